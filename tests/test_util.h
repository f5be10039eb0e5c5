/* test_util.h: a minimal test harness. Each CHECK prints one PASS or FAIL line; tests/run_cpu_tests.sh counts them.
 * A test binary exits with status 1 if any check failed. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures = 0;
static int test_passes = 0;
static const char *test_label __attribute__((unused)) = ""; /* printed before each check's text */

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (cond) {                                        \
            test_passes++;                                 \
            printf("PASS ");                               \
        } else {                                           \
            test_failures++;                               \
            printf("FAIL [%s:%d] ", __FILE__, __LINE__);   \
        }                                                  \
        printf("%s", test_label);                          \
        printf(__VA_ARGS__);                               \
        printf("\n");                                      \
        fflush(stdout);                                    \
    } while (0)

static inline int test_summary_in(const char *file) {
    printf("# %s: %d passed, %d failed\n", file, test_passes, test_failures);
    return test_failures ? 1 : 0;
}
#define test_summary() test_summary_in(__FILE__)

/* ||a - b|| / ||b|| over n elements, in double. */
static inline double rel_error_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int all_finite_f(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

/* The tests' random numbers: splitmix64 on rng_state (a test may reseed it), as a double uniform in [-1, 1). */
static uint64_t rng_state __attribute__((unused)) = 0x9E3779B97F4A7C15ull;
static inline double rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

/* An fp32's bits and the fp32 of bits. */
static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float f32_of_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* fp32 -> bf16 bits, nearest with ties to even as __float2bfloat16 rounds (a NaN becomes the quiet NaN 0x7fc0),
 * and back; bf16_round(x) is x rounded to bf16 (a NaN stays as it is). */
static inline uint16_t bf16_bits(float x) {
    const uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float bf16_value(uint16_t b) { return f32_of_bits((uint32_t)b << 16); }
static inline float bf16_round(float x) { return isnan(x) ? x : bf16_value(bf16_bits(x)); }

#endif
