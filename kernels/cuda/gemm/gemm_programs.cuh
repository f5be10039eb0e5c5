/* gemm_programs.cuh: the epilogue programs behind gemm.h's launchers, each a short composition of the primitives
 * of gemm_epilogue.cuh: the plain store (overwrite or accumulate), K_res (residual + gamma-scaled second output +
 * per-row partial sums of squares) and the row-scaled GEMM. */
#ifndef GEMM_PROGRAMS_CUH
#define GEMM_PROGRAMS_CUH

#include "kernels/cuda/gemm/gemm_epilogue.cuh"

/* C = acc (ACCUMULATE: C += acc), C bf16 or fp32, through GeOut (TMA store / TMA add-reduce, or direct). */
template <class T, bool ACCUMULATE>
struct GeStore : GeEpilogue {
    static constexpr int kStageUnits = GeOut<T>::kUnits;
    struct Params {
        GeOut<T> C;
    };
    static bool direct(const Params &p) { return !p.C.tma; }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        ge_out_put<ACCUMULATE>(p.C, t, 0, col, v);
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) { ge_out_flush<ACCUMULATE>(p.C, t, 0); }
};

/* K_res: D = acc + res (stored bf16); O = D * gamma; part[row, tn] = sum over the tile's columns of D^2.
 * The residual tile is prefetched into L2 before the main loop and read into registers all at once at the
 * epilogue (GeTileIn); gamma's slice is fetched before the main loop and read from shared memory (GeColStage). */
struct GeResNormParams {
    GeOut<bf16> D, O;
    const bf16 *res;
    const float *gamma;
    float *part;
    long ld;     /* row stride of res */
    long ldpart; /* row stride of part (partials per row) */
    GeOut<bf16> R; /* the residual as a TMA source (GeResNormTma; unused by GeResNorm) */
};
template <int BN = GE_BN> /* the tile width it runs with */
struct GeResNorm : GeEpilogue {
    static constexpr int kStageUnits = 2; /* D at unit 0, O at unit 1 */
    static constexpr int kVecFloats = BN; /* gamma */
    using Params = GeResNormParams;
    static bool direct(const Params &p) { return !p.D.tma || !p.O.tma; }
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
        ge_out_put(p.D, t, 0, col, d);
        float2 o[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ss.add(t, h, col, ge_mul(d[h], d[h]));
            o[h] = ge_mul(d[h], g);
        }
        ge_out_put(p.O, t, 1, col, o);
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) {
        ge_out_flush(p.D, t, 0);
        ge_out_flush(p.O, t, 1);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ss.store(p.part, p.ldpart, t); }
};

/* K_res with the residual brought in by TMA into the consumer's shared input staging during the main loop
 * (GeTileInTma: the consumer's BLOCKS row blocks, 2 on ping-pong, loaded before its main loop, which waits for the
 * other consumer's anyway; 1 cooperative, loaded one slot per k-block; no registers, no ring stages; the ping-pong
 * ring drops to 4 stages), D is written in place over it and stored from there; only O has GeOut
 * staging. Needs D and R describable by TMA (the launchers check). WITH_O = false leaves O (and gamma) out: D and
 * the partials only, for a next GEMM whose weight has gamma folded in (ge_gemm_res_rms); without O's staging the
 * ping-pong ring keeps 5 stages, the cooperative 128 x 256 one 3. */
template <int BN = 128, bool WITH_O = true, int BLOCKS = 2>
struct GeResNormTma : GeEpilogue {
    static constexpr int kStageUnits = WITH_O ? 1 : 0; /* O */
    static constexpr int kInUnits = GeTileInTma<BN, BLOCKS>::kUnits; /* the residual, then D */
    static constexpr int kVecFloats = WITH_O ? BN : 0; /* gamma */
    using Params = GeResNormParams;
    static bool direct(const Params &p) { return WITH_O && !p.O.tma; } /* D and R: TMA targets (launchers check) */
    GeRowPartial<GeSum> ss;
    GeTileInTma<BN, BLOCKS> res;
    GeColStage<BN> gamma;
    __device__ __forceinline__ void prefetch(const Params &p, const GeTile &t) {
        if (BLOCKS > 1) res.load(p.R, t);
        if constexpr (WITH_O) gamma.fetch(p.gamma, t);
    }
    __device__ __forceinline__ void during(const Params &p, const GeTile &t, int kb, int nk) {
        if (BLOCKS == 1) res.load_spread(p.R, t, kb, nk);
    }
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
        ss.reset();
        if constexpr (WITH_O) gamma.publish(t);
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
        if constexpr (WITH_O) {
            const float2 g = gamma.get(t, col);
            float2 o[2] = {ge_mul(d[0], g), ge_mul(d[1], g)};
            ge_out_put(p.O, t, 0, col, o);
        }
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) {
        res.flush_out(p.D, t);
        if constexpr (WITH_O) ge_out_flush(p.O, t, 0);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ss.store(p.part, p.ldpart, t); }
};

/* Z = r[row] * acc, Z bf16 or fp32. */
template <class T>
struct GeRowScale : GeEpilogue {
    static constexpr int kStageUnits = GeOut<T>::kUnits;
    struct Params {
        const float *r;
        GeOut<T> Z;
    };
    static bool direct(const Params &p) { return !p.Z.tma; }
    float r[2];
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
        r[0] = ge_row_vec(p.r, t, 0);
        r[1] = ge_row_vec(p.r, t, 1);
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 z[2] = {ge_scale(v[0], r[0]), ge_scale(v[1], r[1])};
        ge_out_put(p.Z, t, 0, col, z);
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) { ge_out_flush(p.Z, t, 0); }
};

#endif
