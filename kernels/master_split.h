/* master_split.h: an fp32 master weight kept as two 16-bit halves (docs/DESIGN.md, "Memory"), for the tables whose
 * working copy is bf16: hi, the weight rounded to bf16 (to nearest, ties to even, as the working copy always was),
 * which the GEMMs read, and lo, the low 16 bits of its fp32 word, kept beside it. Together they are the fp32 word:
 * where lo is above 0x8000 the rounding went up, so the word's high half is hi - 1, else hi. A tie (low bits exactly
 * 0x8000) would leave that ambiguous; such a weight first moves one fp32 ulp toward the side it rounds to (low bits
 * 0x7fff when it rounds down, 0x8001 when up), which keeps hi. Host and device code (C and CUDA). */
#ifndef MASTER_SPLIT_H
#define MASTER_SPLIT_H

#include <stdint.h>

#ifdef __CUDACC__
#define MASTER_SPLIT_FN __host__ __device__ static inline
#else
#define MASTER_SPLIT_FN static inline
#endif

/* The halves of fp32 word x: *hi its bf16 (NaN stays NaN), *lo its low 16 bits after the tie's move. */
MASTER_SPLIT_FN void master_split(uint32_t x, uint16_t *hi, uint16_t *lo) {
    const uint32_t h = (x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t l = x & 0xffffu;
    if (l == 0x8000u) l = h == (x >> 16) ? 0x7fffu : 0x8001u;
    *hi = (uint16_t)h;
    *lo = (uint16_t)l;
}

/* The fp32 word of the halves: x itself, or x moved off its tie (master_split). */
MASTER_SPLIT_FN uint32_t master_join(uint16_t hi, uint16_t lo) {
    return ((uint32_t)(lo > 0x8000u ? hi - 1u : hi) << 16) | lo;
}

#endif
