/* attn_tiles.cuh: what the Hopper attention kernels (attn_forward.cu, attn_backward.cu) share: head tiles brought
 * into shared memory by TMA and stored from it, the consumers' round robin at the tensor cores, wgmma descriptors
 * and matmuls over head tiles, and arithmetic on wgmma accumulator fragments. The PTX wrappers (mbarriers, TMA,
 * wgmma) are hopper/hopper_ptx.cuh's.
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

#define ATTN_LOG2E 1.4426950408889634f

/* ---------------------------------------------------------------- head tiles in shared memory */

/* Bytes of an R-row head tile. */
template <int HD, int R>
struct AttnTile {
    static constexpr int kBoxes = HD / 64;
    static constexpr int kBoxBytes = R * 128;
    static constexpr int kBytes = kBoxes * kBoxBytes;
    static_assert(HD == 64 || HD == 128, "head dim 64 or 128");
};

/* The dynamic shared memory of a kernel, its base aligned to 1 KB (the 128-byte swizzle's pattern repeats there). */
__device__ __forceinline__ uint8_t *attn_smem_base(uint8_t *raw) {
    return reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
}

/* Where use n of an S-stage mbarrier ring falls: its stage, and the parity of the stage's phase that a wait for
 * the stage to be filled waits on (a wait for it to be emptied waits on the other parity). */
template <int S>
struct AttnRingSlot {
    int stage;
    uint32_t parity;
    __device__ __forceinline__ explicit AttnRingSlot(int n) : stage(n % S), parity((n / S) & 1) {}
};

/* Loads rows t0 .. t0 + R - 1 of sequence b, columns col0 .. col0 + HD - 1, into `tile`, completing on `bar`
 * (whose expected transaction bytes the caller sets to AttnTile::kBytes). */
template <int HD, int R>
__device__ __forceinline__ void attn_load_tile(uint8_t *tile, const CUtensorMap *map, uint64_t *bar, int col0, int t0,
                                               int b) {
#pragma unroll
    for (int x = 0; x < AttnTile<HD, R>::kBoxes; x++)
        tma_load_3d(tile + x * AttnTile<HD, R>::kBoxBytes, map, bar, col0 + 64 * x, t0, b);
}

/* Shared-window address of the bf16 pair at (row, col) (col even) of a head tile of R rows. */
template <int R>
__device__ __forceinline__ uint32_t attn_tile_addr(uint32_t tile, int row, int col) {
    return tile + (col >> 6) * (R * 128) + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) + (col & 7) * 2;
}

/* ---------------------------------------------------------------- a consumer's output rows, stored by TMA */

/* A consumer warpgroup stores its 64 output rows through its own rows of a resident tile: its threads write them
 * (attn_stage_tile, or the backward's attn_stage_grad), attn_store_begin makes the writes visible to TMA and returns
 * true in the one thread that then issues the stores (attn_store_rows) and commits them. */
__device__ __forceinline__ bool attn_store_begin(int consumer, int wtid) {
    fence_proxy_async_shared();
    named_bar_sync(1 + consumer, 128); /* the warpgroup's store barrier */
    return wtid == 0;
}

/* Issues the TMA stores of rows row0 .. row0 + 63 of an R-row tile to columns col0 .. col0 + HD - 1 from row t0 of
 * sequence b (a map with boxes of 64 x 64). */
template <int HD, int R>
__device__ __forceinline__ void attn_store_rows(const CUtensorMap *map, const uint8_t *tile, int row0, int col0,
                                                int t0, int b) {
#pragma unroll
    for (int x = 0; x < AttnTile<HD, R>::kBoxes; x++)
        tma_store_3d(map, smem_u32(tile + x * AttnTile<HD, R>::kBoxBytes + row0 * 128), col0 + 64 * x, t0, b);
}

/* Commits the stores and waits for them. */
__device__ __forceinline__ void attn_store_end() {
    bulk_commit();
    bulk_wait<0>();
}

/* A query buffer whose output went out through a store: the storing thread frees it (an arrival on its empty
 * barrier) once the store has read it, and then forgets it (stored_qb = -1; -1: none). */
__device__ __forceinline__ void attn_free_stored_buffer(int &stored_qb, uint64_t *q_empty) {
    if (stored_qb >= 0) {
        bulk_wait_read<0>();
        mbar_arrive(&q_empty[stored_qb]);
        stored_qb = -1;
    }
}

/* ---------------------------------------------------------------- turns at the tensor cores */

/* NC consumer warpgroups take turns issuing their matmuls, a round robin on named barriers NC + 1 .. 2 NC (after the
 * store barriers 1 .. NC of attn_store_begin): consumer c waits for its turn (take), issues, hands the turn to
 * consumer c + 1 mod NC (pass) and runs its elementwise work while the others' matmuls keep the tensor cores busy.
 * Consumer 0 goes first; all take the same number of turns, ending with last() instead of pass(): the last
 * consumer's would give consumer 0 its next first turn, which the next constructor gives, so the barriers end
 * balanced. */
template <int NC>
struct AttnTurns {
    static constexpr int kBar0 = 1 + NC;    /* consumer c's turn barrier: kBar0 + c */
    static constexpr int kBarThreads = 256; /* on a turn barrier: the consumer taking the turn and the one passing it */
    int c;
    __device__ __forceinline__ explicit AttnTurns(int consumer) : c(consumer) {
        if (c == NC - 1) named_bar_arrive(kBar0, kBarThreads);
    }
    __device__ __forceinline__ void take() const { named_bar_sync(kBar0 + c, kBarThreads); }
    __device__ __forceinline__ void pass() const { /* to consumer c + 1 mod NC */
        named_bar_arrive(kBar0 + (NC == 2 ? 1 - c : (c + 1) % NC), kBarThreads);
    }
    __device__ __forceinline__ void last() const {
#pragma unroll
        for (int i = 0; i < NC - 1; i++) /* pass(), by all but the last consumer */
            if (c == i) named_bar_arrive(kBar0 + 1 + i, kBarThreads);
    }
};

/* ---------------------------------------------------------------- wgmma over head tiles */

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

/* Pins the N registers of accumulator d here: the compiler moves no access to them above this point (placed after
 * the wait for the wgmma that writes them). */
template <int N>
__device__ __forceinline__ void attn_pin(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(d[i]);
}
/* Waits until at most PENDING of this thread's wgmma commit groups are in flight, then pins the accumulator d of a
 * group that has completed. */
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

/* ---------------------------------------------------------------- arithmetic on accumulator fragments */

/* 2^x, the SFU's approximation (flushes denormals; 2^-inf = 0). */
__device__ __forceinline__ float attn_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* lo and hi rounded to bf16, as one register (lo in the low half). */
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

/* Raises a kernel's dynamic shared-memory limit, once (host). */
template <class Kernel>
static void attn_set_smem(Kernel kernel, int bytes, bool &done) {
    if (!done) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        done = true;
    }
}

#endif
