/* attn_forward.cu: causal grouped-query attention forward on Hopper, head dim 64 and 128 (docs/DESIGN.md,
 * "Attention"). One CTA per (128-query tile, query head, sequence): a producer warpgroup whose one thread loads the
 * query tile once and the tile's K and V blocks of 128 keys by TMA into a ring of stages; two consumer warpgroups,
 * 64 queries each, computing S = Q K^T on wgmma from shared memory, the online softmax (base 2) in registers, and
 * O += P V with P as the register A operand, V read MN-major from the same tile the load wrote. The consumers take
 * turns at the tensor cores (ping-pong), and each runs a block's softmax while its previous block's P V completes. Only the diagonal
 * key block is masked; blocks after it are never loaded. The output goes through the consumer's own query rows in
 * shared memory to one TMA store; lse (natural log) is kept for the backward. K/V are read in place for every query
 * head of their group. */
#include "kernels/cuda/attention/attn_tiles.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm_maps.h"

template <int HD>
struct AttnFwdShape {
    static constexpr int BM = 128, BN = 128; /* queries per CTA (64 per consumer), keys per K/V block */
    static constexpr int kStages = 2;
    using Q = AttnTile<HD, BM>;
    using KV = AttnTile<HD, BN>;
    static constexpr int oK = Q::kBytes, oV = oK + kStages * KV::kBytes, oBar = oV + kStages * KV::kBytes;
    static constexpr int kSmem = oBar + (1 + 4 * kStages) * 8 + 1024; /* + slack to align the base to 1 KB */
    static_assert(BM == BN, "the diagonal key block is the query tile's own");
};

struct AttnFwdParams {
    CUtensorMap qkv; /* [B][T][(Hq + 2 Hkv) hd], box 64 x 128 */
    CUtensorMap y;   /* [B][T][Hq hd], box 64 x 64 */
    float *lse;      /* [B, Hq, T] */
    int T, Hq, Hkv;
    float scale_log2; /* log2(e) / sqrt(hd) */
};

template <int HD>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_fwd_kernel(const __grid_constant__ AttnFwdParams p) {
    using L = AttnFwdShape<HD>;
    constexpr int S = L::kStages, BM = L::BM, BN = L::BN;
    extern __shared__ uint8_t attn_smem_raw[];
    uint8_t *smem = attn_smem_base(attn_smem_raw);
    uint8_t *sQ = smem, *sK = smem + L::oK, *sV = smem + L::oV;
    uint64_t *q_full = reinterpret_cast<uint64_t *>(smem + L::oBar);
    uint64_t *k_full = q_full + 1, *v_full = k_full + S, *k_empty = v_full + S, *v_empty = k_empty + S;
    /* heads fastest, then sequences, then query tiles from the longest (most key blocks) down */
    const int h = blockIdx.x, b = blockIdx.y, qt = gridDim.z - 1 - blockIdx.z, kv = h / (p.Hq / p.Hkv);
    const int n_blocks = qt + 1;

    attn_init_barriers(q_full, 1 + 2 * S, 2 * S); /* q_full, k_full, v_full; k_empty, v_empty */

    if (threadIdx.x < 128) {
        /* ---------------- producer */
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            tma_prefetch_desc(&p.qkv);
            mbar_arrive_expect_tx(q_full, L::Q::kBytes);
            attn_load_tile<HD, BM>(sQ, &p.qkv, q_full, h * HD, qt * BM, b);
            const int kcol = (p.Hq + kv) * HD, vcol = (p.Hq + p.Hkv + kv) * HD;
            for (int j = 0; j < n_blocks; j++) {
                const int s = j % S;
                const uint32_t ph = (j / S) & 1;
                mbar_wait(&k_empty[s], ph ^ 1);
                mbar_arrive_expect_tx(&k_full[s], L::KV::kBytes);
                attn_load_tile<HD, BN>(sK + s * L::KV::kBytes, &p.qkv, &k_full[s], kcol, j * BN, b);
                mbar_wait(&v_empty[s], ph ^ 1);
                mbar_arrive_expect_tx(&v_full[s], L::KV::kBytes);
                attn_load_tile<HD, BN>(sV + s * L::KV::kBytes, &p.qkv, &v_full[s], vcol, j * BN, b);
            }
        }
        return;
    }

    /* ---------------- consumers: rows row0 .. row0 + 63 of the query tile */
    setmaxnreg_inc<240>();
    const int c = threadIdx.x / 128 - 1, wtid = threadIdx.x & 127, warp = wtid >> 5, lane = threadIdx.x & 31;
    const int row0 = 64 * c;
    int q[2]; /* this thread's two query positions */
    q[0] = qt * BM + row0 + 16 * warp + (lane >> 2);
    q[1] = q[0] + 8;

    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* running max (scaled, base 2) and partial sum */
    mbar_wait(q_full, 0);

    /* The consumers take turns issuing their matmuls (AttnTurns): turn j issues block j's S and block j-1's P V,
     * then lets the other consumer issue its own while this one runs block j's softmax, which needs S only: P V
     * completes meanwhile, before the output's rescale. */
    uint32_t pa[BN / 4];
    const AttnTurns turns(c);
    for (int j = 0; j < n_blocks; j++) {
        const int s = j % S, sp = (j + S - 1) % S;
        const uint32_t ph = (j / S) & 1, php = ((j - 1) / S) & 1; /* php: j > 0 only */
        float sc[BN / 2];
        turns.take();
        mbar_wait(&k_full[s], ph);
        wgmma_fence();
        attn_mma_abt<HD, BM, BN>(sc, sQ, row0, sK + s * L::KV::kBytes);
        wgmma_commit();
        if (j > 0) {
            mbar_wait(&v_full[sp], php);
            wgmma_fence();
            attn_mma_pv<HD, BN>(o, pa, sV + sp * L::KV::kBytes, true);
        }
        wgmma_commit(); /* at j = 0 an empty group: the waits below count the same on every path */
        turns.pass();
        wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < BN / 2; i++) reg_fence(sc[i]);
        if (lane == 0) mbar_arrive(&k_empty[s]);

        /* online softmax: every row has an unmasked key in block 0, so the maxima are finite */
        const bool diagonal = j == qt;
        float mx[2] = {-INFINITY, -INFINITY}; /* of the unscaled scores (the scale is positive) */
#pragma unroll
        for (int i = 0; i < BN / 2; i++) {
            const int hh = attn_frag_half(i);
            if (diagonal && j * BN + attn_frag_col(i, lane) > q[hh]) sc[i] = -INFINITY;
            mx[hh] = fmaxf(mx[hh], sc[i]);
        }
        float alpha[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const float mnew = fmaxf(m[hh], attn_quad_max(mx[hh]) * p.scale_log2);
            alpha[hh] = attn_exp2(m[hh] - mnew);
            m[hh] = mnew;
            l[hh] *= alpha[hh];
        }
#pragma unroll
        for (int i = 0; i < BN / 2; i++) {
            const int hh = attn_frag_half(i);
            sc[i] = attn_exp2(fmaf(sc[i], p.scale_log2, -m[hh]));
            l[hh] += sc[i];
        }
        attn_wgmma_wait<HD / 2>(o);
        if (j > 0 && lane == 0) mbar_arrive(&v_empty[sp]);
#pragma unroll
        for (int i = 0; i < HD / 2; i++) o[i] *= alpha[attn_frag_half(i)];
        attn_pack<BN>(sc, pa);
    }
    { /* the last block's P V, in one more turn */
        const int sp = (n_blocks - 1) % S;
        turns.take();
        mbar_wait(&v_full[sp], ((n_blocks - 1) / S) & 1);
        wgmma_fence();
        attn_mma_pv<HD, BN>(o, pa, sV + sp * L::KV::kBytes, true);
        wgmma_commit();
        turns.last();
        attn_wgmma_wait<HD / 2>(o);
        if (lane == 0) mbar_arrive(&v_empty[sp]);
    }

    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const float sum = attn_quad_sum(l[hh]);
        inv[hh] = 1.0f / sum;
        if ((lane & 3) == 0 && q[hh] < p.T)
            p.lse[((long)b * p.Hq + h) * p.T + q[hh]] = (m[hh] + log2f(sum)) * (1.0f / ATTN_LOG2E);
    }
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] *= inv[attn_frag_half(i)];
    /* the consumer's query rows are read by its own wgmmas only, all complete: they take the output tile */
    attn_stage_tile<HD, BM>(sQ, row0, o, 1.0f, warp, lane);
    if (attn_store_begin(c, wtid)) {
        attn_store_rows<HD, BM>(&p.y, sQ, row0, h * HD, qt * BM + row0, b);
        attn_store_end();
    }
}

template <int HD>
static void launch_fwd(const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv) {
    using L = AttnFwdShape<HD>;
    const long ld = (long)(Hq + 2 * Hkv) * HD, ldy = (long)Hq * HD;
    AttnFwdParams p;
    p.qkv = ge_tensor_map_batched("attention_forward: qkv", qkv, ld, T, ld, B, 64, L::BM);
    p.y = ge_tensor_map_batched("attention_forward: y", y, ldy, T, ldy, B, 64, 64);
    p.lse = lse;
    p.T = T;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.scale_log2 = ATTN_LOG2E / sqrtf((float)HD);
    static bool smem_set;
    attn_set_smem(attn_fwd_kernel<HD>, L::kSmem, smem_set);
    attn_fwd_kernel<HD><<<dim3(Hq, B, cdiv(T, L::BM)), ATTN_THREADS, L::kSmem, cuda_stream()>>>(p);
    LAUNCH_CHECK("attn_fwd_kernel");
}

extern "C" int kernels_cuda_supports_head_dim(int hd) { return hd == 64 || hd == 128; }

extern "C" void cuda_attention_forward(const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv, int hd) {
    if (B <= 0 || T <= 0) return;
    if (hd == 64) launch_fwd<64>(qkv, y, lse, B, T, Hq, Hkv);
    else if (hd == 128) launch_fwd<128>(qkv, y, lse, B, T, Hq, Hkv);
    else cuda_fail("attention_forward", "head_dim must be 64 or 128 (the CUDA attention kernels)", __FILE__, __LINE__);
}
