/* gpu_test_util.h: helpers for the GPU tests: random host data rounded to bf16 (so the CPU oracle and the GPU see
 * the same inputs), device buffers filled from host data or poisoned with NaN, read-back to fp32, and the
 * relative-error check ||gpu - cpu|| / ||cpu|| with NaN never passing. Every buffer is freed by gpu_free_all(). */
#ifndef GPU_TEST_UTIL_H
#define GPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test_util.h"

/* the table under test (test_gpu_ops runs each of its tests on both CUDA tables) */
static const Kernels *kg = &kernels_cuda;
static const Kernels *const kc __attribute__((unused)) = &kernels_cpu;  /* the oracle */

/* The contexts the tables run in, made at their first use: one for the GPU (the two CUDA tables share it) and one
 * for the CPU oracle. */
static inline KernelContext *gctx(void) {
    static KernelContext *c;
    if (!c) c = kernels_cuda.context_create();
    return c;
}
static inline KernelContext *cctx(void) {
    static KernelContext *c;
    if (!c) c = kernels_cpu.context_create();
    return c;
}

static void *host_bufs[512], *dev_bufs[512];
static int n_host_bufs, n_dev_bufs;

/* Exits with a FAIL line unless a usable GPU is present; prints its name. */
static inline void require_gpu(void) {
    char why[256];
    if (!kernels_cuda_available(why, sizeof why)) {
        printf("FAIL no usable GPU: %s\n", why);
        exit(1);
    }
    printf("# device: %s\n", why);
}

static inline void *halloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || n_host_bufs == 512) {
        fprintf(stderr, "gpu test: out of host memory or buffer slots\n");
        exit(2);
    }
    return host_bufs[n_host_bufs++] = p;
}

static inline void *dalloc(size_t bytes) {
    if (n_dev_bufs == 512) {
        fprintf(stderr, "gpu test: too many device buffers\n");
        exit(2);
    }
    return dev_bufs[n_dev_bufs++] = kg->alloc(gctx(), bytes);
}

static inline void gpu_free_all(void) {
    while (n_host_bufs) free(host_bufs[--n_host_bufs]);
    while (n_dev_bufs) kg->free(gctx(), dev_bufs[--n_dev_bufs]);
}


/* offset + scale * uniform, fp32 (for fp32 inputs: gamma, r, c, grads) */
static inline float *rand_f(size_t n, double offset, double scale) {
    float *a = halloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = (float)(offset + scale * rnd());
    return a;
}

/* the same, rounded to bf16 (for act inputs) */
static inline float *rand_bf(size_t n, double offset, double scale) {
    float *a = rand_f(n, offset, scale);
    for (size_t i = 0; i < n; i++) a[i] = bf16_round(a[i]);
    return a;
}

/* qkv ([B*T][(Hq + 2 Hkv) hd], bf16-rounded) whose scores rise along the keys, for the attention forward's rescue
 * (attn_forward.cu): queries in [0, 1], keys in [-1, 1] plus rise * t / T times a factor in [0, 1] at position t,
 * where rise is `slope` for every KV head (by_head 0) or slope * g / (Hkv - 1) for KV head g (by_head 1: head 0 does
 * not rise); values in [-1, 1]. */
static inline float *rising_qkv(int B, int T, int Hq, int Hkv, int hd, double slope, int by_head) {
    const int ld = (Hq + 2 * Hkv) * hd;
    float *qkv = rand_bf((size_t)B * T * ld, 0.0, 1.0);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const int t = (int)(r % T);
        for (int c = 0; c < Hq * hd; c++) qkv[r * ld + c] = bf16_round(0.5f + 0.5f * qkv[r * ld + c]);
        for (int g = 0; g < Hkv; g++) {
            const double rise = (by_head && Hkv > 1 ? slope * g / (Hkv - 1) : slope) * t / T;
            float *k = qkv + r * ld + (Hq + g) * hd;
            for (int d = 0; d < hd; d++) k[d] = bf16_round((float)(k[d] + rise * (0.5 + 0.5 * rnd())));
        }
    }
    return qkv;
}

static inline int32_t *rand_tokens(int n, int V) {
    int32_t *t = halloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) t[i] = (int32_t)((rnd() + 1.0) * 0.5 * V) % V;
    return t;
}

static inline float *nan_f(size_t n) {
    float *a = halloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = NAN;
    return a;
}

static inline float *copy_f(const float *a, size_t n) {
    float *b = halloc(n * sizeof(float));
    memcpy(b, a, n * sizeof(float));
    return b;
}

/* device buffers: act (bf16) or fp32, from host values or NaN */
static inline void *dev_act(const float *host, size_t n) {
    void *d = dalloc(n * kg->act_bytes);
    kg->act_from_f32(gctx(), d, host, n);
    return d;
}
static inline void *dev_act_nan(size_t n) { return dev_act(nan_f(n), n); }
static inline float *dev_f32(const float *host, size_t n) {
    float *d = dalloc(n * sizeof(float));
    kg->copy_to_device(gctx(), d, host, n * sizeof(float));
    return d;
}
static inline float *dev_f32_nan(size_t n) { return dev_f32(nan_f(n), n); }
static inline int32_t *dev_i32(const int32_t *host, size_t n) {
    int32_t *d = dalloc(n * sizeof(int32_t));
    kg->copy_to_device(gctx(), d, host, n * sizeof(int32_t));
    return d;
}

/* ids' token groups (kernels.h): on the host, and copied to the device */
static inline int32_t *host_groups(const int32_t *ids, int n, int V) {
    int32_t *g = halloc(token_groups_ints((size_t)n) * sizeof(int32_t)), *count = halloc((V + 1) * sizeof(int32_t));
    token_groups_build(ids, n, V, g, count);
    return g;
}
static inline int32_t *dev_groups(const int32_t *ids, int n, int V) {
    return dev_i32(host_groups(ids, n, V), token_groups_ints((size_t)n));
}

static inline float *get_act(const void *d, size_t n) {
    float *h = halloc(n * sizeof(float));
    kg->act_to_f32(gctx(), h, d, n);
    return h;
}
static inline float *get_f32(const float *d, size_t n) {
    float *h = halloc(n * sizeof(float));
    kg->copy_to_host(gctx(), h, d, n * sizeof(float));
    return h;
}

/* ||gpu - cpu|| / ||cpu||; any non-finite gpu value (an unwritten, poisoned output) fails. */
static inline void check_rel(const char *what, const float *gpu, const float *cpu, size_t n, double tol) {
    const double err = rel_error_f(gpu, cpu, n);
    CHECK(all_finite_f(gpu, n) && err <= tol, "%s: rel err %.2e (tol %.0e)", what, err, tol);
}

#endif
