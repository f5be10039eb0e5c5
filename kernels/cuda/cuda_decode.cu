/* cuda_decode.cu: the KV cache ops of generation (kernels.h), shared by both CUDA tables: kv_cache_append (a copy
 * of the new rows' K and V columns into the cache) and attention_cached, one CTA per (query head, new row) reading
 * the cache in chunks of DECODE_THREADS keys with an online softmax: each thread scores one key of the chunk, then
 * the threads, as groups of hd/8 threads that each own 8 output columns, add up the chunk's p_j V_j over the keys
 * of their group; the groups' sums are added at the end. Memory-bound on the cache; for the few rows of a decode
 * step (the prefill runs attention_forward). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

#define APPEND_THREADS 128
#define DECODE_THREADS 256
#define MAX_GRID_Y 65535 /* the most blocks of a grid's y dimension: attention_cached's new rows per launch */

/* Block (i, part): the K (part 0) or V (part 1) columns of qkv row i into cache row pos0 + i. */
__global__ void __launch_bounds__(APPEND_THREADS) kv_cache_append_kernel(const bf16 *qkv, bf16 *K, bf16 *V, int pos0,
                                                                        int Hq, int Hkv, int hd, bool vec) {
    const long i = blockIdx.x, ld_qkv = (long)(Hq + 2 * Hkv) * hd;
    const int part = blockIdx.y, width = Hkv * hd;
    const bf16 *src = qkv + i * ld_qkv + (long)(Hq + part * Hkv) * hd;
    bf16 *dst = (part ? V : K) + (pos0 + i) * width;
    for (int c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
        float v[8];
        load8(src + c, min(8, width - c), vec, v);
        store8(dst + c, min(8, width - c), vec, v);
    }
}

extern "C" void cuda_kv_cache_append(KernelContext *kc, const void *qkv, void *K, void *V, int pos0, int M, int Hq,
                                     int Hkv, int hd) {
    if (M <= 0) return;
    const long ld_qkv = (long)(Hq + 2 * Hkv) * hd, width = (long)Hkv * hd;
    const bool vec = hd % 8 == 0 && rows_vec_ok(qkv, ld_qkv, 2) && rows_vec_ok(K, width, 2) &&
                     rows_vec_ok(V, width, 2);
    kv_cache_append_kernel<<<dim3(M, 2), APPEND_THREADS, 0, kc->stream>>>((const bf16 *)qkv, (bf16 *)K, (bf16 *)V, pos0,
                                                                          Hq, Hkv, hd, vec);
    LAUNCH_CHECK("kv_cache_append_kernel");
}

/* Block (h, i): query head h of new row i (position pos0 + i) against cache rows 0 .. pos0 + i. Shared memory: q
 * [hd], the chunk's probabilities [DECODE_THREADS] and the groups' sums [groups, 8 * ceil(hd/8)]. */
__global__ void __launch_bounds__(DECODE_THREADS) attention_cached_kernel(const bf16 *qkv, const bf16 *K,
                                                                         const bf16 *V, bf16 *y, int pos0, int Hq,
                                                                         int Hkv, int hd, float scale, bool vec) {
    extern __shared__ float smem[];
    __shared__ float scratch[32];
    const int h = blockIdx.x, i = blockIdx.y, g = h / (Hq / Hkv), n = pos0 + i + 1;
    const long ld_qkv = (long)(Hq + 2 * Hkv) * hd, ld_kv = (long)Hkv * hd;
    const int chunks = (hd + 7) / 8, groups = DECODE_THREADS / chunks;
    const int chunk = threadIdx.x % chunks, group = threadIdx.x / chunks;
    float *q = smem, *p = q + hd, *sums = p + DECODE_THREADS;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) q[d] = __bfloat162float(qkv[i * ld_qkv + (long)h * hd + d]);
    __syncthreads();
    const bf16 *Kg = K + (long)g * hd, *Vg = V + (long)g * hd;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float m_run = -INFINITY, l_run = 0.0f;
    for (int c0 = 0; c0 < n; c0 += DECODE_THREADS) {
        const int j = c0 + threadIdx.x;
        float s = -INFINITY;
        if (j < n) {
            float dot = 0.0f;
            for (int d = 0; d < hd; d += 8) {
                float k[8];
                load8(Kg + j * ld_kv + d, min(8, hd - d), vec, k);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    if (d + e < hd) dot = fmaf(q[d + e], k[e], dot);
            }
            s = dot * scale;
        }
        const float m_new = fmaxf(m_run, block_max(s, scratch)); /* finite: key c0 is in range */
        const float rescale = expf(m_run - m_new), pj = j < n ? expf(s - m_new) : 0.0f;
        p[threadIdx.x] = pj;
        l_run = l_run * rescale + block_sum(pj, scratch); /* its barriers also publish p */
        m_run = m_new;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] *= rescale;
        if (group < groups) {
            const int in_chunk = min(n - c0, DECODE_THREADS);
            for (int jj = group; jj < in_chunk; jj += groups) {
                float v[8];
                load8(Vg + (c0 + jj) * ld_kv + chunk * 8, min(8, hd - chunk * 8), vec, v);
                const float pw = p[jj];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] = fmaf(pw, v[e], acc[e]);
            }
        }
        __syncthreads(); /* p is rewritten by the next chunk */
    }
    if (group < groups)
#pragma unroll
        for (int e = 0; e < 8; e++) sums[group * chunks * 8 + chunk * 8 + e] = acc[e];
    __syncthreads();
    const float inv = 1.0f / l_run;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float sum = 0.0f;
        for (int gr = 0; gr < groups; gr++) sum += sums[gr * chunks * 8 + d];
        y[i * (long)Hq * hd + (long)h * hd + d] = __float2bfloat16(sum * inv);
    }
}

extern "C" void cuda_attention_cached(KernelContext *kc, const void *qkv, const void *K, const void *V, void *y,
                                      int pos0, int M, int Hq, int Hkv, int hd) {
    if (M <= 0) return;
    const int chunks = (hd + 7) / 8;
    if (chunks > DECODE_THREADS) {
        fprintf(stderr, "error: attention_cached: head dim %d is above the most this kernel takes (%d)\n", hd,
                8 * DECODE_THREADS);
        exit(1);
    }
    const size_t smem = ((size_t)hd + DECODE_THREADS + (size_t)(DECODE_THREADS / chunks) * chunks * 8) * sizeof(float);
    const long width = (long)Hkv * hd;
    const bool vec = hd % 8 == 0 && rows_vec_ok(K, width, 2) && rows_vec_ok(V, width, 2);
    const long ld_qkv = (long)(Hq + 2 * Hkv) * hd, ld_y = (long)Hq * hd;
    for (int r0 = 0; r0 < M; r0 += MAX_GRID_Y) {
        attention_cached_kernel<<<dim3(Hq, min(M - r0, MAX_GRID_Y)), DECODE_THREADS, smem, kc->stream>>>(
            (const bf16 *)qkv + r0 * ld_qkv, (const bf16 *)K, (const bf16 *)V, (bf16 *)y + r0 * ld_y, pos0 + r0, Hq,
            Hkv, hd, 1.0f / sqrtf((float)hd), vec);
        LAUNCH_CHECK("attention_cached_kernel");
    }
}
