/* cuda_embedding.cu: embedding backward (and the LM head's target rows, cuda_rows_scatter_add), deterministic
 * without atomics: from the rows grouped by token on the host (kernels.h's token groups, copied with the batch),
 * one block per distinct token adds its rows of dx (each times its coefficient), in order of m, in fp32 registers,
 * and adds the sum to dE once. The grid has a block for every row; the blocks past the number of groups return. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

#define EMBED_THREADS 128

/* Block u < n_seg: rows order[seg[u] .. seg[u+1]) of dx all have token seg_token[u]; columns in chunks of 8 per
 * thread. groups = [n_seg | order M | seg M+1 | seg_token M]. */
__global__ void __launch_bounds__(EMBED_THREADS) embed_backward_kernel(const bf16 *dx, const float *coef,
                                                                       const int32_t *groups, int M, float *dE, int D,
                                                                       bool vec) {
    const int u = blockIdx.x;
    if (u >= groups[0]) return;
    const int32_t *order = groups + 1, *seg = groups + 1 + M, *seg_token = groups + 2 + 2 * M;
    const int begin = seg[u], end = seg[u + 1];
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

void cuda_rows_scatter_add(KernelContext *kc, const int32_t *groups, const float *coef, const void *dx, float *dE,
                           int M, int D) {
    if (M <= 0) return;
    const int col_blocks = cdiv(cdiv(D, 8), EMBED_THREADS);
    embed_backward_kernel<<<dim3(M, col_blocks), EMBED_THREADS, 0, kc->stream>>>((const bf16 *)dx, coef, groups, M, dE,
                                                                                 D, rows_vec_ok(dx, D, 2));
    LAUNCH_CHECK("embed_backward_kernel");
}

extern "C" void cuda_embed_backward(KernelContext *kc, const int32_t *tokens, const int32_t *groups, const void *dx,
                                    float *dE, int M, int D, int V) {
    cuda_rows_scatter_add(kc, groups, NULL, dx, dE, M, D);
}
