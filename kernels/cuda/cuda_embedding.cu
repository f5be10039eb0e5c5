/* cuda_embedding.cu: embedding backward (and the LM head's target rows, cuda_rows_scatter_add), deterministic
 * without atomics. The token ids are brought to the host (M ints, after the backward pass has been queued: the copy
 * waits for it, which costs nothing at the end of the step) and grouped by a stable counting sort; one block per
 * distinct token then adds its rows of dx (each times its coefficient), in order of m, in fp32 registers, and adds
 * the sum to dE once. */
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

#define EMBED_THREADS 128

/* Block u: rows order[seg[u] .. seg[u+1]) of dx all have token seg_token[u]; columns in chunks of 8 per thread. */
__global__ void __launch_bounds__(EMBED_THREADS) embed_backward_kernel(const bf16 *dx, const float *coef,
                                                                       const int32_t *order, const int32_t *seg,
                                                                       const int32_t *seg_token, float *dE, int D,
                                                                       bool vec) {
    const int u = blockIdx.x, begin = seg[u], end = seg[u + 1];
    float *out = dE + (long)seg_token[u] * D;
    for (int col = (blockIdx.y * blockDim.x + threadIdx.x) * 8; col < D; col += gridDim.y * blockDim.x * 8) {
        const int valid = min(8, D - col);
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = begin; i < end; i++) {
            float v[8];
            load8(dx + (long)order[i] * D + col, valid, vec, v);
            const float a = coef ? coef[order[i]] : 1.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] = fmaf(a, v[j], acc[j]);
        }
        for (int j = 0; j < valid; j++) out[col + j] += acc[j];
    }
}

size_t cuda_rows_scatter_bytes(size_t M) { return size_mul(size_add(size_mul(3, M), 1), sizeof(int32_t)); }

void cuda_rows_scatter_add(const int32_t *tokens, const float *coef, const void *dx, float *dE, int M, int D, int V) {
    if (M <= 0) return;
    /* host and device index buffers, grown once to the largest M (and V) seen */
    static int32_t *h_tok, *h_idx, *h_count, *d_idx;
    static int cap_m, cap_v;
    if (M > cap_m || V > cap_v) {
        free(h_tok);
        free(h_idx);
        free(h_count);
        if (d_idx) cuda_dev_free(d_idx);
        cap_m = M > cap_m ? M : cap_m;
        cap_v = V > cap_v ? V : cap_v;
        h_tok = (int32_t *)malloc((size_t)cap_m * sizeof(int32_t));
        h_idx = (int32_t *)malloc((size_t)(3 * cap_m + 1) * sizeof(int32_t));
        h_count = (int32_t *)malloc((size_t)(cap_v + 1) * sizeof(int32_t));
        if (!h_tok || !h_idx || !h_count) cuda_fail("malloc", "out of host memory", __FILE__, __LINE__);
        d_idx = (int32_t *)cuda_dev_alloc(cuda_rows_scatter_bytes(cap_m));
    }
    CUDA_CHECK(cudaMemcpy(h_tok, tokens, (size_t)M * sizeof(int32_t), cudaMemcpyDeviceToHost));
    /* stable counting sort: order[] lists the rows grouped by token, rows ascending inside a group */
    memset(h_count, 0, (size_t)(V + 1) * sizeof(int32_t));
    for (int m = 0; m < M; m++) h_count[h_tok[m] + 1]++;
    for (int v = 0; v < V; v++) h_count[v + 1] += h_count[v];
    int32_t *order = h_idx, *seg = h_idx + M, *seg_token = h_idx + 2 * M + 1;
    int n_seg = 0;
    for (int v = 0; v < V; v++)
        if (h_count[v + 1] > h_count[v]) {
            seg[n_seg] = h_count[v];
            seg_token[n_seg++] = v;
        }
    seg[n_seg] = M;
    for (int m = 0; m < M; m++) order[h_count[h_tok[m]]++] = m;
    /* one upload: order [M], seg [n_seg+1], seg_token [n_seg] packed at the same offsets as on the host */
    CUDA_CHECK(cudaMemcpy(d_idx, h_idx, (size_t)(2 * M + 1 + n_seg) * sizeof(int32_t), cudaMemcpyHostToDevice));
    const int col_blocks = cdiv(cdiv(D, 8), EMBED_THREADS);
    embed_backward_kernel<<<dim3(n_seg, col_blocks), EMBED_THREADS>>>(
        (const bf16 *)dx, coef, d_idx, d_idx + M, d_idx + 2 * M + 1, dE, D, rows_vec_ok(dx, D, 2));
    LAUNCH_CHECK("embed_backward_kernel");
}

extern "C" void cuda_embed_backward(const int32_t *tokens, const void *dx, float *dE, int M, int D, int V) {
    cuda_rows_scatter_add(tokens, NULL, dx, dE, M, D, V);
}
