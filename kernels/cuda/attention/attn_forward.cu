/* attn_forward.cu: causal grouped-query attention forward on Hopper, head dim 64 and 128 (docs/DESIGN.md,
 * "Attention"): y = softmax(Q K^T / sqrt(hd)) V for every query head, and lse (natural log) for the backward. K and
 * V are read in place from qkv for every query head of their group.
 * Persistent CTAs, one per SM, take (query tile, query head, sequence) tiles in a fixed order, the longest first
 * (AttnFwdTile). A CTA has a producer warpgroup, whose one thread loads each tile's 192 queries into one of two
 * buffers (the next tile's while this one's output is stored) and its K and V blocks (128 keys at head dim 64, 64 at
 * 128) into a ring of stages, by TMA; and 3 consumer warpgroups of 64 queries each. A consumer computes S = Q K^T on
 * wgmma from shared memory, the online softmax (base 2) in registers, and O += P V with P as the register A operand
 * and V read MN-major from the tile the load wrote. The consumers take turns at the tensor cores (AttnTurns), each
 * running a block's softmax while its previous block's P V completes. The softmax takes the maxima of a tile's first
 * key block only, leaving headroom for the later blocks (kHeadroom), and rescues a warp whose scores pass it
 * (attn_fwd_rescue); after its first rescue a warp takes the maxima of every block. A consumer masks only its last
 * key block and computes none past its own last query; blocks past the tile's last query are never loaded. The tiles
 * end at the sequence's end, and the rows that T leaves over pad the start of tile 0 (AttnFwdBlocks). A consumer's
 * output goes through its own query rows in shared memory to one TMA store. */
#include "kernels/cuda/attention/attn_tiles.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm_maps.h"

template <int HD>
struct AttnFwdShape {
    /* consumer warpgroups of 64 queries each: a third consumer's matmuls keep the tensor cores busy while the other
     * two run their softmax, and a tile's start and end are paid once for 192 queries (docs/DESIGN.md). At head dim
     * 128 the key blocks are 64 keys, so that a consumer's output, S and P fit its registers. */
    static constexpr int NC = 3;
    static constexpr int BM = 64 * NC, BN = HD == 64 ? 128 : 64; /* queries per tile, keys per K/V block */
    static constexpr int kThreads = 128 * (NC + 1);
    /* setmaxnreg's split of the SM's 64K registers: the producer's warpgroup and the consumers' */
    static constexpr int kProducerRegs = 24, kConsumerRegs = 160;
    static_assert(128 * (kProducerRegs + NC * kConsumerRegs) <= 65536, "registers of one CTA per SM");
    static constexpr int kStages = HD == 64 ? 2 : 4; /* stages of the K/V ring */
    static constexpr int kQBufs = 2; /* the next tile's queries load while this tile's output is stored */
    using Q = AttnTile<HD, BM>;
    using KV = AttnTile<HD, BN>;
    static constexpr int oK = kQBufs * Q::kBytes, oV = oK + kStages * KV::kBytes, oBar = oV + kStages * KV::kBytes;
    static constexpr int kBars = 2 * kQBufs + 4 * kStages; /* q_full, k_full, v_full; q_empty, k_empty, v_empty */
    static constexpr int kSmem = oBar + kBars * 8 + 1024;  /* + slack to align the base to 1 KB */
    static_assert(kSmem <= 227 * 1024, "the forward CTA's shared memory within a CTA's opt-in maximum");
};

/* The CTA's shared memory (AttnFwdShape's offsets): the query buffers, the K and V rings and their mbarriers. */
template <int HD>
struct AttnFwdSmem {
    using L = AttnFwdShape<HD>;
    uint8_t *q, *k, *v;
    uint64_t *q_full, *k_full, *v_full, *q_empty, *k_empty, *v_empty;
    __device__ __forceinline__ explicit AttnFwdSmem(uint8_t *smem)
        : q(smem), k(smem + L::oK), v(smem + L::oV), q_full(reinterpret_cast<uint64_t *>(smem + L::oBar)),
          k_full(q_full + L::kQBufs), v_full(k_full + L::kStages), q_empty(v_full + L::kStages),
          k_empty(q_empty + L::kQBufs), v_empty(k_empty + L::kStages) {}
    __device__ __forceinline__ uint8_t *q_buf(int qb) const { return q + qb * L::Q::kBytes; }
    __device__ __forceinline__ uint8_t *k_stage(int s) const { return k + s * L::KV::kBytes; }
    __device__ __forceinline__ uint8_t *v_stage(int s) const { return v + s * L::KV::kBytes; }
    /* The full barriers complete on the producer's arrival (and its TMA bytes); a query buffer's empty barrier on
     * each consumer's storing thread, a K or V stage's on lane 0 of each consumer warp. */
    __device__ __forceinline__ void init_barriers() const {
        if (threadIdx.x == 0) {
            for (int i = 0; i < L::kQBufs + 2 * L::kStages; i++) mbar_init(&q_full[i], 1);
            for (int i = 0; i < L::kQBufs; i++) mbar_init(&q_empty[i], L::NC);
            for (int i = 0; i < 2 * L::kStages; i++) mbar_init(&k_empty[i], 4 * L::NC);
            mbar_fence_init();
        }
        __syncthreads();
    }
};

struct AttnFwdParams {
    CUtensorMap kv; /* qkv [B][T][(Hq + 2 Hkv) hd], box 64 x BN: the K and V blocks */
    CUtensorMap y;  /* [B][T][Hq hd], box 64 x 64 */
    float *lse;     /* [B, Hq, T] */
    int T, Hq, Hkv, B;
    float scale_log2;         /* log2(e) / sqrt(hd) */
    CUtensorMap q;            /* qkv again, box 64 x BM: the query tiles */
    const __nv_bfloat16 *qkv; /* qkv itself, for attn_fwd_rescue's scores */
    /* the columns of qkv where KV head kv's K head and its V head start */
    template <int HD>
    __device__ int k_col(int kv) const { return (Hq + kv) * HD; }
    template <int HD>
    __device__ int v_col(int kv) const { return (Hq + Hkv + kv) * HD; }
};

/* The tiles, in order: query tiles from the longest (most key blocks) down, and within one, heads fastest, then
 * sequences. Persistent CTA c of G takes tile r G + c in even rounds r and r G + G - 1 - c in odd ones (a snake), so
 * that the long and the short tiles even out over the CTAs; every thread computes the same sequence. */
struct AttnFwdTile {
    int h, b, qt; /* query head, sequence, query tile */
    __device__ AttnFwdTile(int index, const AttnFwdParams &p, int n_qt) {
        const int heads_seqs = p.Hq * p.B, level = index / heads_seqs, rem = index - level * heads_seqs;
        qt = n_qt - 1 - level;
        b = rem / p.Hq;
        h = rem - b * p.Hq;
    }
    /* the KV head of the query head's group */
    __device__ int kv(const AttnFwdParams &p) const { return h / (p.Hq / p.Hkv); }
};
/* The index of the tile that this CTA takes in round r. */
__device__ __forceinline__ int attn_fwd_tile_of_round(int r) {
    return r * (int)gridDim.x + ((r & 1) ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x);
}

/* The rows and key blocks of query tile qt. The tiles (BM = 192 rows) are shifted back by the whole consumers' rows
 * (64 each) that T leaves over in the last tile, so that tile 0, the one with the fewest key blocks, takes them: its
 * first 64 or 128 rows are before position 0, load as zeros, and their consumers store nothing. Key blocks 0 .. n - 1
 * hold the keys up to the tile's last row (before T). A consumer's rows start at a multiple of 64, so only its last
 * block holds keys after its first row and takes the causal mask. The producer and the consumers count the same. */
template <int BM, int BN>
struct AttnFwdBlocks {
    static_assert(BM % 64 == 0 && BN % 64 == 0, "tiles of whole consumers, blocks of whole 64-key boxes");
    int pos0, n; /* pos0: the query position of the tile's row 0, negative in a padded tile 0 */
    __device__ AttnFwdBlocks(int qt, int n_qt, int T) {
        pos0 = qt * BM - (n_qt * BM - T) / 64 * 64;
        n = min((pos0 + BM - 1) / BN, (T - 1) / BN) + 1;
    }
    /* The blocks that hold keys up to tile row `row` (a consumer's last): those after them are all masked for it. */
    __device__ int n_upto(int row) const { return min(n, max(pos0 + row, 0) / BN + 1); }
    /* Whether block j holds keys after tile row `row` (a consumer's first): its last key, j BN + BN - 1, after it. */
    __device__ bool is_masked(int j, int row) const { return j * BN + BN - 1 > pos0 + row; }
    /* The last key that the tile's row `row` sees, less the first key of masked block j; a row before position 0
     * sees key 0, so that its softmax stays finite. */
    __device__ int last_key(int j, int row) const { return max(pos0 + row, 0) - j * BN; }
};

/* The forward's online softmax (base 2) keeps P = 2^(s scale - m) with a running offset m per row that sits
 * kHeadroom above the row's maximum when it is set: P's largest is then 2^-64, and a later block's scores may pass
 * that maximum by up to 72 (in log2) before any P passes 2^kPBoundLog2 = 2^8, the bound that keeps P in bf16 and the
 * output's fp32 sums far from overflow. So the later blocks need no maxima (attn_fwd_exp_block): m stays, and the
 * output's factor is 1. P below 2^-126 (about 62 below the maximum and more) flushes to 0, which changes no fp32 sum
 * of the row. The rescue rescales rows whose P is at most 2^kRescaleLog2; its factor 2^-k, k at most kRescaleLog2 +
 * 1 + kHeadroom, stays a normal float. */
constexpr float kHeadroom = 64.0f;
constexpr int kPBoundLog2 = 8, kRescaleLog2 = 60;
static_assert(kRescaleLog2 + 1 + (int)kHeadroom <= 126, "the rescale's factor 2^-k is a normal float");

/* Block 0's online softmax on its unscaled scores sc, an m64nBN fragment, and a rescued block's (attn_fwd_rescue):
 * on a masked block (MASKED) sets the scores of the keys after each query to -inf, last[hh] being the last key that
 * the thread's row hh (its first, and the one 8 below) sees, less the block's first key; where the block's maximum
 * would make a P pass 2^8 (always on block 0, where m is -inf), sets m to that maximum plus kHeadroom and leaves the
 * factor of the output so far in alpha (else 1); updates the sums l and leaves P in sc. Every row has an unmasked
 * key (key 0) in block 0, so the maxima are finite after it. */
template <int BN, bool MASKED>
__device__ __forceinline__ void attn_fwd_softmax_block(float *sc, float *m, float *l, float *alpha, const int *last,
                                                       int lane, float scale_log2) {
    if (MASKED) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++)
            if (attn_frag_col(i, lane) > last[attn_frag_half(i)]) sc[i] = -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY}; /* of the unscaled scores (the scale is positive) */
#pragma unroll
    for (int i = 0; i < BN / 2; i++) mx[attn_frag_half(i)] = fmaxf(mx[attn_frag_half(i)], sc[i]);
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const float top = attn_quad_max(mx[hh]) * scale_log2;
        const bool up = top > m[hh] + (float)kPBoundLog2;
        const float mnew = up ? top + kHeadroom : m[hh];
        alpha[hh] = up ? attn_exp2(m[hh] - mnew) : 1.0f;
        m[hh] = mnew;
        l[hh] *= alpha[hh];
    }
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        const int hh = attn_frag_half(i);
        const float x = fmaf(sc[i], scale_log2, -m[hh]);
        sc[i] = attn_exp2(x);
        l[hh] += sc[i];
    }
}
template <int BN>
__device__ __forceinline__ void attn_fwd_softmax(float *sc, float *m, float *l, float *alpha, bool masked,
                                                 const int *last, int lane, float scale_log2) {
    if (masked) /* two paths, so that the other blocks pay nothing for the mask */
        attn_fwd_softmax_block<BN, true>(sc, m, l, alpha, last, lane, scale_log2);
    else
        attn_fwd_softmax_block<BN, false>(sc, m, l, alpha, last, lane, scale_log2);
}

/* A later block's exponentials without its maxima: P = 2^(s scale - m) with m as it stands (masked keys -inf as
 * above), and the thread's sums of P over each of its rows (32 keys) in ps. Returns whether the warp may keep them:
 * every sum at most 2^8, so that every P is. Else the warp calls attn_fwd_rescue: certain where a score passed its
 * row's maximum by more than 72 (in log2), possible from 67 on (32 P of 2^3 each). */
template <int BN, bool MASKED>
__device__ __forceinline__ bool attn_fwd_exp_block(float *sc, const float *m, float *ps, const int *last, int lane,
                                                   float scale_log2) {
    ps[0] = ps[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        const int hh = attn_frag_half(i);
        const float x = fmaf(sc[i], scale_log2, -m[hh]);
        sc[i] = attn_exp2(MASKED && attn_frag_col(i, lane) > last[hh] ? -INFINITY : x);
        ps[hh] += sc[i];
    }
    constexpr float bound = (float)(1 << kPBoundLog2);
    return !__any_sync(0xffffffffu, !(ps[0] <= bound && ps[1] <= bound)); /* NaN too goes to the rescue */
}

/* What the rescue needs to score a block again. */
struct AttnFwdRescueArgs {
    const __nv_bfloat16 *qkv;
    long ld;
    int T, b, qcol, kcol, pos0, key0; /* pos0: the query position of the thread's first row */
};

/* The block's scores for the thread's fragment, recomputed in fp32 from qkv in global memory (the rescue's second
 * path), masked as attn_fwd_softmax_block<BN, true> masks them (when `masked`): rows before position 0 and keys at or
 * past T score 0, as the zero-filled tiles give. One loop over the elements, through a local array: the code runs
 * about never and stays small (the hot loop's instructions stay together). */
template <int HD, int BN>
__device__ __forceinline__ void attn_fwd_scores_again(float *sc, const AttnFwdRescueArgs &args, bool masked,
                                                      const int *last, int lane) {
    const __nv_bfloat16 *seq = args.qkv + (long)args.b * args.T * args.ld;
    float again[BN / 2];
#pragma unroll 1
    for (int i = 0; i < BN / 2; i++) {
        const int hh = attn_frag_half(i), col = attn_frag_col(i, lane);
        const int pos = args.pos0 + 8 * hh, key = args.key0 + col;
        float acc = 0.0f;
        if (pos >= 0 && pos < args.T && key < args.T) {
            const uint4 *q = reinterpret_cast<const uint4 *>(seq + (long)pos * args.ld + args.qcol);
            const uint4 *k = reinterpret_cast<const uint4 *>(seq + (long)key * args.ld + args.kcol);
#pragma unroll 1
            for (int c = 0; c < HD / 8; c++) { /* 8 bf16 of each */
                const uint4 qa = q[c], ka = k[c];
                const uint32_t qw[4] = {qa.x, qa.y, qa.z, qa.w}, kw[4] = {ka.x, ka.y, ka.z, ka.w};
#pragma unroll
                for (int w = 0; w < 4; w++) {
                    const float2 qf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&qw[w]));
                    const float2 kf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&kw[w]));
                    acc = fmaf(qf.y, kf.y, fmaf(qf.x, kf.x, acc));
                }
            }
        }
        again[i] = masked && col > last[hh] ? -INFINITY : acc;
    }
#pragma unroll
    for (int i = 0; i < BN / 2; i++) sc[i] = again[i];
}

/* A block that attn_fwd_exp_block could not keep, for the whole warp (a quad's threads share their rows' m). If every
 * sum of P is at most 2^60, each row whose largest P passed 2^8 moves its m up by the whole k that brings that P to
 * 2^-64 (at most 2^-65 below), and scales its P, l and output by 2^-k (exact: a power of 2); the other rows keep
 * theirs (k = 0). Else (a score more than 124 above its row's maximum, in log2, possibly from 119 on, or an inf or
 * NaN) the warp scores the block again from global memory (attn_fwd_scores_again: the exponentials lost them) and runs
 * block 0's softmax on them. Leaves P in sc, the output's factor in alpha, and l updated with this block's P. */
template <int HD, int BN>
__device__ __forceinline__ void attn_fwd_rescue(float *sc, float *m, float *l, const float *ps, float *alpha,
                                                bool masked, const int *last, int lane, float scale_log2,
                                                const AttnFwdRescueArgs &args) {
    constexpr float rescale_max = (float)(1ull << kRescaleLog2);
    if (!__any_sync(0xffffffffu, !(ps[0] <= rescale_max && ps[1] <= rescale_max))) {
        float mx[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < BN / 2; i++) mx[attn_frag_half(i)] = fmaxf(mx[attn_frag_half(i)], sc[i]);
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const float top = attn_quad_max(mx[hh]);
            /* floor(log2 top) + 1 + 64 from the exponent bits (top in (2^8, 2^60]), at most 125 */
            const int k = top > (float)(1 << kPBoundLog2) ? (int)(__float_as_uint(top) >> 23) - 126 + (int)kHeadroom
                                                          : 0;
            alpha[hh] = __uint_as_float((uint32_t)(127 - k) << 23);
            m[hh] += (float)k;
            l[hh] = (l[hh] + ps[hh]) * alpha[hh];
        }
#pragma unroll
        for (int i = 0; i < BN / 2; i++) sc[i] *= alpha[attn_frag_half(i)];
        return;
    }
    attn_fwd_scores_again<HD, BN>(sc, args, masked, last, lane);
    attn_fwd_softmax_block<BN, false>(sc, m, l, alpha, last, lane, scale_log2); /* masked above */
}

/* The producer's one thread: for each of the CTA's tiles, its queries into the next query buffer, then its K and V
 * blocks into the ring; once the tiles are done, an arrival with no load, which tells the consumers so. */
template <int HD>
__device__ __forceinline__ void attn_fwd_produce(const AttnFwdParams &p, const AttnFwdSmem<HD> &sm, int n_qt,
                                                 int n_tiles) {
    using L = AttnFwdShape<HD>;
    using Blocks = AttnFwdBlocks<L::BM, L::BN>;
    constexpr int BM = L::BM, BN = L::BN;
    tma_prefetch_desc(&p.kv);
    tma_prefetch_desc(&p.q);
    int kvi = 0; /* K/V blocks loaded so far, over this CTA's tiles */
    for (int it = 0;; it++) {
        const int tile = attn_fwd_tile_of_round(it);
        const AttnRingSlot<L::kQBufs> qslot(it);
        mbar_wait(&sm.q_empty[qslot.stage], qslot.parity ^ 1);
        if (tile >= n_tiles) { /* the consumers' last wait: it passes, they find no tile and stop */
            mbar_arrive(&sm.q_full[qslot.stage]);
            break;
        }
        const AttnFwdTile t(tile, p, n_qt);
        const Blocks blocks(t.qt, n_qt, p.T);
        mbar_arrive_expect_tx(&sm.q_full[qslot.stage], L::Q::kBytes);
        const int kv = t.kv(p), kcol = p.k_col<HD>(kv), vcol = p.v_col<HD>(kv);
        attn_load_tile<HD, BM>(sm.q_buf(qslot.stage), &p.q, &sm.q_full[qslot.stage], t.h * HD, blocks.pos0, t.b);
        for (int j = 0; j < blocks.n; j++, kvi++) {
            const AttnRingSlot<L::kStages> slot(kvi);
            mbar_wait(&sm.k_empty[slot.stage], slot.parity ^ 1);
            mbar_arrive_expect_tx(&sm.k_full[slot.stage], L::KV::kBytes);
            attn_load_tile<HD, BN>(sm.k_stage(slot.stage), &p.kv, &sm.k_full[slot.stage], kcol, j * BN, t.b);
            mbar_wait(&sm.v_empty[slot.stage], slot.parity ^ 1);
            mbar_arrive_expect_tx(&sm.v_full[slot.stage], L::KV::kBytes);
            attn_load_tile<HD, BN>(sm.v_stage(slot.stage), &p.kv, &sm.v_full[slot.stage], vcol, j * BN, t.b);
        }
    }
}

/* A row's lse (natural log) from its offset m and its sum of P = 2^(s scale - m): m - 64 + log2(2^64 sum) over
 * log2(e), where the logarithm of a sum near 1 keeps its absolute precision. */
__device__ __forceinline__ float attn_fwd_lse(float m, float sum) {
    return ((m - kHeadroom) + log2f(sum * 0x1p64f)) * (1.0f / ATTN_LOG2E);
}

/* The tile's blocks after a consumer's last row (n_mine .. n_blocks - 1; consumers before the last only), all masked
 * for it: it takes their turns and passes each on at once, so that every consumer takes n_blocks + 1 turns a tile
 * (its last() was a pass()), and frees their stages once they are loaded, so that its arrivals count toward this use
 * of a stage, not an earlier one. */
template <int HD, int NC>
__device__ __forceinline__ void attn_fwd_skip_blocks(const AttnTurns<NC> &turns, const AttnFwdSmem<HD> &sm, int kvi,
                                                     int n_mine, int n_blocks, int lane) {
    for (int j = n_mine; j < n_blocks; j++) {
        const AttnRingSlot<AttnFwdShape<HD>::kStages> slot(kvi + j);
        turns.take();
        turns.pass();
        mbar_wait(&sm.k_full[slot.stage], slot.parity);
        if (lane == 0) mbar_arrive(&sm.k_empty[slot.stage]);
        mbar_wait(&sm.v_full[slot.stage], slot.parity);
        if (lane == 0) mbar_arrive(&sm.v_empty[slot.stage]);
    }
}

/* One persistent CTA: the producer warpgroup (attn_fwd_produce), then NC consumer warpgroups. */
template <int HD>
__global__ void __launch_bounds__(AttnFwdShape<HD>::kThreads, 1)
    attn_fwd_kernel(const __grid_constant__ AttnFwdParams p) {
    using L = AttnFwdShape<HD>;
    using Blocks = AttnFwdBlocks<L::BM, L::BN>;
    using Ring = AttnRingSlot<L::kStages>;
    constexpr int QB = L::kQBufs, NC = L::NC, BM = L::BM, BN = L::BN;
    extern __shared__ uint8_t attn_smem_raw[];
    const AttnFwdSmem<HD> sm(attn_smem_base(attn_smem_raw));
    const int n_qt = (p.T + BM - 1) / BM, n_tiles = p.Hq * p.B * n_qt;

    sm.init_barriers();

    if (threadIdx.x < 128) {
        setmaxnreg_dec<L::kProducerRegs>();
        if (threadIdx.x == 0) attn_fwd_produce<HD>(p, sm, n_qt, n_tiles);
        return;
    }

    /* ---------------- the consumers: rows row0 .. row0 + 63 of each query tile */
    setmaxnreg_inc<L::kConsumerRegs>();
    const int c = consumer_warpgroup(), wtid = threadIdx.x & 127, warp = wtid >> 5, lane = threadIdx.x & 31;
    const int row0 = 64 * c, qrow = row0 + 16 * warp + (lane >> 2); /* the thread's first row in a tile */
    int kvi = 0; /* K/V blocks consumed so far, over this CTA's tiles */
    /* The query buffer whose output store the storing thread has yet to see read: it waits for that in the next
     * tile's first turn, not before it, and then frees the buffer. The last tile's buffer is never waited for by
     * the producer, whose final wait is for the tile before it; the kernel's end waits for the writes. */
    int stored_qb = -1;
    /* Set for good once the warp has needed the rescue: its later blocks take their maxima, as block 0 does, so that
     * scores that keep passing their rows' maxima cost no more than that (warp-uniform) */
    bool warp_takes_maxima = false;
    for (int it = 0;; it++) {
        const int tile = attn_fwd_tile_of_round(it);
        const AttnRingSlot<QB> qslot(it);
        const int qb = qslot.stage;
        mbar_wait(&sm.q_full[qb], qslot.parity);
        if (tile >= n_tiles) break;
        const AttnFwdTile t(tile, p, n_qt);
        const Blocks blocks(t.qt, n_qt, p.T);
        const int n_blocks = blocks.n, n_mine = blocks.n_upto(row0 + 63); /* the consumer's blocks come first */
        uint8_t *sQt = sm.q_buf(qb);

        float o[HD / 2];
#pragma unroll
        for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* per row: the offset m (base 2) and the sum of P */

        /* The consumers take turns issuing their matmuls (AttnTurns): turn j issues block j's S and block j-1's
         * P V, then lets the next consumer issue its own while this one runs block j's softmax, which needs S
         * only: P V completes meanwhile, before the output's rescale. Block 0's turn, with no P V before it, is
         * its own, so that every turn of the loop issues both (a P V on one path only makes the compiler wait for
         * it where the paths join, before the softmax). */
        uint32_t pa[BN / 4]; /* P of the previous block, the A operand of its P V */
        const AttnTurns<NC> turns(c);
        {
            const Ring cur(kvi);
            float sc[BN / 2], alpha[2];
            turns.take();
            mbar_wait(&sm.k_full[cur.stage], cur.parity);
            wgmma_fence();
            attn_mma_abt<HD, BM, BN>(sc, sQt, row0, sm.k_stage(cur.stage));
            wgmma_commit();
            turns.pass();
            attn_free_stored_buffer(stored_qb, sm.q_empty); /* the previous tile's store has had this turn */
            attn_wgmma_wait<BN / 2>(sc);
            if (lane == 0) mbar_arrive(&sm.k_empty[cur.stage]);
            const int last[2] = {blocks.last_key(0, qrow), blocks.last_key(0, qrow + 8)};
            attn_fwd_softmax<BN>(sc, m, l, alpha, blocks.is_masked(0, row0), last, lane, p.scale_log2);
            attn_pack<BN>(sc, pa);
        }
        for (int j = 1; j < n_mine; j++) {
            const Ring cur(kvi + j), prev(kvi + j - 1);
            float sc[BN / 2], alpha[2];
            turns.take();
            mbar_wait(&sm.k_full[cur.stage], cur.parity);
            wgmma_fence();
            attn_mma_abt<HD, BM, BN>(sc, sQt, row0, sm.k_stage(cur.stage));
            wgmma_commit();
            mbar_wait(&sm.v_full[prev.stage], prev.parity);
            wgmma_fence();
            attn_mma_pv<HD, BN>(o, pa, sm.v_stage(prev.stage), true);
            wgmma_commit();
            turns.pass();
            attn_wgmma_wait<BN / 2, 1>(sc);
            if (lane == 0) mbar_arrive(&sm.k_empty[cur.stage]);
            const int last[2] = {blocks.last_key(j, qrow), blocks.last_key(j, qrow + 8)};
            const bool masked = blocks.is_masked(j, row0);
            float ps[2];
            bool kept = true;
            /* warp_takes_maxima is the same in every lane; the vote lets ptxas know it */
            const bool takes_maxima = __any_sync(0xffffffffu, warp_takes_maxima);
            if (!takes_maxima) {
                kept = masked ? attn_fwd_exp_block<BN, true>(sc, m, ps, last, lane, p.scale_log2)
                              : attn_fwd_exp_block<BN, false>(sc, m, ps, last, lane, p.scale_log2);
            } else {
                attn_fwd_softmax<BN>(sc, m, l, alpha, masked, last, lane, p.scale_log2);
                ps[0] = l[0]; /* for attn_wgmma_wait_after only: this path has l updated */
                ps[1] = l[1];
            }
            /* the exponentials before the wait for P V (not sunk after it: they are what overlaps it), and pa live
             * until then (no temporary of the softmax may take the registers P V reads) */
            attn_pin<BN / 2>(sc);
            attn_wgmma_wait_after<HD / 2>(o, ps[0], ps[1]);
#pragma unroll
            for (int i = 0; i < BN / 4; i++) reg_fence_u32(pa[i]);
            if (lane == 0) mbar_arrive(&sm.v_empty[prev.stage]);
            if (takes_maxima) {
                if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) { /* a row of the warp moved */
#pragma unroll
                    for (int i = 0; i < HD / 2; i++) o[i] *= alpha[attn_frag_half(i)];
                }
            } else if (kept) {
                l[0] += ps[0];
                l[1] += ps[1];
            } else { /* rare: a thread's sum of P passed 2^8 (a score passed its row's maximum by 67 to 72 or more) */
                const int kv = t.kv(p);
                const AttnFwdRescueArgs rescue_args = {
                    p.qkv, (long)(p.Hq + 2 * p.Hkv) * HD, p.T, t.b, t.h * HD, p.k_col<HD>(kv),
                    blocks.pos0 + qrow, j * BN};
                attn_fwd_rescue<HD, BN>(sc, m, l, ps, alpha, masked, last, lane, p.scale_log2, rescue_args);
#pragma unroll
                for (int i = 0; i < HD / 2; i++) o[i] *= alpha[attn_frag_half(i)];
                warp_takes_maxima = true;
            }
            attn_pack<BN>(sc, pa);
        }
        { /* the last block's P V, in one more turn */
            const Ring prev(kvi + n_mine - 1);
            turns.take();
            mbar_wait(&sm.v_full[prev.stage], prev.parity);
            wgmma_fence();
            attn_mma_pv<HD, BN>(o, pa, sm.v_stage(prev.stage), true);
            wgmma_commit();
            turns.last();
            attn_wgmma_wait<HD / 2>(o);
            if (lane == 0) mbar_arrive(&sm.v_empty[prev.stage]);
        }
        attn_fwd_skip_blocks(turns, sm, kvi, n_mine, n_blocks, lane);
        kvi += n_blocks;

        float inv[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const float sum = attn_quad_sum(l[hh]);
            inv[hh] = 1.0f / sum;
            const int q = blocks.pos0 + qrow + 8 * hh; /* the row's query position */
            if ((lane & 3) == 0 && q >= 0 && q < p.T)
                p.lse[((long)t.b * p.Hq + t.h) * p.T + q] = attn_fwd_lse(m[hh], sum);
        }
#pragma unroll
        for (int i = 0; i < HD / 2; i++) o[i] *= inv[attn_frag_half(i)];
        /* the consumer's query rows are read by its own wgmmas only, all complete: they take the output tile; once
         * the store has read them, the buffer is free for a later tile's queries */
        attn_stage_tile<HD, BM>(sQt, row0, o, 1.0f, warp, lane);
        if (attn_store_begin(c, wtid)) {
            if (blocks.pos0 + row0 >= 0) { /* not rows before position 0 */
                attn_store_rows<HD, BM>(&p.y, sQt, row0, t.h * HD, blocks.pos0 + row0, t.b);
                bulk_commit();
            }
            stored_qb = qb;
        }
    }
    if (wtid == 0) bulk_wait<0>(); /* the last output's writes */
}

template <int HD>
static void launch_fwd(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv) {
    using L = AttnFwdShape<HD>;
    const long ld = (long)(Hq + 2 * Hkv) * HD, ldy = (long)Hq * HD;
    AttnFwdParams p;
    p.kv = ge_tensor_map_batched("attention_forward: qkv", qkv, ld, T, ld, B, 64, L::BN);
    p.q = ge_tensor_map_batched("attention_forward: q", qkv, ld, T, ld, B, 64, L::BM);
    p.y = ge_tensor_map_batched("attention_forward: y", y, ldy, T, ldy, B, 64, 64);
    p.lse = lse;
    p.qkv = static_cast<const __nv_bfloat16 *>(qkv);
    p.T = T;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.B = B;
    p.scale_log2 = ATTN_LOG2E / sqrtf((float)HD);
    const long tiles = (long)Hq * B * cdiv(T, L::BM);
    const int ctas = (int)(tiles < ge_num_sms() ? tiles : ge_num_sms()); /* one per SM, persistent */
    static bool smem_set;
    attn_set_smem(attn_fwd_kernel<HD>, L::kSmem, smem_set);
    attn_fwd_kernel<HD><<<ctas, L::kThreads, L::kSmem, kc->stream>>>(p);
    LAUNCH_CHECK("attn_fwd_kernel");
}

extern "C" int kernels_cuda_supports_head_dim(int hd) { return hd == 64 || hd == 128; }

extern "C" void cuda_attention_forward(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq,
                                       int Hkv, int hd) {
    if (B <= 0 || T <= 0) return;
    if (hd == 64) launch_fwd<64>(kc, qkv, y, lse, B, T, Hq, Hkv);
    else if (hd == 128) launch_fwd<128>(kc, qkv, y, lse, B, T, Hq, Hkv);
    else cuda_fail("attention_forward", "head_dim must be 64 or 128 (the CUDA attention kernels)", __FILE__, __LINE__);
}
