/* gemm_epilogue.cuh: the five epilogue primitives (docs/DESIGN.md, "The GEMM-epilogue engine"), applied to the
 * accumulator tile while it is in registers, and the staged output and input tiles. An epilogue program (a struct
 * deriving from GeProgram or GeEpilogue; those bases, and how a program declares its outputs and inputs, are
 * gemm_program_decl.cuh's) calls the primitives from its per-fragment hook:
 *   1. maps:        plain arithmetic on float2 pairs; helpers ge_add/ge_mul/ge_scale (the model's math, RoPE and
 *                   SwiGLU, is the backend's: kernels/cuda/cuda_math.cuh);
 *   2. broadcasts:  ge_row_vec (one value per row), ge_col_vec (a pair of per-column values);
 *   3. tiles:       ge_load / ge_store of an extra [rows, cols] matrix at the fragment's position (bf16 or fp32);
 *   4. reductions:  GeRowPartial<Op> (per row, over 128-column slices of the tile) and ge_col_partial_add/_store
 *                   (per column, over the tile's rows), written as one partial per (row, slice) or (M-tile, column);
 *   5. accumulate:  ge_accum (out += value, fp32 or bf16 out).
 * Output tiles go fastest through GeOut (3 and 5 through shared memory and TMA, asynchronous: the consumers do not
 * wait for global memory), and input tiles through GeTileIn (RING fragments' loads in flight, after an L2
 * prefetch) or GeTileInTma; ge_load / ge_store / ge_accum are the direct register paths. The inputs (GeTileIn,
 * GeTileInTma, GeColStage, GeRowVals, GeRowInts: GeInput types) are declared by the program (its inputs(), a
 * GeInputs list); the engine calls their hooks (prefetch, during, begin, flush), and frag() reads them (a TMA
 * input's get() waits for its slot).
 * Every primitive masks rows >= M and columns >= N itself: a fragment of an edge tile may be partly outside. */
#ifndef GEMM_EPILOGUE_CUH
#define GEMM_EPILOGUE_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/hopper/hopper_ptx.cuh"

typedef __nv_bfloat16 bf16;

#define GE_UNIT_BYTES 4096 /* one staging unit of shared memory: a 64 x 32 bf16 slot (an fp32 one takes two) */

/* What the engine keeps, per consumer thread, for the primitives that stage, store and reduce an output tile (its
 * shared-memory areas: gemm_engine.cuh's GeSmem; staging is counted in units of GE_UNIT_BYTES). */
struct GeTilePlumbing {
    int lane;           /* lane in the warp */
    int cwarp;          /* consumer warp, 0..7 */
    int ctid;           /* consumer thread, 0..255 */
    int ttid;           /* this thread among the tile's owners (both consumers, or one in ping-pong) */
    int tthreads;       /* the tile's owners: 256 or 128 */
    float *col_scratch; /* the column partials' scratch (kColPartials: [8 warps][BN] floats), or null */
    /* GeOut staging: the epilogue runs in chunks of 32 columns; this consumer's 64 rows of the chunk */
    int crow0;          /* first row of the current row block (64 rows): m0 + 64 c cooperative, m0 + 64 mb ping-pong */
    int srow;           /* this thread's first row inside that row block: 16*warp + lane/4 (the second is +8) */
    int chunk_col;      /* first column of the current chunk */
    uint32_t out_slots; /* shared-window address of the current chunk's GeOut staging slots (kStageUnits), or 0 */
    uint32_t frag_off_bf16;   /* the lane's row address in a bf16 staging slot for the warp's 8 x 8 matrix stores
                               * and loads (row 16 warp + lane % 16) at the chunk's first fragment (ge_stage_off) */
    uint32_t frag_off_f32[2]; /* the offsets of this thread's rows h in an fp32 staging slot at that fragment */
    int bn, nblk;         /* tile width; m64 row blocks per consumer (2 in ping-pong) */
    int bar;              /* named barrier of the tile's owners (tthreads of them). No primitive syncs on it; it
                           * stays because taking it out of the tile changes the kernels' register allocation */
    int wtid, cbar;       /* thread in its consumer (0..127); the consumer's own named barrier (128 threads) */
    uint32_t vec_scratch; /* the consumer's column-vector scratch (GeColStage), kVecFloats floats */
    uint32_t in_slots;    /* the consumer's input-tile staging slots (GeTileInTma), kInUnits units */
    uint64_t *in_bar;     /* their mbarriers, one per unit (count 1; the loads' transaction bytes) */
    bool direct;          /* GeOut outputs are stored straight from registers: a compile-time constant of the
                           * kernel (ge_kernel's DIRECT), so the unused path leaves no code in the epilogue */
};

/* The output tile as an epilogue program sees it: where it is and which elements this consumer thread holds (its
 * accumulator fragment (h, j) is row row[h], columns col0 + 8j and col0 + 8j + 1). Programs
 * read these fields and hand the whole tile to the primitives; `eng` is the engine's plumbing (staging slots,
 * barriers, scratch), which only the primitives and the engine touch. */
struct GeTile {
    int M, N;   /* output bounds */
    int m0, n0; /* tile origin */
    int tm, tn; /* tile index along M and N */
    int row[2]; /* this thread's rows: eng.crow0 + 16*warp + lane/4, and that + 8 */
    int col0;   /* this thread's first column: n0 + 2*(lane%4) */
    int j;      /* the fragment that frag() gets: 0..BN/8-1, a compile-time constant in the unrolled loop */
    GeTilePlumbing eng;
};

/* A pair of floats as bf16x2 (round to nearest even; x in the low half) by one cvt.rn.bf16x2.f32, and back by a
 * shift and a mask: going through __nv_bfloat162's halves adds byte permutes per pair in the epilogue's SASS. */
__device__ __forceinline__ uint32_t ge_pack_bf16x2(float2 v) {
    uint32_t u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(v.y), "f"(v.x));
    return u;
}
__device__ __forceinline__ float2 ge_unpack_bf16x2(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}

/* Stops the kernel on a programming error (the launch fails with an illegal-address error): a store through a null
 * pointer. Not __trap(): a trap anywhere in the kernel makes ptxas allocate the consumers' code within the launch
 * bound's 168 registers instead of the 232 that setmaxnreg gives them, and the consumers spill. */
__device__ __forceinline__ void ge_fault() { *(volatile int *)nullptr = 0; }

/* Valid columns of the pair starting at `col` in a matrix of `ncols` columns: 0, 1 or 2. */
__device__ __forceinline__ int ge_pair_valid(int col, int ncols) {
    const int v = ncols - col;
    return v < 0 ? 0 : (v > 2 ? 2 : v);
}

/* The base of an input that a program declares (GeEpilogue::inputs): the engine calls its hooks with the input's
 * source `src` (its Src, built from the Params' fields when the hook is called) at the right places, and frag()
 * only reads it. prefetch(src, t) before the tile's main loop (L2 prefetches, TMA loads, column-vector fetches);
 * during(src, t, kb, nk) after k-block kb of nk; begin(src, t) per row block, before its first fragment (register
 * loads, publishing to shared memory); flush(src, t) after each chunk, in the thread that issues its stores (an
 * output written in place of the input). Per fragment, an input's get() waits for its data where it has to. The
 * base's hooks do nothing. kVecFloats and kInUnits: the consumer's shared scratch the input takes (a column
 * vector, TMA staging). */
struct GeInput {
    static constexpr int kVecFloats = 0, kInUnits = 0;
    template <class... A> /* (src, t, ...); the empty list GeInputs<> has them too, as (t, ...) */
    __device__ __forceinline__ void prefetch(const A &...) const {}
    template <class... A>
    __device__ __forceinline__ void during(const A &...) const {}
    template <class... A>
    __device__ __forceinline__ void begin(const A &...) const {}
    template <class... A>
    __device__ __forceinline__ void flush(const A &...) const {}
};

/* When an input's loads are issued: all before the tile's main loop, or spread over its k-blocks. */
enum GeWhen { GE_AHEAD, GE_SPREAD };

/* ---------------------------------------------------------------- 1. maps */

__device__ __forceinline__ float2 ge_add(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 ge_mul(float2 a, float2 b) { return make_float2(a.x * b.x, a.y * b.y); }
__device__ __forceinline__ float2 ge_scale(float2 a, float s) { return make_float2(a.x * s, a.y * s); }

/* ---------------------------------------------------------------- 2. broadcasts */

/* v[row] for the fragment's row h (0 outside the matrix). */
__device__ __forceinline__ float ge_row_vec(const float *v, const GeTile &t, int h) {
    return t.row[h] < t.M ? __ldg(v + t.row[h]) : 0.0f;
}

/* Inputs: a row vector's values at the thread's two rows (row h's is [h]), loaded per row block; an int per row
 * (e.g. the row's target column), `outside` for rows outside the matrix. */
struct GeRowVals : GeInput {
    struct Src {
        const float *p;
    };
    float v[2];
    __device__ __forceinline__ void begin(const Src &s, const GeTile &t) {
        v[0] = ge_row_vec(s.p, t, 0);
        v[1] = ge_row_vec(s.p, t, 1);
    }
    __device__ __forceinline__ float operator[](int h) const { return v[h]; }
};
struct GeRowInts : GeInput {
    struct Src {
        const int32_t *const &p; /* a reference to the Params' field: read at each of the two rows' loads */
        int outside;
    };
    int v[2];
    __device__ __forceinline__ void begin(const Src &s, const GeTile &t) {
#pragma unroll
        for (int h = 0; h < 2; h++) v[h] = t.row[h] < t.M ? __ldg(s.p + t.row[h]) : s.outside;
    }
    __device__ __forceinline__ int operator[](int h) const { return v[h]; }
};

/* (v[col], v[col+1]) for a vector of `n` columns (0 outside). */
__device__ __forceinline__ float2 ge_col_vec(const float *v, int col, int n) {
    const int nv = ge_pair_valid(col, n);
    if (nv == 2 && ((reinterpret_cast<uintptr_t>(v) & 7) == 0)) return __ldg(reinterpret_cast<const float2 *>(v + col));
    return make_float2(nv > 0 ? __ldg(v + col) : 0.0f, nv > 1 ? __ldg(v + col + 1) : 0.0f);
}
__device__ __forceinline__ float2 ge_col_vec(const float *v, const GeTile &t, int col) { return ge_col_vec(v, col, t.N); }

/* ---------------------------------------------------------------- 3. tile loads and stores */

/* Element pair (row, col..col+1) of a row-major [nrows, ncols] matrix with row stride ld; 0 outside. The 4- or
 * 8-byte vector path is taken when the pair is whole and aligned (col is always even). */
__device__ __forceinline__ float2 ge_load_at(const bf16 *p, long ld, int row, int col, int nrows, int ncols) {
    const int nv = row < nrows ? ge_pair_valid(col, ncols) : 0;
    const bf16 *q = p + (long)row * ld + col;
    if (nv == 2 && ((reinterpret_cast<uintptr_t>(q) & 3) == 0))
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(q));
    return make_float2(nv > 0 ? __bfloat162float(q[0]) : 0.0f, nv > 1 ? __bfloat162float(q[1]) : 0.0f);
}
__device__ __forceinline__ float2 ge_load_at(const float *p, long ld, int row, int col, int nrows, int ncols) {
    const int nv = row < nrows ? ge_pair_valid(col, ncols) : 0;
    const float *q = p + (long)row * ld + col;
    if (nv == 2 && ((reinterpret_cast<uintptr_t>(q) & 7) == 0)) return *reinterpret_cast<const float2 *>(q);
    return make_float2(nv > 0 ? q[0] : 0.0f, nv > 1 ? q[1] : 0.0f);
}

/* Stores the pair (masked) and returns it as stored: rounded to bf16 for a bf16 matrix. */
__device__ __forceinline__ float2 ge_store_at(bf16 *p, long ld, int row, int col, int nrows, int ncols, float2 v) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(v.x, v.y);
    const int nv = row < nrows ? ge_pair_valid(col, ncols) : 0;
    bf16 *q = p + (long)row * ld + col;
    if (nv == 2 && ((reinterpret_cast<uintptr_t>(q) & 3) == 0)) {
        *reinterpret_cast<__nv_bfloat162 *>(q) = b;
    } else {
        if (nv > 0) q[0] = b.x;
        if (nv > 1) q[1] = b.y;
    }
    return __bfloat1622float2(b);
}
__device__ __forceinline__ float2 ge_store_at(float *p, long ld, int row, int col, int nrows, int ncols, float2 v) {
    const int nv = row < nrows ? ge_pair_valid(col, ncols) : 0;
    float *q = p + (long)row * ld + col;
    if (nv == 2 && ((reinterpret_cast<uintptr_t>(q) & 7) == 0)) {
        *reinterpret_cast<float2 *>(q) = v;
    } else {
        if (nv > 0) q[0] = v.x;
        if (nv > 1) q[1] = v.y;
    }
    return v;
}

/* The same at the fragment's position, for a matrix shaped like the output ([M, N], row stride ld). */
template <class T>
__device__ __forceinline__ float2 ge_load(const T *p, long ld, const GeTile &t, int h, int col) {
    return ge_load_at(p, ld, t.row[h], col, t.M, t.N);
}
template <class T>
__device__ __forceinline__ float2 ge_store(T *p, long ld, const GeTile &t, int h, int col, float2 v) {
    return ge_store_at(p, ld, t.row[h], col, t.M, t.N, v);
}

/* The output columns' pairs of a matrix twice as wide as the output ([M, 2 N], row stride ld: an interleaved pair
 * of columns per output column), stored straight from registers: v[e] goes to columns 2 (col + e), 2 (col + e) + 1
 * of row h, rounded to bf16 (masked; one 8-byte store when whole and aligned). */
__device__ __forceinline__ void ge_store_wide(bf16 *p, long ld, const GeTile &t, int h, int col, const float2 (&v)[2]) {
    const int nv = t.row[h] < t.M ? ge_pair_valid(col, t.N) : 0;
    bf16 *q = p + (long)t.row[h] * ld + 2 * col;
    if (nv == 2 && ((reinterpret_cast<uintptr_t>(q) & 7) == 0)) {
        *reinterpret_cast<uint2 *>(q) = make_uint2(ge_pack_bf16x2(v[0]), ge_pack_bf16x2(v[1]));
    } else {
        for (int e = 0; e < nv; e++) {
            q[2 * e] = __float2bfloat16(v[e].x);
            q[2 * e + 1] = __float2bfloat16(v[e].y);
        }
    }
}

/* ---------------------------------------------------------------- 4. partial reductions */

struct GeSum {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
};
struct GeMax {
    static __device__ __forceinline__ float identity() { return -INFINITY; }
    static __device__ __forceinline__ float combine(float a, float b) { return fmaxf(a, b); }
};

/* Per-row partial over 128-column slices (GE_PART_COLS), whatever the tile width, so that the partials' layout
 * does not depend on the schedule: add() the fragments' values (columns >= N are skipped; fragment j of a 256-wide
 * tile falls in slice j / 16), then store() writes part[row * ld + n0 / 128 + q] for each valid row and each of the
 * tile's slices q that starts inside N (the 4 threads of a row combine by shuffles; one writes). */
#define GE_PART_COLS 128
template <class Op>
struct GeRowPartial {
    float v[2][2]; /* [slice][h] */
    __device__ __forceinline__ void reset() {
#pragma unroll
        for (int q = 0; q < 2; q++) v[q][0] = v[q][1] = Op::identity();
    }
    __device__ __forceinline__ void add(const GeTile &t, int h, int col, float2 x) {
        const int q = t.j / (GE_PART_COLS / 8), nv = ge_pair_valid(col, t.N);
        if (nv > 0) v[q][h] = Op::combine(v[q][h], x.x);
        if (nv > 1) v[q][h] = Op::combine(v[q][h], x.y);
    }
    __device__ __forceinline__ void store(float *part, long ld, const GeTile &t) const {
#pragma unroll
        for (int q = 0; q < 2; q++) {
            if (q * GE_PART_COLS >= t.eng.bn || t.n0 + q * GE_PART_COLS >= t.N) break;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float x = v[q][h];
                x = Op::combine(x, __shfl_xor_sync(0xffffffffu, x, 1));
                x = Op::combine(x, __shfl_xor_sync(0xffffffffu, x, 2));
                if ((t.eng.lane & 3) == 0 && t.row[h] < t.M) part[(long)t.row[h] * ld + t.n0 / GE_PART_COLS + q] = x;
            }
        }
    }
};

/* Per-column partial sum over the tile's rows. For each fragment column pair, add this thread's values of its two
 * rows (x0: row[0], x1: row[1]; rows >= M are skipped); the warp reduces over its 16 rows by shuffles and keeps the
 * pair in shared scratch [8 warps][BN]. ge_col_partial_store then sums the 8 warps in a fixed order (deterministic)
 * and writes part[tm * ld + col] for the tile's valid columns. Needs the program's kColPartials = true. */
__device__ __forceinline__ void ge_col_partial_add(const GeTile &t, int col, float2 x0, float2 x1, int bn) {
    float2 s = make_float2(t.row[0] < t.M ? x0.x : 0.0f, t.row[0] < t.M ? x0.y : 0.0f);
    if (t.row[1] < t.M) s = ge_add(s, x1);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        s.x += __shfl_xor_sync(0xffffffffu, s.x, off);
        s.y += __shfl_xor_sync(0xffffffffu, s.y, off);
    }
    if (t.eng.lane < 4) *reinterpret_cast<float2 *>(t.eng.col_scratch + t.eng.cwarp * bn + (col - t.n0)) = s;
}
__device__ __forceinline__ void ge_col_partial_store(float *part, long ld, const GeTile &t, int bn) {
    named_bar_sync(1, 256); /* barrier 1: both consumers' 256 threads (column partials are cooperative only) */
    for (int c = t.eng.ctid; c < bn; c += 256) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++) s += t.eng.col_scratch[w * bn + c];
        if (t.n0 + c < t.N) part[(long)t.tm * ld + t.n0 + c] = s;
    }
    named_bar_sync(1, 256); /* the scratch is free again for the next tile */
}

/* ---------------------------------------------------------------- 5. accumulate into the output */

/* p[row, col..col+1] += v (read, add in fp32, write; each element has exactly one owner thread). Returns the sum
 * as stored. */
template <class T>
__device__ __forceinline__ float2 ge_accum_at(T *p, long ld, int row, int col, int nrows, int ncols, float2 v) {
    return ge_store_at(p, ld, row, col, nrows, ncols, ge_add(ge_load_at(p, ld, row, col, nrows, ncols), v));
}
template <class T>
__device__ __forceinline__ float2 ge_accum(T *p, long ld, const GeTile &t, int h, int col, float2 v) {
    return ge_accum_at(p, ld, t.row[h], col, t.M, t.N, v);
}

/* ---------------------------------------------------------------- staged output tiles, register input tiles */

/* An output tile written through shared memory and the TMA unit. The fragments of one 32-column chunk go into a
 * staging slot of the consumer's shared memory (64 rows x 32 columns, swizzled as the tensor map says: bf16 rows
 * of 64 B with the 64-byte swizzle, written by the warp's 8 x 8 matrix stores, 16-byte rows to distinct banks;
 * fp32 rows of 128 B with the 128-byte swizzle, so that a warp's pair writes hit distinct banks); after the chunk
 * the engine has one thread per consumer issue the program's flush(), which stores (or, ACC, adds in L2) the
 * 64 x 32 box with one bulk tensor copy and does not wait for it. The TMA unit drops the box's elements outside
 * [M, N], so edge tiles need no masks. Made on the host by ge_out() (gemm_engine.cuh; its map by ge_out_map,
 * gemm.cu): where TMA cannot describe the matrix (base not 16-byte aligned, row stride or row length not a multiple
 * of 16 bytes), tma = 0; the program's direct() reports it, and ge_run launches the instantiation in which the same
 * calls store directly from registers. A program declares its GeOuts through GeProgram<Os...>
 * (gemm_program_decl.cuh), which sums their kUnits into kStageUnits and gives each its unit offset (ge_put<i>); one
 * that calls ge_out_put by hand declares kStageUnits and passes the offsets itself. */
template <class T, int COLS = 32, bool ACC = false>
struct GeOut {
    CUtensorMap map;
    T *ptr;
    long ld;
    int tma;
    using Elem = T;
    static constexpr int kCols = COLS;  /* columns of the output per 32-column chunk of the tile: 32, or 16 for an
                                         * output half as wide as the tile (one value per column pair) */
    static constexpr bool kAcc = ACC;   /* out += value (fp32: the add happens in L2) instead of out = value */
    /* stored directly from registers on either path: a bf16 accumulate (an add in L2 would round twice) */
    static constexpr bool kAlwaysDirect = ACC && sizeof(T) == 2;
    /* staging units (GE_UNIT_BYTES) per chunk */
    static constexpr int kUnits = (64 * COLS * (int)sizeof(T) + GE_UNIT_BYTES - 1) / GE_UNIT_BYTES;
    static_assert(COLS == 32 || (COLS == 16 && sizeof(T) == 2 && !ACC), "32 columns, or 16 bf16 ones");
};

/* Byte offset of the pair (row r of the consumer's 64, column cc of the chunk's 32) in a staging slot. */
__host__ __device__ __forceinline__ uint32_t ge_stage_off(const bf16 *, int r, int cc) {
    return r * 64 + ((((cc >> 3) ^ (r >> 1)) & 3) << 4) + ((cc & 7) << 1);
}
__host__ __device__ __forceinline__ uint32_t ge_stage_off(const float *, int r, int cc) {
    return r * 128 + ((((cc >> 2) ^ r) & 7) << 4) + ((cc & 3) << 2);
}
/* A half-width bf16 slot (16 columns, rows of 32 B, no swizzle). */
__host__ __device__ __forceinline__ uint32_t ge_stage_off_half(int r, int cc) { return r * 32 + cc * 2; }
/* The same for fragment t.j, from the offsets at the chunk's first fragment that the engine keeps in the tile
 * (t.eng.frag_off_bf16: bf16, the lane's row of the warp's 8 x 8 matrices; t.eng.frag_off_f32[h]: fp32, the
 * thread's row h): a fragment is 8 columns on, which only flips swizzle bits, ge_stage_off(r, cc + 8 i) ==
 * ge_stage_off(r, cc) ^ (i << 4) (bf16) or ^ (i << 5) (fp32) for cc < 8, i < 4 (test_gemm checks it). t.j is a
 * compile-time constant in the unrolled epilogue, so an address costs one XOR instead of the swizzle arithmetic. */
__device__ __forceinline__ uint32_t ge_slot_off_bf16(const GeTile &t) { return t.eng.frag_off_bf16 ^ ((t.j & 3) << 4); }
__device__ __forceinline__ uint32_t ge_slot_off_f32(const GeTile &t, int h) {
    return t.eng.frag_off_f32[h] ^ ((t.j & 3) << 5);
}

/* A fragment's two rows (v[h]: the pair of row h) as bf16 in a staging slot, one 8 x 8 matrix instruction for the
 * warp (addr: the slot + ge_slot_off_bf16): store v rounded to bf16 (v becomes the pairs as stored), or load. */
__device__ __forceinline__ void ge_st_shared_bf16_rows(uint32_t addr, float2 (&v)[2]) {
    uint32_t u[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        u[h] = ge_pack_bf16x2(v[h]);
        v[h] = ge_unpack_bf16x2(u[h]);
    }
    stmatrix_x2(addr, u[0], u[1]);
}
__device__ __forceinline__ void ge_ld_shared_bf16_rows(uint32_t addr, float2 (&v)[2]) {
    uint32_t u[2];
    ldmatrix_x2(addr, u[0], u[1]);
#pragma unroll
    for (int h = 0; h < 2; h++) v[h] = ge_unpack_bf16x2(u[h]);
}

/* Puts the fragment's pairs (v[h]: row h, columns col, col+1) of output o, staged at unit offset `unit`; all the
 * warp's threads call it together (a bf16 output is staged by the warp's matrix stores). v becomes the pairs as
 * stored (rounded to bf16 for a bf16 output); an accumulating output (o += v) leaves v on the TMA path (the fp32
 * add happens in L2) and makes it the sum on the direct path, which a bf16 accumulate always takes (one rounding).
 * Which path runs is decided at compile time (t.eng.direct), never per fragment: a branch here would put both paths'
 * code into the unrolled epilogue, and an epilogue that large runs out of the instruction cache (docs/DESIGN.md,
 * "Why the engine is shaped this way"). */
template <class T, bool ACC>
__device__ __forceinline__ void ge_out_put(const GeOut<T, 32, ACC> &o, const GeTile &t, int unit, int col,
                                           float2 (&v)[2]) {
    if (t.eng.direct || GeOut<T, 32, ACC>::kAlwaysDirect) { /* direct: store, or read-add-write */
#pragma unroll
        for (int h = 0; h < 2; h++)
            v[h] = ACC ? ge_accum(o.ptr, o.ld, t, h, col, v[h]) : ge_store(o.ptr, o.ld, t, h, col, v[h]);
        return;
    }
    const uint32_t slot = t.eng.out_slots + unit * GE_UNIT_BYTES;
    if constexpr (sizeof(T) == 2) {
        ge_st_shared_bf16_rows(slot + ge_slot_off_bf16(t), v);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) st_shared_v2f32(slot + ge_slot_off_f32(t, h), v[h]);
    }
}

/* Puts one value per row (a[h]: row h) of a half-width output at its column col / 2 (col: the fragment's first
 * column, even); a[h] becomes the value as stored (bf16). */
__device__ __forceinline__ void ge_out_put(const GeOut<bf16, 16> &o, const GeTile &t, int unit, int col,
                                           float (&a)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bf16 b = __float2bfloat16(a[h]);
        a[h] = __bfloat162float(b);
        if (t.eng.direct) {
            if (t.row[h] < t.M && col < t.N) o.ptr[(long)t.row[h] * o.ld + col / 2] = b;
        } else {
            st_shared_b16(t.eng.out_slots + unit * GE_UNIT_BYTES +
                              ge_stage_off_half(t.eng.srow + 8 * h, (col - t.eng.chunk_col) / 2),
                          __bfloat16_as_ushort(b));
        }
    }
}

/* Issues the bulk copy (ACC: the fp32 add-reduce) of the 64 x kCols box staged at shared-window address src into
 * output o at column col, row row (ge_out_store_box: the current chunk's position, column chunk_col * kCols / 32). */
template <class O>
__device__ __forceinline__ void ge_out_store_box_at(const O &o, uint32_t src, int col, int row) {
    if constexpr (O::kAcc)
        tma_reduce_add_2d(&o.map, src, col, row);
    else
        tma_store_2d(&o.map, src, col, row);
}
template <class O>
__device__ __forceinline__ void ge_out_store_box(const O &o, const GeTile &t, uint32_t src) {
    ge_out_store_box_at(o, src, t.eng.chunk_col * O::kCols / 32, t.eng.crow0);
}

/* Issues the chunk's bulk copy of output o (the engine calls flush() in one thread per consumer, after a barrier
 * over the consumer's threads; nothing on the direct path). A program whose direct() did not report an output
 * that TMA cannot describe stops here (ge_fault) instead of storing through an empty tensor map. */
template <class O>
__device__ __forceinline__ void ge_out_flush(const O &o, const GeTile &t, int unit) {
    if (t.eng.direct || O::kAlwaysDirect) return;
    if (!o.tma) ge_fault();
    ge_out_store_box(o, t, t.eng.out_slots + unit * GE_UNIT_BYTES);
}

/* Input: a column vector (one fp32 per column, e.g. RMSNorm's gamma) for the tile, staged in shared memory:
 * prefetch() loads the consumer's copy (BN/128 values per thread) into registers before the main loop; begin()
 * writes them to the consumer's vector scratch and syncs the consumer; get(t, col) in frag() reads the pair
 * (v[col], v[col+1]) from shared memory. OPTIONAL: the source may be null, and then nothing is loaded (frag() must
 * not get). */
template <int BN, bool OPTIONAL = false>
struct GeColStage : GeInput {
    static constexpr int kVecFloats = BN;
    struct Src {
        const float *p;
    };
    float x[BN / 128];
    __device__ __forceinline__ void prefetch(const Src &s, const GeTile &t) {
        if (OPTIONAL && !s.p) return;
#pragma unroll
        for (int i = 0; i < BN / 128; i++) {
            const int col = t.n0 + 128 * i + t.eng.wtid;
            x[i] = col < t.N ? __ldg(s.p + col) : 0.0f;
        }
    }
    __device__ __forceinline__ void begin(const Src &s, const GeTile &t) {
        if (OPTIONAL && !s.p) return;
#pragma unroll
        for (int i = 0; i < BN / 128; i++)
            st_shared_b32(t.eng.vec_scratch + 4 * (128 * i + t.eng.wtid), __float_as_uint(x[i]));
        named_bar_sync(t.eng.cbar, 128);
    }
    __device__ __forceinline__ float2 get(const GeTile &t, int col) const {
        return ld_shared_v2f32(t.eng.vec_scratch + 4 * (col - t.n0));
    }
};

/* Issues L2 prefetches for lines [begin, end) of the tile's [128 x bn] block of a row-major matrix shaped like the
 * output (row stride ld; W = 2: twice as wide, columns 2 n0 .. 2 n0 + 2 bn of 2 N), counting 128-byte lines row by
 * row; lines outside the matrix are skipped. */
template <int W, class T>
__device__ __forceinline__ void ge_prefetch_lines(const T *p, long ld, const GeTile &t, int bn, int begin, int end) {
    const int lines = W * bn * (int)sizeof(T) / 128; /* 128-byte lines per row */
    for (int i = begin + t.eng.ttid; i < end; i += t.eng.tthreads) {
        const int row = t.m0 + i / lines, col = W * t.n0 + (i % lines) * (128 / (int)sizeof(T));
        if (row < t.M && col < W * t.N) prefetch_l2(p + (long)row * ld + col);
    }
}

/* The whole block at once, before the tile's main loop (the prefetch() hook). */
template <int W = 1, class T>
__device__ __forceinline__ void ge_prefetch_tile(const T *p, long ld, const GeTile &t, int bn) {
    ge_prefetch_lines<W>(p, ld, t, bn, 0, W * bn * (int)sizeof(T));
}

/* The same spread over the main loop (the during() hook, k-block kb of nk): the tile's rows in PARTS parts, part q
 * in k-block nk - PARTS + q (all parts up to there in the first k-block when nk < PARTS), so that the lines arrive
 * shortly before the epilogue and do not compete with the main loop's first operand loads (the SwiGLU backward's
 * input: docs/DESIGN.md, "Why the engine is shaped this way", the SwiGLU epilogues). */
template <int W = 1, int PARTS = 16, class T>
__device__ __forceinline__ void ge_prefetch_tile_spread(const T *p, long ld, const GeTile &t, int bn, int kb, int nk) {
    const int last = kb - (nk - PARTS), first = kb == 0 ? 0 : last;
    if (last < 0) return;
    const int per = W * bn * (int)sizeof(T) / PARTS; /* lines per part: 128 rows of W bn sizeof(T) / 128 lines */
    ge_prefetch_lines<W>(p, ld, t, bn, first * per, (last + 1) * per);
}

/* Input: a bf16 tile shaped like the output, read into registers ahead of use, after L2 prefetches issued before
 * the main loop (WHEN = GE_AHEAD) or spread over its last k-blocks (GE_SPREAD). begin() issues the loads of the
 * first RING fragments at once, so they cost one memory latency (an L2 hit) instead of one per fragment; get(t, h)
 * in frag() returns the pair at fragment (h, t.j) as floats (0 outside the matrix). With RING < BN/8 the program
 * calls advance(t) in frag() after the fragment's last get: it refills the slots of each finished GROUP of
 * fragments with the fragments RING ahead, so the loads stay RING - GROUP fragments ahead of use in RING x 2 x W
 * registers (the one per-fragment call a program makes for an input: where the refill's loads go among the
 * fragment's stores is part of the program's code). W = 2: the input is twice as wide as the output (an
 * interleaved pair of columns per output column: SwiGLU's (gate, up)); get2(t, h, p) returns row h's two pairs,
 * p[e] for output column col + e. */
template <int BN, int RING = BN / 8, int GROUP = BN / 8, int W = 1, GeWhen WHEN = GE_AHEAD>
struct GeTileIn : GeInput {
    static_assert(RING % GROUP == 0 && (BN / 8) % GROUP == 0 && RING <= BN / 8, "ring of whole groups");
    static_assert(W == 1 || W == 2, "an input as wide as the output, or twice as wide");
    struct Src {
        const bf16 *p;
        long ld; /* row stride */
    };
    uint32_t v[RING][2][W];
    const bf16 *rp[2]; /* this thread's two rows at column W col0 */
    bool fast;         /* both rows inside, the tile's columns inside, 4 W-byte aligned: unmasked loads */
    template <bool FAST>
    __device__ __forceinline__ void load_frag(const GeTile &t, int j) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bf16 *q = rp[h] + 8 * W * j;
            uint32_t *d = v[j % RING][h];
            if (FAST) {
                if constexpr (W == 1) {
                    d[0] = __ldg(reinterpret_cast<const unsigned int *>(q));
                } else {
                    const uint2 u = __ldg(reinterpret_cast<const uint2 *>(q));
                    d[0] = u.x;
                    d[1] = u.y;
                }
            } else {
                const int nv = W * (t.row[h] < t.M ? ge_pair_valid(t.col0 + 8 * j, t.N) : 0);
                const unsigned short *e = reinterpret_cast<const unsigned short *>(q);
#pragma unroll
                for (int i = 0; i < W; i++) {
                    const unsigned short lo = 2 * i < nv ? __ldg(e + 2 * i) : 0;
                    const unsigned short hi = 2 * i + 1 < nv ? __ldg(e + 2 * i + 1) : 0;
                    d[i] = (uint32_t)lo | ((uint32_t)hi << 16);
                }
            }
        }
    }
    /* fragments j0 .. j0 + n - 1 (< BN/8), one branch on `fast` for all of them */
    __device__ __forceinline__ void load_frags(const GeTile &t, int j0, int n) {
        if (fast) {
#pragma unroll
            for (int i = 0; i < n; i++)
                if (j0 + i < BN / 8) load_frag<true>(t, j0 + i);
        } else {
#pragma unroll
            for (int i = 0; i < n; i++)
                if (j0 + i < BN / 8) load_frag<false>(t, j0 + i);
        }
    }
    __device__ __forceinline__ void prefetch(const Src &s, const GeTile &t) {
        if constexpr (WHEN == GE_AHEAD) ge_prefetch_tile<W>(s.p, s.ld, t, BN);
    }
    __device__ __forceinline__ void during(const Src &s, const GeTile &t, int kb, int nk) {
        if constexpr (WHEN == GE_SPREAD) ge_prefetch_tile_spread<W>(s.p, s.ld, t, BN, kb, nk);
    }
    __device__ __forceinline__ void begin(const Src &s, const GeTile &t) {
        rp[0] = s.p + (long)t.row[0] * s.ld + W * t.col0;
        rp[1] = s.p + (long)t.row[1] * s.ld + W * t.col0;
        fast = t.row[1] < t.M && t.n0 + BN <= t.N &&
               ((reinterpret_cast<uintptr_t>(rp[0]) | reinterpret_cast<uintptr_t>(rp[1])) & (4 * W - 1)) == 0;
        load_frags(t, 0, RING);
    }
    __device__ __forceinline__ void advance(const GeTile &t) {
        if ((t.j + 1) % GROUP == 0 && t.j + 1 - GROUP + RING < BN / 8) load_frags(t, t.j + 1 - GROUP + RING, GROUP);
    }
    __device__ __forceinline__ float2 get(const GeTile &t, int h) const {
        static_assert(W == 1, "get: an input as wide as the output");
        return ge_unpack_bf16x2(v[t.j % RING][h][0]);
    }
    __device__ __forceinline__ void get2(const GeTile &t, int h, float2 (&p)[2]) const {
        static_assert(W == 2, "get2: an input twice as wide as the output");
        p[0] = ge_unpack_bf16x2(v[t.j % RING][h][0]);
        p[1] = ge_unpack_bf16x2(v[t.j % RING][h][1]);
    }
};

/* Input: a bf16 tile shaped like the output (e.g. a residual), brought into the consumer's shared input staging by
 * TMA, so that it takes no registers, no ring stages, and its latency hides behind the main loop: one slot of 64
 * rows x 32 columns per chunk and row block (kUnits 4 KB units: up to BLOCKS row blocks of BN/32 chunks), each laid
 * out as GeOut's bf16 staging slot (the source is a GeOut<bf16>'s map, ge_out()), each with its own "in" mbarrier.
 * WHEN = GE_AHEAD: prefetch() loads the row blocks this consumer will hold, before the main loop (after its earlier
 * bulk stores have read the slots); GE_SPREAD (one row block): during() loads them one slot per k-block of it.
 * Slots wholly outside the matrix are not loaded (all their outputs are masked). get(t, v) in frag() waits for the
 * chunk's slot at its first fragment and reads the fragment's two row pairs (warp-wide); put(t, v) writes bf16
 * values over them, and flush() stores the chunk from there by TMA to the source's `to`: an output written in
 * place of the input, with no staging of its own. (The alternatives tried: docs/EXPERIMENTS.md, "The GEMM-epilogue
 * engine".) */
template <int BN, int BLOCKS = 2, GeWhen WHEN = GE_AHEAD>
struct GeTileInTma : GeInput {
    static_assert(WHEN == GE_AHEAD || BLOCKS == 1, "loads spread over the main loop: one row block");
    static constexpr int kSlots = BN / 32, kUnits = BLOCKS * kSlots, kInUnits = kUnits;
    struct Src {
        const GeOut<bf16> &from; /* the input */
        const GeOut<bf16> &to;   /* the output written in place of it */
    };
    uint32_t loads = 0; /* tiles loaded so far: a slot's wait parity is that of its latest load */
    /* the first row of this consumer's first row block: m0 + 64 c cooperative (c = cwarp / 4), m0 in ping-pong */
    __device__ __forceinline__ static int first_row(const GeTile &t) { return t.m0 + (t.eng.nblk == 1 ? 64 * (t.eng.cwarp >> 2) : 0); }
    /* the slot of the current row block and chunk (t.j / 4) */
    __device__ __forceinline__ static int slot(const GeTile &t) {
        return ((t.eng.crow0 - first_row(t)) >> 6) * kSlots + (t.j >> 2);
    }
    __device__ __forceinline__ static uint32_t addr(const GeTile &t) {
        return t.eng.in_slots + slot(t) * GE_UNIT_BYTES + ge_slot_off_bf16(t);
    }
    /* slot s of row block b of the tile: its TMA load, or only the arrival where it lies outside the matrix */
    __device__ __forceinline__ static void load_slot(const GeOut<bf16> &o, const GeTile &t, int b, int s) {
        uint64_t *bar = t.eng.in_bar + b * kSlots + s;
        const int row = first_row(t) + 64 * b;
        if (row < t.M && t.n0 + 32 * s < t.N) {
            mbar_arrive_expect_tx(bar, GE_UNIT_BYTES);
            tma_load_2d_u32(t.eng.in_slots + (b * kSlots + s) * GE_UNIT_BYTES, &o.map, bar, t.n0 + 32 * s, row);
        } else {
            mbar_arrive(bar);
        }
    }
    /* the consumer's row blocks of the tile it will hold next, all at once (prefetch() hook, all threads; after
     * the slots' last stores, the previous tile's outputs written in place, have read them) */
    __device__ __forceinline__ void load(const GeOut<bf16> &o, const GeTile &t) {
        loads++;
        if (t.eng.wtid != 0) return;
        bulk_wait_read<0>();
        const int nb = t.eng.nblk < BLOCKS ? t.eng.nblk : BLOCKS;
        for (int b = 0; b < nb; b++)
#pragma unroll
            for (int s = 0; s < kSlots; s++) load_slot(o, t, b, s);
    }
    /* The same for one row block (cooperative), spread over the main loop (the during() hook, k-block kb of nk):
     * slot s after k-block s + 1, the rest after the last one. Issued all at once before the main loop, the
     * residual's reads (which miss L2) held up the operands' k-blocks behind them: on the cooperative schedule,
     * with 3 ring stages, the consumers then waited for their k-blocks far more often than the plain GEMM's
     * (docs/DESIGN.md, "Why the engine is shaped this way"). */
    __device__ __forceinline__ void load_spread(const GeOut<bf16> &o, const GeTile &t, int kb, int nk) {
        if (kb == 0) loads++;
        if (t.eng.wtid != 0) return;
        const int first = kb == 0 ? 0 : kb - 1, last = kb == nk - 1 ? kSlots - 1 : kb - 1;
        if (first > last || first >= kSlots) return;
        if (first == 0) bulk_wait_read<0>();
        for (int s = first; s <= last; s++) load_slot(o, t, 0, s);
    }
    __device__ __forceinline__ void prefetch(const Src &s, const GeTile &t) {
        if constexpr (WHEN == GE_AHEAD) load(s.from, t);
    }
    __device__ __forceinline__ void during(const Src &s, const GeTile &t, int kb, int nk) {
        if constexpr (WHEN == GE_SPREAD) load_spread(s.from, t, kb, nk);
    }
    /* at the chunk's first fragment, wait for its slot; read: the fragment's pairs (after wait) */
    __device__ __forceinline__ void wait(const GeTile &t) const {
        if (t.j % 4 == 0) mbar_wait(t.eng.in_bar + slot(t), (loads - 1) & 1);
    }
    __device__ __forceinline__ void read(const GeTile &t, float2 (&v)[2]) const { ge_ld_shared_bf16_rows(addr(t), v); }
    __device__ __forceinline__ void get(const GeTile &t, float2 (&v)[2]) const {
        wait(t);
        read(t, v);
    }
    __device__ __forceinline__ void put(const GeTile &t, float2 (&v)[2]) const { ge_st_shared_bf16_rows(addr(t), v); }
    __device__ __forceinline__ void flush(const Src &s, const GeTile &t) const {
        ge_out_store_box(s.to, t, t.eng.in_slots + slot(t) * GE_UNIT_BYTES);
    }
};

#endif
