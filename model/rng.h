/* rng.h: the random numbers of the trainer: a counter-based normal (for the parameter init, the same values whatever
 * order or chunking generates them) and a small sequential generator (for sampling), both from splitmix64. */
#ifndef RNG_H
#define RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Uniform in (0, 1], 53 bits. */
static inline double u64_to_unit(uint64_t x) { return ((x >> 11) + 1) * (1.0 / 9007199254740992.0); }

/* Standard normal number i of stream `seed` (Box-Muller on two hashed counters). */
static inline double rng_normal_at(uint64_t seed, uint64_t i) {
    uint64_t a = splitmix64(seed ^ splitmix64(2 * i));
    uint64_t b = splitmix64(seed ^ splitmix64(2 * i + 1));
    return sqrt(-2.0 * log(u64_to_unit(a))) * cos(6.283185307179586 * u64_to_unit(b));
}

/* Sequential generator: the state is one uint64 (saved in checkpoints). */
static inline uint64_t rng_next(uint64_t *state) {
    *state += 0x9E3779B97F4A7C15ull;
    return splitmix64(*state);
}
static inline double rng_uniform(uint64_t *state) { return u64_to_unit(rng_next(state)) - 0x1p-53; } /* [0, 1) */

#endif
