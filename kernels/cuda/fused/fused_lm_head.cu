/* fused_lm_head.cu: the LM head and cross-entropy of the fused table, the logits never in memory beyond one chunk
 * of rows (docs/DESIGN.md, "The LM head").
 *
 * Per chunk of rows:
 * 1. zref[m] = r[m] <O[m], W[target[m]]>, the target's logit, by one warp per row (lm_zref_kernel);
 * 2. the logits GEMM with FusedLmHead's epilogue: E = exp(z - zref) in bf16 (stored when training), the target's
 *    e and z apart in fp32, per-row partials of sum E, sum z E and max z;
 * 3. lm_finish_kernel: S = sum E + e_t, lse = zref + log S, loss = lse - z_t; training: the gradient's row factors
 *    s = r dscale / S (dZ = s E off the target) and a = r g_t (g_t = dscale (e_t / S - 1), at the target), the
 *    norm's c = <z, g> = dscale sum(z E) / S + z_t g_t, and O' = s O for the weight gradient. A row whose max
 *    logit is more than FusedLmHead's clamp above zref (a target 64 nats below the best logit: E might have been
 *    clamped) is counted; if any is, the chunk runs steps 2-3 again with zref = the row's max logit (that second
 *    pass is always queued and returns at once when no row asked for it: the device decides, the host never waits).
 * 4. training: dres = the final norm's backward in the epilogue of E . W (FusedNormBwd with the row factors and the
 *    target rows of W) and dW += E^T . O' (fp32, added in L2); after the last chunk, dW[target[m]] += a[m] O[m] for
 *    all rows (deterministic scatter from the targets' token groups).
 * Evaluation runs steps 1-3 on all rows at once, without storing E: the same arithmetic per row, so the same loss
 * bits as training. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/cuda/fused/fused_programs.cuh"
#include "kernels/cuda/gemm/gemm_engine.cuh"

#define LM_WARPS 8                        /* rows per block of the row kernels */
#define LM_CHUNK_BYTES ((size_t)1 << 30) /* the E chunk of training: 4096 rows of Llama 3's vocabulary */

/* zref[m] = r[m] * <O[m], W[target[m]]> (fp32; K a multiple of 8, rows 16-byte aligned). */
__global__ void __launch_bounds__(32 * LM_WARPS) lm_zref_kernel(const bf16 *O, const bf16 *W, const float *r,
                                                                const int32_t *target, float *zref, int M, int K) {
    const int m = blockIdx.x * LM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (m >= M) return;
    const bf16 *o = O + (long)m * K, *w = W + (long)target[m] * K;
    float acc = 0.0f;
    for (int k = lane * 8; k < K; k += 256) {
        float a[8], b[8];
        load8(o + k, 8, true, a);
        load8(w + k, 8, true, b);
#pragma unroll
        for (int i = 0; i < 8; i++) acc = fmaf(a[i], b[i], acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) zref[m] = r[m] * acc;
}

/* The per-row work of the LM head after its GEMM (step 3 of the file's note), one warp per row. final_pass: the
 * rows are accepted whatever their max logit (non-finite logits then give a non-finite loss). */
struct LmFinishArgs {
    const float *part_e, *part_ze, *part_zmax; /* [M, nparts]: FusedLmHead's partials of sum E, sum z E, max z */
    int nparts;
    const float *et, *zt, *r;
    float *zref; /* the reference logits (the targets'); a row that asks for the second pass sets its own to its max */
    float *loss;
    int *redo;      /* how many rows ask for the second pass */
    int final_pass; /* the second pass: runs only if *redo != 0 */
    /* training (s != NULL) */
    float dscale;
    float *s, *a, *c;
    const bf16 *O; /* [M, K] */
    bf16 *Os;      /* [M, K]: s * O */
    int K;
};
/* The second passes that ran (a test reads it). */
__device__ long lm_repasses;

__global__ void __launch_bounds__(32 * LM_WARPS) lm_finish_kernel(const LmFinishArgs g, int M) {
    const int m = blockIdx.x * LM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (g.final_pass && *g.redo == 0) return;
    if (g.final_pass && m == 0 && lane == 0) lm_repasses++;
    if (m >= M) return;
    float sum = 0.0f, ze = 0.0f, zmax = -INFINITY;
    for (int t = lane; t < g.nparts; t += 32) {
        sum += g.part_e[(long)m * g.nparts + t];
        ze += g.part_ze[(long)m * g.nparts + t];
        zmax = fmaxf(zmax, g.part_zmax[(long)m * g.nparts + t]);
    }
    sum = warp_sum(sum);
    ze = warp_sum(ze);
    zmax = warp_max(zmax);
    const float S = sum + g.et[m], zt = g.zt[m], zref = g.zref[m];
    if (!g.final_pass && !(zmax - zref <= FusedLmHead<false>::kClamp)) {
        if (lane == 0) {
            atomicAdd(g.redo, 1);
            g.zref[m] = zmax; /* the next pass's reference: every e <= 1 */
        }
        return;
    }
    if (lane == 0) g.loss[m] = zref + logf(S) - zt;
    if (!g.s) return;
    const float gt = g.dscale * (g.et[m] / S - 1.0f), s = g.r[m] * g.dscale / S;
    if (lane == 0) {
        g.s[m] = s;
        g.a[m] = g.r[m] * gt;
        g.c[m] = g.dscale * ze / S + zt * gt;
    }
    for (int k = lane * 8; k < g.K; k += 256) {
        float o[8];
        load8(g.O + (long)m * g.K + k, 8, true, o);
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] *= s;
        store8(g.Os + (long)m * g.K + k, 8, true, o);
    }
}

/* Scratch of one chunk of C rows (a: of all M rows), carved from the backend's workspace. */
struct LmScratch {
    bf16 *E, *Os;
    float *part_e, *part_ze, *part_zmax, *zref, *et, *zt, *s, *a, *c, *part;
    int *redo;
};

/* Takes bytes from *at, rounded up so that the next piece starts 256-byte aligned; returns what it took. */
static size_t carve(char **at, size_t bytes) {
    const size_t b = size_round_up(bytes, 256);
    *at += b;
    return b;
}

/* Sets the scratch pointers for chunks of C rows of M (E, Os, s, c, part and the M rows' a only when training);
 * returns the bytes it needs (base NULL: only measures). */
static size_t lm_scratch(char *base, LmScratch *sc, int M, int C, long ldE, int nparts, int K, bool train) {
    char *at = base;
    size_t total = 0;
#define TAKE(ptr, T, n)                                                   \
    do {                                                                  \
        if (base) sc->ptr = (T *)at;                                      \
        total += carve(&at, (size_t)(n) * sizeof(T));                     \
    } while (0)
    if (train) {
        TAKE(E, bf16, (size_t)C * ldE);
        TAKE(Os, bf16, (size_t)C * K);
        TAKE(s, float, C);
        TAKE(a, float, M);
        TAKE(c, float, C);
        TAKE(part, float, (size_t)cdiv(C, GE_BM) * K);
    }
    TAKE(part_e, float, (size_t)C * nparts);
    TAKE(part_ze, float, (size_t)C * nparts);
    TAKE(part_zmax, float, (size_t)C * nparts);
    TAKE(zref, float, C);
    TAKE(et, float, C);
    TAKE(zt, float, C);
    TAKE(redo, int, 1);
#undef TAKE
    return total;
}

/* Training's E row stride (rows padded for TMA) and its rows per chunk: LM_CHUNK_BYTES of E, at least one tile. */
static long lm_ldE(int V) { return (V + 7) / 8 * 8; }
static int lm_chunk_rows(int M, long ldE) {
    const long rows = (long)(LM_CHUNK_BYTES / ((size_t)ldE * sizeof(bf16))) / GE_BM * GE_BM;
    return (int)(rows < GE_BM ? GE_BM : rows < M ? rows : M);
}

size_t cudaf_lm_head_workspace(int M, int V, int K, int train) {
    LmScratch sc = {};
    if (!train) return lm_scratch(NULL, &sc, M, M, 0, ge_row_parts(V), K, false);
    return lm_scratch(NULL, &sc, M, lm_chunk_rows(M, lm_ldE(V)), lm_ldE(V), ge_row_parts(V), K, true);
}

extern "C" long fused_lm_head_repasses(KernelContext *kc) {
    long n = 0;
    CUDA_CHECK(cudaMemcpyFromSymbolAsync(&n, lm_repasses, sizeof(n), 0, cudaMemcpyDeviceToHost, kc->stream));
    CUDA_CHECK(cudaStreamSynchronize(kc->stream));
    return n;
}

/* Steps 1-3 for rows [0, C) of O (and r, target, loss, a offset by the caller). */
template <bool STORE>
static void lm_forward_chunk(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *target,
                             float *loss, float *a, const LmScratch &sc, int C, int V, int K, long ldE, float dscale) {
    const int nparts = ge_row_parts(V);
    const int row_blocks = cdiv(C, LM_WARPS);
    lm_zref_kernel<<<row_blocks, 32 * LM_WARPS, 0, kc->stream>>>((const bf16 *)O, (const bf16 *)W, r, target, sc.zref,
                                                                 C, K);
    LAUNCH_CHECK("lm_zref_kernel");
    typename FusedLmHead<STORE>::Params p = {};
    if constexpr (STORE) p.out.head = ge_out(sc.E, C, V, ldE);
    p.r = r;
    p.zref = sc.zref;
    p.target = target;
    p.et = sc.et;
    p.zt = sc.zt;
    p.part_e = sc.part_e;
    p.part_ze = sc.part_ze;
    p.part_zmax = sc.part_zmax;
    p.ldpart = nparts;
    LmFinishArgs f = {.part_e = sc.part_e, .part_ze = sc.part_ze, .part_zmax = sc.part_zmax, .nparts = nparts,
                      .et = sc.et, .zt = sc.zt, .r = r, .zref = sc.zref, .loss = loss, .redo = sc.redo,
                      .final_pass = 0, .dscale = dscale, .s = STORE ? sc.s : NULL, .a = a, .c = sc.c,
                      .O = (const bf16 *)O, .Os = sc.Os, .K = K};
    const ge_launch how = cuda_gemm_launch(kc, STORE ? "lm_head_train (logits)" : "lm_head_loss (logits)");
    CUDA_CHECK(cudaMemsetAsync(sc.redo, 0, sizeof(int), kc->stream));
    for (int pass = 0; pass < 2; pass++) { /* the second returns at once unless the first set redo */
        p.redo = pass ? sc.redo : NULL;
        ge_run_fused<FusedLmHead<STORE>>(GE_FUSED, O, K, W, K, C, V, K, p, how);
        f.final_pass = pass;
        lm_finish_kernel<<<row_blocks, 32 * LM_WARPS, 0, kc->stream>>>(f, C);
        LAUNCH_CHECK("lm_finish_kernel");
    }
}

/* The engine's TMA needs K (O's and W's rows) a multiple of 8; otherwise the unfused op runs. */
extern "C" void cudaf_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r,
                                   const int32_t *targets, float *loss, int M, int V, int K) {
    if (M <= 0) return;
    if (!fused_dim_ok(K)) {
        cuda_lm_head_loss(kc, O, W, r, targets, loss, M, V, K);
        return;
    }
    LmScratch sc = {};
    const int nparts = ge_row_parts(V);
    char *ws = (char *)cuda_workspace(kc, cudaf_lm_head_workspace(M, V, K, 0));
    lm_scratch(ws, &sc, M, M, 0, nparts, K, false);
    lm_forward_chunk<false>(kc, O, W, r, targets, loss, NULL, sc, M, V, K, 0, 0.0f);
}

extern "C" void cudaf_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r,
                                    const int32_t *targets, const int32_t *target_groups, float dscale, const void *x,
                                    const float *gamma, float *loss, float *dW, void *dres, float *dgamma, int M, int V,
                                    int K) {
    if (M <= 0) return;
    if (!fused_dim_ok(K)) {
        cuda_lm_head_train(kc, O, W, r, targets, target_groups, dscale, x, gamma, loss, dW, dres, dgamma, M, V, K);
        return;
    }
    const long ldE = lm_ldE(V);
    const int nparts = ge_row_parts(V);
    const int C = lm_chunk_rows(M, ldE);
    LmScratch sc = {};
    char *ws = (char *)cuda_workspace(kc, cudaf_lm_head_workspace(M, V, K, 1));
    lm_scratch(ws, &sc, M, C, ldE, nparts, K, true);
    for (int m0 = 0; m0 < M; m0 += C) {
        const int rows_c = M - m0 < C ? M - m0 : C;
        const bf16 *Oc = (const bf16 *)O + (size_t)m0 * K;
        lm_forward_chunk<true>(kc, Oc, W, r + m0, targets + m0, loss + m0, sc.a + m0, sc, rows_c, V, K, ldE, dscale);
        fused_norm_backward(kc, sc.E, ldE, W, gamma, r + m0, sc.c, (const bf16 *)x + (size_t)m0 * K,
                            (bf16 *)dres + (size_t)m0 * K, dgamma, 0, rows_c, V, K, sc.part, sc.s, sc.a + m0,
                            targets + m0);
        /* dW [V, K] += E^T . O' (E: [rows_c, V], row stride ldE) */
        ge_gemm_f32_strided(GE_ATB, sc.E, ldE, sc.Os, K, dW, K, 1, V, K, rows_c,
                            cuda_gemm_launch(kc, "lm_head_train (E^T . O')"));
    }
    cuda_rows_scatter_add(kc, target_groups, sc.a, O, dW, M, K);
}
