/* fused_programs.cuh: the CODA epilogue programs of the trainer's fused path (docs/DESIGN.md, "Fused step"), each
 * the arithmetic of one non-attention operation applied to a GEMM's accumulator tile on chip, composed from the
 * primitives of gemm_epilogue.cuh, its math from cuda_math.cuh. Forward: K_res (residual + RMSNorm statistics:
 * FusedResNorm, FusedResNormTma), the row-scaled GEMM (FusedRowScale), QKV + RoPE (FusedRope, its angles an input
 * of their own, RopeAngles), gate/up + SwiGLU (FusedSwiGLU), the LM head's softmax numerator (FusedLmHead).
 * Backward: the RMSNorm backward, optionally with the LM head's gradient rows (FusedNormBwd), the SwiGLU backward
 * (FusedSwiGLUBwd), the weight gradient with a column scale (FusedDw). (The plain GEMMs are the engine's,
 * gemm_programs.cuh.) In the Params, r is RMSNorm's row scale, ld<x> the row stride of matrix x, and part the
 * partial sums that a finish kernel adds up: per row and 128-column slice (row stride ldpart), or FusedNormBwd's
 * per column and 128-row tile. */
#ifndef FUSED_PROGRAMS_CUH
#define FUSED_PROGRAMS_CUH

#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/gemm/gemm_program_decl.cuh"

/* ---------------------------------------------------------------- forward */

/* K_res: D = acc + res (stored bf16); O = D * gamma; part[row, slice] = sum over the slice's columns of D^2 (D as
 * stored). The residual tile is prefetched into L2 before the main loop and read into registers all at once at the
 * epilogue (GeTileIn); gamma's slice is fetched before the main loop and read from shared memory (GeColStage). The
 * launcher runs it on cooperative tiles, and on ping-pong where TMA cannot describe D or the residual; elsewhere
 * on ping-pong it runs FusedResNormTma (below), with the same Params. */
struct FusedResNormParams {
    GeOutputs<GeOut<bf16>, GeOut<bf16>> out; /* D, O */
    const bf16 *res;
    const float *gamma;
    float *part;
    long ldres;          /* row stride of res */
    long ldpart;         /* row stride of part (partials per row) */
    GeOut<bf16> res_tma; /* the residual as a TMA source (FusedResNormTma; unused by FusedResNorm) */
};
template <int BN> /* the tile width it runs with */
struct FusedResNorm : GeProgram<GeOut<bf16>, GeOut<bf16>> {
    using Params = FusedResNormParams;
    GeTileIn<BN> res; /* the whole tile: BN/4 registers, all loads in flight at once */
    GeColStage<BN> gamma;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(res, p.res, p.ldres), ge_in(gamma, p.gamma));
    }
    GeRowPartial<GeSum> sumsq;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { sumsq.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const float2 g = gamma.get(t, col);
        float2 d[2] = {ge_add(v[0], res.get(t, 0)), ge_add(v[1], res.get(t, 1))};
        ge_put<0>(p.out, t, col, d);
        float2 o[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            sumsq.add(t, h, col, ge_mul(d[h], d[h]));
            o[h] = ge_mul(d[h], g);
        }
        ge_put<1>(p.out, t, col, o);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { sumsq.store(p.part, p.ldpart, t); }
};

/* K_res with the residual brought by TMA into the consumer's shared input staging before its main loop
 * (GeTileInTma: both row blocks of a ping-pong tile, in no registers; its staging leaves room for 4 ring stages),
 * D written in place over it and stored from there, so that only O has GeOut staging. Needs D and the residual
 * describable by TMA (the launcher checks). Its Params are FusedResNorm's, whose out list is (D, O): it declares O
 * alone as its staged output, puts and flushes it by hand at unit 0, and D goes out with the residual input's
 * flush. */
template <int BN>
struct FusedResNormTma : GeProgram<GeOut<bf16>> {
    using Params = FusedResNormParams;
    /* O in the Params' out list (D, O) */
    __host__ __device__ __forceinline__ static const GeOut<bf16> &o_out(const Params &p) { return p.out.tail.head; }
    static bool direct(const Params &p) { return !o_out(p).tma; } /* D and the residual: TMA, checked by the launcher */
    GeTileInTma<BN> res; /* the residual, then D written over it */
    GeColStage<BN> gamma;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(res, p.res_tma, p.out.head), ge_in(gamma, p.gamma));
    }
    GeRowPartial<GeSum> sumsq;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { sumsq.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 d[2];
        res.get(t, d);
#pragma unroll
        for (int h = 0; h < 2; h++) d[h] = ge_add(v[h], d[h]);
        res.put(t, d);
#pragma unroll
        for (int h = 0; h < 2; h++) sumsq.add(t, h, col, ge_mul(d[h], d[h]));
        const float2 g = gamma.get(t, col);
        float2 o[2] = {ge_mul(d[0], g), ge_mul(d[1], g)};
        ge_out_put(o_out(p), t, 0, col, o);
    }
    /* O's chunk (D's was stored from the residual's slots by the input's flush, which runs before this) */
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) { ge_out_flush(o_out(p), t, 0); }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { sumsq.store(p.part, p.ldpart, t); }
};

/* Z = r[row] * acc, Z bf16 or fp32. */
template <class T>
struct FusedRowScale : GeProgram<GeOut<T>> {
    struct Params {
        typename FusedRowScale::Out out; /* Z */
        const float *r;
    };
    GeRowVals r;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) { return ge_inputs(ge_in(r, p.r)); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 z[2] = {ge_scale(v[0], r[0]), ge_scale(v[1], r[1])};
        ge_put<0>(p.out, t, col, z);
    }
};

/* Input: RoPE's angles at the thread's two rows, from the (cos, sin) tables [T, hd/2] at position row % T.
 * cos(t, h, pair) and sin(t, h, pair) are row h's at pair index pair = (col mod hd) / 2 of the fragment's column
 * col. HD is the head dim when it is 32 or 64: a thread's fragments then meet only HD / 8 pair indices, whose
 * values begin() loads per row block, all at once, for every head of the tile to reuse (pair is not read). HD = 0
 * for another power of two (hd_mask = hd - 1): the values are loaded per fragment (at 128, cached values would not
 * fit in the ping-pong consumer's registers). */
template <int HD>
struct RopeAngles : GeInput {
    struct Src {
        const float *const &cos, *const &sin;
        const int &hd_mask, &T;
    };
    static constexpr int kCached = HD > 0 ? HD / 8 : 1;   /* distinct pair indices per thread and row */
    const float *row_cos[2], *row_sin[2];                 /* the tables' rows at this thread's rows */
    float cos_cached[2][kCached], sin_cached[2][kCached]; /* HD > 0: [h][j mod kCached] for fragment j */
    __device__ __forceinline__ void begin(const Src &src, const GeTile &t) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const long row_offset = (long)(t.row[h] < t.M ? t.row[h] % src.T : 0) * ((src.hd_mask + 1) / 2);
            row_cos[h] = src.cos + row_offset;
            row_sin[h] = src.sin + row_offset;
            if constexpr (HD > 0) {
#pragma unroll
                for (int q = 0; q < kCached; q++) { /* the pair index of fragments j = q mod kCached */
                    const int pair = ((t.col0 + 8 * q) & (HD - 1)) >> 1;
                    cos_cached[h][q] = __ldg(row_cos[h] + pair);
                    sin_cached[h][q] = __ldg(row_sin[h] + pair);
                }
            }
        }
    }
    __device__ __forceinline__ float cos(const GeTile &t, int h, int pair) const {
        if constexpr (HD > 0)
            return cos_cached[h][t.j % kCached];
        else
            return __ldg(row_cos[h] + pair);
    }
    __device__ __forceinline__ float sin(const GeTile &t, int h, int pair) const {
        if constexpr (HD > 0)
            return sin_cached[h][t.j % kCached];
        else
            return __ldg(row_sin[h] + pair);
    }
};

/* QKV projection: Z = rope(r * acc). RoPE rotates the interleaved pair (col, col + 1) of columns [0, n_rope) by
 * the angle of position row % T and pair (col mod hd) / 2 (RopeAngles<HD>). */
template <int HD>
struct FusedRope : GeProgram<GeOut<bf16>> {
    struct Params {
        Out out; /* Z [M, N] */
        const float *r, *cos, *sin; /* r [M]; cos/sin [T, hd/2] */
        int n_rope, hd_mask, T;
    };
    GeRowVals r;
    RopeAngles<HD> angle;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(r, p.r), ge_in(angle, p.cos, p.sin, p.hd_mask, p.T));
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const bool rotate = col < p.n_rope;
        const int pair = (col & p.hd_mask) >> 1;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            v[h] = ge_scale(v[h], r[h]);
            if (rotate) v[h] = rope_rotate(v[h], angle.cos(t, h, pair), angle.sin(t, h, pair));
        }
        ge_put<0>(p.out, t, col, v);
    }
};

/* Gate/up projection: Z = r * acc (the pre-activations, which the backward needs) and act = silu(G) * U for each
 * interleaved (G, U) column pair, from Z as stored (so that the backward's recomputation gives the same bits). */
struct FusedSwiGLU : GeProgram<GeOut<bf16>, GeOut<bf16, 16>> {
    struct Params {
        Out out; /* Z [M, 2F], act [M, F] */
        const float *r;
    };
    GeRowVals r;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) { return ge_inputs(ge_in(r, p.r)); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 z[2] = {ge_scale(v[0], r[0]), ge_scale(v[1], r[1])};
        ge_put<0>(p.out, t, col, z); /* z becomes Z as stored */
        float a[2] = {swiglu_approx(z[0]), swiglu_approx(z[1])};
        ge_put<1>(p.out, t, col, a);
    }
};

/* LM head, the softmax numerator: z = r * acc (the logits), e = exp(min(z - zref[row], kClamp)) with zref a per-row
 * reference (the target's logit, from a cheap pass before), E = e rounded to bf16 and stored (STORE), except at the
 * target column, where E is 0 and e and z go to et[row], zt[row] in fp32. Per row and 128-column slice, partials
 * of the sum of E as stored, of z E and of max z. The LM head's finish (fused_lm_head.cu) turns them into the
 * log-sum-exp zref + log S with S = sum E + et, the loss, and the gradient's per-row factors: dZ = r dscale
 * (softmax - onehot) = s E + a onehot with s = r dscale / S, so E is the gradient up to a row scale, made here, in
 * the epilogue of the logits GEMM. A row whose max z is more than kClamp above its zref (the target 64 nats below
 * the best logit) is found by the finish and computed again with zref = max z. */
template <bool STORE>
struct FusedLmHead : std::conditional_t<STORE, GeProgram<GeOut<bf16>>, GeProgram<>> {
    static constexpr float kClamp = 64.0f; /* e <= e^64: sums of up to 2^24 of them stay finite in fp32 */
    struct Params {
        typename FusedLmHead::Out out; /* E [M, V] (STORE) */
        const float *r, *zref;
        const int32_t *target;
        float *et, *zt;                      /* [M]: e and z at the target column */
        float *part_e, *part_ze, *part_zmax; /* [M, ldpart]: partials of sum E, sum z E, max z */
        long ldpart;
        const int *redo; /* not NULL: run only if *redo != 0 (the second pass: some row asked for it) */
    };
    __device__ __forceinline__ static bool skip(const Params &p) { return p.redo && *p.redo == 0; }
    GeRowVals r, zref;
    GeRowInts target;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(r, p.r), ge_in(zref, p.zref), ge_in(target, p.target, -1));
    }
    GeRowPartial<GeSum> sum_e, sum_ze;
    GeRowPartial<GeMax> max_z;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) {
        sum_e.reset();
        sum_ze.reset();
        max_z.reset();
    }
    /* Where row h's target column is in the pair at col: its e and z go to et, zt, and its E becomes 0. */
    __device__ __forceinline__ void set_aside_target(const Params &p, const GeTile &t, int h, int col, float2 z,
                                                     float2 e, float2 &E) const {
        if (target[h] == col || target[h] == col + 1) {
            const bool first = target[h] == col;
            p.et[t.row[h]] = first ? e.x : e.y;
            p.zt[t.row[h]] = first ? z.x : z.y;
            if (first) E.x = 0.0f;
            else E.y = 0.0f;
        }
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 E[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float2 z = ge_scale(v[h], r[h]);
            const float2 e = make_float2(__expf(fminf(z.x - zref[h], kClamp)), __expf(fminf(z.y - zref[h], kClamp)));
            E[h] = ge_unpack_bf16x2(ge_pack_bf16x2(e)); /* e as stored */
            set_aside_target(p, t, h, col, z, e, E[h]);
            sum_e.add(t, h, col, E[h]);
            sum_ze.add(t, h, col, ge_mul(z, E[h]));
            max_z.add(t, h, col, z);
        }
        if constexpr (STORE) ge_put<0>(p.out, t, col, E);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) {
        sum_e.store(p.part_e, p.ldpart, t);
        sum_ze.store(p.part_ze, p.ldpart, t);
        max_z.store(p.part_zmax, p.ldpart, t);
    }
};

/* ---------------------------------------------------------------- backward */

/* RMSNorm backward in the epilogue of G = dZ . W (layout A.B, cooperative: column partials). For the norm whose
 * forward was z = r (O . W^T), O = x * gamma, with c[m] = <z, dLoss/dz>:
 *   dx = gamma * G - (r^2 / N) c x;  dres = dx (ACC: dres += dx, in place through shared memory);
 *   dgamma partials: part[tile row, col] = sum over the tile's rows of G x.
 * LMHEAD: dZ is the LM head's E (FusedLmHead, above), so G = s * acc + a * W[target] (the gradient's row scale,
 * and its target column added back as a row of W). x comes into registers ahead of use (GeTileIn). */
template <int BN, bool ACC, bool LMHEAD>
struct FusedNormBwd : std::conditional_t<ACC, GeProgram<>, GeProgram<GeOut<bf16>>> {
    static constexpr bool kColPartials = true;
    struct Params {
        typename FusedNormBwd::Out out; /* dres (!ACC) */
        GeOut<bf16> dres_tma;           /* dres as the TMA source and target of the in-place update (ACC) */
        const bf16 *x;
        long ldx;
        const float *gamma, *r, *c;
        float *part; /* [ceil(M / 128), N] */
        float inv_n; /* 1 / N */
        const float *s, *a; /* LMHEAD: per-row factors */
        const int32_t *target;
        const bf16 *W; /* LMHEAD: [V, N] */
        int V;
    };
    GeTileIn<BN, 16, 4> x;              /* a ring of 16 fragments, refilled 4 at a time */
    GeTileInTma<BN, 1, GE_SPREAD> dres; /* ACC: dres, then dx added over it (its loads spread over the main loop) */
    GeColStage<BN> gamma;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(x, p.x, p.ldx), ge_in_if<ACC>(dres, p.dres_tma, p.dres_tma), ge_in(gamma, p.gamma));
    }
    /* The per-row factors, loaded and derived by the program's own begin(), which runs before the inputs' begin():
     * coef = r^2 c / N and, with LMHEAD, s, a and the target. (Declared as row inputs, with coef formed in frag(),
     * they make larger kernels: docs/EXPERIMENTS.md, "What was measured and not kept".) */
    float coef[2], s[2], a[2];
    int target_row[2]; /* LMHEAD: the rows' targets, rows of W (V for a row outside the matrix: its loads masked) */
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float rr = ge_row_vec(p.r, t, h);
            coef[h] = rr * rr * p.inv_n * ge_row_vec(p.c, t, h);
            if constexpr (LMHEAD) {
                s[h] = ge_row_vec(p.s, t, h);
                a[h] = ge_row_vec(p.a, t, h);
                target_row[h] = t.row[h] < t.M ? __ldg(p.target + t.row[h]) : p.V;
            }
        }
    }
    /* G at row h's pair: the accumulator, or with LMHEAD s acc + a W[target] */
    __device__ __forceinline__ float2 grad(const Params &p, const GeTile &t, int h, int col, float2 acc) const {
        if constexpr (LMHEAD) {
            const float2 w = ge_load_at(p.W, t.N, target_row[h], col, p.V, t.N);
            return make_float2(s[h] * acc.x + a[h] * w.x, s[h] * acc.y + a[h] * w.y);
        } else {
            return acc;
        }
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const float2 g = gamma.get(t, col);
        float2 G[2], dx[2], gx[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            G[h] = grad(p, t, h, col, v[h]);
            const float2 xv = x.get(t, h);
            dx[h] = make_float2(rms_backward(g.x, G[h].x, coef[h], xv.x), rms_backward(g.y, G[h].y, coef[h], xv.y));
            gx[h] = ge_mul(G[h], xv);
        }
        x.advance(t); /* x's next loads, before the stores of dx and the column partials */
        if constexpr (ACC) {
            float2 old[2];
            dres.get(t, old);
            float2 sum[2] = {ge_add(old[0], dx[0]), ge_add(old[1], dx[1])};
            dres.put(t, sum);
        } else {
            ge_put<0>(p.out, t, col, dx);
        }
        ge_col_partial_add(t, col, gx[0], gx[1], BN);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ge_col_partial_store(p.part, t.N, t, BN); }
};

/* SwiGLU backward in the epilogue of dact = dY . W_down (layout A.B, cooperative). Z [M, 2F] comes into registers
 * ahead of use, two columns (G, U) per accumulator column (GeTileIn, W = 2), after L2 prefetches spread over the
 * main loop's last k-blocks; then
 *   dG = dact U silu'(G), dU = dact silu(G);  dZ = r (dG, dU), stored from registers;  c partials: sum of
 *   G dG + U dU per row and slice;  act = silu(G) U again (swiglu on Z as stored: the forward's bits), for
 *   the weight gradient of W_down, staged. */
template <int BN>
struct FusedSwiGLUBwd : GeProgram<GeOut<bf16>> {
    struct Params {
        Out out;        /* act [M, F] */
        const bf16 *Z;  /* [M, 2F] */
        bf16 *dZ;       /* [M, 2F] */
        long ldz;       /* their row stride */
        const float *r;
        float *part; /* [M, ldpart] */
        long ldpart;
    };
    GeRowVals r;
    GeTileIn<BN, 8, 4, 2, GE_SPREAD> z; /* (G, U): a ring of 8 fragments, refilled 4 at a time */
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(r, p.r), ge_in(z, p.Z, p.ldz));
    }
    GeRowPartial<GeSum> c;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { c.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float act[2][2]; /* [h][e]: row h, output column col + e */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 gu[2], dgu[2]; /* [e]: (G, U) and r (dG, dU) of output column col + e */
            z.get2(t, h, gu);
            const float dact[2] = {v[h].x, v[h].y};
            float c_term[2]; /* [e]: G dG + U dU */
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float g = gu[e].x, u = gu[e].y, sg = sigmoid_approx(g);
                float dg, du;
                swiglu_backward(g, u, sg, dact[e], dg, du);
                c_term[e] = g * dg + u * du;
                dgu[e] = make_float2(r[h] * dg, r[h] * du);
                act[h][e] = swiglu(g, sg, u);
            }
            ge_store_wide(p.dZ, p.ldz, t, h, col, dgu);
            c.add(t, h, col, make_float2(c_term[0], c_term[1]));
        }
        z.advance(t); /* Z's next loads, before act is staged */
        float2 act_rows[2] = {make_float2(act[0][0], act[0][1]), make_float2(act[1][0], act[1][1])};
        ge_put<0>(p.out, t, col, act_rows);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { c.store(p.part, p.ldpart, t); }
};

/* Weight gradient: dW = acc * scale[col] (ACC: dW += that, the add in L2 by TMA); scale NULL: 1. With the forward's
 * input x and scale = gamma, this is the gradient of a weight whose input was O = x * gamma. When it overwrites and
 * part is set, also part[row, slice] = the sum over the 128-column slice of dW^2 as stored (the tensor's share of
 * global-norm clipping, summed by the caller). */
template <int BN, bool ACC>
struct FusedDw : GeProgram<GeOut<float, 32, ACC>> {
    struct Params {
        typename FusedDw::Out out; /* dW */
        const float *scale;
        float *part; /* [N, ldpart] or NULL (!ACC only) */
        long ldpart;
    };
    GeColStage<BN, true> scale; /* may be null */
    __host__ __device__ __forceinline__ auto inputs(const Params &p) { return ge_inputs(ge_in(scale, p.scale)); }
    GeRowPartial<GeSum> sumsq;
    /* whether it sums dW^2: it overwrites dW and part is set */
    __device__ __forceinline__ static bool sums_squares(const Params &p) { return !ACC && p.part; }
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { sumsq.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 dw[2] = {v[0], v[1]};
        if (p.scale) {
            const float2 s = scale.get(t, col);
            dw[0] = ge_mul(dw[0], s);
            dw[1] = ge_mul(dw[1], s);
        }
        ge_put<0>(p.out, t, col, dw);
        if (sums_squares(p)) {
            sumsq.add(t, 0, col, ge_mul(dw[0], dw[0]));
            sumsq.add(t, 1, col, ge_mul(dw[1], dw[1]));
        }
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) {
        if (sums_squares(p)) sumsq.store(p.part, p.ldpart, t);
    }
};

#endif
