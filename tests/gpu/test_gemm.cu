/* test_gemm.cu: the GEMM-epilogue engine (kernels/cuda/gemm) against cuBLAS and an fp64 CPU reference, on fresh
 * random inputs (seed printed; GE_SEED=n repeats a run):
 * - the plain GEMM in the three layouts, bf16 out, fp32 out and fp32 accumulate, ragged shapes, outputs poisoned
 *   with NaN first and guard zones around them checked for stray writes, on every schedule of gemm.h (cooperative
 *   128 x 256 and 128 x 128, ping-pong 128 x 128, and GE_AUTO, which must give the bits of the config ge_pick
 *   names); the strided fp32 launcher with padded operands and output (TMA and direct stores);
 * - each epilogue primitive on its own, through a small program defined here (that a program is a few lines
 *   is the point of the engine): positions, maps, broadcasts, tile load/store, row/column partials, accumulate;
 *   declared outputs (GeProgram: bf16, fp32 and half-width bf16 in one program, staged on each schedule and
 *   stored directly, bit for bit alike); input tiles by TMA (GeTileInTma, as wide as the output or twice, loaded
 *   before the main loop or spread over it) with the output written in place;
 * - two of the trainer's programs (kernels/cuda/fused: K_res + the r reduction, the row-scaled GEMM) and their
 *   chain vs fp64 references, on every schedule, the default one bit for bit against the schedule ge_pick names,
 *   and K_res's register-residual variant (FusedResNorm on ping-pong, the launcher's path where TMA cannot describe
 *   D or the residual) bit for bit against the TMA one it runs otherwise.
 * The fp64 reference covers a sample of rows (all columns) so that large shapes stay cheap on the CPU. The engine's
 * host side (tensor maps, launchers, ge_pick) comes from build/libtrainer.a. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/fused/fused_coda.h"
#include "kernels/cuda/fused/fused_programs.cuh"
#include "kernels/cuda/gemm/gemm_engine.cuh"
#include "kernels/cuda/gemm/gemm_programs.cuh"
#include "tests/gpu/cuda_test_check.h"
#include "tests/test_util.h"


/* ge_run's launch for the engine kernels run directly (default stream; the config is ge_run's template arguments) */
static const ge_launch TEST_LAUNCH = {GE_AUTO, 0, "test_gemm", 0};

/* ---------------------------------------------------------------- host data */

/* Host values (rounded to bf16 when `bf`) of offset + scale * U[-1,1). */
static float *rand_host(size_t n, double offset, double scale, int bf) {
    float *a = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(offset + scale * rnd());
        if (bf) a[i] = bf16_round(a[i]);
    }
    return a;
}

/* Device buffers with a poisoned guard zone of GUARD bytes on each side. */
#define GUARD 4096
static void *dev_alloc(size_t bytes) {
    uint8_t *p;
    CK(cudaMalloc(&p, bytes + 2 * GUARD));
    CK(cudaMemset(p, 0xFF, bytes + 2 * GUARD));
    return p + GUARD;
}
static void dev_free(void *p) { CK(cudaFree((uint8_t *)p - GUARD)); }
static int guards_intact(const void *p, size_t bytes) {
    static uint8_t h[GUARD];
    for (int side = 0; side < 2; side++) {
        const uint8_t *g = side ? (const uint8_t *)p + bytes : (const uint8_t *)p - GUARD;
        CK(cudaMemcpy(h, g, GUARD, cudaMemcpyDeviceToHost));
        for (int i = 0; i < GUARD; i++)
            if (h[i] != 0xFF) return 0;
    }
    return 1;
}
static void *dev_bf16(const float *h, size_t n) {
    uint16_t *t = (uint16_t *)malloc(n * 2);
    for (size_t i = 0; i < n; i++) t[i] = bf16_bits(h[i]);
    void *d = dev_alloc(n * 2);
    CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
    free(t);
    return d;
}
static float *dev_f32(const float *h, size_t n) {
    float *d = (float *)dev_alloc(n * 4);
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    return d;
}
static void poison(void *d, size_t bytes) { CK(cudaMemset(d, 0xFF, bytes)); } /* NaN in bf16 and fp32 */
static float *get_bf16(const void *d, size_t n) {
    uint16_t *t = (uint16_t *)malloc(n * 2);
    CK(cudaMemcpy(t, d, n * 2, cudaMemcpyDeviceToHost));
    float *h = (float *)malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = bf16_value(t[i]);
    free(t);
    return h;
}
static float *get_f32(const float *d, size_t n) {
    float *h = (float *)malloc(n * 4);
    CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

/* ---------------------------------------------------------------- references */

/* op(A)(m, k) of a layout, on a packed host array. */
static inline double opA(ge_layout l, const float *A, int M, int K, int m, int k) {
    return l == GE_ATB ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
}

/* The rows that the fp64 reference covers: the first, the last, and up to `extra` random ones. */
static int pick_rows(int M, int extra, int *rows) {
    int n = 0;
    rows[n++] = 0;
    if (M > 1) rows[n++] = M - 1;
    for (int i = 0; i < extra && n < M; i++) rows[n++] = (int)((rnd() + 1.0) * 0.5 * M) % M;
    return n;
}

/* ref[i, n] = sum_k op(A)(rows[i], k) op(B)(n, k), fp64. */
static double *ref_rows(ge_layout l, const float *A, const float *B, int M, int N, int K, const int *rows, int nr) {
    double *ref = (double *)calloc((size_t)nr * N, sizeof(double));
    double *arow = (double *)malloc((size_t)K * sizeof(double));
    for (int i = 0; i < nr; i++) {
        for (int k = 0; k < K; k++) arow[k] = opA(l, A, M, K, rows[i], k);
        double *out = ref + (size_t)i * N;
        if (l == GE_ABT) {
            for (int n = 0; n < N; n++) {
                double s = 0;
                const float *b = B + (size_t)n * K;
                for (int k = 0; k < K; k++) s += arow[k] * b[k];
                out[n] = s;
            }
        } else {
            for (int k = 0; k < K; k++) {
                const float *b = B + (size_t)k * N;
                for (int n = 0; n < N; n++) out[n] += arow[k] * b[n];
            }
        }
    }
    free(arow);
    return ref;
}

/* ||got[rows] - ref|| / ||ref|| over the sampled rows; NaN in got makes it NaN. */
static double rel_err_rows(const float *got, const double *ref, const int *rows, int nr, int N) {
    double num = 0, den = 0;
    for (int i = 0; i < nr; i++)
        for (int n = 0; n < N; n++) {
            const double g = got[(size_t)rows[i] * N + n], r = ref[(size_t)i * N + n];
            num += (g - r) * (g - r);
            den += r * r;
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static double rel_err_full(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static int all_finite(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

/* cuBLAS C (row-major [M,N]) = op(A) . op(B), written as the column-major product C^T. */
static cublasHandle_t blas;
static void cublas_gemm(ge_layout l, const void *A, const void *B, void *C, cudaDataType_t ct, int M, int N, int K,
                        float beta) {
    const float alpha = 1.0f;
    cublasStatus_t st;
    if (l == GE_ABT)
        st = cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, K, A, CUDA_R_16BF, K,
                          &beta, C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else if (l == GE_AB)
        st = cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K,
                          &beta, C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &alpha, B, CUDA_R_16BF, N, A, CUDA_R_16BF, M,
                          &beta, C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasGemmEx failed: %d\n", (int)st);
        exit(2);
    }
}

/* Tolerance of an fp32-output product of depth K against fp64 (or another fp32 order): fp32 accumulation error
 * grows like sqrt(K) (about 4e-8 sqrt(K) expected); bf16 rounding would be ~1e-3, far above. */
static double tol32(int K) { return 1e-6 * sqrt((double)K) + 1e-6; }

static const char *lname(ge_layout l) { return l == GE_ABT ? "A.B^T" : l == GE_AB ? "A.B" : "A^T.B"; }

/* Bytes of two device buffers equal (both copied to the host). */
static int same_bytes(const void *a, const void *b, size_t bytes) {
    uint8_t *ha = (uint8_t *)malloc(bytes), *hb = (uint8_t *)malloc(bytes);
    CK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    const int same = memcmp(ha, hb, bytes) == 0;
    free(ha), free(hb);
    return same;
}

/* A config by name; GE_AUTO names the one ge_pick chose (`picked`). */
static void sched_tag(char *buf, size_t n, ge_config s, ge_config picked) {
    char name[64];
    if (!s.bn)
        snprintf(buf, n, "auto: %s", ge_config_format(picked, name, sizeof name));
    else
        snprintf(buf, n, "%s", ge_config_format(s, name, sizeof name));
}

/* A launch on the default stream with config s. */
static ge_launch on(ge_config s) {
    const ge_launch how = {s, 0, "test_gemm", 0};
    return how;
}

/* ---------------------------------------------------------------- plain GEMM */

static void test_plain(ge_layout l, int M, int N, int K) {
    const size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    float *A = rand_host(na, 0, 1, 1), *B = rand_host(nb, 0, 1, 1), *C0 = rand_host(nc, 0, 4, 0);
    void *dA = dev_bf16(A, na), *dB = dev_bf16(B, nb);
    void *dC16 = dev_alloc(nc * 2);
    float *dC32 = (float *)dev_alloc(nc * 4), *dRef = (float *)dev_alloc(nc * 4);
    int rows[64];
    const int nr = pick_rows(M, 48, rows);
    double *ref = ref_rows(l, A, B, M, N, K, rows, nr);
    /* ref_acc = C0 + the product, on the sampled rows */
    double *ref_acc = (double *)malloc((size_t)nr * N * sizeof(double));
    for (int i = 0; i < nr; i++)
        for (int n = 0; n < N; n++) ref_acc[(size_t)i * N + n] = ref[(size_t)i * N + n] + C0[(size_t)rows[i] * N + n];
    cublas_gemm(l, dA, dB, dRef, CUDA_R_32F, M, N, K, 0.0f);
    CK(cudaDeviceSynchronize());
    float *cref = get_f32(dRef, nc);
    CK(cudaMemcpy(dRef, C0, nc * 4, cudaMemcpyHostToDevice));
    cublas_gemm(l, dA, dB, dRef, CUDA_R_32F, M, N, K, 1.0f);
    CK(cudaDeviceSynchronize());
    float *cref_acc = get_f32(dRef, nc);

    /* every schedule of the launchers; the default (GE_AUTO) first, its outputs kept until the schedule
     * ge_pick names runs, which must give the same bits */
    const ge_config picked = ge_pick(GE_PLAIN, M, N, K, ge_num_sms());
    static const ge_config scheds[] = {GE_AUTO, GE_COOP_256, GE_COOP_128, GE_PINGPONG_128};
    float *auto16 = NULL, *auto32 = NULL, *auto_acc = NULL;
    for (ge_config s : scheds) {
        char sn[64], tag[160];
        sched_tag(sn, sizeof sn, s, picked);
        snprintf(tag, sizeof tag, "%s %d x %d x %d (%s)", lname(l), M, N, K, sn);

        /* bf16 out */
        poison(dC16, nc * 2);
        ge_gemm_bf16(l, dA, dB, dC16, M, N, K, on(s));
        CK(cudaDeviceSynchronize());
        float *c16 = get_bf16(dC16, nc);
        double e64 = rel_err_rows(c16, ref, rows, nr, N), eb = rel_err_full(c16, cref, nc);
        CHECK(all_finite(c16, nc) && guards_intact(dC16, nc * 2) && e64 < 5e-3 && eb < 5e-3,
              "plain %s bf16 out: every element written, guards intact; rel err vs fp64 %.2e, vs cuBLAS fp32 %.2e",
              tag, e64, eb);

        /* fp32 out */
        poison(dC32, nc * 4);
        ge_gemm_f32(l, dA, dB, dC32, 0, M, N, K, on(s));
        CK(cudaDeviceSynchronize());
        float *c32 = get_f32(dC32, nc);
        e64 = rel_err_rows(c32, ref, rows, nr, N);
        eb = rel_err_full(c32, cref, nc);
        CHECK(all_finite(c32, nc) && guards_intact(dC32, nc * 4) && e64 < tol32(K) && eb < tol32(K),
              "plain %s fp32 out: every element written, guards intact; rel err vs fp64 %.2e, vs cuBLAS %.2e", tag,
              e64, eb);

        /* fp32 accumulate: C = C0 + op(A) op(B) */
        CK(cudaMemcpy(dC32, C0, nc * 4, cudaMemcpyHostToDevice));
        ge_gemm_f32(l, dA, dB, dC32, 1, M, N, K, on(s));
        CK(cudaDeviceSynchronize());
        float *cacc = get_f32(dC32, nc);
        e64 = rel_err_rows(cacc, ref_acc, rows, nr, N);
        eb = rel_err_full(cacc, cref_acc, nc);
        CHECK(all_finite(cacc, nc) && guards_intact(dC32, nc * 4) && e64 < tol32(K) && eb < tol32(K),
              "plain %s fp32 accumulate (C += ...): rel err vs fp64 %.2e, vs cuBLAS beta=1 %.2e", tag, e64, eb);

        if (!s.bn) {
            auto16 = c16, auto32 = c32, auto_acc = cacc;
            continue;
        }
        if (ge_config_eq(s, picked)) {
            const size_t bytes = nc * sizeof(float);
            const int same = memcmp(auto16, c16, bytes) == 0 && memcmp(auto32, c32, bytes) == 0 &&
                             memcmp(auto_acc, cacc, bytes) == 0;
            CHECK(same, "plain %s: the default schedule gives this schedule's bits (bf16 out, fp32 out, fp32 +=)",
                  tag);
        }
        free(c16), free(c32), free(cacc);
    }

    free(A), free(B), free(C0), free(ref), free(ref_acc), free(cref), free(cref_acc);
    free(auto16), free(auto32), free(auto_acc);
    dev_free(dA), dev_free(dB), dev_free(dC16), dev_free(dC32), dev_free(dRef);
}

/* A [rows, cols] host matrix copied into rows of ld >= cols elements, the padding set to `pad`. */
static float *padded(const float *a, int rows, int cols, long ld, float pad) {
    float *p = (float *)malloc((size_t)rows * ld * sizeof(float));
    for (int r = 0; r < rows; r++)
        for (long c = 0; c < ld; c++) p[(size_t)r * ld + c] = c < cols ? a[(size_t)r * cols + c] : pad;
    return p;
}

/* ge_gemm_f32_strided: operands and output with row strides wider than their rows. The operands' padding holds
 * NaN (read into any product, it would show); the output's padding is poisoned and must stay as it was. C and
 * C += C0 must equal the packed launcher's bits on the same schedule (the same products, one rounding each). ldc a
 * multiple of 4 floats: TMA stores and add-reduces; 2 floats more: direct stores (TMA cannot describe the rows). */
static void test_strided(ge_layout l, int M, int N, int K, ge_config sched) {
    const int ra = l == GE_ATB ? K : M, ca = l == GE_ATB ? M : K; /* A as stored: ra rows of ca */
    const int rb = l == GE_ABT ? N : K, cb = l == GE_ABT ? K : N; /* B as stored */
    const long lda = ca + 24, ldb = cb + 40;
    const size_t nc = (size_t)M * N;
    float *A = rand_host((size_t)ra * ca, 0, 1, 1), *B = rand_host((size_t)rb * cb, 0, 1, 1), *C0 = rand_host(nc, 0, 4, 0);
    float *As = padded(A, ra, ca, lda, NAN), *Bs = padded(B, rb, cb, ldb, NAN);
    void *dA = dev_bf16(A, (size_t)ra * ca), *dB = dev_bf16(B, (size_t)rb * cb);
    void *dAs = dev_bf16(As, (size_t)ra * lda), *dBs = dev_bf16(Bs, (size_t)rb * ldb);
    float *dC = (float *)dev_alloc(nc * 4);
    poison(dC, nc * 4);
    ge_gemm_f32(l, dA, dB, dC, 0, M, N, K, on(sched));
    CK(cudaDeviceSynchronize());
    float *want = get_f32(dC, nc);
    CK(cudaMemcpy(dC, C0, nc * 4, cudaMemcpyHostToDevice));
    ge_gemm_f32(l, dA, dB, dC, 1, M, N, K, on(sched));
    CK(cudaDeviceSynchronize());
    float *want_acc = get_f32(dC, nc);

    for (int v = 0; v < 2; v++) {
        const long ldc = (N + 3) / 4 * 4 + (v ? 2 : 4);
        const size_t ns = (size_t)M * ldc;
        float *dCs = (float *)dev_alloc(ns * 4);
        /* rows whose bits differ from the packed result's (over both runs), and padding bytes changed */
        size_t bad = 0, badpad = 0;
        float *h = (float *)malloc(ns * 4);
        for (int acc = 0; acc < 2; acc++) {
            memset(h, 0xFF, ns * 4); /* NaN in the padding, and in C unless accumulating into C0 */
            if (acc)
                for (int m = 0; m < M; m++) memcpy(h + (size_t)m * ldc, C0 + (size_t)m * N, (size_t)N * 4);
            CK(cudaMemcpy(dCs, h, ns * 4, cudaMemcpyHostToDevice));
            ge_gemm_f32_strided(l, dAs, lda, dBs, ldb, dCs, ldc, acc, M, N, K, on(sched));
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(h, dCs, ns * 4, cudaMemcpyDeviceToHost));
            const float *w = acc ? want_acc : want;
            for (int m = 0; m < M; m++) {
                bad += memcmp(h + (size_t)m * ldc, w + (size_t)m * N, (size_t)N * 4) != 0;
                const uint8_t *pad = (const uint8_t *)(h + (size_t)m * ldc + N);
                for (size_t b = 0; b < (size_t)(ldc - N) * 4; b++) badpad += pad[b] != 0xFF;
            }
        }
        char sn[64];
        CHECK(bad == 0 && badpad == 0 && guards_intact(dCs, ns * 4),
              "strided fp32 %s %d x %d x %d (%s; lda %ld, ldb %ld, ldc %ld: %s): C and C += equal the packed "
              "launcher's bits (%zu row mismatches), padding untouched (%zu bytes changed), guards intact",
              lname(l), M, N, K, ge_config_format(sched, sn, sizeof sn), lda, ldb, ldc, v ? "direct stores" : "TMA", bad, badpad);
        free(h);
        dev_free(dCs);
    }
    free(A), free(B), free(C0), free(As), free(Bs), free(want), free(want_acc);
    dev_free(dA), dev_free(dB), dev_free(dAs), dev_free(dBs), dev_free(dC);
}

/* ---------------------------------------------------------------- primitives, one program each */

/* Primitive 1 (positions): each register knows its row and column. out = row * N + col exactly (+ 0 * acc). */
struct PPos : GeEpilogue {
    struct Params { float *out; };
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        for (int h = 0; h < 2; h++) {
            const float base = (float)t.row[h] * (float)t.N + (float)col;
            ge_store(p.out, t.N, t, h, col, make_float2(base + 0.0f * v[h].x, base + 1.0f + 0.0f * v[h].y));
        }
    }
};
/* Primitive 1 (maps): out1 = 2 acc + 1 elementwise; out2 = the pair rotated by an angle of (row, col/2). */
struct PMap : GeEpilogue {
    struct Params { float *out1, *out2; };
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        for (int h = 0; h < 2; h++) {
            ge_store(p.out1, t.N, t, h, col, ge_add(ge_scale(v[h], 2.0f), make_float2(1.0f, 1.0f)));
            const float th = 0.01f * (col / 2) + 0.001f * t.row[h];
            ge_store(p.out2, t.N, t, h, col, rope_rotate(v[h], __cosf(th), __sinf(th)));
        }
    }
};
/* Primitive 2: out = acc * rv[row] * cv[col] + cb[col]. */
struct PVec : GeEpilogue {
    struct Params { const float *rv, *cv, *cb; float *out; };
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        const float2 cv = ge_col_vec(p.cv, t, col), cb = ge_col_vec(p.cb, t, col);
        for (int h = 0; h < 2; h++)
            ge_store(p.out, t.N, t, h, col, ge_add(ge_mul(ge_scale(v[h], ge_row_vec(p.rv, t, h)), cv), cb));
    }
};
/* Primitive 3: out (bf16) = acc + X (bf16 tile load); out2 (fp32) = 2 acc (a second output tile). */
struct PTile : GeEpilogue {
    struct Params { const bf16 *X; bf16 *out; float *out2; };
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        for (int h = 0; h < 2; h++) {
            ge_store(p.out, t.N, t, h, col, ge_add(v[h], ge_load(p.X, t.N, t, h, col)));
            ge_store(p.out2, t.N, t, h, col, ge_scale(v[h], 2.0f));
        }
    }
};
/* Primitive 4 (rows): psum[row, q] = sum of acc over 128-column slice q, pmax[row, q] = max. */
struct PRowPart : GeEpilogue {
    struct Params { float *psum, *pmax; int nparts; };
    GeRowPartial<GeSum> s;
    GeRowPartial<GeMax> m;
    __device__ void begin(const Params &, const GeTile &) { s.reset(), m.reset(); }
    __device__ void frag(const Params &, const GeTile &t, int col, float2 (&v)[2]) {
        for (int h = 0; h < 2; h++) s.add(t, h, col, v[h]), m.add(t, h, col, v[h]);
    }
    __device__ void end(const Params &p, const GeTile &t) { s.store(p.psum, p.nparts, t), m.store(p.pmax, p.nparts, t); }
};
/* Primitive 4 (columns): pcol[tm, col] = sum of acc * x over the tile's rows (x a bf16 tile, as dgamma needs). */
struct PColPart : GeEpilogue {
    static constexpr bool kColPartials = true;
    struct Params { const bf16 *X; float *pcol; };
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        ge_col_partial_add(t, col, ge_mul(v[0], ge_load(p.X, t.N, t, 0, col)),
                           ge_mul(v[1], ge_load(p.X, t.N, t, 1, col)), GE_BN);
    }
    __device__ void end(const Params &p, const GeTile &t) { ge_col_partial_store(p.pcol, t.N, t, GE_BN); }
};

/* Declared outputs (GeProgram): three staged outputs of three kinds in one program, each at its own staging units
 * (1 + 2 + 1): Y = acc (bf16), Y2 = 2 acc (fp32), and the half-width output H[row, col/2] = silu(Y[row, col])
 * Y[row, col + 1] (one bf16 value per column pair, from Y as stored, as SwiGLU's forward makes it). */
struct POuts : GeProgram<GeOut<bf16>, GeOut<float>, GeOut<bf16, 16>> {
    struct Params { Out out; };
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 w[2] = {ge_scale(v[0], 2.0f), ge_scale(v[1], 2.0f)};
        ge_put<1>(p.out, t, col, w);
        ge_put<0>(p.out, t, col, v); /* v becomes Y as stored */
        float a[2] = {swiglu_approx(v[0]), swiglu_approx(v[1])};
        ge_put<2>(p.out, t, col, a);
    }
};

/* Primitive 3, input tiles (declared inputs). By TMA (GeTileInTma), an output written in place of it: Y = X + acc,
 * X and Y [M, N] bf16. BLOCKS = 2: the consumer's row blocks loaded before its main loop (ping-pong, as K_res);
 * BLOCKS = 1: one slot per k-block during it (cooperative, GE_SPREAD). Y is stored from the input's slots; the
 * program has no GeOut staging. */
template <int BN, int BLOCKS>
struct PInTma : GeProgram<> {
    struct Params {
        Out out; /* none */
        GeOut<bf16> X, Y;
    };
    GeTileInTma<BN, BLOCKS, BLOCKS == 1 ? GE_SPREAD : GE_AHEAD> in;
    __host__ __device__ auto inputs(const Params &p) { return ge_inputs(ge_in(in, p.X, p.Y)); }
    __device__ void frag(const Params &, const GeTile &t, int, float2 (&v)[2]) {
        float2 x[2];
        in.get(t, x);
#pragma unroll
        for (int h = 0; h < 2; h++) x[h] = ge_add(x[h], v[h]);
        in.put(t, x);
    }
};

/* Into registers, twice as wide as the output (GeTileIn with W = 2 after L2 prefetches spread over the main loop,
 * as the SwiGLU backward reads Z), and stored straight from registers (ge_store_wide): X and Y [M, 2N], a pair of
 * columns per output column c: Y[., 2c] = X[., 2c] + acc[., c], Y[., 2c + 1] = X[., 2c + 1] - acc[., c]. */
template <int BN>
struct PInWide : GeProgram<> {
    struct Params {
        Out out; /* none */
        const bf16 *X;
        bf16 *Y;
        long ld;
    };
    GeTileIn<BN, 8, 4, 2, GE_SPREAD> in;
    __host__ __device__ auto inputs(const Params &p) { return ge_inputs(ge_in(in, p.X, p.ld)); }
    __device__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 q[2]; /* q[e]: the input pair of output column col + e */
            in.get2(t, h, q);
            q[0] = make_float2(q[0].x + v[h].x, q[0].y - v[h].x);
            q[1] = make_float2(q[1].x + v[h].y, q[1].y - v[h].y);
            ge_store_wide(p.Y, p.ld, t, h, col, q);
        }
        in.advance(t);
    }
};

template <class P>
static void run_abt(const void *A, const void *B, int M, int N, int K, const typename P::Params &p) {
    ge_run<P, GE_ABT>(A, K, B, K, M, N, K, p, TEST_LAUNCH);
    CK(cudaDeviceSynchronize());
}

/* An A.B^T product's random bf16 operands (host and device) and the fp64 product of up to 64 sampled rows. */
struct AbtCase {
    float *A, *B;
    void *dA, *dB;
    int rows[64], nr;
    double *acc; /* [nr, N]: the sampled rows of A.B^T */
    AbtCase(int M, int N, int K) {
        A = rand_host((size_t)M * K, 0, 1, 1), B = rand_host((size_t)N * K, 0, 1, 1);
        dA = dev_bf16(A, (size_t)M * K), dB = dev_bf16(B, (size_t)N * K);
        nr = pick_rows(M, 40, rows);
        acc = ref_rows(GE_ABT, A, B, M, N, K, rows, nr);
    }
    AbtCase(const AbtCase &) = delete;
    ~AbtCase() { free(A), free(B), free(acc), dev_free(dA), dev_free(dB); }
};

static void test_primitives(int M, int N, int K) {
    const size_t nc = (size_t)M * N;
    const AbtCase c(M, N, K);
    const float *A = c.A, *B = c.B;
    const void *dA = c.dA, *dB = c.dB;
    const int *rows = c.rows, nr = c.nr;
    const double *acc = c.acc;
    double *ref = (double *)calloc(nc, sizeof(double)); /* scratch, [nr, N] */
    float *o1 = (float *)dev_alloc(nc * 4), *o2 = (float *)dev_alloc(nc * 4);
    char tag[64];
    snprintf(tag, sizeof tag, "%d x %d x %d", M, N, K);

    { /* positions */
        poison(o1, nc * 4);
        run_abt<PPos>(dA, dB, M, N, K, {o1});
        float *h = get_f32(o1, nc);
        size_t bad = 0;
        for (size_t i = 0; i < nc; i++) bad += h[i] != (float)i;
        CHECK(bad == 0 && guards_intact(o1, nc * 4), "primitive positions %s: out[row, col] == row*N + col everywhere (%zu wrong)", tag, bad);
        free(h);
    }
    { /* maps */
        poison(o1, nc * 4), poison(o2, nc * 4);
        run_abt<PMap>(dA, dB, M, N, K, {o1, o2});
        float *h1 = get_f32(o1, nc), *h2 = get_f32(o2, nc);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n++) ref[(size_t)i * N + n] = 2 * acc[(size_t)i * N + n] + 1;
        const double e1 = rel_err_rows(h1, ref, rows, nr, N);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n += 2) {
                const double th = 0.01f * (n / 2) + 0.001f * rows[i];
                const double a = acc[(size_t)i * N + n], b = n + 1 < N ? acc[(size_t)i * N + n + 1] : 0.0;
                ref[(size_t)i * N + n] = a * cos(th) - b * sin(th);
                if (n + 1 < N) ref[(size_t)i * N + n + 1] = b * cos(th) + a * sin(th);
            }
        const double e2 = rel_err_rows(h2, ref, rows, nr, N);
        CHECK(all_finite(h1, nc) && all_finite(h2, nc) && e1 < 1e-5 && e2 < 1e-5,
              "primitive maps %s: elementwise 2*acc+1 rel err %.2e, pairwise rotation rel err %.2e", tag, e1, e2);
        free(h1), free(h2);
    }
    { /* broadcasts */
        float *rv = rand_host(M, 1, 0.5, 0), *cv = rand_host(N, 1, 0.5, 0), *cb = rand_host(N, 0, 1, 0);
        float *drv = dev_f32(rv, M), *dcv = dev_f32(cv, N), *dcb = dev_f32(cb, N);
        poison(o1, nc * 4);
        run_abt<PVec>(dA, dB, M, N, K, {drv, dcv, dcb, o1});
        float *h = get_f32(o1, nc);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n++) ref[(size_t)i * N + n] = acc[(size_t)i * N + n] * rv[rows[i]] * cv[n] + cb[n];
        const double e = rel_err_rows(h, ref, rows, nr, N);
        CHECK(all_finite(h, nc) && e < 1e-5, "primitive broadcasts %s: acc * r[row] * g[col] + b[col] rel err %.2e", tag, e);
        free(h), free(rv), free(cv), free(cb), dev_free(drv), dev_free(dcv), dev_free(dcb);
    }
    { /* tile load + second output */
        float *X = rand_host(nc, 0, 4, 1);
        void *dX = dev_bf16(X, nc), *d16 = dev_alloc(nc * 2);
        poison(d16, nc * 2), poison(o2, nc * 4);
        run_abt<PTile>(dA, dB, M, N, K, {(const bf16 *)dX, (bf16 *)d16, o2});
        float *h1 = get_bf16(d16, nc), *h2 = get_f32(o2, nc);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n++) ref[(size_t)i * N + n] = acc[(size_t)i * N + n] + X[(size_t)rows[i] * N + n];
        const double e1 = rel_err_rows(h1, ref, rows, nr, N);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n++) ref[(size_t)i * N + n] = 2 * acc[(size_t)i * N + n];
        const double e2 = rel_err_rows(h2, ref, rows, nr, N);
        CHECK(all_finite(h1, nc) && all_finite(h2, nc) && guards_intact(d16, nc * 2) && e1 < 5e-3 && e2 < 1e-5,
              "primitive tiles %s: bf16 out = acc + X (tile load) rel err %.2e; second fp32 output 2*acc rel err %.2e",
              tag, e1, e2);
        free(X), free(h1), free(h2), dev_free(dX), dev_free(d16);
    }
    { /* row partials (sum and max) */
        const int np = (N + GE_PART_COLS - 1) / GE_PART_COLS; /* one per 128-column slice (run_abt: 128 x 256 tiles) */
        float *ds = (float *)dev_alloc((size_t)M * np * 4), *dm = (float *)dev_alloc((size_t)M * np * 4);
        poison(ds, (size_t)M * np * 4), poison(dm, (size_t)M * np * 4);
        run_abt<PRowPart>(dA, dB, M, N, K, {ds, dm, np});
        float *hs = get_f32(ds, (size_t)M * np), *hm = get_f32(dm, (size_t)M * np);
        double num = 0, den = 0, maxerr = 0;
        for (int i = 0; i < nr; i++)
            for (int t = 0; t < np; t++) {
                double s = 0, mx = -INFINITY;
                for (int n = t * GE_PART_COLS; n < N && n < (t + 1) * GE_PART_COLS; n++) {
                    s += acc[(size_t)i * N + n];
                    mx = fmax(mx, acc[(size_t)i * N + n]);
                }
                const double gs = hs[(size_t)rows[i] * np + t], gm = hm[(size_t)rows[i] * np + t];
                num += (gs - s) * (gs - s), den += s * s;
                maxerr = fmax(maxerr, isfinite(gm) ? fabs(gm - mx) / fabs(mx) : INFINITY);
            }
        const double e = sqrt(num / den);
        CHECK(all_finite(hs, (size_t)M * np) && all_finite(hm, (size_t)M * np) && e < 1e-5 && maxerr < 1e-5,
              "primitive row partials %s (%d per row): sums rel err %.2e, maxima rel err %.2e", tag, np, e, maxerr);
        free(hs), free(hm), dev_free(ds), dev_free(dm);
    }
    { /* column partials: sum over each M-tile of acc * X */
        const int mt = (M + GE_BM - 1) / GE_BM;
        float *X = rand_host(nc, 0, 1, 1);
        void *dX = dev_bf16(X, nc);
        float *dp = (float *)dev_alloc((size_t)mt * N * 4);
        poison(dp, (size_t)mt * N * 4);
        run_abt<PColPart>(dA, dB, M, N, K, {(const bf16 *)dX, dp});
        float *hp = get_f32(dp, (size_t)mt * N);
        /* full fp64 reference for 3 M-tiles (first, a middle one, last): needs all their rows */
        int tms[3] = {0, mt / 2, mt - 1}, trows[GE_BM];
        double num = 0, den = 0;
        for (int q = 0; q < 3; q++) {
            int n_tr = 0;
            for (int m = tms[q] * GE_BM; m < M && m < (tms[q] + 1) * GE_BM; m++) trows[n_tr++] = m;
            double *tacc = ref_rows(GE_ABT, A, B, M, N, K, trows, n_tr);
            for (int n = 0; n < N; n++) {
                double s = 0;
                for (int i = 0; i < n_tr; i++) s += tacc[(size_t)i * N + n] * X[(size_t)trows[i] * N + n];
                const double g = hp[(size_t)tms[q] * N + n];
                num += (g - s) * (g - s), den += s * s;
            }
            free(tacc);
        }
        const double e = sqrt(num / den);
        CHECK(all_finite(hp, (size_t)mt * N) && guards_intact(dp, (size_t)mt * N * 4) && e < 1e-5,
              "primitive column partials %s (%d M-tiles): sum over rows of acc*X rel err %.2e", tag, mt, e);
        free(X), free(hp), dev_free(dX), dev_free(dp);
    }
    { /* accumulate into a bf16 output */
        float *C0 = rand_host(nc, 0, 8, 1);
        void *d16 = dev_bf16(C0, nc);
        run_abt<GeStore<bf16, true>>(dA, dB, M, N, K, {{ge_out_as<GeOut<bf16, 32, true>>((bf16 *)d16, M, N, N)}});
        float *h = get_bf16(d16, nc);
        for (int i = 0; i < nr; i++)
            for (int n = 0; n < N; n++) ref[(size_t)i * N + n] = acc[(size_t)i * N + n] + C0[(size_t)rows[i] * N + n];
        const double e = rel_err_rows(h, ref, rows, nr, N);
        CHECK(all_finite(h, nc) && guards_intact(d16, nc * 2) && e < 5e-3,
              "primitive accumulate %s: bf16 C += acc rel err %.2e", tag, e);
        free(C0), free(h), dev_free(d16);
    }
    free(ref), dev_free(o1), dev_free(o2);
}

/* Declared outputs (POuts) on each schedule at its own tile width, staged and stored by TMA, and on the direct
 * path (outputs with tma = 0: stored from registers, cooperative 128 x 256), which must give the staged run's bits on
 * the same tiles. N a multiple of 16 (the half-width output's rows then fill whole 16-byte units, as TMA needs). */
static void test_outputs(int M, int N, int K) {
    const size_t nc = (size_t)M * N, nh = (size_t)M * (N / 2);
    const AbtCase c(M, N, K);
    void *dY = dev_alloc(nc * 2), *dH = dev_alloc(nh * 2);
    float *dY2 = (float *)dev_alloc(nc * 4);
    double *ref = (double *)malloc((size_t)c.nr * N * sizeof(double));
    for (int i = 0; i < c.nr * N; i++) ref[i] = c.acc[i];
    double *ref2 = (double *)malloc((size_t)c.nr * N * sizeof(double));
    for (int i = 0; i < c.nr * N; i++) ref2[i] = 2 * c.acc[i];
    static const char *name[] = {"cooperative 128x256", "cooperative 128x128", "ping-pong 128x128",
                                 "direct stores, cooperative 128x256"};
    float *staged[3] = {NULL, NULL, NULL}; /* the cooperative 128 x 256 run's Y, Y2, H */
    for (int cfg = 0; cfg < 4; cfg++) {
        poison(dY, nc * 2), poison(dY2, nc * 4), poison(dH, nh * 2);
        POuts::Params p = {};
        p.out.head = ge_out((bf16 *)dY, M, N, N);
        p.out.tail.head = ge_out(dY2, M, N, N);
        p.out.tail.tail.head = ge_out_as<GeOut<bf16, 16>>((bf16 *)dH, M, N / 2, N / 2);
        if (cfg == 3) /* stored straight from registers, as where TMA cannot describe an output */
            p.out.head.tma = p.out.tail.head.tma = p.out.tail.tail.head.tma = 0;
        const int tma = p.out.head.tma && p.out.tail.head.tma && p.out.tail.tail.head.tma;
        if (cfg == 1)
            ge_run<POuts, GE_ABT, 128, GE_COOP>(c.dA, K, c.dB, K, M, N, K, p, TEST_LAUNCH);
        else if (cfg == 2)
            ge_run<POuts, GE_ABT, 128, GE_PINGPONG>(c.dA, K, c.dB, K, M, N, K, p, TEST_LAUNCH);
        else
            ge_run<POuts, GE_ABT>(c.dA, K, c.dB, K, M, N, K, p, TEST_LAUNCH);
        CK(cudaDeviceSynchronize());
        float *Y = get_bf16(dY, nc), *Y2 = get_f32(dY2, nc), *H = get_bf16(dH, nh);
        const double eY = rel_err_rows(Y, ref, c.rows, c.nr, N), eY2 = rel_err_rows(Y2, ref2, c.rows, c.nr, N);
        /* H against silu(y) y' in fp64 from the GPU's Y, every element */
        double num = 0, den = 0;
        for (size_t i = 0; i < nh; i++) {
            const double g = Y[2 * i], u = Y[2 * i + 1], r = g / (1.0 + exp(-g)) * u;
            num += (H[i] - r) * (H[i] - r), den += r * r;
        }
        const double eH = sqrt(num / den);
        CHECK(tma == (cfg < 3) && all_finite(Y, nc) && all_finite(Y2, nc) && all_finite(H, nh) &&
                  guards_intact(dY, nc * 2) && guards_intact(dY2, nc * 4) && guards_intact(dH, nh * 2) &&
                  eY < 5e-3 && eY2 < tol32(K) && eH < 5e-3,
              "declared outputs %d x %d x %d (%s): Y = acc (bf16) rel err %.2e, Y2 = 2 acc (fp32) %.2e, half-width "
              "H = silu(Y) Y' (bf16, vs fp64 of Y as stored) %.2e; every element written, guards intact",
              M, N, K, name[cfg], eY, eY2, eH);
        if (cfg == 0) {
            staged[0] = Y, staged[1] = Y2, staged[2] = H;
            continue;
        }
        if (cfg == 3) {
            const int same = memcmp(staged[0], Y, nc * 4) == 0 && memcmp(staged[1], Y2, nc * 4) == 0 &&
                             memcmp(staged[2], H, nh * 4) == 0;
            CHECK(same, "declared outputs %d x %d x %d: direct stores give the staged outputs' bits (Y, Y2, H)", M, N,
                  K);
        }
        free(Y), free(Y2), free(H);
    }
    for (float *s : staged) free(s);
    free(ref), free(ref2);
    dev_free(dY), dev_free(dY2), dev_free(dH);
}

/* An input-tile program on one configuration: Y against fp64 of X + acc (W = 2: X + acc, X - acc) on the sampled
 * rows; ld: the row stride of X and Y (W = 2: odd strides leave the 8-byte loads and stores misaligned). */
template <class P, int BN, int SCHED, int W>
static void in_tile_case(const AbtCase &c, int M, int N, int K, long ld, const char *how) {
    const int NX = W * N;
    const size_t nx = (size_t)M * ld;
    float *X = rand_host(nx, 0, 4, 1);
    void *dX = dev_bf16(X, nx), *dY = dev_alloc(nx * 2);
    poison(dY, nx * 2);
    typename P::Params p = {};
    bool tma = true;
    if constexpr (W == 1) {
        p.X = ge_out((bf16 *)dX, M, NX, ld);
        p.Y = ge_out((bf16 *)dY, M, NX, ld);
        tma = p.X.tma && p.Y.tma;
    } else {
        p.X = (const bf16 *)dX;
        p.Y = (bf16 *)dY;
        p.ld = ld;
    }
    ge_run<P, GE_ABT, BN, SCHED>(c.dA, K, c.dB, K, M, N, K, p, TEST_LAUNCH);
    CK(cudaDeviceSynchronize());
    float *Y = get_bf16(dY, nx);
    double *ref = (double *)calloc((size_t)c.nr * NX, sizeof(double));
    float *Yrows = (float *)malloc((size_t)M * NX * sizeof(float)); /* Y without the stride's padding */
    for (int m = 0; m < M; m++) memcpy(Yrows + (size_t)m * NX, Y + (size_t)m * ld, NX * sizeof(float));
    for (int i = 0; i < c.nr; i++)
        for (int n = 0; n < N; n++) {
            const double a = c.acc[(size_t)i * N + n];
            const float *x = X + (size_t)c.rows[i] * ld;
            double *r = ref + (size_t)i * NX;
            if (W == 1) {
                r[n] = x[n] + a;
            } else {
                r[2 * n] = x[2 * n] + a;
                r[2 * n + 1] = x[2 * n + 1] - a;
            }
        }
    const double e = rel_err_rows(Yrows, ref, c.rows, c.nr, NX);
    CHECK(tma && all_finite(Yrows, (size_t)M * NX) && guards_intact(dY, nx * 2) && e < 5e-3,
          "primitive input tile %d x %d x %d (%s, %s, row stride %ld): Y = %s, rel err %.2e; every element written, "
          "guards intact", M, N, K,
          SCHED == GE_PINGPONG ? "ping-pong 128x128" : BN == 256 ? "cooperative 128x256" : "cooperative 128x128",
          how, ld, W == 1 ? "X + acc" : "(X + acc, X' - acc)", e);
    free(X), free(Y), free(Yrows), free(ref);
    dev_free(dX), dev_free(dY);
}

static void test_in_tile(int M, int N, int K) {
    const AbtCase c(M, N, K);
    in_tile_case<PInTma<128, 2>, 128, GE_PINGPONG, 1>(c, M, N, K, N, "by TMA before the main loop, Y in place");
    in_tile_case<PInTma<256, 1>, 256, GE_COOP, 1>(c, M, N, K, N, "by TMA during the main loop, Y in place");
    in_tile_case<PInWide<128>, 128, GE_PINGPONG, 2>(c, M, N, K, 2L * N, "twice as wide, into registers");
    in_tile_case<PInWide<256>, 256, GE_COOP, 2>(c, M, N, K, 2L * N, "twice as wide, into registers");
    in_tile_case<PInWide<256>, 256, GE_COOP, 2>(c, M, N, K, 2L * N + 1, "twice as wide, into registers");
}

/* ---------------------------------------------------------------- the fused programs */

/* The outputs of one run of the fused chain. */
struct ChainOut {
    void *D, *O, *Z16;
    float *part, *r, *Z32;
    size_t nd, nz, np;
    ChainOut(int M, int N, int N2) : nd((size_t)M * N), nz((size_t)M * N2), np((size_t)M * ge_row_parts(N)) {
        D = dev_alloc(nd * 2), O = dev_alloc(nd * 2), Z16 = dev_alloc(nz * 2);
        part = (float *)dev_alloc(np * 4), r = (float *)dev_alloc((size_t)M * 4), Z32 = (float *)dev_alloc(nz * 4);
        poison(D, nd * 2), poison(O, nd * 2), poison(Z16, nz * 2);
        poison(part, np * 4), poison(r, (size_t)M * 4), poison(Z32, nz * 4);
    }
    ChainOut(const ChainOut &) = delete;
    ~ChainOut() { dev_free(D), dev_free(O), dev_free(Z16), dev_free(part), dev_free(r), dev_free(Z32); }
    /* the same bits as another run's: all of them, or (kres_only) K_res's D, O and partials */
    int same(const ChainOut &o, int M, bool kres_only = false) const {
        int s = same_bytes(D, o.D, nd * 2) && same_bytes(O, o.O, nd * 2) && same_bytes(part, o.part, np * 4);
        if (!kres_only)
            s = s && same_bytes(r, o.r, (size_t)M * 4) && same_bytes(Z16, o.Z16, nz * 2) &&
                same_bytes(Z32, o.Z32, nz * 4);
        return s;
    }
};

/* K_res + r, then Z = r * (O . W2^T) (bf16 and fp32), on each schedule, vs fp64 references of the unfused math on
 * sampled rows. The default schedule must give the bits of the schedules ge_pick names (K_res's and the row-scaled
 * GEMM's); on ping-pong, FusedResNorm<128> (the residual by direct loads, the launcher's path where TMA cannot
 * describe D or the residual) must give FusedResNormTma's D, O and partials (the same arithmetic). */
static void test_fused(int M, int N, int K, int N2) {
    const float eps = 1e-5f;
    const size_t nd = (size_t)M * N, nz = (size_t)M * N2;
    float *A = rand_host((size_t)M * K, 0, 1, 1), *W = rand_host((size_t)N * K, 0, 0.05, 1);
    float *res = rand_host(nd, 0, 1, 1), *gamma = rand_host(N, 1, 0.2, 0), *W2 = rand_host((size_t)N2 * N, 0, 0.05, 1);
    void *dA = dev_bf16(A, (size_t)M * K), *dW = dev_bf16(W, (size_t)N * K), *dres = dev_bf16(res, nd);
    void *dW2 = dev_bf16(W2, (size_t)N2 * N);
    float *dgamma = dev_f32(gamma, N);
    auto chain = [&](ge_config s_kres, ge_config s_z, const ChainOut &o) {
        fused_gemm_res_norm(dA, dW, dres, dgamma, o.D, o.O, o.part, M, N, K, on(s_kres));
        fused_rms_finish(o.part, M, N, eps, o.r, 0);
        fused_gemm_rowscale(o.O, dW2, o.r, o.Z16, 0, M, N2, N, on(s_z));
        fused_gemm_rowscale(o.O, dW2, o.r, o.Z32, 1, M, N2, N, on(s_z));
        CK(cudaDeviceSynchronize());
    };

    /* fp64 references on sampled rows: D, O = D * gamma, r, and Z = rmsnorm(D) . W2^T from the unrounded D */
    int rows[64];
    const int nr = pick_rows(M, 40, rows);
    double *d_ref = ref_rows(GE_ABT, A, W, M, N, K, rows, nr); /* A.W^T, then D in place */
    double *o_ref = (double *)malloc((size_t)nr * N * sizeof(double)), *r_ref = (double *)malloc(nr * sizeof(double));
    for (int i = 0; i < nr; i++) {
        double ss = 0;
        for (int n = 0; n < N; n++) {
            double *d = &d_ref[(size_t)i * N + n];
            *d += res[(size_t)rows[i] * N + n];
            ss += *d * *d;
            o_ref[(size_t)i * N + n] = *d * gamma[n];
        }
        r_ref[i] = 1.0 / sqrt(ss / N + eps);
    }
    double *z_ref = (double *)calloc((size_t)nr * N2, sizeof(double));
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < N2; j++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += o_ref[(size_t)i * N + n] * W2[(size_t)j * N + n];
            z_ref[(size_t)i * N2 + j] = r_ref[i] * s;
        }
    double *zo = (double *)calloc((size_t)nr * N2, sizeof(double));

    const ge_config pick_kres = ge_pick(GE_RESIDUAL, M, N, K, ge_num_sms());
    const ge_config pick_z = ge_pick(GE_FUSED, M, N2, N, ge_num_sms());
    /* the configs the fused programs are instantiated for (ge_run_fused), and the default */
    static const ge_config scheds[] = {GE_PINGPONG_128, GE_COOP_256, GE_AUTO};
    for (ge_config s : scheds) {
        char sn[160], n1[64], n2[64];
        if (!s.bn)
            snprintf(sn, sizeof sn, "auto: K_res %s, row-scaled GEMM %s", ge_config_format(pick_kres, n1, sizeof n1),
                     ge_config_format(pick_z, n2, sizeof n2));
        else
            snprintf(sn, sizeof sn, "%s", ge_config_format(s, n1, sizeof n1));
        const ChainOut o(M, N, N2);
        chain(s, s, o);
        float *D = get_bf16(o.D, nd), *O = get_bf16(o.O, nd), *r = get_f32(o.r, M);
        float *Z16 = get_bf16(o.Z16, nz), *Z32 = get_f32(o.Z32, nz);

        double rnum = 0, rden = 0;
        for (int i = 0; i < nr; i++)
            rnum += (r[rows[i]] - r_ref[i]) * (r[rows[i]] - r_ref[i]), rden += r_ref[i] * r_ref[i];
        const double eD = rel_err_rows(D, d_ref, rows, nr, N), eO = rel_err_rows(O, o_ref, rows, nr, N);
        const double er = sqrt(rnum / rden);
        CHECK(all_finite(D, nd) && all_finite(O, nd) && all_finite(r, M) && guards_intact(o.D, nd * 2) &&
                  guards_intact(o.O, nd * 2) && guards_intact(o.part, o.np * 4) && eD < 5e-3 && eO < 5e-3 &&
                  er < 1e-3,
              "fused K_res %d x %d x %d (%s): D = A.W^T + res rel err %.2e, O = D*gamma %.2e, r (from partials) %.2e",
              M, N, K, sn, eD, eO, er);

        const double ez16 = rel_err_rows(Z16, z_ref, rows, nr, N2), ez32 = rel_err_rows(Z32, z_ref, rows, nr, N2);
        CHECK(all_finite(Z16, nz) && all_finite(Z32, nz) && guards_intact(o.Z16, nz * 2) &&
                  guards_intact(o.Z32, nz * 4) && ez16 < 1e-2 && ez32 < 1e-2,
              "fused row-scaled GEMM Z = r*(O.W2^T), %d x %d x %d (%s): bf16 Z rel err %.2e, fp32 Z %.2e (chain vs "
              "unfused fp64)", M, N2, N, sn, ez16, ez32);

        /* the row-scaled GEMM alone, against fp64 of its own inputs (O and r as the GPU stored them) */
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < N2; j++) {
                double acc = 0;
                for (int n = 0; n < N; n++) acc += (double)O[(size_t)rows[i] * N + n] * W2[(size_t)j * N + n];
                zo[(size_t)i * N2 + j] = r[rows[i]] * acc;
            }
        const double eo32 = rel_err_rows(Z32, zo, rows, nr, N2), eo16 = rel_err_rows(Z16, zo, rows, nr, N2);
        CHECK(eo32 < tol32(N) && eo16 < 5e-3, "fused row-scaled GEMM alone (%s): fp32 Z rel err %.2e, bf16 Z %.2e",
              sn, eo32, eo16);

        if (!s.bn) { /* the same chain with the schedules ge_pick names */
            const ChainOut e(M, N, N2);
            chain(pick_kres, pick_z, e);
            CHECK(o.same(e, M), "fused %d x %d x %d -> %d: the default schedules give the bits of the ones ge_pick "
                  "names (%s): D, O, partials, r, bf16 and fp32 Z", M, N, K, N2, sn);
        }
        if (ge_config_eq(s, GE_PINGPONG_128)) { /* K_res with the residual by direct loads, on ping-pong */
            const ChainOut e(M, N, N2);
            FusedResNormParams p = {};
            p.out.head = ge_out((bf16 *)e.D, M, N, N);
            p.out.tail.head = ge_out((bf16 *)e.O, M, N, N);
            p.res = (const bf16 *)dres;
            p.gamma = dgamma;
            p.part = e.part;
            p.ldres = N;
            p.ldpart = ge_row_parts(N);
            p.res_tma = ge_out((bf16 *)dres, M, N, N);
            ge_run_fused<FusedResNorm<128>, FusedResNorm<256>>(GE_RESIDUAL, dA, K, dW, K, M, N, K, p, on(GE_PINGPONG_128));
            CK(cudaDeviceSynchronize());
            CHECK(o.same(e, M, true) && guards_intact(e.D, nd * 2) && guards_intact(e.O, nd * 2),
                  "fused K_res %d x %d x %d on ping-pong: the residual by direct loads (FusedResNorm<128>) gives the "
                  "TMA variant's D, O and partials bit for bit", M, N, K);
        }
        free(D), free(O), free(r), free(Z16), free(Z32);
    }

    free(A), free(W), free(res), free(gamma), free(W2), free(d_ref), free(o_ref), free(r_ref), free(z_ref), free(zo);
    dev_free(dA), dev_free(dW), dev_free(dres), dev_free(dW2), dev_free(dgamma);
}

/* The staging-slot address rule the epilogue relies on (ge_slot_off_bf16, ge_slot_off_f32): moving a fragment (8 columns) along a chunk
 * only flips swizzle bits of the first fragment's offset, for every row and thread column pair. */
static void test_slot_offsets(void) {
    int bad16 = 0, bad32 = 0;
    for (int r = 0; r < 64; r++)
        for (int cc = 0; cc < 8; cc += 2)
            for (int i = 0; i < 4; i++) {
                bad16 += ge_stage_off((const bf16 *)0, r, cc + 8 * i) != (ge_stage_off((const bf16 *)0, r, cc) ^ (i << 4));
                bad32 += ge_stage_off((const float *)0, r, cc + 8 * i) != (ge_stage_off((const float *)0, r, cc) ^ (i << 5));
            }
    CHECK(bad16 == 0 && bad32 == 0, "staging offsets: fragment i = first ^ (i << 4 or 5): %d bf16, %d fp32 mismatches",
          bad16, bad32);
}

int main(void) {
    alarm(120); /* a deadlocked pipeline ends the test instead of the machine's lease */
    const char *seed = getenv("GE_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
    printf("# test_gemm: seed %llu (GE_SEED=%llu repeats it)\n", (unsigned long long)rng_state,
           (unsigned long long)rng_state);
    test_slot_offsets();
    int dev = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        printf("# test_gemm: %s is not a Hopper GPU (sm_%d%d): skipped\n", prop.name, prop.major, prop.minor);
        return 0;
    }
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 2;
    }

    /* A.B^T: only K (the rows' length) must be a multiple of 8 */
    test_plain(GE_ABT, 8191, 2047, 1000);
    test_plain(GE_ABT, 1, 8, 16);
    test_plain(GE_ABT, 1, 3, 8);
    test_plain(GE_ABT, 128, 256, 64);
    test_plain(GE_ABT, 300, 777, 8192);
    test_plain(GE_ABT, 2000, 1000, 200);
    test_plain(GE_ABT, 200, 1000, 8192);
    /* A.B: K and N multiples of 8 */
    test_plain(GE_AB, 8191, 2040, 1000);
    test_plain(GE_AB, 1, 8, 16);
    test_plain(GE_AB, 333, 264, 8);
    /* A^T.B: M and N multiples of 8, K free */
    test_plain(GE_ATB, 2040, 1000, 8191);
    test_plain(GE_ATB, 8, 8, 16);
    test_plain(GE_ATB, 8, 16, 1);
    test_plain(GE_ATB, 264, 520, 100);
    /* the strided fp32 launcher: each layout on the two tile widths */
    for (ge_config s : {GE_COOP_256, GE_PINGPONG_128}) {
        test_strided(GE_ABT, 1001, 777, 136, s);
        test_strided(GE_AB, 333, 264, 72, s);
        test_strided(GE_ATB, 264, 520, 100, s);
    }

    test_primitives(300, 520, 136);
    test_primitives(1000, 777, 64);
    test_outputs(1000, 784, 136); /* ragged tiles on every side */
    test_outputs(4000, 2064, 200); /* more tiles than SMs: staging buffers rotate across tiles */
    test_in_tile(1000, 776, 136);   /* 3 k-blocks: most slots load after the last one */
    test_in_tile(2000, 2064, 1280); /* 20 k-blocks: one slot per k-block */

    /* The fused programs on each schedule (AUTO: ping-pong at these sizes), on three shapes, one with a ragged last
     * tile row (1001 rows). */
    test_fused(1000, 2000, 264, 520);
    test_fused(4096, 2048, 2048, 2048);
    test_fused(1001, 1000, 72, 136);

    cublasDestroy(blas);
    return test_summary();
}
