/* fused_programs.cuh: the CODA epilogue programs of the trainer's fused path (docs/DESIGN.md, "Fused step"), each
 * the arithmetic of one non-attention operation applied to a GEMM's accumulator tile on chip, composed from the
 * primitives of gemm_epilogue.cuh, its math from cuda_math.cuh. Forward: K_res (residual + RMSNorm statistics),
 * the row-scaled GEMM, QKV + RoPE, gate/up + SwiGLU, the LM head's softmax numerator. Backward: the RMSNorm
 * backward (optionally with the LM head's gradient rows), the SwiGLU backward, the weight gradient with a column
 * scale. (The plain GEMMs are the engine's, gemm_programs.cuh.) */
#ifndef FUSED_PROGRAMS_CUH
#define FUSED_PROGRAMS_CUH

#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/gemm/gemm_program_decl.cuh"

/* ---------------------------------------------------------------- forward */

/* K_res: D = acc + res (stored bf16); O = D * gamma; part[row, slice] = sum over the slice's columns of D^2 (D as
 * stored). The residual tile is prefetched into L2 before the main loop and read into registers all at once at the
 * epilogue (GeTileIn); gamma's slice is fetched before the main loop and read from shared memory (GeColStage).
 * FusedResNormTma (below) is the faster variant where TMA can describe D and the residual. */
struct FusedResNormParams {
    GeOutputs<GeOut<bf16>, GeOut<bf16>> out; /* D, O */
    const bf16 *res;
    const float *gamma;
    float *part;
    long ld;     /* row stride of res */
    long ldpart; /* row stride of part (partials per row) */
    GeOut<bf16> R; /* the residual as a TMA source (FusedResNormTma; unused by FusedResNorm) */
};
template <int BN> /* the tile width it runs with */
struct FusedResNorm : GeProgram<GeOut<bf16>, GeOut<bf16>> {
    using Params = FusedResNormParams;
    GeTileIn<BN> res; /* the whole tile: BN/4 registers, all loads in flight at once */
    GeColStage<BN> gamma;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(res, p.res, p.ld), ge_in(gamma, p.gamma));
    }
    GeRowPartial<GeSum> ss;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { ss.reset(); }
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
template <int BN>
struct FusedResNormTma : GeProgram<GeOut<bf16>> {
    using Params = FusedResNormParams;
    static bool direct(const Params &p) { return !p.out.tail.head.tma; } /* O; D and R are TMA targets */
    GeTileInTma<BN> res; /* the residual, then D written over it */
    GeColStage<BN> gamma;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(res, p.R, p.out.head), ge_in(gamma, p.gamma));
    }
    GeRowPartial<GeSum> ss;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { ss.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
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
    /* O only: the Params are FusedResNorm's (one launch picks either program), whose out list is (D, O); D is
     * stored from the residual's slots (its input's flush, before this) */
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) { ge_out_flush(p.out.tail.head, t, 0); }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) { ss.store(p.part, p.ldpart, t); }
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

/* RoPE's angles as an input: the (cos, sin) tables' rows [T, hd/2] at the positions (row % T) of the thread's two
 * rows; HD: the head dim when it is 32 or 64 (then the thread's values for its hd / 8 pair indices are loaded per
 * row block, all at once, and reused by every head of the tile), 0 for another power of two (loaded per fragment;
 * hd_mask = hd - 1; at 128 the cached values would not fit the ping-pong consumer's registers). cos(t, h, i),
 * sin(t, h, i): row h's at pair index i = (col mod hd) / 2 of the fragment's column col. */
template <int HD>
struct RopeAngles : GeInput {
    struct Src {
        const float *const &cos, *const &sin;
        const int &hd_mask, &T;
    };
    static constexpr int kCached = HD > 0 ? HD / 8 : 1; /* distinct pair indices per thread and row */
    const float *cs[2], *sn[2];                         /* this thread's rows' table rows */
    float c[2][kCached], s[2][kCached];
    __device__ __forceinline__ void begin(const Src &src, const GeTile &t) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const long at = (long)(t.row[h] < t.M ? t.row[h] % src.T : 0) * ((src.hd_mask + 1) / 2);
            cs[h] = src.cos + at;
            sn[h] = src.sin + at;
            if constexpr (HD > 0) {
#pragma unroll
                for (int q = 0; q < kCached; q++) { /* fragment j uses index (col0 + 8 j) mod HD / 2, j mod kCached */
                    const int i = ((t.col0 + 8 * q) & (HD - 1)) >> 1;
                    c[h][q] = __ldg(cs[h] + i);
                    s[h][q] = __ldg(sn[h] + i);
                }
            }
        }
    }
    __device__ __forceinline__ float cos(const GeTile &t, int h, int i) const {
        if constexpr (HD > 0)
            return c[h][t.j % kCached];
        else
            return __ldg(cs[h] + i);
    }
    __device__ __forceinline__ float sin(const GeTile &t, int h, int i) const {
        if constexpr (HD > 0)
            return s[h][t.j % kCached];
        else
            return __ldg(sn[h] + i);
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
        const bool rope = col < p.n_rope;
        const int i = (col & p.hd_mask) >> 1;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            v[h] = ge_scale(v[h], r[h]);
            if (rope) v[h] = rope_rotate(v[h], angle.cos(t, h, i), angle.sin(t, h, i));
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
 * log-sum-exp zref + log(sum E + et), the loss, and the gradient's per-row factors: dZ = r dscale softmax -
 * onehot = s E + a onehot with s = r dscale / S, so E is the gradient up to a row scale, made here, in the
 * epilogue of the logits GEMM. A row whose max z is more than kClamp above its zref (the target 64 nats below the
 * best logit) is found by the finish and computed again with zref = max z. */
template <bool STORE>
struct FusedLmHead : std::conditional_t<STORE, GeProgram<GeOut<bf16>>, GeProgram<>> {
    static constexpr float kClamp = 64.0f; /* e <= e^64: sums of up to 2^24 of them stay finite in fp32 */
    struct Params {
        typename FusedLmHead::Out out; /* E [M, V] (STORE) */
        const float *r, *zref;
        const int32_t *target;
        float *et, *zt;        /* [M] */
        float *ps, *pze, *pmax; /* [M, ldpart] */
        long ldpart;
        const int *gate;        /* not NULL: run only if *gate != 0 (the second pass: some row asked for it) */
    };
    __device__ __forceinline__ static bool skip(const Params &p) { return p.gate && *p.gate == 0; }
    GeRowVals r, zref;
    GeRowInts tgt;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(r, p.r), ge_in(zref, p.zref), ge_in(tgt, p.target, -1));
    }
    GeRowPartial<GeSum> s, ze;
    GeRowPartial<GeMax> zmax;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) {
        s.reset();
        ze.reset();
        zmax.reset();
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 e[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float2 z = ge_scale(v[h], r[h]);
            const float2 ex = make_float2(__expf(fminf(z.x - zref[h], kClamp)), __expf(fminf(z.y - zref[h], kClamp)));
            e[h] = ge_unpack_bf16x2(ge_pack_bf16x2(ex)); /* as stored */
            if (tgt[h] == col || tgt[h] == col + 1) {
                const bool x = tgt[h] == col;
                p.et[t.row[h]] = x ? ex.x : ex.y;
                p.zt[t.row[h]] = x ? z.x : z.y;
                if (x) e[h].x = 0.0f;
                else e[h].y = 0.0f;
            }
            s.add(t, h, col, e[h]);
            ze.add(t, h, col, ge_mul(z, e[h]));
            zmax.add(t, h, col, z);
        }
        if constexpr (STORE) ge_put<0>(p.out, t, col, e);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) {
        s.store(p.ps, p.ldpart, t);
        ze.store(p.pze, p.ldpart, t);
        zmax.store(p.pmax, p.ldpart, t);
    }
};

/* ---------------------------------------------------------------- backward */

/* RMSNorm backward in the epilogue of G = dZ . W (layout A.B, cooperative: column partials). For the norm whose
 * forward was z = r (O . W^T), O = x * gamma, with c[m] = <z, dLoss/dz>:
 *   dx = gamma * G - (r^2 / N) c x;  dres = dx (ACC: dres += dx, in place through shared memory);
 *   dgamma partials: part[tile row, col] = sum over the tile's rows of G x.
 * LMHEAD: dZ is the LM head's E (fused_programs' FusedLmHead), so G = s * acc + a * W[target] (the gradient's row
 * scale, and its target column added back as a row of W). x comes into registers ahead of use (GeTileIn). */
template <int BN, bool ACC, bool LMHEAD>
struct FusedNormBwd : std::conditional_t<ACC, GeProgram<>, GeProgram<GeOut<bf16>>> {
    static constexpr bool kColPartials = true;
    struct Params {
        typename FusedNormBwd::Out out; /* dres (!ACC) */
        GeOut<bf16> R;                  /* dres as the TMA source and target of the in-place update (ACC) */
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
    GeTileIn<BN, 16, 4> x;
    GeTileInTma<BN, 1, GE_SPREAD> dres; /* ACC: dres, then dx added over it */
    GeColStage<BN> gamma;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(x, p.x, p.ldx), ge_in_if<ACC>(dres, p.R, p.R), ge_in(gamma, p.gamma));
    }
    /* The per-row factors, loaded and derived here, before the inputs' begin(): an explicit hook, because as
     * declared row inputs with r^2 c / N computed in frag() the kernels grew (docs/EXPERIMENTS.md) */
    float coef[2], s[2], a[2];
    int trow[2]; /* LMHEAD: the rows' targets (V outside the matrix: masked) */
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float rr = ge_row_vec(p.r, t, h);
            coef[h] = rr * rr * p.inv_n * ge_row_vec(p.c, t, h);
            if constexpr (LMHEAD) {
                s[h] = ge_row_vec(p.s, t, h);
                a[h] = ge_row_vec(p.a, t, h);
                trow[h] = t.row[h] < t.M ? __ldg(p.target + t.row[h]) : p.V;
            }
        }
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const float2 g = gamma.get(t, col);
        float2 G[2], dx[2], gx[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            G[h] = v[h];
            if constexpr (LMHEAD) {
                const float2 w = ge_load_at(p.W, t.N, trow[h], col, p.V, t.N);
                G[h] = make_float2(s[h] * v[h].x + a[h] * w.x, s[h] * v[h].y + a[h] * w.y);
            }
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
    GeTileIn<BN, 8, 4, 2, GE_SPREAD> z;
    __host__ __device__ __forceinline__ auto inputs(const Params &p) {
        return ge_inputs(ge_in(r, p.r), ge_in(z, p.Z, p.ldz));
    }
    GeRowPartial<GeSum> c;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { c.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float act[2][2]; /* [h][column e]: pairs for ge_put below */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 gu[2], d[2];
            z.get2(t, h, gu);
            const float da[2] = {v[h].x, v[h].y};
            float cc[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float g = gu[e].x, u = gu[e].y, sg = sigmoid_approx(g);
                float dg, du;
                swiglu_backward(g, u, sg, da[e], dg, du);
                cc[e] = g * dg + u * du;
                d[e] = make_float2(r[h] * dg, r[h] * du);
                act[h][e] = swiglu(g, sg, u);
            }
            ge_store_wide(p.dZ, p.ldz, t, h, col, d);
            c.add(t, h, col, make_float2(cc[0], cc[1]));
        }
        z.advance(t); /* Z's next loads, before act is staged */
        float2 av[2] = {make_float2(act[0][0], act[0][1]), make_float2(act[1][0], act[1][1])};
        ge_put<0>(p.out, t, col, av);
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
    GeRowPartial<GeSum> sq;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { sq.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 w[2] = {v[0], v[1]};
        if (p.scale) {
            const float2 s = scale.get(t, col);
            w[0] = ge_mul(w[0], s);
            w[1] = ge_mul(w[1], s);
        }
        ge_put<0>(p.out, t, col, w);
        if (!ACC && p.part) {
            sq.add(t, 0, col, ge_mul(w[0], w[0]));
            sq.add(t, 1, col, ge_mul(w[1], w[1]));
        }
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) {
        if (!ACC && p.part) sq.store(p.part, p.ldpart, t);
    }
};

#endif
