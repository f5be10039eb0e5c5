/* bench_attention.c: times the CUDA attention forward and backward (a benchmark, not a test: run by
 * scripts/bench_attention.py, which also times PyTorch's SDPA). Usage: bench_attention B T Hq Hkv hd [iters].
 * Random bf16 inputs; a sample is REPS back-to-back calls between two synchronizations, timed with the host clock
 * (so that launch latency does not count, as it does not in CUDA-event timings); prints the median over samples of
 * the ms per call and TFLOP/s with the usual causal convention (forward 2 matmuls of B*Hq*T^2*hd/2 multiply-adds each, backward 2.5x).
 * Output: one line "attention fwd_ms F bwd_ms B fwd_tflops X bwd_tflops Y". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tests/gpu/gpu_test_util.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s B T Hq Hkv hd [iters]\n", argv[0]);
        return 2;
    }
    const int B = atoi(argv[1]), T = atoi(argv[2]), Hq = atoi(argv[3]), Hkv = atoi(argv[4]), hd = atoi(argv[5]);
    const int iters = argc > 6 ? atoi(argv[6]) : 30;
    char why[256];
    if (!kernels_cuda_available(why, sizeof why)) {
        fprintf(stderr, "no usable GPU: %s\n", why);
        return 1;
    }
    const size_t n_qkv = (size_t)B * T * (Hq + 2 * Hkv) * hd, n_y = (size_t)B * T * Hq * hd;
    void *qkv = dev_act(rand_bf(n_qkv, 0.0, 2.0), n_qkv), *dy = dev_act(rand_bf(n_y, 0.0, 1.0), n_y);
    void *y = dalloc(n_y * 2), *dqkv = dalloc(n_qkv * 2);
    float *lse = dalloc((size_t)B * Hq * T * sizeof(float));
    double *tf = halloc(iters * sizeof(double)), *tb = halloc(iters * sizeof(double));
    enum { REPS = 10 };
    for (int i = -3; i < iters; i++) { /* 3 warm-up samples (30 calls) */
        kg->synchronize();
        double t0 = now_ms();
        for (int r = 0; r < REPS; r++) kg->attention_forward(qkv, y, lse, B, T, Hq, Hkv, hd);
        kg->synchronize();
        double t1 = now_ms();
        for (int r = 0; r < REPS; r++)
            kg->attention_backward(qkv, y, lse, dy, NULL, NULL, NULL, dqkv, NULL, B, T, Hq, Hkv, hd);
        kg->synchronize();
        double t2 = now_ms();
        if (i >= 0) tf[i] = (t1 - t0) / REPS, tb[i] = (t2 - t1) / REPS;
    }
    qsort(tf, iters, sizeof(double), cmp_double);
    qsort(tb, iters, sizeof(double), cmp_double);
    const double fwd_flops = 4.0 * B * Hq * (double)T * T * hd / 2.0, f = tf[iters / 2], b = tb[iters / 2];
    printf("attention fwd_ms %.4f bwd_ms %.4f fwd_tflops %.1f bwd_tflops %.1f\n", f, b, fwd_flops / f * 1e-9,
           2.5 * fwd_flops / b * 1e-9);
    gpu_free_all();
    return 0;
}
