/* cuda_math.cuh: the model's elementwise math on the device, written once, for the fused programs
 * (kernels/cuda/fused), the unfused passes and the attention backward's stores: RoPE's rotation, silu and SwiGLU with
 * its derivative, RMSNorm's row scale and its backward. Where the two paths round differently (the fused epilogues use
 * the SFU's approximate exp, reciprocal and rsqrt, whose code stays compact in an unrolled epilogue; the unfused
 * passes the correctly rounded ones), both variants are here, named for it, so that each path keeps its bits: the
 * tests compare the paths with a tolerance, and each path's forward with its own backward's recomputation bit for bit.
 * The engine (kernels/cuda/gemm) knows none of this. */
#ifndef CUDA_MATH_CUH
#define CUDA_MATH_CUH

#include <cuda_runtime.h>

/* ---------------------------------------------------------------- RoPE */

/* RoPE on an adjacent pair (a, b) by the angle whose cosine and sine are c and s: (a c - b s, b c + a s). Its
 * transpose (the backward) is the rotation by -s, as the unfused backward and the attention backward's stores
 * (attention/attn_backward.cu, attn_stage_grad) call it. */
__device__ __forceinline__ float2 rope_rotate(float2 v, float c, float s) {
    return make_float2(v.x * c - v.y * s, v.y * c + v.x * s);
}

/* ---------------------------------------------------------------- silu and SwiGLU */

/* sigmoid(g) = 1 / (1 + e^-g): by the approximate exp and reciprocal (e^-g = inf for g < -88 gives 0; the fused
 * programs), or by expf and a correctly rounded division (the unfused passes). */
__device__ __forceinline__ float sigmoid_approx(float g) { return __fdividef(1.0f, 1.0f + __expf(-g)); }
__device__ __forceinline__ float sigmoid_ieee(float g) { return 1.0f / (1.0f + expf(-g)); }

/* SwiGLU of a (gate, up) pair, silu(g) u = g sigmoid(g) u, from s = sigmoid(g); swiglu_approx of a pair (g, u)
 * with sigmoid_approx. The fused forward and the fused backward's recomputation of act both call it on Z as
 * stored, so they give the same bits. */
__device__ __forceinline__ float swiglu(float g, float s, float u) { return g * s * u; }
__device__ __forceinline__ float swiglu_approx(float2 gu) { return swiglu(gu.x, sigmoid_approx(gu.x), gu.y); }
/* The unfused passes' SwiGLU, g / (1 + e^-g) u (one rounding fewer than from sigmoid_ieee), which their forward and
 * their backward's recomputation of act call on Z as stored. */
__device__ __forceinline__ float swiglu_ieee(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* SwiGLU's backward from s = sigmoid(g): dG = dact u silu'(g) with silu'(g) = s (1 + g (1 - s)), dU = dact g s. */
__device__ __forceinline__ void swiglu_backward(float g, float u, float s, float dact, float &dg, float &du) {
    dg = dact * u * (s * (1.0f + g * (1.0f - s)));
    du = dact * (g * s);
}

/* ---------------------------------------------------------------- RMSNorm */

/* The row scale r = 1 / sqrt(ss / n + eps) from the row's sum of squares ss over n columns: by rsqrtf (the fused
 * path's finish of K_res's partials), or by a correctly rounded square root and division (the unfused pass). */
__device__ __forceinline__ float rms_scale_approx(float ss, int n, float eps) { return rsqrtf(ss / (float)n + eps); }
__device__ __forceinline__ float rms_scale_ieee(float ss, int n, float eps) { return 1.0f / sqrtf(ss / (float)n + eps); }

/* The backward of y = x r gamma for one element, with G = dz . W and the row's c = <z, dz> (docs/DESIGN.md, "The
 * schedule"): dx = gamma G - coef x, where coef = (r^2 / n) c is the row's (the fused program forms it with 1/n,
 * the unfused pass with a division by n: each where its row values are loaded). */
__device__ __forceinline__ float rms_backward(float gamma, float G, float coef, float x) { return gamma * G - coef * x; }

#endif
