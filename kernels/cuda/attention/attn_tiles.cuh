/* attn_tiles.cuh: what the Hopper attention kernels (attn_forward.cu, attn_backward.cu) share: head tiles brought
 * into shared memory by TMA, wgmma descriptors over them, and arithmetic on wgmma accumulator fragments. The PTX
 * wrappers (mbarriers, TMA, wgmma) are hopper/hopper_ptx.cuh's.
 *
 * Layout (docs/DESIGN.md, "Attention"). A head tile is R rows (tokens) x HD columns of one head of qkv, y or dy,
 * loaded as HD/64 TMA boxes of 64 columns x R rows, each R rows of 128 bytes with the 128-byte swizzle (16-byte
 * chunk c of row r stored at chunk c ^ (r % 8)), the boxes R * 128 bytes apart. The maps are rank 3 over
 * [B][T][columns] (ge_tensor_map_batched), so a box never reads the next sequence's rows: rows >= T load as zeros
 * and are not stored. The same tile serves wgmma two ways:
 *   K-major (the head dimension is the reduction): rows are M or N, k16 step kk at box kk / 4, byte 32 (kk % 4);
 *   MN-major (the tokens are the reduction): rows are K, k16 step kk at byte 2048 kk, the next 64 of N one box on.
 * An m64nN accumulator fragment (float acc[N/2]) of a consumer thread (warp w of its warpgroup, lane l) holds
 * rows 16w + l/4 + 8h, columns 8j + 2(l%4) + e at acc[4j + 2h + e]. Packed to bf16 pairs in order, it is the
 * A operand of a register-sourced wgmma with the columns as its reduction (attn_pack). */
#ifndef ATTN_TILES_CUH
#define ATTN_TILES_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/hopper/hopper_ptx.cuh"

#define ATTN_THREADS 384 /* the backward's CTA: one producer warpgroup and two consumer warpgroups */
#define ATTN_LOG2E 1.4426950408889634f

/* Bytes of an R-row head tile. */
template <int HD, int R>
struct AttnTile {
    static constexpr int kBoxes = HD / 64;
    static constexpr int kBoxBytes = R * 128;
    static constexpr int kBytes = kBoxes * kBoxBytes;
    static_assert(HD == 64 || HD == 128, "head dim 64 or 128");
};

/* Loads rows row0 .. row0 + R - 1 of sequence b, columns col0 .. col0 + HD - 1, into `tile`, completing on `bar`
 * (whose expected transaction bytes the caller sets to AttnTile::kBytes). */
template <int HD, int R>
__device__ __forceinline__ void attn_load_tile(uint8_t *tile, const CUtensorMap *map, uint64_t *bar, int col0,
                                               int row0, int b) {
#pragma unroll
    for (int x = 0; x < AttnTile<HD, R>::kBoxes; x++)
        tma_load_3d(tile + x * AttnTile<HD, R>::kBoxBytes, map, bar, col0 + 64 * x, row0, b);
}

/* The dynamic shared memory of a kernel, its base aligned to 1 KB (the 128-byte swizzle's pattern repeats there). */
__device__ __forceinline__ uint8_t *attn_smem_base(uint8_t *raw) {
    return reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
}

/* The CTA's mbarriers, contiguous in shared memory: the first n_full completed by the producer's one arrival (and
 * its TMA bytes), then n_empty completed by every consumer thread (attn_turn_open, attn_turn_matmuls; the dQ
 * CTA's also at a head's end: its last product's stage and its Q buffer). Every thread calls it. */
__device__ __forceinline__ void attn_init_barriers(uint64_t *bars, int n_full, int n_empty) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n_full + n_empty; i++) mbar_init(&bars[i], i < n_full ? 1 : ATTN_THREADS - 128);
        mbar_fence_init();
    }
    __syncthreads();
}

/* Issues the TMA stores of rows row0 .. row0 + 63 of an R-row tile to columns col0 .. col0 + HD - 1 from row t0 of
 * sequence b (a map with boxes of 64 x 64); one thread. */
template <int HD, int R>
__device__ __forceinline__ void attn_store_rows(const CUtensorMap *map, const uint8_t *tile, int row0, int col0,
                                                int t0, int b) {
#pragma unroll
    for (int x = 0; x < AttnTile<HD, R>::kBoxes; x++)
        tma_store_3d(map, smem_u32(tile + x * AttnTile<HD, R>::kBoxBytes + row0 * 128), col0 + 64 * x, t0, b);
}

/* After a consumer warpgroup has staged its rows (attn_stage_tile / attn_stage_grad): its writes are made visible
 * to TMA and the warpgroup syncs on its named barrier (1 + c); returns true in the one thread that then issues the
 * stores (attn_store_rows) and calls attn_store_end. */
__device__ __forceinline__ bool attn_store_begin(int c, int wtid) {
    fence_proxy_async_shared();
    named_bar_sync(1 + c, 128);
    return wtid == 0;
}
/* NC consumer warpgroups take turns issuing their matmuls, a round robin on named barriers NC + 1 .. 2 NC (after the
 * store barriers 1 .. NC of attn_store_begin): consumer c waits for its turn (take), issues, hands the turn to
 * consumer c + 1 mod NC (pass) and runs its elementwise work while the others' matmuls keep the tensor cores busy.
 * Consumer 0 goes first; all take the same number of turns, ending with last() instead of pass(): the last
 * consumer's would give consumer 0 its next first turn, which the next constructor gives, so the barriers end
 * balanced. */
template <int NC = 2>
struct AttnTurns {
    static constexpr int kBar0 = 1 + NC; /* consumer c's turn barrier: kBar0 + c */
    int c;
    __device__ __forceinline__ explicit AttnTurns(int consumer) : c(consumer) {
        if (c == NC - 1) named_bar_arrive(kBar0, 256);
    }
    __device__ __forceinline__ void take() const { named_bar_sync(kBar0 + c, 256); }
    __device__ __forceinline__ void pass() const { /* to consumer c + 1 mod NC */
        named_bar_arrive(kBar0 + (NC == 2 ? 1 - c : (c + 1) % NC), 256);
    }
    __device__ __forceinline__ void last() const {
#pragma unroll
        for (int i = 0; i < NC - 1; i++) /* pass(), by all but the last consumer */
            if (c == i) named_bar_arrive(kBar0 + 1 + i, 256);
    }
};

/* No turns: each consumer issues its matmuls as soon as it is ready (the hd-64 dK/dV CTA, AttnDkdvShape::Turns). */
struct AttnNoTurns {
    __device__ __forceinline__ explicit AttnNoTurns(int) {}
    __device__ __forceinline__ void take() const {}
    __device__ __forceinline__ void pass() const {}
    __device__ __forceinline__ void last() const {}
};

/* A backward consumer's turn (attn_backward.cu), in which the previous block's products (dV and dK, or dQ) run
 * beside this block's matmuls. attn_turn_open takes the turn and waits for this block's stage s. If the block is all
 * masked for this consumer (!live), it hands the turn over, frees stage s and returns false: the products wait for
 * the next turn. Else it issues the products of the block in stage pend (products(stage), which commits them as one
 * or more groups), and the consumer's attn_turn_matmuls issues the block's two matmuls around the products' end
 * and passes the turn. Before the consumer's first block (pend < 0) the products are issued all the same, on
 * stage s with the consumer's P and dS still zero, adding exact zeros to zeros: a wgmma on one path only makes
 * ptxas serialize them all (C7520). Every consumer thread arrives on a stage's empty barrier: an mbarrier arrive
 * releases the arriving thread's own reads only, and each thread reads the stage's L and D rows (the dK/dV CTA). */
template <class Turns, class Products>
__device__ __forceinline__ bool attn_turn_open(const Turns &turns, int pend, Products &products,
                                               uint64_t *full, uint64_t *empty, int s, uint32_t ph, bool live) {
    turns.take();
    mbar_wait(&full[s], ph);
    if (!live) {
        turns.pass();
        mbar_arrive(&empty[s]);
        return false;
    }
    wgmma_fence();
    products(pend >= 0 ? pend : s);
    return true;
}
/* The rest of a live block's turn: the first matmul (first(), S or S^T) issued and committed behind the products,
 * then the wait for the products (only that matmul stays in flight) and their stage freed, then the second matmul
 * (second(), dP or dP^T) issued and committed, and the turn passed. */
template <class Turns, class First, class Second>
__device__ __forceinline__ void attn_turn_matmuls(const Turns &turns, int pend, uint64_t *empty, First &&first,
                                                  Second &&second) {
    wgmma_fence();
    first();
    wgmma_commit();
    wgmma_wait<1>();
    if (pend >= 0) mbar_arrive(&empty[pend]);
    wgmma_fence();
    second();
    wgmma_commit();
    turns.pass();
}
/* The last turn: the last block's products, if any, issued and waited for (the consumer then pins their
 * accumulators, attn_pin: the wait is on one path only, and a wait outside it would make ptxas serialize, C7515). */
template <class Turns, class Products>
__device__ __forceinline__ void attn_turn_close(const Turns &turns, int pend, Products &products) {
    turns.take();
    if (pend >= 0) {
        wgmma_fence();
        products(pend);
        wgmma_wait<0>();
    }
    turns.last();
}

/* Commits the stores and waits for them. */
__device__ __forceinline__ void attn_store_end() {
    bulk_commit();
    bulk_wait<0>();
}

/* Descriptors of the k16 steps of head tiles. A matmul's loop-invariant operand (the A tile, the same on every
 * block) builds each step's descriptor whole, which the compiler hoists out of the loop; the operand that changes
 * with the pipeline's stage builds the tile's once and moves it by the step's byte offset (wgmma_desc_add), an
 * addition per step. K-major, from tile row row0 (a multiple of 8) on: step kk is 32 (kk % 4) bytes into box kk / 4. */
template <int HD, int R>
__device__ __forceinline__ int attn_k_step_bytes(int kk) {
    return (kk >> 2) * AttnTile<HD, R>::kBoxBytes + (kk & 3) * 32;
}
template <int HD, int R>
__device__ __forceinline__ uint64_t attn_desc_k(const uint8_t *tile, int row0, int kk) {
    return wgmma_desc_sw128(tile + row0 * 128 + attn_k_step_bytes<HD, R>(kk), 16, 1024);
}
template <int HD, int R>
__device__ __forceinline__ uint64_t attn_desc_k_step(uint64_t desc, int kk) {
    return wgmma_desc_add(desc, attn_k_step_bytes<HD, R>(kk));
}
/* MN-major: step kk is tile rows 16 kk .. 16 kk + 15, 2048 bytes on. */
template <int HD, int R>
__device__ __forceinline__ uint64_t attn_desc_mn(const uint8_t *tile) {
    return wgmma_desc_sw128(tile, AttnTile<HD, R>::kBoxBytes, 1024);
}
__device__ __forceinline__ uint64_t attn_desc_mn_step(uint64_t desc, int kk) { return wgmma_desc_add(desc, kk * 2048); }

/* Shared-window address of the bf16 pair at (row, col) (col even) of a head tile of R rows. */
template <int R>
__device__ __forceinline__ uint32_t attn_tile_addr(uint32_t tile, int row, int col) {
    return tile + (col >> 6) * (R * 128) + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) + (col & 7) * 2;
}

/* D (m64nN accumulator) = A . B^T over the head dimension: A rows a_row0 .. + 63 of an RA-row tile, B all RB
 * rows of another, both K-major (N = RB). */
template <int HD, int RA, int RB>
__device__ __forceinline__ void attn_mma_abt(float *d, const uint8_t *a, int a_row0, const uint8_t *b) {
    static_assert(RB == 64 || RB == 128, "N = 64 or 128");
    const uint64_t db0 = attn_desc_k<HD, RB>(b, 0, 0);
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const uint64_t da = attn_desc_k<HD, RA>(a, a_row0, kk), db = attn_desc_k_step<HD, RB>(db0, kk);
        if constexpr (RB == 128)
            wgmma_m64n128k16<0, 0>(d, da, db, kk > 0);
        else
            wgmma_m64n64k16<0, 0>(d, da, db, kk > 0);
    }
}

/* D (m64nHD accumulator) (+)= P . V over R tokens: P packed in registers (attn_pack of an m64nR fragment), V all
 * R rows of a tile read MN-major. */
template <int HD, int R>
__device__ __forceinline__ void attn_mma_pv(float *d, const uint32_t *p, const uint8_t *v, bool accumulate) {
    const uint64_t dv0 = attn_desc_mn<HD, R>(v);
#pragma unroll
    for (int kk = 0; kk < R / 16; kk++) {
        const uint64_t dv = attn_desc_mn_step(dv0, kk);
        const int acc = accumulate || kk > 0;
        if constexpr (HD == 128)
            wgmma_m64n128k16_rs<1>(d, p + 4 * kk, dv, acc);
        else
            wgmma_m64n64k16_rs<1>(d, p + 4 * kk, dv, acc);
    }
}

/* Waits for this thread's wgmmas (all but the last PENDING commit groups) and pins the registers of the accumulator d
 * (of a completed group) after the wait (attn_pin: the compiler moves no access to them above that point). */
template <int N>
__device__ __forceinline__ void attn_pin(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(d[i]);
}
template <int N, int PENDING = 0>
__device__ __forceinline__ void attn_wgmma_wait(float *d) {
    wgmma_wait<PENDING>();
    attn_pin<N>(d);
}

/* attn_wgmma_wait, placed after the values a and b are computed: a branch on their bits (never all ones for the
 * non-negative sums it is given) ends the instruction scheduler's block there, so it cannot hoist the wait above
 * them. Without it the scheduler, counting the wait as cheap, moves it up to the top of the softmax that is meant
 * to run while the wgmmas complete. */
template <int N>
__device__ __forceinline__ void attn_wgmma_wait_after(float *d, float a, float b) {
    if ((__float_as_uint(a) & __float_as_uint(b)) == 0xffffffffu) __trap();
    attn_wgmma_wait<N>(d);
}

/* 2^x, the SFU's approximation (flushes denormals; 2^-inf = 0). */
__device__ __forceinline__ float attn_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t attn_pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* The A operand (bf16 pairs) of an m64nN fragment. */
template <int N>
__device__ __forceinline__ void attn_pack(const float *acc, uint32_t *a) {
#pragma unroll
    for (int i = 0; i < N / 4; i++) a[i] = attn_pack_bf16(acc[2 * i], acc[2 * i + 1]);
}

/* Column of element i of an m64nN fragment for lane l, and which of the thread's two rows it is on. */
__device__ __forceinline__ int attn_frag_col(int i, int lane) { return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1); }
__device__ __forceinline__ int attn_frag_half(int i) { return (i >> 1) & 1; }

/* Sum / max over the 4 lanes that share a fragment row. */
__device__ __forceinline__ float attn_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float attn_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* Writes an m64nHD fragment, times `scale`, as bf16 into rows row0 .. row0 + 63 of an R-row head tile (where a
 * TMA store takes it from); the warpgroup's threads together write all of it. */
template <int HD, int R>
__device__ __forceinline__ void attn_stage_tile(uint8_t *tile, int row0, const float *acc, float scale, int warp,
                                                int lane) {
    const uint32_t base = smem_u32(tile);
#pragma unroll
    for (int i = 0; i < HD / 2; i += 2) {
        const int row = row0 + 16 * warp + (lane >> 2) + 8 * attn_frag_half(i);
        st_shared_b32(attn_tile_addr<R>(base, row, attn_frag_col(i, lane)),
                      attn_pack_bf16(acc[i] * scale, acc[i + 1] * scale));
    }
}

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
        const long grow = (long)b * T + (live ? t : 0);
        const float rr = tail.r[grow];
        const float *cs = tail.cos + (long)(live ? t : 0) * (HD / 2), *sn = tail.sin + (long)(live ? t : 0) * (HD / 2);
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            const int i = 4 * j + 2 * hh, col = attn_frag_col(i, lane);
            const uint32_t addr = attn_tile_addr<R>(base, row, col);
            const uint32_t zbits = ld_shared_b32(addr);
            const float2 z = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&zbits));
            const float g0 = acc[i] * scale, g1 = acc[i + 1] * scale;
            dot = fmaf(z.x, g0, fmaf(z.y, g1, dot));
            float a = g0, c = g1;
            if (rope) { /* RoPE's transpose: the rotation by the opposite angle */
                const float2 t = rope_rotate(make_float2(g0, g1), __ldg(cs + col / 2), -__ldg(sn + col / 2));
                a = t.x;
                c = t.y;
            }
            st_shared_b32(addr, attn_pack_bf16(rr * a, rr * c));
        }
        dot = attn_quad_sum(dot);
        if (live && (lane & 3) == 0) tail.cpart[grow * tail.nslots + slot] = dot;
    }
}

/* Raises a kernel's dynamic shared-memory limit, once (host). */
template <class Kernel>
static void attn_set_smem(Kernel kernel, int bytes, bool &done) {
    if (!done) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        done = true;
    }
}

#endif
