/* attn_backward.cu: causal grouped-query attention backward on Hopper, head dim 64 and 128 (docs/DESIGN.md,
 * "Attention"), deterministic: every output element is written once by one thread, no atomics. With
 * P = exp(S scale - lse) recomputed and D_q = <dy_q, y_q>:
 *   dV_k = sum_q P_qk dy_q,   dK_k = scale sum_q dS_qk q_q,   dQ_q = scale sum_k dS_qk k_k,   dS = P (dy.v - D_q).
 * Two launches:
 *   prep (attn_bwd_prep_kernel): per (sequence, query head) rows of L = lse log2(e) and D, padded to a whole number
 *     of 128-row tiles (L = +inf, so P = 0, and D = 0 past T): the dQ CTAs read them from global memory, the dK/dV
 *     CTAs' producer copies each query block's into its stage;
 *   one grid of dK/dV CTAs, then dQ CTAs (attn_bwd_kernel), each a producer warpgroup whose one thread loads by TMA
 *     and two consumer warpgroups of 64 rows each:
 *   dK/dV (attn_dkdv_cta): one CTA per (128-key block, KV head, sequence), K and V resident; it loops over the
 *     group's query heads and the query blocks (128 queries at head dim 64, 64 at 128) at or after its keys,
 *     streamed by the producer with their L and D rows, computing S^T = K Q^T and dP^T = V dy^T on wgmma with keys
 *     as rows, so that P^T and dS^T are register A operands of dV += P^T dy and dK += dS^T Q (Q and dy read
 *     MN-major); dK and dV stay in registers across the group, so GQA needs no reduction;
 *   dQ (attn_dq_cta): one CTA per (128-query tile, KV head, sequence), taking the group's query heads in turn, each
 *     head's Q and dy resident (two buffers: the next head's load while this one's dQ is stored), streaming K/V
 *     blocks (128 keys at head dim 64, 64 at 128) up to the diagonal: S = Q K^T, dP = dy V^T, dQ += dS K (K read
 *     MN-major).
 * In both, the two consumers take turns at the tensor cores (AttnTurns, attn_turn_open; the hd-64 dK/dV CTA's go
 * without, AttnDkdvShape::Turns): a turn issues the previous block's products (dV and dK, or dQ) and this block's S
 * behind them, then, once the products are complete, this block's dP; the elementwise work runs during the other
 * consumer's turn, P's exponentials while dP completes.
 * The stores of dQ, dK and dV carry the tail (AttnTail: RoPE backward, r and the row dots c) when the fused table
 * asks for it, and go through the resident tiles' own rows to TMA stores. */
#include "kernels/cuda/attention/attn_ops.h"
#include "kernels/cuda/attention/attn_tiles.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm_maps.h"
#include <type_traits>

#define ATTN_PAD 128 /* L and D rows are padded to a multiple of this, the dQ CTA's query tile */

/* Both CTAs of attn_bwd_kernel: a producer warpgroup and NC consumer warpgroups of 64 rows each. */
struct AttnBwdCta {
    static constexpr int NC = 2;
    static constexpr int kThreads = 128 * (NC + 1);
    /* setmaxnreg's split of the SM's 64K registers: the producer's warpgroup and the consumers' */
    static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
    static_assert(128 * (kProducerRegs + NC * kConsumerRegs) <= 65536, "registers of one CTA per SM");
};

/* ---------------------------------------------------------------- the stores' tail */

/* The optional tail of the backward's stores (kernels.h attention_backward with r): a gradient G (fp32, before any
 * rounding) is stored as r * rope^T(G) for Q and K heads and r * G for V heads, and each row's <Z, G> over the head
 * (Z: the forward's values of those rows, the tile the store goes through) goes to cpart[row, slot]; a finish sums
 * a row's slots into c. r == NULL: G itself. A RoPE pair is the adjacent columns (2i, 2i+1) of a head, which one
 * thread holds as elements e = 0, 1 of a fragment. */
struct AttnTail {
    const float *r;         /* [B*T] */
    const float *cos, *sin; /* [T, hd/2] */
    float *cpart;           /* [B*T, nslots] */
    int nslots;
};

/* attn_stage_tile for a gradient: acc * scale with the tail, written over Z in rows row0 .. row0 + 63 of an
 * R-row tile whose row 0 is position t0 of sequence b (global row b T + t0); rows >= T compute on position 0's
 * tables and store nothing (the TMA store clips them). */
template <int HD, int R>
__device__ __forceinline__ void attn_stage_grad(uint8_t *tile, int row0, const float *acc, float scale,
                                                const AttnTail &tail, bool rope, int slot, int t0, int b, int T,
                                                int warp, int lane) {
    if (!tail.r) {
        attn_stage_tile<HD, R>(tile, row0, acc, scale, warp, lane);
        return;
    }
    const uint32_t base = smem_u32(tile);
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int row = row0 + 16 * warp + (lane >> 2) + 8 * hh, t = t0 + row;
        const bool live = t < T;
        const int pos = live ? t : 0; /* the row's position for the tables */
        const long grow = (long)b * T + pos;
        const float r = tail.r[grow];
        const float *cos = tail.cos + (long)pos * (HD / 2), *sin = tail.sin + (long)pos * (HD / 2);
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            const int i = 4 * j + 2 * hh, col = attn_frag_col(i, lane);
            const uint32_t addr = attn_tile_addr<R>(base, row, col);
            const uint32_t zbits = ld_shared_b32(addr);
            const float2 z = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&zbits));
            const float g0 = acc[i] * scale, g1 = acc[i + 1] * scale;
            dot = fmaf(z.x, g0, fmaf(z.y, g1, dot));
            float2 g = make_float2(g0, g1);
            if (rope) /* RoPE's transpose: the rotation by the opposite angle */
                g = rope_rotate(g, __ldg(cos + col / 2), -__ldg(sin + col / 2));
            st_shared_b32(addr, attn_pack_bf16(r * g.x, r * g.y));
        }
        dot = attn_quad_sum(dot);
        if (live && (lane & 3) == 0) tail.cpart[grow * tail.nslots + slot] = dot;
    }
}

struct AttnBwdParams {
    CUtensorMap qkv[2]; /* [B][T][(Hq + 2 Hkv) hd], boxes of 64 columns x 64 rows ([0]) or 128 rows ([1]) */
    CUtensorMap dy[2];  /* [B][T][Hq hd], the same boxes */
    CUtensorMap dqkv;   /* [B][T][(Hq + 2 Hkv) hd], box 64 x 64 (stores) */
    const float *L, *D; /* [B Hq][Tpad] */
    int B, T, Tpad, Hq, Hkv;
    int n_dkdv, n_qt; /* dK/dV CTAs (the grid's first), query tiles */
    float scale, scale_log2;
    AttnTail tail;
    /* the load maps of qkv and dy for R-row tiles (R = 64 or 128) */
    template <int R>
    __device__ const CUtensorMap *qkv_map() const { return &qkv[R == 128]; }
    template <int R>
    __device__ const CUtensorMap *dy_map() const { return &dy[R == 128]; }
    /* the columns of qkv (and dqkv) where KV head kv's K head and its V head start */
    template <int HD>
    __device__ int k_col(int kv) const { return (Hq + kv) * HD; }
    template <int HD>
    __device__ int v_col(int kv) const { return (Hq + Hkv + kv) * HD; }
};

/* ---------------------------------------------------------------- what both CTAs share */

/* The CTA's mbarriers, contiguous in shared memory: the first n_full completed by the producer's one arrival (and
 * its TMA bytes), then n_empty completed by every consumer thread (attn_turn_open, attn_turn_matmuls; the dQ
 * CTA's also at a head's end: its last product's stage and its Q buffer). Every thread calls it. */
__device__ __forceinline__ void attn_bwd_init_barriers(uint64_t *bars, int n_full, int n_empty) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n_full + n_empty; i++) mbar_init(&bars[i], i < n_full ? 1 : 128 * AttnBwdCta::NC);
        mbar_fence_init();
    }
    __syncthreads();
}

/* No turns: each consumer issues its matmuls as soon as it is ready (the hd-64 dK/dV CTA, AttnDkdvShape::Turns). */
struct AttnNoTurns {
    __device__ __forceinline__ explicit AttnNoTurns(int) {}
    __device__ __forceinline__ void take() const {}
    __device__ __forceinline__ void pass() const {}
    __device__ __forceinline__ void last() const {}
};

/* A consumer's turn, in which the previous live block's products (dV and dK, or dQ) run beside this block's
 * matmuls. attn_turn_open takes the turn and waits for this block's stage s. If the block is all masked for this
 * consumer (!live), it hands the turn over, frees stage s and returns false: the products wait for the next turn.
 * Else it issues the products of the block in stage `pending` (products(stage), which commits them as one or more
 * groups), and the consumer's attn_turn_matmuls issues the block's two matmuls around the products' end and passes
 * the turn. Before the consumer's first live block (pending < 0) the products are issued all the same, on stage s
 * with the consumer's P and dS still zero, adding exact zeros to zeros: a wgmma on one path only makes ptxas
 * serialize them all (C7520). Every consumer thread arrives on a stage's empty barrier: an mbarrier arrive releases
 * the arriving thread's own reads only, and each thread reads the stage's L and D rows (the dK/dV CTA). */
template <class Turns, class Products>
__device__ __forceinline__ bool attn_turn_open(const Turns &turns, int pending, Products &products, uint64_t *full,
                                               uint64_t *empty, int s, uint32_t parity, bool live) {
    turns.take();
    mbar_wait(&full[s], parity);
    if (!live) {
        turns.pass();
        mbar_arrive(&empty[s]);
        return false;
    }
    wgmma_fence();
    products(pending >= 0 ? pending : s);
    return true;
}
/* The rest of a live block's turn: the first matmul (first(), S or S^T) issued and committed behind the products,
 * then the wait for the products (only that matmul stays in flight) and their stage freed, then the second matmul
 * (second(), dP or dP^T) issued and committed, and the turn passed. */
template <class Turns, class First, class Second>
__device__ __forceinline__ void attn_turn_matmuls(const Turns &turns, int pending, uint64_t *empty, First &&first,
                                                  Second &&second) {
    wgmma_fence();
    first();
    wgmma_commit();
    wgmma_wait<1>();
    if (pending >= 0) mbar_arrive(&empty[pending]);
    wgmma_fence();
    second();
    wgmma_commit();
    turns.pass();
}
/* The last turn: the last live block's products, if any, issued and waited for (the consumer then pins their
 * accumulators, attn_pin: the wait is on one path only, and a wait outside it would make ptxas serialize, C7515). */
template <class Turns, class Products>
__device__ __forceinline__ void attn_turn_close(const Turns &turns, int pending, Products &products) {
    turns.take();
    if (pending >= 0) {
        wgmma_fence();
        products(pending);
        wgmma_wait<0>();
    }
    turns.last();
}

/* ---------------------------------------------------------------- prep */

/* L and D rows: HD/8 threads a row, 8 columns each. */
template <int HD>
__global__ void attn_bwd_prep_kernel(const bf16 *y, const bf16 *dy, const float *lse, float *L, float *D, int B,
                                     int T, int Tpad, int Hq) {
    constexpr int kRowThreads = HD / 8;
    const long idx = (blockIdx.x * (long)blockDim.x + threadIdx.x) / kRowThreads, n = (long)B * Hq * Tpad;
    const int part = threadIdx.x % kRowThreads;
    const long at_idx = idx < n ? idx : 0;
    const int t = (int)(at_idx % Tpad);
    const long bh = at_idx / Tpad;
    const bool live = idx < n && t < T;
    const long row = (bh / Hq) * T + (live ? t : 0), h = bh % Hq;
    float yv[8], dyv[8], dot = 0.0f;
    const long at = row * Hq * HD + h * HD + part * 8;
    load8(y + at, 8, true, yv);
    load8(dy + at, 8, true, dyv);
#pragma unroll
    for (int i = 0; i < 8; i++) dot = fmaf(yv[i], dyv[i], dot);
#pragma unroll
    for (int o = kRowThreads / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (idx < n && part == 0) {
        L[idx] = live ? lse[bh * T + t] * ATTN_LOG2E : INFINITY;
        D[idx] = live ? dot : 0.0f;
    }
}

/* ---------------------------------------------------------------- dK / dV */

template <int HD>
struct AttnDkdvShape {
    /* keys per CTA (64 per consumer), queries per stage (at head dim 128, 64: dK and dV fill the registers) */
    static constexpr int BK = 128, BQ = HD == 64 ? 128 : 64;
    static constexpr int kStages = HD == 64 ? 4 : 3;
    /* the consumers' turns at the tensor cores: at head dim 64 none, each issues as soon as it is ready
     * (docs/DESIGN.md) */
    using Turns = std::conditional_t<HD == 64, AttnNoTurns, AttnTurns<AttnBwdCta::NC>>;
    using KV = AttnTile<HD, BK>;
    using Q = AttnTile<HD, BQ>;
    /* a stage: the Q and dy blocks, then the block's L and D rows (in a KB of their own: the tiles stay
     * 1 KB-aligned) */
    static constexpr int oLD = 2 * Q::kBytes, kLoadBytes = oLD + 2 * BQ * 4, kStageBytes = oLD + 1024;
    static_assert(2 * BQ * 4 <= 1024, "L and D rows fit their KB");
    static constexpr int oV = KV::kBytes, oStage = 2 * KV::kBytes, oBar = oStage + kStages * kStageBytes;
    static constexpr int kSmem = oBar + (1 + 2 * kStages) * 8 + 1024;
    static_assert(kSmem <= 227 * 1024, "the dK/dV CTA's shared memory within a CTA's opt-in maximum");
    static_assert(ATTN_PAD % BQ == 0, "a query block's L and D rows within the padded rows");
    /* stage s of the ring: a query block's Q, dy, L and D */
    __device__ static uint8_t *stage(uint8_t *smem, int s) { return smem + oStage + s * kStageBytes; }
};

/* A dK/dV block's elementwise work on this thread's fragments (keys as rows, BQ queries from qmin as columns), in
 * three steps, so that the SFU's exponentials run beside other work: the first half of P^T's exponentials while
 * dP^T is still computed; then the second half, a column pair at a time, beside the first half's dS^T; then the
 * second half's dS^T. L and D of the fragment's column pair j (columns 8 j + 2 (lane % 4) and + 1) are l_cols[j]
 * (in registers) and the float2 at d_cols + 32 j (the stage's D row, a shared-window address).
 * attn_dkdv_p: st (S^T) becomes P^T = 2^(S^T scale_log2 - L) at elements [i0, i1). DIAGONAL: the block has queries
 * before this consumer's keys (key: the thread's two), whose P is 0; the other blocks take the path without the
 * mask. */
template <bool DIAGONAL>
__device__ __forceinline__ void attn_dkdv_p(float *st, const float2 *l_cols, float scale_log2, int qmin,
                                            const int *key, int lane, int i0, int i1) {
#pragma unroll
    for (int i = i0; i < i1; i++) { /* element i: column pair j = i / 4, member i % 2 */
        float pv = attn_exp2(st[i] * scale_log2 - (i & 1 ? l_cols[i / 4].y : l_cols[i / 4].x));
        if (DIAGONAL && qmin + attn_frag_col(i, lane) < key[attn_frag_half(i)]) pv = 0.0f;
        st[i] = pv;
    }
}
/* attn_dkdv_ds: dpt (dP^T) becomes dS^T = P^T (dP^T - D) at column pairs [j0, j1), pt holding P^T. */
__device__ __forceinline__ void attn_dkdv_ds(const float *pt, float *dpt, uint32_t d_cols, int j0, int j1) {
#pragma unroll
    for (int j = j0; j < j1; j++) {
        const float2 dc = ld_shared_v2f32(d_cols + 32 * j);
#pragma unroll
        for (int e = 0; e < 4; e++) { /* element i = 4 j + e: row half e / 2, column pair member e % 2 */
            const int i = 4 * j + e;
            dpt[i] = pt[i] * (dpt[i] - (e & 1 ? dc.y : dc.x));
        }
    }
}
/* attn_dkdv_p_beside_ds: the second half's exponentials beside the first half's dS^T. */
template <int BQ, bool DIAGONAL>
__device__ __forceinline__ void attn_dkdv_p_beside_ds(float *st, float *dpt, const float2 *l_cols, uint32_t d_cols,
                                                      float scale_log2, int qmin, const int *key, int lane) {
    constexpr int H = BQ / 4; /* elements in half of the fragment */
#pragma unroll
    for (int j = 0; j < H / 4; j++) {
        attn_dkdv_p<DIAGONAL>(st, l_cols, scale_log2, qmin, key, lane, H + 4 * j, H + 4 * j + 4);
        attn_dkdv_ds(st, dpt, d_cols, j, j + 1);
    }
}

/* The dK/dV CTA's walk over its group's query heads and their query blocks: iteration it is query block qi = it % nq
 * of query head h = (first head) + it / nq, counted rather than divided. */
struct AttnDkdvWalk {
    int qi, h;
    __device__ void next(int nq) {
        qi = qi + 1 == nq ? 0 : qi + 1;
        h += qi == 0;
    }
};

/* The dK/dV CTA of key block kb of KV head kv of sequence b. */
template <int HD>
__device__ __forceinline__ void attn_dkdv_cta(const AttnBwdParams &p, uint8_t *smem, int kv, int b, int kb) {
    using L = AttnDkdvShape<HD>;
    constexpr int S = L::kStages, BK = L::BK, BQ = L::BQ;
    uint8_t *sK = smem, *sV = smem + L::oV;
    uint64_t *kv_full = reinterpret_cast<uint64_t *>(smem + L::oBar), *full = kv_full + 1, *empty = full + S;
    const int group = p.Hq / p.Hkv;
    /* the query blocks at or after the CTA's keys: q_first .. q_first + nq - 1 of each of the group's heads */
    const int q_first = kb * BK / BQ, nq = (p.T + BQ - 1) / BQ - q_first, n_it = group * nq;

    attn_bwd_init_barriers(kv_full, 1 + S, S); /* kv_full, full; empty */

    if (threadIdx.x < 128) { /* the producer: K and V, then each query block's Q, dy, L and D rows */
        setmaxnreg_dec<AttnBwdCta::kProducerRegs>();
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(kv_full, 2 * L::KV::kBytes);
            attn_load_tile<HD, BK>(sK, p.qkv_map<BK>(), kv_full, p.k_col<HD>(kv), kb * BK, b);
            attn_load_tile<HD, BK>(sV, p.qkv_map<BK>(), kv_full, p.v_col<HD>(kv), kb * BK, b);
            AttnDkdvWalk w = {0, kv * group};
            for (int it = 0; it < n_it; it++, w.next(nq)) {
                const AttnRingSlot<S> slot(it);
                const int s = slot.stage, qb = q_first + w.qi;
                uint8_t *stage = L::stage(smem, s);
                mbar_wait(&empty[s], slot.parity ^ 1);
                mbar_arrive_expect_tx(&full[s], L::kLoadBytes);
                attn_load_tile<HD, BQ>(stage, p.qkv_map<BQ>(), &full[s], w.h * HD, qb * BQ, b);
                attn_load_tile<HD, BQ>(stage + L::Q::kBytes, p.dy_map<BQ>(), &full[s], w.h * HD, qb * BQ, b);
                const long ld_row = ((long)b * p.Hq + w.h) * p.Tpad + qb * BQ;
                bulk_load_1d(stage + L::oLD, p.L + ld_row, BQ * 4, &full[s]);
                bulk_load_1d(stage + L::oLD + BQ * 4, p.D + ld_row, BQ * 4, &full[s]);
            }
        }
        return;
    }

    setmaxnreg_inc<AttnBwdCta::kConsumerRegs>();
    const int c = consumer_warpgroup(), wtid = threadIdx.x & 127, warp = wtid >> 5, lane = threadIdx.x & 31;
    const int row0 = 64 * c, key0 = kb * BK + row0; /* the consumer's keys: key0 .. key0 + 63 */
    int key[2];                                     /* this thread's two keys */
    key[0] = key0 + 16 * warp + (lane >> 2);
    key[1] = key[0] + 8;
    float dk[HD / 2], dv[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] = dv[i] = 0.0f;
    mbar_wait(kv_full, 0);

    /* A block's matmuls, in a turn at the tensor cores at head dim 128 and as soon as the consumer is ready at 64
     * (L::Turns, attn_turn_open): the previous live block's dV and dK products as two commit groups; once dV is
     * complete (P^T's registers free), this block's S^T; once dK is, this block's dP^T. The tensor cores always have
     * a group queued, and the registers hold at most dK, dV, L, S^T and dP^T. With turns, the elementwise work (P^T,
     * dS^T) runs while the other consumer has its turn. */
    uint32_t pa[BQ / 4], da[BQ / 4]; /* P^T and dS^T packed; zero before the first live block (attn_turn_open) */
#pragma unroll
    for (int i = 0; i < BQ / 4; i++) pa[i] = da[i] = 0u;
    int pending = -1; /* the stage whose dV and dK products are still to be issued */
    auto products = [&](int sp) {
        const uint8_t *pQ = L::stage(smem, sp);
        attn_mma_pv<HD, BQ>(dv, pa, pQ + L::Q::kBytes, true);
        wgmma_commit();
        attn_mma_pv<HD, BQ>(dk, da, pQ, true);
        wgmma_commit();
    };
    const typename L::Turns turns(c);
    AttnDkdvWalk w = {0, kv * group};
    for (int it = 0; it < n_it; it++, w.next(nq)) {
        const AttnRingSlot<S> slot(it);
        const int s = slot.stage, qmin = (q_first + w.qi) * BQ;
        const uint8_t *sQ = L::stage(smem, s), *sdy = sQ + L::Q::kBytes;
        /* else every query of the block is before every key of this consumer */
        const bool live = qmin + BQ - 1 >= key0;
        if (!attn_turn_open(turns, pending, products, full, empty, s, slot.parity, live)) continue;
        /* the block's L and D at this thread's fragment columns (attn_dkdv_p, attn_dkdv_ds), from the stage */
        const uint32_t l_cols_addr = smem_u32(sQ + L::oLD) + 8 * (lane & 3), d_cols = l_cols_addr + BQ * 4;
        float2 l_cols[BQ / 8];
#pragma unroll
        for (int j = 0; j < BQ / 8; j++) l_cols[j] = ld_shared_v2f32(l_cols_addr + 32 * j);
        /* S^T and dP^T as two commit groups: P^T's exponentials run while dP^T is computed */
        float st[BQ / 2], dpt[BQ / 2];
        wgmma_wait<1>(); /* dV, whose P^T registers S^T may then take */
        attn_turn_matmuls(
            turns, pending, empty, [&] { attn_mma_abt<HD, BK, BQ>(st, sK, row0, sQ); },
            [&] { attn_mma_abt<HD, BK, BQ>(dpt, sV, row0, sdy); });
        attn_wgmma_wait<BQ / 2, 1>(st);
        /* a query of the block is before a key of this consumer: two paths, as in the forward */
        const bool diagonal = qmin < key0 + 63;
        constexpr int H = BQ / 4; /* elements in half of the fragment */
        if (diagonal)
            attn_dkdv_p<true>(st, l_cols, p.scale_log2, qmin, key, lane, 0, H);
        else
            attn_dkdv_p<false>(st, l_cols, p.scale_log2, qmin, key, lane, 0, H);
        attn_wgmma_wait<BQ / 2>(dpt); /* where the paths join: ptxas cannot hoist it above the exponentials */
        if (diagonal)
            attn_dkdv_p_beside_ds<BQ, true>(st, dpt, l_cols, d_cols, p.scale_log2, qmin, key, lane);
        else
            attn_dkdv_p_beside_ds<BQ, false>(st, dpt, l_cols, d_cols, p.scale_log2, qmin, key, lane);
        attn_dkdv_ds(st, dpt, d_cols, H / 4, BQ / 8);
        attn_pack<BQ>(st, pa);
        attn_pack<BQ>(dpt, da);
        pending = s;
    }
    attn_turn_close(turns, pending, products);
    attn_pin<HD / 2>(dv);
    attn_pin<HD / 2>(dk);

    /* this consumer's K and V rows were read by its own wgmmas only, all complete: they take dK and dV */
    attn_stage_grad<HD, BK>(sK, row0, dk, p.scale, p.tail, true, p.Hq + kv, kb * BK, b, p.T, warp, lane);
    attn_stage_grad<HD, BK>(sV, row0, dv, 1.0f, p.tail, false, p.Hq + p.Hkv + kv, kb * BK, b, p.T, warp, lane);
    if (attn_store_begin(c, wtid)) {
        attn_store_rows<HD, BK>(&p.dqkv, sK, row0, p.k_col<HD>(kv), key0, b);
        attn_store_rows<HD, BK>(&p.dqkv, sV, row0, p.v_col<HD>(kv), key0, b);
        attn_store_end();
    }
}

/* ---------------------------------------------------------------- dQ */

template <int HD>
struct AttnDqShape {
    /* queries per CTA (64 per consumer), keys per stage (at head dim 128, 64: registers) */
    static constexpr int BM = 128, BN = HD == 64 ? 128 : 64;
    static constexpr int kStages = HD == 64 ? 4 : 3;
    static constexpr int kQBufs = 2; /* the next query head's Q and dy load while this one's dQ is stored */
    using Q = AttnTile<HD, BM>;
    using KV = AttnTile<HD, BN>;
    static constexpr int kQBytes = 2 * Q::kBytes;      /* Q and dy of one query head */
    static constexpr int kStageBytes = 2 * KV::kBytes; /* K and V blocks */
    static constexpr int oStage = kQBufs * kQBytes, oBar = oStage + kStages * kStageBytes;
    static constexpr int kBars = 2 * (kQBufs + kStages); /* q_full, full; q_empty, empty */
    static constexpr int kSmem = oBar + kBars * 8 + 1024;
    static_assert(kSmem <= 227 * 1024, "the dQ CTA's shared memory within a CTA's opt-in maximum");
    static_assert(ATTN_PAD % BM == 0, "a query tile's L and D rows within the padded rows");
    /* query buffer qb (a head's Q and dy) and stage s of the ring (a key block's K and V) */
    __device__ static uint8_t *q_buf(uint8_t *smem, int qb) { return smem + qb * kQBytes; }
    __device__ static uint8_t *stage(uint8_t *smem, int s) { return smem + oStage + s * kStageBytes; }
};

/* A dQ block's elementwise work on this thread's fragments (queries as rows, BN keys from k0 as columns), L and D of
 * the thread's two rows in l_rows and d_rows, in three steps as in the dK/dV CTA. attn_dq_p: sc (S) becomes
 * P = 2^(S scale_log2 - L) at elements [i0, i1). DIAGONAL: the block has keys after this consumer's queries (query:
 * the thread's two), whose P is 0. attn_dq_ds: dp (dP) becomes dS = P (dP - D) at elements [i0, i1). */
template <bool DIAGONAL>
__device__ __forceinline__ void attn_dq_p(float *sc, const float *l_rows, float scale_log2, int k0, const int *query,
                                          int lane, int i0, int i1) {
#pragma unroll
    for (int i = i0; i < i1; i++) {
        const int hh = attn_frag_half(i);
        float pv = attn_exp2(sc[i] * scale_log2 - l_rows[hh]);
        if (DIAGONAL && k0 + attn_frag_col(i, lane) > query[hh]) pv = 0.0f;
        sc[i] = pv;
    }
}
__device__ __forceinline__ void attn_dq_ds(const float *pv, float *dp, const float *d_rows, int i0, int i1) {
#pragma unroll
    for (int i = i0; i < i1; i++) dp[i] = pv[i] * (dp[i] - d_rows[attn_frag_half(i)]);
}
/* attn_dq_p_then_ds: the first half's exponentials while dP is computed; the wait for dP, after them (in each path:
 * at the join ptxas would hoist it); then the second half's exponentials beside the first half's dS. */
template <int BN, bool DIAGONAL>
__device__ __forceinline__ void attn_dq_p_then_ds(float *sc, float *dp, const float *l_rows, const float *d_rows,
                                                  float scale_log2, int k0, const int *query, int lane) {
    constexpr int H = BN / 4; /* elements in half of the fragment */
    attn_dq_p<DIAGONAL>(sc, l_rows, scale_log2, k0, query, lane, 0, H);
    attn_wgmma_wait_after<BN / 2>(dp, sc[H - 2], sc[H - 1]);
#pragma unroll
    for (int i = 0; i < H; i++) {
        attn_dq_p<DIAGONAL>(sc, l_rows, scale_log2, k0, query, lane, H + i, H + i + 1);
        attn_dq_ds(sc, dp, d_rows, i, i + 1);
    }
}

/* The dQ CTA of query tile qt of the query heads of KV head kv of sequence b: the group's heads one after another
 * (their K and V blocks are the same, read again from L2), so that a CTA's start (barriers, the first loads, the
 * pipeline's fill) and the wait for its last dQ store are paid once per group.
 * Each head's Q and dy load into one of two buffers, the next head's while this one's dQ is stored from its own. */
template <int HD>
__device__ __forceinline__ void attn_dq_cta(const AttnBwdParams &p, uint8_t *smem, int kv, int b, int qt) {
    using L = AttnDqShape<HD>;
    constexpr int S = L::kStages, QB = L::kQBufs, BM = L::BM, BN = L::BN;
    uint64_t *q_full = reinterpret_cast<uint64_t *>(smem + L::oBar), *full = q_full + QB, *q_empty = full + S,
             *empty = q_empty + QB;
    const int group = p.Hq / p.Hkv;
    /* the key blocks up to the tile's last query and the sequence's end */
    const int nk_causal = (qt + 1) * BM / BN, nk_seq = (p.T + BN - 1) / BN;
    const int n_blocks = nk_causal < nk_seq ? nk_causal : nk_seq;

    attn_bwd_init_barriers(q_full, QB + S, QB + S); /* q_full, full; q_empty, empty */

    if (threadIdx.x < 128) { /* the producer: each head's Q and dy, then its K and V blocks */
        setmaxnreg_dec<AttnBwdCta::kProducerRegs>();
        if (threadIdx.x == 0) {
            /* one loop over the group's heads i and their key blocks j (kvi = i n_blocks + j): the producer's
             * registers (AttnBwdCta::kProducerRegs) hold it without spilling */
            for (int kvi = 0, i = 0, j = 0; i < group; kvi++) {
                if (j == 0) { /* the head's Q and dy first */
                    const AttnRingSlot<QB> qslot(i);
                    const int qb = qslot.stage;
                    uint8_t *sQ = L::q_buf(smem, qb);
                    mbar_wait(&q_empty[qb], qslot.parity ^ 1);
                    mbar_arrive_expect_tx(&q_full[qb], L::kQBytes);
                    attn_load_tile<HD, BM>(sQ, p.qkv_map<BM>(), &q_full[qb], (kv * group + i) * HD, qt * BM, b);
                    attn_load_tile<HD, BM>(sQ + L::Q::kBytes, p.dy_map<BM>(), &q_full[qb], (kv * group + i) * HD,
                                           qt * BM, b);
                }
                const AttnRingSlot<S> slot(kvi);
                const int s = slot.stage;
                uint8_t *stage = L::stage(smem, s);
                mbar_wait(&empty[s], slot.parity ^ 1);
                mbar_arrive_expect_tx(&full[s], L::kStageBytes);
                attn_load_tile<HD, BN>(stage, p.qkv_map<BN>(), &full[s], p.k_col<HD>(kv), j * BN, b);
                attn_load_tile<HD, BN>(stage + L::KV::kBytes, p.qkv_map<BN>(), &full[s], p.v_col<HD>(kv), j * BN, b);
                if (++j == n_blocks) {
                    j = 0;
                    i++;
                }
            }
        }
        return;
    }

    setmaxnreg_inc<AttnBwdCta::kConsumerRegs>();
    const int c = consumer_warpgroup(), wtid = threadIdx.x & 127, warp = wtid >> 5, lane = threadIdx.x & 31;
    const int row0 = 64 * c, q0 = qt * BM + row0; /* the consumer's queries: q0 .. q0 + 63 */
    int query[2];                                 /* this thread's two queries */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) query[hh] = q0 + 16 * warp + (lane >> 2) + 8 * hh;
    int kvi = 0;        /* K/V blocks consumed so far, over the group's heads */
    int stored_qb = -1; /* the storing thread's: the buffer whose dQ store it has yet to see read */
    for (int i = 0; i < group; i++) {
        const AttnRingSlot<QB> qslot(i);
        const int h = kv * group + i, qb = qslot.stage;
        uint8_t *sQ = L::q_buf(smem, qb);
        const uint8_t *sdy = sQ + L::Q::kBytes;
        float l_rows[2], d_rows[2]; /* L and D of the thread's two queries */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const long at = ((long)b * p.Hq + h) * p.Tpad + query[hh]; /* query < Tpad: tiles of 128 rows */
            l_rows[hh] = p.L[at];
            d_rows[hh] = p.D[at];
        }
        float dq[HD / 2];
#pragma unroll
        for (int k = 0; k < HD / 2; k++) dq[k] = 0.0f;
        mbar_wait(&q_full[qb], qslot.parity);

        /* Turns as in the dK/dV CTA: a turn issues the previous live block's dQ product, this block's S behind it,
         * and once the product is complete this block's dP. */
        uint32_t da[BN / 4]; /* dS packed; zero before the head's first live block (attn_turn_open) */
#pragma unroll
        for (int k = 0; k < BN / 4; k++) da[k] = 0u;
        int pending = -1; /* the stage whose dQ product is still to be issued */
        auto product = [&](int sp) {
            attn_mma_pv<HD, BN>(dq, da, L::stage(smem, sp), true);
            wgmma_commit();
        };
        const AttnTurns<AttnBwdCta::NC> turns(c);
        for (int j = 0; j < n_blocks; j++) {
            const AttnRingSlot<S> slot(kvi + j);
            const int s = slot.stage;
            const uint8_t *sK = L::stage(smem, s), *sV = sK + L::KV::kBytes;
            const bool live = j * BN <= q0 + 63; /* else every key of the block is after every query of this consumer */
            if (!attn_turn_open(turns, pending, product, full, empty, s, slot.parity, live)) continue;
            float sc[BN / 2], dp[BN / 2];
            attn_turn_matmuls(
                turns, pending, empty, [&] { attn_mma_abt<HD, BM, BN>(sc, sQ, row0, sK); },
                [&] { attn_mma_abt<HD, BM, BN>(dp, sdy, row0, sV); });
            /* the previous head's store has had this turn to read its buffer (block 0 is live for both consumers,
             * so every head's first turn comes here) */
            attn_free_stored_buffer(stored_qb, q_empty);
            attn_wgmma_wait<BN / 2, 1>(sc); /* S; P's exponentials run while dP is computed */
            /* a key of the block is after a query of this consumer: two paths, as in the forward */
            const bool diagonal = j * BN + BN - 1 > q0;
            if (diagonal)
                attn_dq_p_then_ds<BN, true>(sc, dp, l_rows, d_rows, p.scale_log2, j * BN, query, lane);
            else
                attn_dq_p_then_ds<BN, false>(sc, dp, l_rows, d_rows, p.scale_log2, j * BN, query, lane);
            attn_dq_ds(sc, dp, d_rows, BN / 4, BN / 2); /* the second half's dS */
            attn_pack<BN>(dp, da);
            pending = s;
        }
        attn_turn_close(turns, pending, product);
        attn_pin<HD / 2>(dq);
        /* the last product's stage, which the next head's loads reuse (there is one: block 0 is live for both
         * consumers) */
        if (pending >= 0) mbar_arrive(&empty[pending]);
        kvi += n_blocks;

        /* this consumer's Q rows were read by its own wgmmas only, all complete: they take dQ; every consumer
         * thread but the storing one then frees the buffer, which the storing thread frees once its store has read
         * it, in the next head's first turn (after the last head no load follows: it only waits for the read) */
        attn_stage_grad<HD, BM>(sQ, row0, dq, p.scale, p.tail, true, h, qt * BM, b, p.T, warp, lane);
        if (attn_store_begin(c, wtid)) {
            attn_store_rows<HD, BM>(&p.dqkv, sQ, row0, h * HD, q0, b);
            bulk_commit();
            stored_qb = qb;
        } else {
            mbar_arrive(&q_empty[qb]);
        }
    }
    if (stored_qb >= 0) bulk_wait_read<0>(); /* the last store's reads of shared memory */
}

/* ---------------------------------------------------------------- one grid for both */

/* The dK/dV CTAs (KV heads fastest, then sequences, then key blocks from the first, with the most query blocks
 * after it, on), then the dQ CTAs (KV heads fastest, then sequences, then query tiles from the last, with the
 * most key blocks before it, down): one launch, so the dQ CTAs, the longest first, fill the SMs that the dK/dV CTAs'
 * tail leaves. */
template <int HD>
__global__ void __launch_bounds__(AttnBwdCta::kThreads, 1) attn_bwd_kernel(const __grid_constant__ AttnBwdParams p) {
    extern __shared__ uint8_t attn_smem_raw[];
    uint8_t *smem = attn_smem_base(attn_smem_raw);
    const int i = blockIdx.x, j = i - p.n_dkdv;
    if (j < 0) attn_dkdv_cta<HD>(p, smem, i % p.Hkv, i / p.Hkv % p.B, i / (p.Hkv * p.B));
    else attn_dq_cta<HD>(p, smem, j % p.Hkv, j / p.Hkv % p.B, p.n_qt - 1 - j / (p.Hkv * p.B));
}

/* ---------------------------------------------------------------- launch */

/* Floats of L, and of D: [B, Hq, Tpad], Tpad = T padded to a multiple of ATTN_PAD. */
static size_t attn_bwd_ld_floats(size_t B, size_t T, size_t Hq) {
    return size_mul(size_mul(B, Hq), (T + ATTN_PAD - 1) / ATTN_PAD * ATTN_PAD);
}

template <int HD>
static void launch_bwd(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy, void *dqkv,
                       AttnTail tail, float *ws, int B, int T, int Hq, int Hkv) {
    const long ld = (long)(Hq + 2 * Hkv) * HD, ldy = (long)Hq * HD;
    const int Tpad = cdiv(T, ATTN_PAD) * ATTN_PAD;
    const long n_ld = (long)B * Hq * Tpad;
    float *Lb = ws, *Db = ws + n_ld;
    AttnBwdParams p;
    for (int i = 0; i < 2; i++) {
        p.qkv[i] = ge_tensor_map_batched("attention_backward: qkv", qkv, ld, T, ld, B, 64, 64 << i);
        p.dy[i] = ge_tensor_map_batched("attention_backward: dy", dy, ldy, T, ldy, B, 64, 64 << i);
    }
    p.dqkv = ge_tensor_map_batched("attention_backward: dqkv", dqkv, ld, T, ld, B, 64, 64);
    p.L = Lb;
    p.D = Db;
    p.B = B;
    p.T = T;
    p.Tpad = Tpad;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.scale = 1.0f / sqrtf((float)HD);
    p.scale_log2 = p.scale * ATTN_LOG2E;
    p.tail = tail;

    const long threads = n_ld * (HD / 8);
    attn_bwd_prep_kernel<HD>
        <<<cdiv(threads, 256), 256, 0, kc->stream>>>((const bf16 *)y, (const bf16 *)dy, lse, Lb, Db, B, T, Tpad, Hq);
    LAUNCH_CHECK("attn_bwd_prep_kernel");

    using Dkdv = AttnDkdvShape<HD>;
    using Dq = AttnDqShape<HD>;
    const int smem = Dkdv::kSmem > Dq::kSmem ? Dkdv::kSmem : Dq::kSmem;
    p.n_dkdv = Hkv * B * cdiv(T, Dkdv::BK);
    p.n_qt = cdiv(T, Dq::BM);
    const long n_ctas = p.n_dkdv + (long)Hkv * B * p.n_qt;
    static bool smem_set;
    attn_set_smem(attn_bwd_kernel<HD>, smem, smem_set);
    attn_bwd_kernel<HD><<<n_ctas, AttnBwdCta::kThreads, smem, kc->stream>>>(p);
    LAUNCH_CHECK("attn_bwd_kernel");
}

/* The workspace: L and D [B, Hq, Tpad] each, then with the tail the rows' partials of c [M, Hq + 2 Hkv]. */
size_t cuda_attention_backward_workspace(size_t B, size_t T, size_t Hq, size_t Hkv, int with_tail) {
    const size_t n_ld = attn_bwd_ld_floats(B, T, Hq);
    const size_t tail = with_tail ? size_mul(size_mul(B, T), Hq + 2 * Hkv) : 0;
    return size_mul(size_add(size_mul(2, n_ld), tail), sizeof(float));
}

/* The kernels, with the tail in their stores when r is set (then c gets the rows' sums of the partials). */
static void attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                               void *dqkv, const float *r, const float *rope_cos, const float *rope_sin, float *c,
                               int B, int T, int Hq, int Hkv, int hd) {
    if (B <= 0 || T <= 0) return;
    const int M = B * T, nslots = Hq + 2 * Hkv;
    const size_t n_ld = attn_bwd_ld_floats(B, T, Hq);
    float *ws = (float *)cuda_workspace(kc, cuda_attention_backward_workspace(B, T, Hq, Hkv, r != NULL));
    const AttnTail tail = {r, rope_cos, rope_sin, r ? ws + 2 * n_ld : NULL, nslots};
    if (hd == 64) launch_bwd<64>(kc, qkv, y, lse, dy, dqkv, tail, ws, B, T, Hq, Hkv);
    else if (hd == 128) launch_bwd<128>(kc, qkv, y, lse, dy, dqkv, tail, ws, B, T, Hq, Hkv);
    else cuda_fail("attention_backward", "head_dim must be 64 or 128 (the CUDA attention kernels)", __FILE__, __LINE__);
    if (r) cuda_row_sum(kc, tail.cpart, nslots, M, c);
}

/* The unfused table's: the kernels, then the RoPE backward as its own pass (cuda_elementwise.cu). */
extern "C" void cuda_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse,
                                        const void *dy, const float *r, const float *rope_cos, const float *rope_sin,
                                        void *dqkv, float *c, int B, int T, int Hq, int Hkv, int hd) {
    attention_backward(kc, qkv, y, lse, dy, dqkv, NULL, NULL, NULL, NULL, B, T, Hq, Hkv, hd);
    if (r && B > 0 && T > 0)
        cuda_rope_backward(kc, qkv, dqkv, r, rope_cos, rope_sin, dqkv, c, B * T, (Hq + 2 * Hkv) * hd, (Hq + Hkv) * hd,
                           hd, T);
}

/* The fused table's (attn_ops.h): the RoPE backward and c in the stores of dQ, dK and dV. */
extern "C" void cudaf_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse,
                                         const void *dy, const float *r, const float *rope_cos, const float *rope_sin,
                                         void *dqkv, float *c, int B, int T, int Hq, int Hkv, int hd) {
    attention_backward(kc, qkv, y, lse, dy, dqkv, r, rope_cos, rope_sin, c, B, T, Hq, Hkv, hd);
}
