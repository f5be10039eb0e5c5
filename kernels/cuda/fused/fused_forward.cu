/* fused_forward.cu: the forward ops of the fused table: the block's GEMMs with their epilogue programs (QKV +
 * RoPE; K_res, then the tiny kernel that turns its partials into r; gate/up + SwiGLU) and the row-scaled GEMM of
 * sampling, and fused_coda.h's launchers of K_res, its finish and the row-scaled GEMM. A shape the engine cannot
 * take runs the unfused op (fused_ops.h). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_coda.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/cuda/fused/fused_programs.cuh"
#include "kernels/cuda/gemm/gemm_engine.cuh"

extern "C" int fused_shape_ok(int D, int F, int n_qkv, int n_q, int hd) {
    return fused_dim_ok(D) && fused_dim_ok(F) && fused_dim_ok(n_qkv) && fused_dim_ok(n_q) && fused_head_dim_ok(hd);
}

extern "C" const char *cudaf_shape_note(const KernelShapes *s) {
    if (fused_shape_ok(s->D, s->F, (s->Hq + 2 * s->Hkv) * s->hd, s->Hq * s->hd, s->hd)) return NULL;
    return "this model's dimensions are not all multiples of 8 (or its head dim is not a power of two): the GEMMs the "
           "fused programs cannot take run unfused";
}

extern "C" void fused_gemm_res_norm(const void *A, const void *W, const void *res, const float *gamma, void *D,
                                    void *O, float *part, int M, int N, int K, ge_launch how) {
    FusedResNormParams p = {};
    p.out.head = ge_out((bf16 *)D, M, N, N);
    p.out.tail.head = ge_out((bf16 *)O, M, N, N);
    p.res = (const bf16 *)res;
    p.gamma = gamma;
    p.part = part;
    p.ldres = N;
    p.ldpart = ge_row_parts(N);
    p.res_tma = ge_out((bf16 *)res, M, N, N);
    /* where TMA can describe D and the residual: on ping-pong, the residual through shared memory, D in place */
    if (p.out.head.tma && p.res_tma.tma)
        ge_run_fused<FusedResNormTma<128>, FusedResNorm<256>>(GE_RESIDUAL, A, K, W, K, M, N, K, p, how);
    else
        ge_run_fused<FusedResNorm<128>, FusedResNorm<256>>(GE_RESIDUAL, A, K, W, K, M, N, K, p, how);
}

/* r[m] = the RMSNorm row scale of row m from its nparts partial sums of squares, added in order. */
static __global__ void rms_finish_kernel(const float *part, int nparts, int M, int N, float eps, float *r) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    float s = 0.0f;
    for (int t = 0; t < nparts; t++) s += part[(long)m * nparts + t];
    r[m] = rms_scale_approx(s, N, eps);
}

extern "C" void fused_rms_finish(const float *part, int M, int N, float eps, float *r, cudaStream_t stream) {
    if (M <= 0) return;
    rms_finish_kernel<<<cdiv(M, 256), 256, 0, stream>>>(part, ge_row_parts(N), M, N, eps, r);
    LAUNCH_CHECK("rms_finish_kernel");
}

extern "C" void fused_gemm_rowscale(const void *O, const void *W, const float *r, void *Z, int z_f32, int M, int N,
                                    int K, ge_launch how) {
    if (z_f32)
        ge_run_fused<FusedRowScale<float>>(GE_FUSED, O, K, W, K, M, N, K, {{ge_out((float *)Z, M, N, N)}, r}, how);
    else
        ge_run_fused<FusedRowScale<bf16>>(GE_FUSED, O, K, W, K, M, N, K, {{ge_out((bf16 *)Z, M, N, N)}, r}, how);
}

/* the row partials of r */
size_t cudaf_residual_norm_workspace(size_t M, int N) {
    return size_mul(size_mul(M, ge_row_parts(N)), sizeof(float));
}

extern "C" void cudaf_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res,
                                         const float *gamma, float eps, void *h, void *O, float *r, int M, int N,
                                         int K) {
    if (M <= 0) return;
    if (!(fused_dim_ok(N) && fused_dim_ok(K))) {
        cuda_gemm_residual_norm(kc, A, W, res, gamma, eps, h, O, r, M, N, K);
        return;
    }
    float *part = (float *)cuda_workspace(kc, cudaf_residual_norm_workspace(M, N));
    fused_gemm_res_norm(A, W, res, gamma, h, O, part, M, N, K, cuda_gemm_launch(kc, "gemm_residual_norm"));
    fused_rms_finish(part, M, N, eps, r, kc->stream);
}

/* The RoPE program with HD the head dim where it is 32 or 64 (its angles then loaded once per row block), else 0:
 * any other power of two, read from hd_mask (fused_programs.cuh, RopeAngles). */
template <int HD>
static void rope_run(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                     const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T) {
    typename FusedRope<HD>::Params p = {};
    p.out.head = ge_out((bf16 *)Z, M, N, N);
    p.r = r;
    p.cos = rope_cos;
    p.sin = rope_sin;
    p.n_rope = n_rope_cols;
    p.hd_mask = hd - 1;
    p.T = T;
    ge_run_fused<FusedRope<HD>>(GE_FUSED, O, K, W, K, M, N, K, p, cuda_gemm_launch(kc, "gemm_rope"));
}

extern "C" void cudaf_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                                const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T) {
    if (M <= 0) return;
    if (!fused_dim_ok(K) || !fused_head_dim_ok(hd)) {
        cuda_gemm_rope(kc, O, W, r, rope_cos, rope_sin, Z, M, N, K, n_rope_cols, hd, T);
        return;
    }
    switch (hd) {
    case 32:
        rope_run<32>(kc, O, W, r, rope_cos, rope_sin, Z, M, N, K, n_rope_cols, hd, T);
        break;
    case 64:
        rope_run<64>(kc, O, W, r, rope_cos, rope_sin, Z, M, N, K, n_rope_cols, hd, T);
        break;
    default:
        rope_run<0>(kc, O, W, r, rope_cos, rope_sin, Z, M, N, K, n_rope_cols, hd, T);
    }
}

extern "C" void cudaf_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act,
                                  int M, int F, int K) {
    if (M <= 0) return;
    if (!fused_dim_ok(K)) {
        cuda_gemm_swiglu(kc, O, W, r, Z, act, M, F, K);
        return;
    }
    FusedSwiGLU::Params p = {};
    p.out.head = ge_out((bf16 *)Z, M, 2 * F, 2 * F);
    p.out.tail.head = ge_out_as<GeOut<bf16, 16>>((bf16 *)act, M, F, F);
    p.r = r;
    ge_run_fused<FusedSwiGLU>(GE_FUSED, O, K, W, K, M, 2 * F, K, p, cuda_gemm_launch(kc, "gemm_swiglu"));
}

extern "C" void cudaf_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M,
                                    int N, int K) {
    if (M <= 0) return;
    if (!fused_dim_ok(K)) {
        cuda_gemm_rowscale(kc, O, W, r, Y, M, N, K);
        return;
    }
    fused_gemm_rowscale(O, W, r, Y, /* z_f32 */ 1, M, N, K, cuda_gemm_launch(kc, "gemm_rowscale"));
}
