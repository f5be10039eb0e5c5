/* cuda_attention_fwd.cu: causal grouped-query attention forward: the entry point, which runs the Hopper kernels
 * (attention/attn_forward.cu) at head dim 64 and 128, and the FlashAttention-2 style kernel kept for head dim 32
 * (the tiny config's) until that config moves to head dim 64. One block of WARPS warps
 * per (16*WARPS-query tile, query head, batch); each warp owns 16 queries. K/V tiles of 64 keys stream through shared memory
 * (double-buffered cp.async); scores, the online softmax (base 2) and the output accumulator stay in registers; no
 * T x T matrix exists anywhere. Writes y (bf16) and the natural-log lse [B, Hq, T] for the backward pass. */
#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_ops.h"

template <int HD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) attn_fwd_kernel(const bf16 *qkv, bf16 *y, float *lse, AttnDims d) {
    constexpr int BM = 16 * WARPS, NT = 32 * WARPS;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sK = sQ + BM * HD, *sV = sK + 2 * ATT_BN * HD;
    const int qt = gridDim.x - 1 - blockIdx.x; /* the longest rows first */
    const int h = blockIdx.y, b = blockIdx.z, g = h / (d.Hq / d.Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bf16 *base = qkv + (long)b * d.T * d.ld;
    const bf16 *q_src = base + h * HD, *k_src = base + (d.Hq + g) * HD, *v_src = base + (d.Hq + d.Hkv + g) * HD;

    load_tile_async<HD, BM, NT>(sQ, q_src, d.ld, qt * BM, d.T);
    load_tile_async<HD, ATT_BN, NT>(sK, k_src, d.ld, 0, d.T);
    load_tile_async<HD, ATT_BN, NT>(sV, v_src, d.ld, 0, d.T);
    cp_async_commit();

    float O[HD / 8][4];
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) O[dt][0] = O[dt][1] = O[dt][2] = O[dt][3] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    const int q_warp = qt * BM + warp * 16, q_row = q_warp + (lane >> 2); /* this thread's rows: q_row, q_row + 8 */
    const int n_kt = (qt * BM + BM + ATT_BN - 1) / ATT_BN;

    for (int kt = 0; kt < n_kt; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < n_kt) {
            load_tile_async<HD, ATT_BN, NT>(sK + (buf ^ 1) * ATT_BN * HD, k_src, d.ld, (kt + 1) * ATT_BN, d.T);
            load_tile_async<HD, ATT_BN, NT>(sV + (buf ^ 1) * ATT_BN * HD, v_src, d.ld, (kt + 1) * ATT_BN, d.T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt * ATT_BN <= q_warp + 15) { /* else every key of the tile is after every query of this warp */
            float S[ATT_BN / 8][4];
            mma_abt<HD, ATT_BN / 8>(S, sQ, warp * 16, sK + buf * ATT_BN * HD, 0, lane);
            const bool diagonal = (kt + 1) * ATT_BN > q_warp;
#pragma unroll
            for (int nt = 0; nt < ATT_BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kt * ATT_BN + nt * 8 + (lane & 3) * 2 + (e & 1), q = q_row + (e >> 1) * 8;
                    S[nt][e] = diagonal && key > q ? -INFINITY : S[nt][e] * d.scale_log2;
                }
            /* online softmax, one row per half */
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < ATT_BN / 8; nt++) mx = fmaxf(mx, fmaxf(S[nt][2 * half], S[nt][2 * half + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float new_max = fmaxf(row_max[half], mx); /* finite: every row has an unmasked key in its tiles */
                const float alpha = exp2f(row_max[half] - new_max);
                row_max[half] = new_max;
                float s = 0.0f;
#pragma unroll
                for (int nt = 0; nt < ATT_BN / 8; nt++) {
                    S[nt][2 * half] = exp2f(S[nt][2 * half] - new_max);
                    S[nt][2 * half + 1] = exp2f(S[nt][2 * half + 1] - new_max);
                    s += S[nt][2 * half] + S[nt][2 * half + 1];
                }
                row_sum[half] = row_sum[half] * alpha + s;
#pragma unroll
                for (int dt = 0; dt < HD / 8; dt++) {
                    O[dt][2 * half] *= alpha;
                    O[dt][2 * half + 1] *= alpha;
                }
            }
            mma_pb<HD, ATT_BN / 16>(O, S, sV + buf * ATT_BN * HD, 0, lane);
        }
        __syncthreads(); /* the buffer is refilled by the next iteration's prefetch */
    }

#pragma unroll
    for (int half = 0; half < 2; half++) {
        float s = row_sum[half];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        const float inv = 1.0f / s;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            O[dt][2 * half] *= inv;
            O[dt][2 * half + 1] *= inv;
        }
        const int q = q_row + 8 * half;
        if ((lane & 3) == 0 && q < d.T)
            lse[((long)b * d.Hq + h) * d.T + q] = (row_max[half] + log2f(s)) * (1.0f / ATT_LOG2E);
    }
    store_rows_bf16<HD>(y + (long)b * d.T * d.ldy + h * HD, d.ldy, q_warp, d.T, O, 1.0f, lane);
}

template <int HD>
static void launch_fwd(const bf16 *qkv, bf16 *y, float *lse, int B, const AttnDims &d) {
    constexpr int W = ATT_FWD_WARPS;
    const size_t smem = (size_t)(16 * W + 4 * ATT_BN) * HD * sizeof(bf16);
    ATT_SET_SMEM((attn_fwd_kernel<HD, W>), smem);
    attn_fwd_kernel<HD, W><<<dim3(cdiv(d.T, 16 * W), d.Hq, B), 32 * W, smem>>>(qkv, y, lse, d);
    LAUNCH_CHECK("attn_fwd_kernel");
}

extern "C" void cuda_attention_forward(const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv, int hd) {
    if (B <= 0 || T <= 0) return;
    AttnDims d = {T, Hq, Hkv, (long)(Hq + 2 * Hkv) * hd, (long)Hq * hd, 1.0f / sqrtf((float)hd), 0.0f};
    d.scale_log2 = d.scale * ATT_LOG2E;
    const bf16 *q = (const bf16 *)qkv;
    if (hd == 32) launch_fwd<32>(q, (bf16 *)y, lse, B, d);
    else if (hd == 64 || hd == 128) attn_hopper_forward(qkv, y, lse, B, T, Hq, Hkv, hd);
    else cuda_fail("cuda_attention_forward", "head_dim must be 32, 64 or 128", __FILE__, __LINE__);
}
