/* cuda_elementwise.cu: the unfused path's GEMM ops whose epilogue is elementwise: a cuBLAS GEMM, then one pass.
 * RoPE (forward, and its transpose with the RMSNorm row scalar c for the backward) and SwiGLU (forward and backward):
 * one block per row, 8 columns a thread with 16-byte accesses where the rows allow them; the math is
 * cuda_math.cuh's. gemm_rowscale's row scale and gemm_dw's column scale: grid-stride over a row's columns, one row
 * per grid row. gemm_dx: the GEMM alone. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_ops.h"

#define ROW_THREADS 256 /* the most threads of a row kernel's block */

/* A row kernel's threads for rows of `chunks` chunks of 8 columns: 64, 128 or ROW_THREADS, fewer for short rows. */
static int row_threads(int chunks) { return chunks >= ROW_THREADS ? ROW_THREADS : chunks > 64 ? 128 : 64; }

/* The scale passes: SCALE_THREADS threads a block, at most SCALE_MAX_COL_BLOCKS blocks along a row. */
#define SCALE_THREADS 256
#define SCALE_MAX_COL_BLOCKS 64

/* ---------------------------------------------------------------- RoPE */

/* out[m] = r[m] * R(in[m]) where R rotates the interleaved pairs of columns [0, n_rope) in heads of hd columns by the
 * angles of position m % T (sin_sign -1: R^T). With dot_with != NULL also c[m] = <dot_with[m], in[m]>. out may
 * alias in (each thread reads its columns before writing them). */
__global__ void __launch_bounds__(ROW_THREADS) rope_rows_kernel(const bf16 *in, bf16 *out, const float *r,
                                                                const float *rope_cos, const float *rope_sin,
                                                                float sin_sign, const bf16 *dot_with, float *c, int N,
                                                                int n_rope, int hd, int T, bool vec) {
    __shared__ float scratch[32];
    const long m = blockIdx.x;
    const int half = hd / 2;
    const float *cos_row = rope_cos + (long)(m % T) * half, *sin_row = rope_sin + (long)(m % T) * half;
    const float scale = r[m];
    float dot = 0.0f;
    for (int col = threadIdx.x * 8; col < N; col += blockDim.x * 8) {
        const int valid = min(8, N - col);
        float v[8], o[8];
        load8(in + m * N + col, valid, vec, v);
        if (dot_with) {
            float z[8];
            load8(dot_with + m * N + col, valid, vec, z);
#pragma unroll
            for (int i = 0; i < 8; i++) dot = fmaf(z[i], v[i], dot);
        }
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const int cp = col + 2 * p;
            const float a = v[2 * p], b = v[2 * p + 1];
            if (cp < n_rope) {
                const int i = (cp % hd) / 2;
                const float2 rot = rope_rotate(make_float2(a, b), cos_row[i], sin_sign * sin_row[i]);
                o[2 * p] = scale * rot.x;
                o[2 * p + 1] = scale * rot.y;
            } else {
                o[2 * p] = scale * a;
                o[2 * p + 1] = scale * b;
            }
        }
        store8(out + m * N + col, valid, vec, o);
    }
    if (dot_with) {
        dot = block_sum(dot, scratch);
        if (threadIdx.x == 0) c[m] = dot;
    }
}

static void rope_rows(KernelContext *kc, const void *in, void *out, const float *r, const float *rope_cos,
                      const float *rope_sin, float sin_sign, const void *dot_with, float *c, int M, int N, int n_rope,
                      int hd, int T) {
    if (M <= 0) return;
    const bool vec = rows_vec_ok(in, N, 2) && rows_vec_ok(out, N, 2) && (!dot_with || rows_vec_ok(dot_with, N, 2));
    rope_rows_kernel<<<M, row_threads(cdiv(N, 8)), 0, kc->stream>>>((const bf16 *)in, (bf16 *)out, r, rope_cos,
                                                                    rope_sin, sin_sign, (const bf16 *)dot_with, c, N,
                                                                    n_rope, hd, T, vec);
    LAUNCH_CHECK("rope_rows_kernel");
}

extern "C" void cuda_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                               const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T) {
    cuda_gemm_xwt_bf16(kc, O, W, Z, N, M, N, K, 0.0f);
    rope_rows(kc, Z, Z, r, rope_cos, rope_sin, 1.0f, NULL, NULL, M, N, n_rope_cols, hd, T);
}

extern "C" void cuda_rope_backward(KernelContext *kc, const void *Z, const void *dZ_in, const float *r,
                                   const float *rope_cos, const float *rope_sin, void *dZ_out, float *c, int M, int N,
                                   int n_rope_cols, int hd, int T) {
    rope_rows(kc, dZ_in, dZ_out, r, rope_cos, rope_sin, -1.0f, Z, c, M, N, n_rope_cols, hd, T);
}

/* ---------------------------------------------------------------- SwiGLU */

/* Z[m] = r[m] * Z[m] (in place) and act[m, j] = silu(G_j) * U_j for the interleaved pairs (G_j, U_j) of Z as
 * stored. */
__global__ void __launch_bounds__(ROW_THREADS) swiglu_rows_kernel(bf16 *Z, const float *r, bf16 *act, int F,
                                                                  bool vec) {
    const long m = blockIdx.x;
    const int N = 2 * F;
    const float scale = r[m];
    for (int col = threadIdx.x * 8; col < N; col += blockDim.x * 8) {
        const int valid = min(8, N - col);
        float v[8], a[4];
        load8(Z + m * N + col, valid, vec, v);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            /* as stored: rounded to bf16 */
            const float g = __bfloat162float(__float2bfloat16(scale * v[2 * p]));
            const float u = __bfloat162float(__float2bfloat16(scale * v[2 * p + 1]));
            v[2 * p] = g;
            v[2 * p + 1] = u;
            a[p] = swiglu_ieee(g, u);
        }
        store8(Z + m * N + col, valid, vec, v);
        store4(act + m * F + col / 2, valid / 2, vec, a);
    }
}

extern "C" void cuda_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act,
                                 int M, int F, int K) {
    if (M <= 0) return;
    cuda_gemm_xwt_bf16(kc, O, W, Z, 2 * F, M, 2 * F, K, 0.0f);
    const bool vec = rows_vec_ok(Z, 2 * F, 2) && rows_vec_ok(act, F, 2);
    swiglu_rows_kernel<<<M, row_threads(cdiv(2 * F, 8)), 0, kc->stream>>>((bf16 *)Z, r, (bf16 *)act, F, vec);
    LAUNCH_CHECK("swiglu_rows_kernel");
}

/* dZ holds dact [M, F] in fp32 (the same bytes as dZ's bf16 [M, 2F]: dact[m, j] occupies exactly dZ[m, 2j..2j+1]),
 * so each thread reads its dact values and overwrites them with (r dG, r dU). c[m] = <Z[m], (dG, dU)[m]>; act[m] =
 * silu(G) * U again. */
__global__ void __launch_bounds__(ROW_THREADS) swiglu_backward_rows_kernel(const bf16 *Z, const float *r, bf16 *dZ,
                                                                           float *c, bf16 *act, int F, bool vec) {
    __shared__ float scratch[32];
    const long m = blockIdx.x;
    const int N = 2 * F;
    const float scale = r[m];
    const float *dact = reinterpret_cast<const float *>(dZ) + m * F;
    float dot = 0.0f;
    for (int col = threadIdx.x * 8; col < N; col += blockDim.x * 8) {
        const int valid = min(8, N - col);
        float z[8], da[4], d[8], a[4];
        load8(Z + m * N + col, valid, vec, z);
        load4f(dact + col / 2, valid / 2, vec, da);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const float g = z[2 * p], u = z[2 * p + 1];
            float dg, du;
            swiglu_backward(g, u, sigmoid_ieee(g), da[p], dg, du);
            dot = fmaf(g, dg, fmaf(u, du, dot));
            d[2 * p] = scale * dg;
            d[2 * p + 1] = scale * du;
            a[p] = swiglu_ieee(g, u);
        }
        store8(dZ + m * N + col, valid, vec, d);
        store4(act + m * F + col / 2, valid / 2, vec, a);
    }
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) c[m] = dot;
}

extern "C" void cuda_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z,
                                          const float *r, void *dZ, float *c, void *act, int M, int D, int F) {
    if (M <= 0) return;
    cuda_gemm_dyw_f32(kc, dY, W_down, (float *)dZ, M, D, F);
    const bool vec = rows_vec_ok(Z, 2 * F, 2) && rows_vec_ok(dZ, 2 * F, 2) && rows_vec_ok(act, F, 2);
    swiglu_backward_rows_kernel<<<M, row_threads(cdiv(2 * F, 8)), 0, kc->stream>>>((const bf16 *)Z, r, (bf16 *)dZ, c,
                                                                                   (bf16 *)act, F, vec);
    LAUNCH_CHECK("swiglu_backward_rows_kernel");
}

/* ---------------------------------------------------------------- plain GEMMs and the row scale */

/* Y[m, n] *= r[m]. */
__global__ void scale_rows_kernel(float *Y, const float *r, int N) {
    const long m = blockIdx.y;
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) Y[m * N + n] *= r[m];
}

extern "C" void cuda_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M,
                                   int N, int K) {
    if (M <= 0) return;
    cuda_gemm_xwt_f32(kc, O, W, Y, M, N, K);
    const int col_blocks = capped_blocks(N, SCALE_THREADS, SCALE_MAX_COL_BLOCKS);
    scale_rows_kernel<<<dim3(col_blocks, M), SCALE_THREADS, 0, kc->stream>>>(Y, r, N);
    LAUNCH_CHECK("scale_rows_kernel");
}

extern "C" void cuda_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K) {
    cuda_gemm_dyw_bf16(kc, dY, W, dX, M, N, K);
}

/* O[m, k] = X[m, k] * s[k] (bf16, rounded once: the bits the forward's norm pass wrote as O). */
__global__ void scale_cols_kernel(const bf16 *X, const float *s, bf16 *O, int K) {
    const long m = blockIdx.y;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < K; k += gridDim.x * blockDim.x)
        O[m * K + k] = __float2bfloat16(__bfloat162float(X[m * K + k]) * s[k]);
}

size_t cuda_dw_scaled_workspace(size_t M, size_t K) { return size_mul(size_mul(M, K), sizeof(bf16)); }

extern "C" void cuda_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW,
                             int accumulate, double *sq, int M, int N, int K) {
    if (!col_scale || M <= 0) {
        cuda_gemm_dw_f32(kc, dY, X, dW, accumulate, M, N, K);
    } else { /* the unfused way: the scaled input in a pass, then cuBLAS */
        bf16 *O = (bf16 *)cuda_workspace(kc, cuda_dw_scaled_workspace(M, K));
        const int col_blocks = capped_blocks(K, SCALE_THREADS, SCALE_MAX_COL_BLOCKS);
        scale_cols_kernel<<<dim3(col_blocks, M), SCALE_THREADS, 0, kc->stream>>>((const bf16 *)X, col_scale, O, K);
        LAUNCH_CHECK("scale_cols_kernel");
        cuda_gemm_dw_f32(kc, dY, O, dW, accumulate, M, N, K);
    }
    if (sq) cuda_sum_squares(kc, dW, (size_t)N * K, sq);
}
