/* gemm_epilogue.cuh: the five epilogue primitives of DESIGN §4, applied to the accumulator tile while it is in
 * registers. An epilogue program (a struct, see gemm_engine.cuh's note) calls them from its per-fragment hook:
 *   1. maps:        plain arithmetic on float2 pairs; helpers ge_add/ge_mul/ge_scale, ge_rotate (RoPE), ge_silu_mul;
 *   2. broadcasts:  ge_row_vec (one value per row), ge_col_vec (a pair of per-column values);
 *   3. tiles:       ge_load / ge_store of an extra [rows, cols] matrix at the fragment's position (bf16 or fp32);
 *   4. reductions:  GeRowPartial<Op> (per row, over the tile's columns) and ge_col_partial_add/_store (per column,
 *                   over the tile's rows), written as one partial per (row, N-tile) or (M-tile, column);
 *   5. accumulate:  ge_accum (out += value, fp32 or bf16 out).
 * Every primitive masks rows >= M and columns >= N itself: a fragment of an edge tile may be partly outside. */
#ifndef GEMM_EPILOGUE_CUH
#define GEMM_EPILOGUE_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/gemm/gemm_ptx.cuh"

typedef __nv_bfloat16 bf16;

/* What one consumer thread knows about the output tile it holds. Its accumulator fragment (h, j) holds
 * rows row[h] and columns (col0 + 8j, col0 + 8j + 1). */
struct GeTile {
    int M, N;     /* output bounds */
    int m0, n0;   /* tile origin */
    int tm, tn;   /* tile index along M and N */
    int row[2];   /* this thread's rows: m0 + 64*consumer + 16*warp + lane/4, and that + 8 */
    int col0;     /* this thread's first column: n0 + 2*(lane%4) */
    int lane;     /* lane in the warp */
    int cwarp;    /* consumer warp, 0..7 */
    int ctid;     /* consumer thread, 0..255 */
    float *smem;  /* epilogue scratch in shared memory (column partials), or null */
};

/* Valid columns of the pair starting at `col` in a matrix of `ncols` columns: 0, 1 or 2. */
__device__ __forceinline__ int ge_pair_valid(int col, int ncols) {
    const int v = ncols - col;
    return v < 0 ? 0 : (v > 2 ? 2 : v);
}

/* ---------------------------------------------------------------- 1. maps */

__device__ __forceinline__ float2 ge_add(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 ge_mul(float2 a, float2 b) { return make_float2(a.x * b.x, a.y * b.y); }
__device__ __forceinline__ float2 ge_scale(float2 a, float s) { return make_float2(a.x * s, a.y * s); }
/* RoPE on an adjacent pair (a, b): (a cos - b sin, b cos + a sin). */
__device__ __forceinline__ float2 ge_rotate(float2 v, float c, float s) {
    return make_float2(v.x * c - v.y * s, v.y * c + v.x * s);
}
/* SwiGLU on an adjacent (gate, up) pair: silu(g) * u. */
__device__ __forceinline__ float ge_silu_mul(float2 gu) { return gu.x / (1.0f + __expf(-gu.x)) * gu.y; }

/* ---------------------------------------------------------------- 2. broadcasts */

/* v[row] for the fragment's row h (0 outside the matrix). */
__device__ __forceinline__ float ge_row_vec(const float *v, const GeTile &t, int h) {
    return t.row[h] < t.M ? __ldg(v + t.row[h]) : 0.0f;
}

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

/* ---------------------------------------------------------------- 4. partial reductions */

struct GeSum {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
};
struct GeMax {
    static __device__ __forceinline__ float identity() { return -INFINITY; }
    static __device__ __forceinline__ float combine(float a, float b) { return fmaxf(a, b); }
};

/* Per-row partial over the tile's columns: add() the fragments' values (columns >= N are skipped), then store()
 * writes part[row * ld + tn] for each valid row (the 4 threads of a row combine by shuffles; one writes). */
template <class Op>
struct GeRowPartial {
    float v[2];
    __device__ __forceinline__ void reset() { v[0] = v[1] = Op::identity(); }
    __device__ __forceinline__ void add(const GeTile &t, int h, int col, float2 x) {
        const int nv = ge_pair_valid(col, t.N);
        if (nv > 0) v[h] = Op::combine(v[h], x.x);
        if (nv > 1) v[h] = Op::combine(v[h], x.y);
    }
    __device__ __forceinline__ void store(float *part, long ld, const GeTile &t) const {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float x = v[h];
            x = Op::combine(x, __shfl_xor_sync(0xffffffffu, x, 1));
            x = Op::combine(x, __shfl_xor_sync(0xffffffffu, x, 2));
            if ((t.lane & 3) == 0 && t.row[h] < t.M) part[(long)t.row[h] * ld + t.tn] = x;
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
    if (t.lane < 4) *reinterpret_cast<float2 *>(t.smem + t.cwarp * bn + (col - t.n0)) = s;
}
__device__ __forceinline__ void ge_col_partial_store(float *part, long ld, const GeTile &t, int bn) {
    named_bar_sync(1, 256);
    for (int c = t.ctid; c < bn; c += 256) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++) s += t.smem[w * bn + c];
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

/* The base of every epilogue program: no per-tile work, no scratch. A program overrides what it needs. */
struct GeEpilogue {
    static constexpr bool kColPartials = false;
    template <class P>
    __device__ __forceinline__ void begin(const P &, const GeTile &) {}
    template <class P>
    __device__ __forceinline__ void end(const P &, const GeTile &) {}
};

#endif
