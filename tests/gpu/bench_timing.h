/* bench_timing.h: the one timing method of the CUDA benchmark programs (bench_attention, bench_fused, bench_gemm),
 * the same as scripts/timing.py's for the PyTorch side, with the same BT_METHOD text: BT_WARMUP_CALLS calls of each
 * callable, then BT_SAMPLES samples of BT_CALLS back-to-back calls, each sample between two CUDA events on the
 * default stream, after an L2 flush (a buffer larger than L2 written just before the first event, which also gives
 * the host a head start so that the GPU does not wait for launches); the result is the median over the samples of
 * the time per call. Several callables are timed in turns, in an order shuffled each round, so that the clock's
 * drift as the card heats biases none of them. A callable gets the index of the call (for rotating among input
 * sets). For C (bt_time_each) and CUDA C++ (the same over std::function). */
#ifndef BENCH_TIMING_H
#define BENCH_TIMING_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/cuda_test_check.h"

#define BT_WARMUP_CALLS 10
#define BT_SAMPLES 30
#define BT_CALLS 10
#define BT_FLUSH_MIN_BYTES ((size_t)256 << 20)
#define BT_METHOD                                                                                              \
    "median over 30 samples of 10 back-to-back calls, each sample timed by CUDA events after an L2 flush (a " \
    "buffer of max(256 MiB, 2 x L2) written); 10 warm-up calls first"

typedef void (*bt_fn)(void *ctx, int call);

static inline int bt_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (the mean of the two middle values for even n, as Python's statistics.median); sorts v. */
static inline double bt_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), bt_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline size_t bt_flush_bytes(void) {
    int dev, l2;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    return 2 * (size_t)l2 > BT_FLUSH_MIN_BYTES ? 2 * (size_t)l2 : BT_FLUSH_MIN_BYTES;
}

/* Times the n callables fns[k](ctx[k], call) in turns by BT_METHOD: median_ms[k] is the median ms per call; samples,
 * unless NULL, gets each sample's ms per call (n x BT_SAMPLES, callable by callable). */
static inline void bt_time_each(int n, const bt_fn *fns, void *const *ctx, double *median_ms, double *samples) {
    const size_t flush_bytes = bt_flush_bytes();
    void *flush;
    CK(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t *ev = (cudaEvent_t *)malloc(2 * (size_t)n * sizeof(cudaEvent_t));
    int *order = (int *)malloc((size_t)n * sizeof(int));
    double *t = (double *)malloc((size_t)n * BT_SAMPLES * sizeof(double));
    if (!ev || !order || !t) {
        fprintf(stderr, "bench_timing: out of host memory\n");
        exit(2);
    }
    for (int k = 0; k < 2 * n; k++) CK(cudaEventCreate(&ev[k]));
    for (int k = 0; k < n; k++) {
        order[k] = k;
        for (int i = 0; i < BT_WARMUP_CALLS; i++) fns[k](ctx[k], i);
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int s = 0; s < BT_SAMPLES; s++) {
        for (int k = n - 1; k > 0; k--) { /* a fresh order each round (Fisher-Yates, fixed seed) */
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const int j = (int)((rng >> 33) % (uint64_t)(k + 1)), x = order[k];
            order[k] = order[j], order[j] = x;
        }
        const int first_call = BT_WARMUP_CALLS + s * BT_CALLS;
        for (int q = 0; q < n; q++) {
            const int k = order[q];
            CK(cudaMemsetAsync(flush, 0, flush_bytes, 0));
            CK(cudaEventRecord(ev[2 * k], 0));
            for (int c = 0; c < BT_CALLS; c++) fns[k](ctx[k], first_call + c);
            CK(cudaEventRecord(ev[2 * k + 1], 0));
        }
        CK(cudaDeviceSynchronize());
        for (int k = 0; k < n; k++) {
            float ms;
            CK(cudaEventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1]));
            t[k * BT_SAMPLES + s] = (double)ms / BT_CALLS;
        }
    }
    CK(cudaGetLastError());
    if (samples) memcpy(samples, t, (size_t)n * BT_SAMPLES * sizeof(double));
    for (int k = 0; k < n; k++) median_ms[k] = bt_median(t + k * BT_SAMPLES, BT_SAMPLES);
    for (int k = 0; k < 2 * n; k++) CK(cudaEventDestroy(ev[k]));
    CK(cudaFree(flush));
    free(ev);
    free(order);
    free(t);
}

#ifdef __cplusplus
#include <functional>
#include <vector>

static inline void bt_call_function(void *f, int call) { (*static_cast<const std::function<void(int)> *>(f))(call); }

/* bt_time_each over C++ callables: the median ms per call of each. */
static inline std::vector<double> bt_time_each(const std::vector<std::function<void(int)>> &fs) {
    const int n = (int)fs.size();
    std::vector<bt_fn> fns(n, bt_call_function);
    std::vector<void *> ctx;
    for (const auto &f : fs) ctx.push_back(const_cast<std::function<void(int)> *>(&f));
    std::vector<double> med(n);
    bt_time_each(n, fns.data(), ctx.data(), med.data(), NULL);
    return med;
}
#endif

#endif
