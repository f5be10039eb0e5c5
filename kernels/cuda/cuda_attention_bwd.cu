/* cuda_attention_bwd.cu: causal grouped-query attention backward: the entry points, which run the Hopper kernels
 * (attention/attn_backward.cu) at head dim 64 and 128, and the FlashAttention-2 style kernels kept for head dim 32
 * (the tiny config's) until that config moves to head dim 64. Those are deterministic (no atomics): with P = exp(S*scale - lse) recomputed from the saved lse and Dq = <dy_q, y_q>,
 *   dV_k = sum_q P_qk dy_q,  dK_k = scale sum_q dS_qk q_q,  dQ_q = scale sum_k dS_qk k_k,  dS = P (dy.v - Dq).
 * Three kernels: the row dots Dq; dK/dV with one block per (16*WARPS-key tile, KV head, batch) that loops over the
 * heads of its group and the query tiles at or after its keys, accumulating in registers (computing S^T = K Q^T so
 * keys are the rows of the warp tiles); and dQ with one block per (16*WARPS-query tile, query head, batch) looping
 * over the key tiles at or before its queries. Each output element is written once by one thread. A warp skips the
 * tiles that the causal mask hides from all its rows. */
#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"

/* Dq[b, h, t] = <dy[b*T+t, head h], y[b*T+t, head h]>: HD/8 threads per (row, head), 8 columns each. */
template <int HD>
__global__ void attn_row_dot_kernel(const bf16 *y, const bf16 *dy, float *Dq, int BT, int T, int Hq, long ldy) {
    constexpr int G = HD / 8;
    const long pair = (blockIdx.x * (long)blockDim.x + threadIdx.x) / G;
    const int part = threadIdx.x % G;
    const bool live = pair < (long)BT * Hq;
    const long row = live ? pair / Hq : 0;
    const int h = live ? (int)(pair % Hq) : 0;
    float a[8], c[8], s = 0.0f;
    const long at = row * ldy + h * HD + part * 8;
    load8(y + at, 8, true, a);
    load8(dy + at, 8, true, c);
#pragma unroll
    for (int i = 0; i < 8; i++) s = fmaf(a[i], c[i], s);
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (live && part == 0) Dq[((row / T) * Hq + h) * T + row % T] = s;
}

/* Query rows per iteration of the dK/dV kernel (fewer at head dim 128 to stay within the registers). */
template <int HD>
struct DkdvTile {
    static constexpr int BQ = HD == 128 ? 32 : 64;
};

template <int HD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, ATT_BWD_MINB_OF(HD)) attn_bwd_dkdv_kernel(const bf16 *qkv, const bf16 *dy, const float *lse,
                                                                   const float *Dq, bf16 *dqkv, AttnDims d,
                                                                   AttnGradTail tail) {
    constexpr int BQ = DkdvTile<HD>::BQ, BM = 16 * WARPS, NT = 32 * WARPS;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem), *sV = sK + BM * HD, *sQ = sV + BM * HD, *sdY = sQ + 2 * BQ * HD;
    float *sL = reinterpret_cast<float *>(sdY + 2 * BQ * HD), *sD = sL + 2 * BQ;
    const int kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, group = d.Hq / d.Hkv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bf16 *base = qkv + (long)b * d.T * d.ld, *dy_base = dy + (long)b * d.T * d.ldy;

    load_tile_async<HD, BM, NT>(sK, base + (d.Hq + g) * HD, d.ld, kt * BM, d.T);
    load_tile_async<HD, BM, NT>(sV, base + (d.Hq + d.Hkv + g) * HD, d.ld, kt * BM, d.T);
    const int q_first = kt * BM / BQ, nq = (d.T + BQ - 1) / BQ - q_first, n_it = group * nq;
    /* iteration `it` works on query head g*group + it/nq, query tile q_first + it%nq */
    auto load_it = [&](int it, int buf) {
        const int h = g * group + it / nq, qt = q_first + it % nq;
        load_tile_async<HD, BQ, NT>(sQ + buf * BQ * HD, base + h * HD, d.ld, qt * BQ, d.T);
        load_tile_async<HD, BQ, NT>(sdY + buf * BQ * HD, dy_base + h * HD, d.ldy, qt * BQ, d.T);
        for (int i = threadIdx.x; i < BQ; i += NT) {
            const int q = qt * BQ + i;
            const long at = ((long)b * d.Hq + h) * d.T + q;
            sL[buf * BQ + i] = q < d.T ? lse[at] * ATT_LOG2E : INFINITY; /* padded queries: P = 0 */
            sD[buf * BQ + i] = q < d.T ? Dq[at] : 0.0f;
        }
    };
    load_it(0, 0);
    cp_async_commit();

    float dK[HD / 8][4], dV[HD / 8][4];
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) dK[dt][e] = dV[dt][e] = 0.0f;
    const int key_warp = kt * BM + warp * 16, key_row = key_warp + (lane >> 2); /* keys key_row, key_row + 8 */

    for (int it = 0; it < n_it; it++) {
        const int buf = it & 1, qt = q_first + it % nq;
        if (it + 1 < n_it) {
            load_it(it + 1, buf ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *Q = sQ + buf * BQ * HD, *dY = sdY + buf * BQ * HD;
        const float *L = sL + buf * BQ, *Dv = sD + buf * BQ;
        if (qt * BQ + BQ - 1 >= key_warp) { /* else every query of the tile is before every key of this warp */
            float P[BQ / 8][4], dP[BQ / 8][4];
            mma_abt<HD, BQ / 8>(P, sK, warp * 16, Q, 0, lane); /* S^T: rows keys, columns queries */
#pragma unroll
            for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = nt * 8 + (lane & 3) * 2 + (e & 1), key = key_row + (e >> 1) * 8;
                    P[nt][e] = qt * BQ + qi < key ? 0.0f : exp2f(P[nt][e] * d.scale_log2 - L[qi]);
                }
            mma_pb<HD, BQ / 16>(dV, P, dY, 0, lane);            /* dV += P^T dY */
            mma_abt<HD, BQ / 8>(dP, sV, warp * 16, dY, 0, lane); /* dP^T = V dY^T */
#pragma unroll
            for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) dP[nt][e] = P[nt][e] * (dP[nt][e] - Dv[nt * 8 + (lane & 3) * 2 + (e & 1)]);
            mma_pb<HD, BQ / 16>(dK, dP, Q, 0, lane); /* dK += dS^T Q */
        }
        __syncthreads();
    }
    bf16 *out = dqkv + (long)b * d.T * d.ld;
    const int nslots = d.Hq + 2 * d.Hkv;
    store_grad_rows_bf16<HD>(out + (d.Hq + g) * HD, d.ld, key_warp, d.T, dK, d.scale, lane, tail, (long)b * d.T, sK,
                             warp * 16, true, d.Hq + g, nslots);
    store_grad_rows_bf16<HD>(out + (d.Hq + d.Hkv + g) * HD, d.ld, key_warp, d.T, dV, 1.0f, lane, tail, (long)b * d.T,
                             sV, warp * 16, false, d.Hq + d.Hkv + g, nslots);
}

template <int HD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, ATT_BWD_MINB_OF(HD)) attn_bwd_dq_kernel(const bf16 *qkv, const bf16 *dy, const float *lse,
                                                                 const float *Dq, bf16 *dqkv, AttnDims d,
                                                                 AttnGradTail tail) {
    constexpr int BM = 16 * WARPS, NT = 32 * WARPS;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sdY = sQ + BM * HD, *sK = sdY + BM * HD, *sV = sK + 2 * ATT_BN * HD;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (d.Hq / d.Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bf16 *base = qkv + (long)b * d.T * d.ld;
    const bf16 *k_src = base + (d.Hq + g) * HD, *v_src = base + (d.Hq + d.Hkv + g) * HD;

    load_tile_async<HD, BM, NT>(sQ, base + h * HD, d.ld, qt * BM, d.T);
    load_tile_async<HD, BM, NT>(sdY, dy + (long)b * d.T * d.ldy + h * HD, d.ldy, qt * BM, d.T);
    load_tile_async<HD, ATT_BN, NT>(sK, k_src, d.ld, 0, d.T);
    load_tile_async<HD, ATT_BN, NT>(sV, v_src, d.ld, 0, d.T);
    cp_async_commit();

    const int q_warp = qt * BM + warp * 16, q_row = q_warp + (lane >> 2);
    float L[2], Dv[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int q = q_row + 8 * half;
        const long at = ((long)b * d.Hq + h) * d.T + q;
        L[half] = q < d.T ? lse[at] * ATT_LOG2E : INFINITY;
        Dv[half] = q < d.T ? Dq[at] : 0.0f;
    }
    float dQ[HD / 8][4];
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) dQ[dt][0] = dQ[dt][1] = dQ[dt][2] = dQ[dt][3] = 0.0f;
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
        const bf16 *K = sK + buf * ATT_BN * HD, *V = sV + buf * ATT_BN * HD;
        if (kt * ATT_BN <= q_warp + 15) { /* else every key of the tile is after every query of this warp */
            float P[ATT_BN / 8][4], dP[ATT_BN / 8][4];
            mma_abt<HD, ATT_BN / 8>(P, sQ, warp * 16, K, 0, lane);
#pragma unroll
            for (int nt = 0; nt < ATT_BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kt * ATT_BN + nt * 8 + (lane & 3) * 2 + (e & 1), q = q_row + (e >> 1) * 8;
                    P[nt][e] = key > q ? 0.0f : exp2f(P[nt][e] * d.scale_log2 - L[e >> 1]);
                }
            mma_abt<HD, ATT_BN / 8>(dP, sdY, warp * 16, V, 0, lane); /* dP = dY V^T */
#pragma unroll
            for (int nt = 0; nt < ATT_BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) dP[nt][e] = P[nt][e] * (dP[nt][e] - Dv[e >> 1]);
            mma_pb<HD, ATT_BN / 16>(dQ, dP, K, 0, lane); /* dQ += dS K */
        }
        __syncthreads();
    }
    store_grad_rows_bf16<HD>(dqkv + (long)b * d.T * d.ld + h * HD, d.ld, q_warp, d.T, dQ, d.scale, lane, tail,
                             (long)b * d.T, sQ, warp * 16, true, h, d.Hq + 2 * d.Hkv);
}

template <int HD>
static void launch_bwd(const bf16 *qkv, const bf16 *y, const float *lse, const bf16 *dy, bf16 *dqkv, int B,
                       const AttnDims &d, AttnGradTail tail, float *Dq) {
    constexpr int BQ = DkdvTile<HD>::BQ;
    const long threads = (long)B * d.T * d.Hq * (HD / 8);
    attn_row_dot_kernel<HD><<<cdiv(threads, 256), 256>>>(y, dy, Dq, B * d.T, d.T, d.Hq, d.ldy);
    LAUNCH_CHECK("attn_row_dot_kernel");

    constexpr int WK = ATT_DKDV_WARPS, WQ = ATT_DQ_WARPS;
    const size_t smem_kv = (size_t)(2 * 16 * WK + 4 * BQ) * HD * sizeof(bf16) + 4 * BQ * sizeof(float);
    ATT_SET_SMEM((attn_bwd_dkdv_kernel<HD, WK>), smem_kv);
    attn_bwd_dkdv_kernel<HD, WK><<<dim3(cdiv(d.T, 16 * WK), d.Hkv, B), 32 * WK, smem_kv>>>(qkv, dy, lse, Dq, dqkv, d,
                                                                                            tail);
    LAUNCH_CHECK("attn_bwd_dkdv_kernel");

    const size_t smem_q = (size_t)(2 * 16 * WQ + 4 * ATT_BN) * HD * sizeof(bf16);
    ATT_SET_SMEM((attn_bwd_dq_kernel<HD, WQ>), smem_q);
    attn_bwd_dq_kernel<HD, WQ><<<dim3(cdiv(d.T, 16 * WQ), d.Hq, B), 32 * WQ, smem_q>>>(qkv, dy, lse, Dq, dqkv, d, tail);
    LAUNCH_CHECK("attn_bwd_dq_kernel");
}

/* The kernels, with the tail in their stores when tail.r is set (then cpart is carved beside Dq and summed into c). */
static void attention_backward(const void *qkv, const void *y, const float *lse, const void *dy, void *dqkv,
                               AttnGradTail tail, float *c, int B, int T, int Hq, int Hkv, int hd) {
    if (B <= 0 || T <= 0) return;
    if (hd == 64 || hd == 128) {
        attn_hopper_backward(qkv, y, lse, dy, dqkv, tail.r, tail.cos, tail.sin, c, B, T, Hq, Hkv, hd);
        return;
    }
    AttnDims d = {T, Hq, Hkv, (long)(Hq + 2 * Hkv) * hd, (long)Hq * hd, 1.0f / sqrtf((float)hd), 0.0f};
    d.scale_log2 = d.scale * ATT_LOG2E;
    const int M = B * T, nslots = Hq + 2 * Hkv;
    const size_t n_dq = (size_t)B * Hq * T;
    float *ws = (float *)cuda_workspace((n_dq + (tail.r ? (size_t)M * nslots : 0)) * sizeof(float));
    if (tail.r) tail.cpart = ws + n_dq;
    const bf16 *q = (const bf16 *)qkv, *yy = (const bf16 *)y, *g = (const bf16 *)dy;
    if (hd == 32) launch_bwd<32>(q, yy, lse, g, (bf16 *)dqkv, B, d, tail, ws);
    else cuda_fail("attention_backward", "head_dim must be 32, 64 or 128", __FILE__, __LINE__);
    if (tail.r) cuda_row_sum(tail.cpart, nslots, M, c);
}

/* The unfused table's: the kernels, then the RoPE backward as its own pass (cuda_elementwise.cu). */
extern "C" void cuda_attention_backward(const void *qkv, const void *y, const float *lse, const void *dy,
                                        const float *r, const float *rope_cos, const float *rope_sin, void *dqkv,
                                        float *c, int B, int T, int Hq, int Hkv, int hd) {
    const AttnGradTail plain = {NULL, NULL, NULL, NULL};
    attention_backward(qkv, y, lse, dy, dqkv, plain, NULL, B, T, Hq, Hkv, hd);
    if (r && B > 0 && T > 0)
        cuda_rope_backward(qkv, dqkv, r, rope_cos, rope_sin, dqkv, c, B * T, (Hq + 2 * Hkv) * hd, (Hq + Hkv) * hd, hd,
                           T);
}

/* The fused table's (fused_ops.h): the RoPE backward and c in the stores of dQ, dK and dV. */
extern "C" void cudaf_attention_backward(const void *qkv, const void *y, const float *lse, const void *dy,
                                         const float *r, const float *rope_cos, const float *rope_sin, void *dqkv,
                                         float *c, int B, int T, int Hq, int Hkv, int hd) {
    const AttnGradTail tail = {r, rope_cos, rope_sin, NULL};
    attention_backward(qkv, y, lse, dy, dqkv, tail, c, B, T, Hq, Hkv, hd);
}
