/* cuda_norm.cu: the RMSNorm ops of the unfused path. Forward: embed_norm (gather + statistics) and
 * gemm_residual_norm (res copied into h, one cuBLAS GEMM with beta = 1 so the residual add happens in fp32 before
 * the rounding to bf16, then one pass that writes O = h*gamma and r). Backward: gemm_norm_backward (G = dZ.W in fp32
 * scratch, then one pass for dres and per-row-block dgamma partials, summed in block order: deterministic). Also the
 * deterministic sums of partials that the fused backward shares (cuda_column_sum_add, cuda_row_sum). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_ops.h"

#define NORM_THREADS 256
#define NORM_BWD_ROWS 16 /* rows per block of the backward pass, i.e. per dgamma partial */

/* One block per row m: v = the row (src row m, or src row tokens[m] when gathering); optionally x_out[m] = v;
 * O[m] = v * gamma; r[m] = 1/sqrt(mean(v^2) + eps). */
__global__ void __launch_bounds__(NORM_THREADS) norm_rows_kernel(const bf16 *src, const int32_t *tokens, bf16 *x_out,
                                                                 const float *gamma, float eps, bf16 *O, float *r,
                                                                 int N, bool vec) {
    __shared__ float scratch[32];
    const long m = blockIdx.x;
    const bf16 *row = src + (tokens ? (long)tokens[m] : m) * N;
    float ss = 0.0f;
    for (int col = threadIdx.x * 8; col < N; col += blockDim.x * 8) {
        const int valid = min(8, N - col);
        float v[8], g[8], o[8];
        load8(row + col, valid, vec, v);
        load8f(gamma + col, valid, vec, g);
        if (x_out) store8(x_out + m * N + col, valid, vec, v);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            o[i] = v[i] * g[i];
            ss = fmaf(v[i], v[i], ss);
        }
        store8(O + m * N + col, valid, vec, o);
    }
    ss = block_sum(ss, scratch);
    if (threadIdx.x == 0) r[m] = rms_scale_ieee(ss, N, eps);
}

static void norm_rows(KernelContext *kc, const void *src, const int32_t *tokens, void *x_out, const float *gamma,
                      float eps, void *O, float *r, int M, int N) {
    if (M <= 0) return;
    const bool vec = rows_vec_ok(src, N, 2) && rows_vec_ok(O, N, 2) && rows_vec_ok(gamma, N, 4) &&
                     (!x_out || rows_vec_ok(x_out, N, 2));
    norm_rows_kernel<<<M, NORM_THREADS, 0, kc->stream>>>((const bf16 *)src, tokens, (bf16 *)x_out, gamma, eps,
                                                         (bf16 *)O, r, N, vec);
    LAUNCH_CHECK("norm_rows_kernel");
}

extern "C" void cuda_embed_norm(KernelContext *kc, const int32_t *tokens, const void *E, const float *gamma, float eps,
                                void *x, void *O, float *r, int M, int D) {
    norm_rows(kc, E, tokens, x, gamma, eps, O, r, M, D);
}

extern "C" void cuda_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res,
                                        const float *gamma, float eps, void *h, void *O, float *r, int M, int N,
                                        int K) {
    if (M <= 0) return;
    CUDA_CHECK(cudaMemcpyAsync(h, res, (size_t)M * N * sizeof(bf16), cudaMemcpyDeviceToDevice, kc->stream));
    cuda_gemm_xwt_bf16(kc, A, W, h, N, M, N, K, 1.0f);
    norm_rows(kc, h, NULL, NULL, gamma, eps, O, r, M, N);
}

/* Block b owns rows [b*NORM_BWD_ROWS, ...): dx = gamma*G - (r^2/K) c x into dres (= or +=), and its partial column
 * sums of G*x into partial[b, :]. */
__global__ void __launch_bounds__(NORM_THREADS) norm_backward_rows_kernel(const float *G, const float *gamma,
                                                                          const float *r, const float *c,
                                                                          const bf16 *x, bf16 *dres, float *partial,
                                                                          int accumulate, int M, int K, bool vec) {
    const int m0 = blockIdx.x * NORM_BWD_ROWS, rows = min(NORM_BWD_ROWS, M - m0);
    for (int col = threadIdx.x * 8; col < K; col += blockDim.x * 8) {
        const int valid = min(8, K - col);
        float gam[8], acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        load8f(gamma + col, valid, vec, gam);
        for (int i = 0; i < rows; i++) {
            const long m = m0 + i, at = m * K + col;
            const float coef = r[m] * r[m] / (float)K * c[m];
            float g[8], xv[8], d[8], prev[8];
            load8f(G + at, valid, vec, g);
            load8(x + at, valid, vec, xv);
            if (accumulate) load8(dres + at, valid, vec, prev);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float grad = rms_backward(gam[j], g[j], coef, xv[j]);
                d[j] = accumulate ? prev[j] + grad : grad;
                acc[j] = fmaf(g[j], xv[j], acc[j]);
            }
            store8(dres + at, valid, vec, d);
        }
        for (int j = 0; j < valid; j++) partial[(long)blockIdx.x * K + col + j] = acc[j];
    }
}

/* out[k] += sum over blocks b (in order) of partial[b, k]. */
__global__ void column_sum_add_kernel(const float *partial, int n_blocks, float *out, int K) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    float s = 0.0f;
    for (int b = 0; b < n_blocks; b++) s += partial[(long)b * K + k];
    out[k] += s;
}

void cuda_column_sum_add(KernelContext *kc, const float *partial, int n_blocks, float *out, int K) {
    if (K <= 0) return;
    column_sum_add_kernel<<<cdiv(K, 256), 256, 0, kc->stream>>>(partial, n_blocks, out, K);
    LAUNCH_CHECK("column_sum_add_kernel");
}

/* out[m] = sum over t (in order) of part[m, t]. */
__global__ void row_sum_kernel(const float *part, int nparts, int M, float *out) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    float s = 0.0f;
    for (int t = 0; t < nparts; t++) s += part[(long)m * nparts + t];
    out[m] = s;
}

void cuda_row_sum(KernelContext *kc, const float *part, int nparts, int M, float *out) {
    if (M <= 0) return;
    row_sum_kernel<<<cdiv(M, 256), 256, 0, kc->stream>>>(part, nparts, M, out);
    LAUNCH_CHECK("row_sum_kernel");
}

/* The workspace: G [M, K] fp32 (256-byte aligned end), then the dgamma partials [n_blocks, K]. */
static size_t norm_backward_g_bytes(size_t M, size_t K) {
    return size_round_up(size_mul(size_mul(M, K), sizeof(float)), 256);
}

size_t cuda_norm_backward_workspace(size_t M, size_t K) {
    return size_add(norm_backward_g_bytes(M, K), size_mul((M + NORM_BWD_ROWS - 1) / NORM_BWD_ROWS, K * sizeof(float)));
}

extern "C" void cuda_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma,
                                        const float *r, const float *c, const void *x, void *dres, float *dgamma,
                                        int accumulate, int M, int N, int K) {
    if (M <= 0) return;
    const int n_blocks = cdiv(M, NORM_BWD_ROWS);
    const size_t g_bytes = norm_backward_g_bytes(M, K);
    char *ws = (char *)cuda_workspace(kc, cuda_norm_backward_workspace(M, K));
    float *G = (float *)ws, *partial = (float *)(ws + g_bytes);
    cuda_gemm_dyw_f32(kc, dZ, W, G, M, N, K);
    const bool vec = rows_vec_ok(G, K, 4) && rows_vec_ok(x, K, 2) && rows_vec_ok(dres, K, 2) &&
                     rows_vec_ok(gamma, K, 4);
    norm_backward_rows_kernel<<<n_blocks, NORM_THREADS, 0, kc->stream>>>(G, gamma, r, c, (const bf16 *)x, (bf16 *)dres,
                                                                         partial, accumulate, M, K, vec);
    LAUNCH_CHECK("norm_backward_rows_kernel");
    cuda_column_sum_add(kc, partial, n_blocks, dgamma, K);
}
