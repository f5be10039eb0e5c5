/* gemm_programs.cuh: the epilogue programs behind gemm.h's launchers, each a short composition of the primitives
 * of gemm_epilogue.cuh: the plain store (overwrite or accumulate), K_res (residual + gamma-scaled second output +
 * per-row partial sums of squares) and the row-scaled GEMM. */
#ifndef GEMM_PROGRAMS_CUH
#define GEMM_PROGRAMS_CUH

#include "kernels/cuda/gemm/gemm_epilogue.cuh"

/* C = acc (ACCUMULATE: C += acc), C bf16 or fp32. */
template <class T, bool ACCUMULATE>
struct GeStore : GeEpilogue {
    struct Params {
        T *C;
        long ldc;
    };
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (ACCUMULATE)
                ge_accum(p.C, p.ldc, t, h, col, v[h]);
            else
                ge_store(p.C, p.ldc, t, h, col, v[h]);
        }
    }
};

/* K_res: D = acc + res (stored bf16); O = D * gamma; part[row, tn] = sum over the tile's columns of D^2. */
struct GeResNorm : GeEpilogue {
    struct Params {
        const bf16 *res;
        const float *gamma;
        bf16 *D, *O;
        float *part;
        long ld;      /* row stride of res, D, O */
        long ldpart;  /* row stride of part (partials per row) */
    };
    GeRowPartial<GeSum> ss;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { ss.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const float2 g = ge_col_vec(p.gamma, t, col);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float2 d = ge_store(p.D, p.ld, t, h, col, ge_add(v[h], ge_load(p.res, p.ld, t, h, col)));
            ss.add(t, h, col, ge_mul(d, d));
            ge_store(p.O, p.ld, t, h, col, ge_mul(d, g));
        }
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ss.store(p.part, p.ldpart, t); }
};

/* Z = r[row] * acc, Z bf16 or fp32. */
template <class T>
struct GeRowScale : GeEpilogue {
    struct Params {
        const float *r;
        T *Z;
        long ldz;
    };
    float r[2];
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
        r[0] = ge_row_vec(p.r, t, 0);
        r[1] = ge_row_vec(p.r, t, 1);
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
#pragma unroll
        for (int h = 0; h < 2; h++) ge_store(p.Z, p.ldz, t, h, col, ge_scale(v[h], r[h]));
    }
};

#endif
