/* cuda_loss.cu: the LM head and cross-entropy of the unfused path. Rows go in chunks of LM_CHUNK: one cuBLAS GEMM
 * writes the chunk's raw logits O.W^T in bf16, into the rows of the [M, V] gradient buffer when training (then
 * transformed in place) or into a backend workspace for evaluation; then one block per row computes the
 * log-sum-exp of z = r * logits (online max/sum), the loss, and, when training, dZ = r * dscale * (softmax -
 * onehot) and c = <z, g>. Both paths make the same GEMM calls, so the loss has the same bits in both. Training
 * then runs the LM head's weight gradient and the final norm's backward on the whole dZ (cuBLAS + passes). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

#define LM_CHUNK 1024  /* rows per GEMM, and the rows of evaluation's logits workspace */
#define CE_THREADS 512 /* threads of a row's cross-entropy block */

/* Block i: row i of the chunk, whose raw logits are in logits[i]. With z = r[i] * logits[i]: loss[i] = lse(z) -
 * z[target]; with write_grad the row is overwritten with r[i] g, g = dscale (softmax(z) - onehot(target)), and
 * c[i] = <z, g>. */
__global__ void __launch_bounds__(CE_THREADS) cross_entropy_rows_kernel(bf16 *logits, const float *r,
                                                                        const int32_t *targets, float dscale,
                                                                        float *loss, int write_grad, float *c, int V,
                                                                        bool vec) {
    __shared__ float scratch[32];
    const long i = blockIdx.x; /* row inside the chunk */
    bf16 *row = logits + i * V;
    const float scale = r[i];
    /* pass 1: this thread's running max and sum of exp(z - max) */
    float tmax = -INFINITY, tsum = 0.0f;
    for (int col = threadIdx.x * 8; col < V; col += blockDim.x * 8) {
        const int valid = min(8, V - col);
        float v[8], cmax = -INFINITY;
        load8(row + col, valid, vec, v);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            v[j] = j < valid ? scale * v[j] : -INFINITY;
            cmax = fmaxf(cmax, v[j]);
        }
        if (cmax > tmax) {
            tsum *= expf(tmax - cmax); /* exp(-inf) = 0 on the first chunk */
            tmax = cmax;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) tsum += expf(v[j] - tmax);
    }
    const float zmax = block_max(tmax, scratch);
    const float sum = block_sum(tmax == -INFINITY ? 0.0f : tsum * expf(tmax - zmax), scratch);
    const float lse = zmax + logf(sum);
    const int target = targets[i];
    if (threadIdx.x == 0) loss[i] = lse - scale * __bfloat162float(row[target]);
    if (!write_grad) return;
    __syncthreads(); /* every thread has read row[target] before anyone overwrites it */
    float dot = 0.0f;
    for (int col = threadIdx.x * 8; col < V; col += blockDim.x * 8) {
        const int valid = min(8, V - col);
        float v[8];
        load8(row + col, valid, vec, v);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float z = scale * v[j];
            const float g = dscale * (expf(z - lse) - (col + j == target ? 1.0f : 0.0f));
            if (j < valid) dot = fmaf(z, g, dot);
            v[j] = scale * g;
        }
        store8(row + col, valid, vec, v);
    }
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) c[i] = dot;
}

size_t cuda_lm_head_loss_workspace(size_t M, size_t V) {
    return size_mul(size_mul(M < LM_CHUNK ? M : LM_CHUNK, V), sizeof(bf16));
}

/* lm_head_train's buffer: the [M, V] gradient (bf16, to a 256-byte boundary), then c [M]. */
static size_t lm_grad_dz_bytes(size_t M, size_t V) {
    return size_round_up(size_mul(size_mul(M, V), sizeof(bf16)), 256);
}

size_t cuda_lm_head_grad_bytes(size_t M, size_t V) {
    return size_add(lm_grad_dz_bytes(M, V), size_mul(M, sizeof(float)));
}

static void lm_head_rows(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                         float dscale, float *loss, bf16 *dZ, float *c, int M, int V, int K) {
    bf16 *scratch = dZ ? NULL : (bf16 *)cuda_workspace(kc, cuda_lm_head_loss_workspace(M, V));
    for (int m0 = 0; m0 < M; m0 += LM_CHUNK) {
        const int rows = M - m0 < LM_CHUNK ? M - m0 : LM_CHUNK;
        bf16 *logits = dZ ? dZ + (size_t)m0 * V : scratch;
        cuda_gemm_xwt_bf16(kc, (const bf16 *)O + (size_t)m0 * K, W, logits, V, rows, V, K, 0.0f);
        cross_entropy_rows_kernel<<<rows, CE_THREADS, 0, kc->stream>>>(logits, r + m0, targets + m0, dscale, loss + m0,
                                                                       dZ != NULL, dZ ? c + m0 : NULL, V,
                                                                       rows_vec_ok(logits, V, 2));
        LAUNCH_CHECK("cross_entropy_rows_kernel");
    }
}

extern "C" void cuda_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r,
                                  const int32_t *targets, float *loss, int M, int V, int K) {
    lm_head_rows(kc, O, W, r, targets, 0.0f, loss, NULL, NULL, M, V, K);
}

extern "C" void cuda_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r,
                                   const int32_t *targets, const int32_t *target_groups, float dscale, const void *x,
                                   const float *gamma, float *loss, float *dW, void *dres, float *dgamma, int M, int V,
                                   int K) {
    if (M <= 0) return;
    /* the [M, V] gradient and c, kept by the context (grown to the largest seen; counted in the peak) */
    const size_t need = cuda_lm_head_grad_bytes(M, V);
    if (need > kc->lm_grad_bytes) {
        if (kc->lm_grad) {
            CUDA_CHECK(cudaStreamSynchronize(kc->stream)); /* earlier kernels may still read the old buffer */
            cuda_dev_free(kc, kc->lm_grad);
        }
        kc->lm_grad = (char *)cuda_dev_alloc(kc, need);
        kc->lm_grad_bytes = need;
    }
    bf16 *dZ = (bf16 *)kc->lm_grad;
    float *c = (float *)(kc->lm_grad + lm_grad_dz_bytes(M, V));
    lm_head_rows(kc, O, W, r, targets, dscale, loss, dZ, c, M, V, K);
    cuda_gemm_dw(kc, dZ, O, NULL, dW, 1, NULL, M, V, K);
    cuda_gemm_norm_backward(kc, dZ, W, gamma, r, c, x, dres, dgamma, 0, M, V, K);
}
