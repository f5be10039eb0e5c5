/* gemm_programs.cuh: the epilogue programs behind gemm.h's launchers, each a short composition of the primitives
 * of gemm_epilogue.cuh: the plain store (overwrite or accumulate), K_res (residual + gamma-scaled second output +
 * per-row partial sums of squares) and the row-scaled GEMM. */
#ifndef GEMM_PROGRAMS_CUH
#define GEMM_PROGRAMS_CUH

#include "kernels/cuda/gemm/gemm_epilogue.cuh"

/* C = acc (ACCUMULATE: C += acc), C bf16 or fp32, through GeOut (TMA store / TMA add-reduce, or direct). */
template <class T, bool ACCUMULATE>
struct GeStore : GeProgram<GeOut<T, 32, ACCUMULATE>> {
    struct Params {
        typename GeStore::Out out; /* C */
    };
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        ge_put<0>(p.out, t, col, v);
    }
};

/* K_res: D = acc + res (stored bf16); O = D * gamma; part[row, slice] = sum over the slice's columns of D^2 (D as
 * stored). The residual tile is prefetched into L2 before the main loop and read into registers all at once at the
 * epilogue (GeTileIn); gamma's slice is fetched before the main loop and read from shared memory (GeColStage).
 * GeResNormTma (below) is the faster variant where TMA can describe D and the residual. */
struct GeResNormParams {
    GeOutputs<GeOut<bf16>, GeOut<bf16>> out; /* D, O */
    const bf16 *res;
    const float *gamma;
    float *part;
    long ld;     /* row stride of res */
    long ldpart; /* row stride of part (partials per row) */
    GeOut<bf16> R; /* the residual as a TMA source (GeResNormTma; unused by GeResNorm) */
};
template <int BN = GE_BN> /* the tile width it runs with */
struct GeResNorm : GeProgram<GeOut<bf16>, GeOut<bf16>> {
    static constexpr int kVecFloats = BN; /* gamma */
    using Params = GeResNormParams;
    GeRowPartial<GeSum> ss;
    GeTileIn<BN> res; /* the whole tile: BN/4 registers, all loads in flight at once */
    GeColStage<BN> gamma;
    __device__ __forceinline__ void prefetch(const Params &p, const GeTile &t) {
        ge_prefetch_tile(p.res, p.ld, t, BN);
        gamma.fetch(p.gamma, t);
    }
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
        ss.reset();
        res.start(p.res, p.ld, t);
        gamma.publish(t);
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const float2 g = gamma.get(t, col);
        float2 d[2] = {ge_add(v[0], res.get(t, 0)), ge_add(v[1], res.get(t, 1))};
        ge_put<0>(p.out, t, col, d);
        float2 o[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ss.add(t, h, col, ge_mul(d[h], d[h]));
            o[h] = ge_mul(d[h], g);
        }
        ge_put<1>(p.out, t, col, o);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ss.store(p.part, p.ldpart, t); }
};

/* K_res with the residual brought in by TMA into the consumer's shared input staging before its main loop
 * (GeTileInTma: both row blocks of a ping-pong tile; no registers, no ring stages; the ring drops to 4 stages),
 * D written in place over it and stored from there; only O has GeOut staging. Needs D and R describable by TMA
 * (the launcher checks). */
template <int BN = 128>
struct GeResNormTma : GeProgram<GeOut<bf16>> {
    static constexpr int kInUnits = GeTileInTma<BN>::kUnits; /* the residual, then D */
    static constexpr int kVecFloats = BN;                    /* gamma */
    using Params = GeResNormParams;
    static bool direct(const Params &p) { return !p.out.tail.head.tma; } /* O; D and R are TMA targets */
    GeRowPartial<GeSum> ss;
    GeTileInTma<BN> res;
    GeColStage<BN> gamma;
    __device__ __forceinline__ void prefetch(const Params &p, const GeTile &t) {
        res.load(p.R, t);
        gamma.fetch(p.gamma, t);
    }
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
        ss.reset();
        gamma.publish(t);
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        res.wait(t);
        float2 d[2];
        res.get(t, d);
#pragma unroll
        for (int h = 0; h < 2; h++) d[h] = ge_add(v[h], d[h]);
        res.put(t, d);
#pragma unroll
        for (int h = 0; h < 2; h++) ss.add(t, h, col, ge_mul(d[h], d[h]));
        const float2 g = gamma.get(t, col);
        float2 o[2] = {ge_mul(d[0], g), ge_mul(d[1], g)};
        ge_out_put(p.out.tail.head, t, 0, col, o);
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) {
        res.flush_out(p.out.head, t);
        ge_out_flush(p.out.tail.head, t, 0);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ss.store(p.part, p.ldpart, t); }
};

/* Z = r[row] * acc, Z bf16 or fp32. */
template <class T>
struct GeRowScale : GeProgram<GeOut<T>> {
    struct Params {
        typename GeRowScale::Out out; /* Z */
        const float *r;
    };
    GeRowVals r;
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) { r.load(p.r, t); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 z[2] = {ge_scale(v[0], r[0]), ge_scale(v[1], r[1])};
        ge_put<0>(p.out, t, col, z);
    }
};

#endif
