/* fused_backward.cu: the backward ops of the fused table: the data-gradient GEMMs with the RMSNorm backward or the
 * SwiGLU backward in their epilogues (then a tiny kernel that sums the column or row partials), the plain
 * data-gradient GEMM, and the weight-gradient GEMMs (fp32, written or added in L2; with a column scale where the
 * forward's input was O = x * gamma; when written, with the sum of squares for global-norm clipping). A shape the
 * engine cannot take runs the unfused op (fused_ops.h). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/cuda/fused/fused_programs.cuh"
#include "kernels/cuda/gemm/gemm_engine.cuh"

/* The RMSNorm backward's operands (FusedNormBwd's; s, a, target: the LM head's, else NULL). */
struct NormBwdArgs {
    const void *dZ;
    long ldz;
    const void *W;
    const float *gamma, *r, *c;
    const void *x;
    void *dres;
    float *part;
    const float *s, *a;
    const int32_t *target;
    int M, N, K; /* dZ [M, N], W [N, K] */
};

/* The program on G = dZ . W (A.B: M x K x N), cooperative 128 x 256 or 128 x 128 (ge_pick's). */
template <bool ACC, bool LMHEAD>
static void norm_backward_run(const NormBwdArgs &g, const ge_launch &how) {
    const ge_config config = ge_config_of(how, GE_COOP_ONLY, g.M, g.K, g.N);
    ge_dispatch<GE_CFG_COOP_256 | GE_CFG_COOP_128>(config, how.op, [&](auto cfg) {
        using C = decltype(cfg);
        using Program = FusedNormBwd<C::kBN, ACC, LMHEAD>;
        typename Program::Params p = {};
        if constexpr (ACC)
            p.dres_tma = ge_out((bf16 *)g.dres, g.M, g.K, g.K);
        else
            p.out.head = ge_out((bf16 *)g.dres, g.M, g.K, g.K);
        p.x = (const bf16 *)g.x;
        p.ldx = g.K;
        p.gamma = g.gamma;
        p.r = g.r;
        p.c = g.c;
        p.part = g.part;
        p.inv_n = 1.0f / (float)g.K;
        p.s = g.s;
        p.a = g.a;
        p.target = g.target;
        p.W = (const bf16 *)g.W;
        p.V = g.N;
        ge_run<Program, GE_AB, C::kBN, C::kSched>(g.dZ, g.ldz, g.W, g.K, g.M, g.K, g.N, p, how);
    });
}

/* gemm_norm_backward's fused path, shared with the LM head (target != NULL: dZ is its E, and s, a, target go to
 * FusedNormBwd; dres is written, not accumulated): dres and the dgamma partials (part: [ceil(M/128), K]), then the
 * partials' sum into dgamma. ldz: dZ's row stride. */
extern "C" void fused_norm_backward(KernelContext *kc, const void *dZ, long ldz, const void *W, const float *gamma,
                                    const float *r, const float *c, const void *x, void *dres, float *dgamma,
                                    int accumulate, int M, int N, int K, float *part, const float *s, const float *a,
                                    const int32_t *target) {
    if (M <= 0) return;
    const NormBwdArgs g = {dZ, ldz, W, gamma, r, c, x, dres, part, s, a, target, M, N, K};
    const ge_launch how = cuda_gemm_launch(kc, target ? "lm_head_train (E . W)" : "gemm_norm_backward");
    if (target)
        norm_backward_run<false, true>(g, how);
    else if (accumulate)
        norm_backward_run<true, false>(g, how);
    else
        norm_backward_run<false, false>(g, how);
    cuda_column_sum_add(kc, part, cdiv(M, GE_BM), dgamma, K);
}

/* the dgamma partials [ceil(M/128), K] */
size_t cudaf_norm_backward_workspace(size_t M, int K) {
    return size_mul((M + GE_BM - 1) / GE_BM, (size_t)K * sizeof(float));
}

extern "C" void cudaf_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma,
                                         const float *r, const float *c, const void *x, void *dres, float *dgamma,
                                         int accumulate, int M, int N, int K) {
    if (M <= 0) return;
    if (!(fused_dim_ok(N) && fused_dim_ok(K))) {
        cuda_gemm_norm_backward(kc, dZ, W, gamma, r, c, x, dres, dgamma, accumulate, M, N, K);
        return;
    }
    float *part = (float *)cuda_workspace(kc, cudaf_norm_backward_workspace(M, K));
    fused_norm_backward(kc, dZ, N, W, gamma, r, c, x, dres, dgamma, accumulate, M, N, K, part, NULL, NULL, NULL);
}

static void swiglu_backward_run(KernelContext *kc, const void *dY, const void *W_down, const void *Z, const float *r,
                                void *dZ, void *act, float *part, int nparts, int M, int D, int F) {
    const ge_launch how = cuda_gemm_launch(kc, "gemm_swiglu_backward");
    ge_dispatch<GE_CFG_COOP_256 | GE_CFG_COOP_128>(ge_config_of(how, GE_COOP_ONLY, M, F, D), how.op, [&](auto cfg) {
        using C = decltype(cfg);
        using Program = FusedSwiGLUBwd<C::kBN>;
        typename Program::Params p = {};
        p.out.head = ge_out((bf16 *)act, M, F, F);
        p.Z = (const bf16 *)Z;
        p.dZ = (bf16 *)dZ;
        p.ldz = 2L * F;
        p.r = r;
        p.part = part;
        p.ldpart = nparts;
        ge_run<Program, GE_AB, C::kBN, C::kSched>(dY, D, W_down, F, M, F, D, p, how);
    });
}

/* the row partials of c */
size_t cudaf_swiglu_backward_workspace(size_t M, int F) {
    return size_mul(size_mul(M, ge_row_parts(F)), sizeof(float));
}

extern "C" void cudaf_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z,
                                           const float *r, void *dZ, float *c, void *act, int M, int D, int F) {
    if (M <= 0) return;
    if (!(fused_dim_ok(D) && fused_dim_ok(F))) {
        cuda_gemm_swiglu_backward(kc, dY, W_down, Z, r, dZ, c, act, M, D, F);
        return;
    }
    const int nparts = ge_row_parts(F);
    float *part = (float *)cuda_workspace(kc, cudaf_swiglu_backward_workspace(M, F));
    swiglu_backward_run(kc, dY, W_down, Z, r, dZ, act, part, nparts, M, D, F);
    cuda_row_sum(kc, part, nparts, M, c);
}

extern "C" void cudaf_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K) {
    if (!(fused_dim_ok(N) && fused_dim_ok(K))) {
        cuda_gemm_dx(kc, dY, W, dX, M, N, K);
        return;
    }
    ge_gemm_bf16(GE_AB, dY, W, dX, M, K, N, cuda_gemm_launch(kc, "gemm_dx")); /* [M, N] . [N, K] */
}

/* dW [N, K] (+)= ([M, N]^T . [M, K]) * col_scale, on ge_pick's config for a plain GEMM; part: FusedDw's. */
template <bool ACC>
static void dw_run(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW, float *part,
                   int M, int N, int K) {
    const ge_launch how = cuda_gemm_launch(kc, "gemm_dw");
    ge_dispatch<GE_CFG_ALL>(ge_config_of(how, GE_PLAIN, N, K, M), how.op, [&](auto cfg) {
        using C = decltype(cfg);
        using Program = FusedDw<C::kBN, ACC>;
        typename Program::Params p = {};
        if constexpr (ACC)
            p.out.head = ge_out_as<GeOut<float, 32, true>>(dW, N, K, K);
        else
            p.out.head = ge_out(dW, N, K, K);
        p.scale = col_scale;
        p.part = part;
        p.ldpart = ge_row_parts(K);
        ge_run<Program, GE_ATB, C::kBN, C::kSched>(dY, N, X, K, N, K, M, p, how);
    });
}

/* the row partials of the sum of squares (when it overwrites dW and sums) */
static size_t dw_parts_bytes(int N, int K) { return size_mul(size_mul(N, ge_row_parts(K)), sizeof(float)); }

size_t cudaf_dw_workspace(int N, int K, int accumulate, int sq) { return !accumulate && sq ? dw_parts_bytes(N, K) : 0; }

/* Overwriting, the sum of squares comes from the epilogue's row partials; accumulating, from a pass over dW. */
extern "C" void cudaf_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW,
                              int accumulate, double *sq, int M, int N, int K) {
    if (!(fused_dim_ok(N) && fused_dim_ok(K)) || M <= 0 || N <= 0 || K <= 0) {
        cuda_gemm_dw(kc, dY, X, col_scale, dW, accumulate, sq, M, N, K);
        return;
    }
    if (accumulate) {
        dw_run<true>(kc, dY, X, col_scale, dW, NULL, M, N, K);
        if (sq) cuda_sum_squares(kc, dW, (size_t)N * K, sq);
        return;
    }
    const size_t total_parts = (size_t)N * ge_row_parts(K);
    float *part = sq ? (float *)cuda_workspace(kc, dw_parts_bytes(N, K)) : NULL;
    dw_run<false>(kc, dY, X, col_scale, dW, part, M, N, K);
    if (sq) cuda_sum(kc, part, total_parts, sq, 0);
}
