/* bench_attention.c: times the CUDA attention forward and backward (a benchmark, not a test: run by
 * scripts/bench_attention.py, which times PyTorch's SDPA the same way). Usage: bench_attention B T Hq Hkv hd [rise].
 * Random bf16 inputs (with a sixth argument R, gpu_test_util.h's rising_qkv with every KV head's keys rising by R t /
 * T: the forward's rescue, attn_forward.cu, and its warps' maxima after it); the forward and the backward are timed
 * separately, in turns, by bench_timing.h's method (the backward's inputs y and lse from a forward of the same qkv);
 * prints the median ms per call and TFLOP/s with the usual causal convention (forward 2 matmuls of B*Hq*T^2*hd/2
 * multiply-adds each, backward 2.5x).
 * Output: "attention fwd_ms F bwd_ms B fwd_tflops X bwd_tflops Y", then "method: " and BT_METHOD. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/gpu/bench_timing.h"
#include "tests/gpu/gpu_test_util.h"

typedef struct {
    int B, T, Hq, Hkv, hd;
    void *qkv, *y, *dy, *dqkv;
    float *lse;
} AttnBench;

static void forward(void *ctx, int call) {
    const AttnBench *a = ctx;
    kg->attention_forward(gctx(), a->qkv, a->y, a->lse, a->B, a->T, a->Hq, a->Hkv, a->hd);
}

static void backward(void *ctx, int call) {
    const AttnBench *a = ctx;
    kg->attention_backward(gctx(), a->qkv, a->y, a->lse, a->dy, NULL, NULL, NULL, a->dqkv, NULL, a->B, a->T, a->Hq,
                           a->Hkv, a->hd);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s B T Hq Hkv hd [rise]\n", argv[0]);
        return 2;
    }
    AttnBench a = {.B = atoi(argv[1]), .T = atoi(argv[2]), .Hq = atoi(argv[3]), .Hkv = atoi(argv[4]),
                   .hd = atoi(argv[5])};
    char why[256];
    if (!kernels_cuda_available(why, sizeof why)) {
        fprintf(stderr, "no usable GPU: %s\n", why);
        return 1;
    }
    const size_t n_qkv = (size_t)a.B * a.T * (a.Hq + 2 * a.Hkv) * a.hd, n_y = (size_t)a.B * a.T * a.Hq * a.hd;
    a.qkv = dev_act(argc == 7 ? rising_qkv(a.B, a.T, a.Hq, a.Hkv, a.hd, atof(argv[6]), 0) : rand_bf(n_qkv, 0.0, 2.0),
                    n_qkv);
    a.dy = dev_act(rand_bf(n_y, 0.0, 1.0), n_y);
    a.y = dalloc(n_y * 2);
    a.dqkv = dalloc(n_qkv * 2);
    a.lse = dalloc((size_t)a.B * a.Hq * a.T * sizeof(float));
    forward(&a, 0);

    const bt_fn fns[2] = {forward, backward};
    void *const ctx[2] = {&a, &a};
    double ms[2];
    bt_time_each(2, fns, ctx, ms, NULL);
    const double fwd_flops = 4.0 * a.B * a.Hq * (double)a.T * a.T * a.hd / 2.0;
    printf("attention fwd_ms %.4f bwd_ms %.4f fwd_tflops %.1f bwd_tflops %.1f\n", ms[0], ms[1],
           fwd_flops / ms[0] * 1e-9, 2.5 * fwd_flops / ms[1] * 1e-9);
    printf("method: %s\n", BT_METHOD);
    gpu_free_all();
    return 0;
}
