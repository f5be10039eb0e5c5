/* test_cpu_ops.c: every op of kernels_cpu against naive unfused references in double (and finite differences of them),
 * with ragged shapes, NaN-poisoned outputs, accumulate semantics and bitwise determinism across thread counts. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test_util.h"

#define REL_TOL 1e-5    /* ||fp32 out - double ref|| / ||ref|| */
#define FD_TOL 1e-5     /* |<g, u> - expected| / (||g|| ||u||) for a kernel's fp32 gradient (see check_directional) */
#define FD_REF_TOL 1e-8 /* the same for a double reference gradient (validates the reference) */
#define FD_STEP 1e-5

static const Kernels *kc = &kernels_cpu;
static KernelContext *cctx; /* kc's context, made in main */

/* ---------------------------------------------------------------- buffers, random numbers, comparisons */

/* Every buffer of a test goes on this list and is freed by free_all() when the test ends. */
static void *tracked[256];
static int n_tracked;

static void *talloc(size_t bytes) {
    if (n_tracked == (int)(sizeof tracked / sizeof tracked[0])) {
        fprintf(stderr, "test_cpu_ops: too many buffers in one test\n");
        exit(2);
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_cpu_ops: out of memory\n");
        exit(2);
    }
    return tracked[n_tracked++] = p;
}

static void free_all(void) {
    while (n_tracked) free(tracked[--n_tracked]);
}


/* offset + scale * uniform[-1, 1) */
static float *rand_f(size_t n, double offset, double scale) {
    float *a = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = (float)(offset + scale * rnd());
    return a;
}

static int32_t *rand_tokens(int n, int V) {
    int32_t *t = talloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) t[i] = (int32_t)((rnd() + 1.0) * 0.5 * V) % V;
    return t;
}

/* The token groups of ids (kernels.h), test-owned. */
static int32_t *groups_of(const int32_t *ids, int n, int V) {
    int32_t *g = talloc(token_groups_ints((size_t)n) * sizeof(int32_t)), *count = talloc((V + 1) * sizeof(int32_t));
    token_groups_build(ids, n, V, g, count);
    return g;
}

static float *nan_f(size_t n) {
    float *a = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = NAN;
    return a;
}

static float *copy_f(const float *a, size_t n) {
    float *b = talloc(n * sizeof(float));
    memcpy(b, a, n * sizeof(float));
    return b;
}

static double *to_d(const float *a, size_t n) {
    double *b = talloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) b[i] = a[i];
    return b;
}

static double *zeros_d(size_t n) {
    double *b = talloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) b[i] = 0.0;
    return b;
}

static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ||a - ref|| / ||ref||, a fp32 against a double reference; NaN anywhere in a (an unwritten output) gives NaN. */
static double rel_err(const float *a, const double *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void check_close(const char *what, const float *a, const double *ref, size_t n) {
    const double err = rel_err(a, ref, n);
    CHECK(all_finite_f(a, n) && err < REL_TOL, "%s: rel err %.2e (tol %.0e)", what, err, REL_TOL);
}

/* A gradient g (a kernel's, or a double reference's) along a direction u against the value expected for <g, u> (a
 * central difference of the double forward, or an adjoint identity), as |<g, u> - expected| / (||g|| ||u||):
 * scale-aware, so a large loss with a small directional derivative is judged fairly. */
static void check_directional(const char *what, const double *g, const double *u, size_t n, double expected,
                              double tol) {
    const double err = fabs(dot_d(g, u, n) - expected) / sqrt(dot_d(g, g, n) * dot_d(u, u, n));
    CHECK(err < tol, "%s: |<g,u> - expected| / (|g| |u|) = %.2e (tol %.0e)", what, err, tol);
}

/* x +/- FD_STEP * u, into a fresh buffer. */
static double *step_d(const double *x, const double *u, size_t n, double sign) {
    double *y = talloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i] + sign * FD_STEP * u[i];
    return y;
}

static double *rand_dir(size_t n) {
    double *u = talloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) u[i] = rnd();
    return u;
}

/* Determinism checks run an op with 1 and with 3 threads; set_threads(0) restores the count the test started with. */
static int default_threads;

static void set_threads(int n) { omp_set_num_threads(n ? n : default_threads); }

static void check_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
    CHECK(memcmp(a, b, bytes) == 0, "%s: bitwise identical with 1 and 3 threads", what);
    set_threads(0);
}

/* ---------------------------------------------------------------- naive double references (unfused) */

/* Y[M,N] = X[M,K] . W[N,K]^T */
static void ref_xwt(const double *X, const double *W, double *Y, int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += X[(size_t)m * K + k] * W[(size_t)n * K + k];
            Y[(size_t)m * N + n] = s;
        }
}

/* dX[M,K] = dY[M,N] . W[N,K] */
static void ref_xw(const double *dY, const double *W, double *dX, int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += dY[(size_t)m * N + n] * W[(size_t)n * K + k];
            dX[(size_t)m * K + k] = s;
        }
}

static double ref_rms_rscale(const double *x, int n, double eps) {
    return 1.0 / sqrt(dot_d(x, x, (size_t)n) / n + eps);
}

static void scale_rows(double *Y, const double *r, int M, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) Y[(size_t)m * N + n] *= r[m];
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

/* RoPE tables [T, hd/2] in fp32, as the model builds them (theta = 10000). */
static void rope_tables(int T, int hd, float **cos_t, float **sin_t) {
    *cos_t = talloc((size_t)T * hd / 2 * sizeof(float));
    *sin_t = talloc((size_t)T * hd / 2 * sizeof(float));
    for (int pos = 0; pos < T; pos++)
        for (int i = 0; i < hd / 2; i++) {
            const double angle = pos * pow(10000.0, -2.0 * i / hd);
            (*cos_t)[pos * hd / 2 + i] = (float)cos(angle);
            (*sin_t)[pos * hd / 2 + i] = (float)sin(angle);
        }
}

/* RoPE of one row in place, done the Hugging Face way: un-interleave each head (internal column 2i is HF column i,
 * 2i+1 is HF column i + hd/2), apply x*cos + rotate_half(x)*sin (sin negated for the transpose), interleave back. */
static void ref_rope_row(double *z, int n_rope_cols, int hd, const float *cos_row, const float *sin_row, double sign) {
    const int half = hd / 2;
    double hf[64], out[64]; /* hd <= 64 */
    for (int head = 0; head < n_rope_cols; head += hd) {
        for (int i = 0; i < half; i++) {
            hf[i] = z[head + 2 * i];
            hf[i + half] = z[head + 2 * i + 1];
        }
        for (int i = 0; i < hd; i++) {
            const double rot = i < half ? -hf[i + half] : hf[i - half];
            out[i] = hf[i] * cos_row[i % half] + rot * sign * sin_row[i % half];
        }
        for (int i = 0; i < half; i++) {
            z[head + 2 * i] = out[i];
            z[head + 2 * i + 1] = out[i + half];
        }
    }
}

/* Cross-entropy of one row of logits: returns lse - z[t]; g (optional) = dscale * (softmax - onehot). */
static double ref_cross_entropy(const double *z, int t, int V, double dscale, double *g) {
    double zmax = z[0];
    for (int v = 1; v < V; v++) zmax = fmax(zmax, z[v]);
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp(z[v] - zmax);
    const double lse = zmax + log(s);
    if (g)
        for (int v = 0; v < V; v++) g[v] = dscale * (exp(z[v] - lse) - (v == t));
    return lse - z[t];
}

/* Attention with the full T x T score matrix per (batch, head): y [B*T, Hq*hd], lse [B, Hq, T] (lse may be NULL).
 * With dy (not NULL), also the backward into dqkv (zeroed here) from the materialized P, dP and dS. */
static void ref_attention(const double *qkv, double *y, double *lse, const double *dy, double *dqkv, int B, int T,
                          int Hq, int Hkv, int hd) {
    const int ld = (Hq + 2 * Hkv) * hd, ldy = Hq * hd, group = Hq / Hkv;
    const double scale = 1.0 / sqrt((double)hd);
    double *S = talloc((size_t)T * T * sizeof(double)), *P = talloc((size_t)T * T * sizeof(double));
    double *dP = talloc((size_t)T * sizeof(double));
    if (dqkv) memset(dqkv, 0, (size_t)B * T * ld * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++) {
            const double *Q = qkv + (size_t)b * T * ld + h * hd;
            const double *Kh = qkv + (size_t)b * T * ld + (Hq + h / group) * hd;
            const double *Vh = qkv + (size_t)b * T * ld + (Hq + Hkv + h / group) * hd;
            for (int i = 0; i < T; i++) {
                double smax = -INFINITY;
                for (int j = 0; j < T; j++) {
                    S[i * T + j] = j <= i ? scale * dot_d(Q + (size_t)i * ld, Kh + (size_t)j * ld, hd) : -INFINITY;
                    smax = fmax(smax, S[i * T + j]);
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) sum += exp(S[i * T + j] - smax);
                if (lse) lse[((size_t)b * Hq + h) * T + i] = smax + log(sum);
                for (int j = 0; j < T; j++) P[i * T + j] = exp(S[i * T + j] - smax) / sum;
                double *yi = y + ((size_t)b * T + i) * ldy + h * hd;
                for (int d = 0; d < hd; d++) {
                    double s = 0.0;
                    for (int j = 0; j < T; j++) s += P[i * T + j] * Vh[(size_t)j * ld + d];
                    yi[d] = s;
                }
            }
            if (!dy) continue;
            double *dQ = dqkv + (size_t)b * T * ld + h * hd;
            double *dK = dqkv + (size_t)b * T * ld + (Hq + h / group) * hd;
            double *dV = dqkv + (size_t)b * T * ld + (Hq + Hkv + h / group) * hd;
            const double *dY = dy + (size_t)b * T * ldy + h * hd;
            for (int i = 0; i < T; i++) {
                /* softmax backward: dS_ij = P_ij (dP_ij - sum_l P_il dP_il) with dP_ij = <dy_i, v_j> */
                double rowsum = 0.0;
                for (int j = 0; j < T; j++) {
                    dP[j] = dot_d(dY + (size_t)i * ldy, Vh + (size_t)j * ld, hd);
                    rowsum += P[i * T + j] * dP[j];
                }
                for (int j = 0; j < T; j++) {
                    const double dS = P[i * T + j] * (dP[j] - rowsum);
                    for (int d = 0; d < hd; d++) {
                        dQ[(size_t)i * ld + d] += scale * dS * Kh[(size_t)j * ld + d];
                        dK[(size_t)j * ld + d] += scale * dS * Q[(size_t)i * ld + d];
                        dV[(size_t)j * ld + d] += P[i * T + j] * dY[(size_t)i * ldy + d];
                    }
                }
            }
        }
}

/* ---------------------------------------------------------------- tests */

static const int M = 37, N = 45, K = 29; /* ragged GEMM shape */

static void test_memory(void) {
    CHECK(kc->act_bytes == sizeof(float) && strcmp(kc->name, "cpu") == 0, "memory: name cpu, act_bytes 4");
    const size_t n = 1001;
    float *p = kc->alloc(cctx, n * sizeof(float));
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += p[i] != 0.0f;
    CHECK(((uintptr_t)p % 64) == 0 && nonzero == 0, "memory: alloc is 64-byte aligned and zero-filled");
    float *src = rand_f(n, 0.0, 1.0), *back = nan_f(n);
    kc->copy_to_device(cctx, p, src, n * sizeof(float));
    kc->copy_to_host(cctx, back, p, n * sizeof(float));
    CHECK(memcmp(src, back, n * sizeof(float)) == 0, "memory: copy_to_device then copy_to_host round-trips");
    kc->memset_zero(cctx, p, n * sizeof(float));
    nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += p[i] != 0.0f;
    CHECK(nonzero == 0, "memory: memset_zero");
    float *back2 = nan_f(n);
    kc->act_from_f32(cctx, p, src, n);
    kc->act_to_f32(cctx, back2, p, n);
    kc->synchronize(cctx);
    CHECK(memcmp(src, back2, n * sizeof(float)) == 0, "memory: act_from_f32 then act_to_f32 round-trips exactly");
    kc->free(cctx, p);
    free_all();
}

static void test_embed_norm(void) {
    const int V = 11, D = 29;
    const float eps = 1e-5f;
    const int32_t *tok = rand_tokens(M, V);
    const float *E = rand_f((size_t)V * D, 0.0, 1.0), *gamma = rand_f(D, 1.0, 0.5);
    float *x = nan_f((size_t)M * D), *O = nan_f((size_t)M * D), *r = nan_f(M);
    kc->embed_norm(cctx, tok, E, gamma, eps, x, O, r, M, D);

    int rows_equal = 1;
    double *O_ref = zeros_d((size_t)M * D), *r_ref = zeros_d(M);
    for (int m = 0; m < M; m++) {
        rows_equal &= memcmp(x + (size_t)m * D, E + (size_t)tok[m] * D, D * sizeof(float)) == 0;
        double *xm = to_d(E + (size_t)tok[m] * D, D);
        for (int d = 0; d < D; d++) O_ref[(size_t)m * D + d] = xm[d] * gamma[d];
        r_ref[m] = ref_rms_rscale(xm, D, eps);
    }
    CHECK(rows_equal, "embed_norm: x rows are the embedding rows of the tokens");
    check_close("embed_norm: O = x * gamma", O, O_ref, (size_t)M * D);
    check_close("embed_norm: r", r, r_ref, M);
    free_all();
}

static void test_gemm_residual_norm(void) {
    const float eps = 1e-5f;
    const float *A = rand_f((size_t)M * K, 0.0, 1.0), *W = rand_f((size_t)N * K, 0.0, 0.3);
    const float *res = rand_f((size_t)M * N, 0.0, 1.0), *gamma = rand_f(N, 1.0, 0.5);
    float *h = nan_f((size_t)M * N), *O = nan_f((size_t)M * N), *r = nan_f(M);
    kc->gemm_residual_norm(cctx, A, W, res, gamma, eps, h, O, r, M, N, K);

    double *h_ref = zeros_d((size_t)M * N), *O_ref = zeros_d((size_t)M * N), *r_ref = zeros_d(M);
    ref_xwt(to_d(A, (size_t)M * K), to_d(W, (size_t)N * K), h_ref, M, N, K);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            h_ref[(size_t)m * N + n] += res[(size_t)m * N + n];
            O_ref[(size_t)m * N + n] = h_ref[(size_t)m * N + n] * gamma[n];
        }
        r_ref[m] = ref_rms_rscale(h_ref + (size_t)m * N, N, eps);
    }
    check_close("gemm_residual_norm: h = A.W^T + res", h, h_ref, (size_t)M * N);
    check_close("gemm_residual_norm: O = h * gamma", O, O_ref, (size_t)M * N);
    check_close("gemm_residual_norm: r", r, r_ref, M);
    free_all();
}

static void test_gemm_rope(int T, int Hq, int Hkv, int hd) {
    const int Nq = (Hq + 2 * Hkv) * hd, n_rope = (Hq + Hkv) * hd;
    float *cos_t, *sin_t;
    rope_tables(T, hd, &cos_t, &sin_t);
    const float *O = rand_f((size_t)M * K, 0.0, 1.0), *W = rand_f((size_t)Nq * K, 0.0, 0.3);
    const float *r = rand_f(M, 1.0, 0.5);
    float *Z = nan_f((size_t)M * Nq);
    kc->gemm_rope(cctx, O, W, r, cos_t, sin_t, Z, M, Nq, K, n_rope, hd, T);

    double *Z_ref = zeros_d((size_t)M * Nq);
    ref_xwt(to_d(O, (size_t)M * K), to_d(W, (size_t)Nq * K), Z_ref, M, Nq, K);
    scale_rows(Z_ref, to_d(r, M), M, Nq);
    for (int m = 0; m < M; m++)
        ref_rope_row(Z_ref + (size_t)m * Nq, n_rope, hd, cos_t + (m % T) * hd / 2, sin_t + (m % T) * hd / 2, 1.0);
    char what[128];
    snprintf(what, sizeof what, "gemm_rope (T=%d Hq=%d Hkv=%d hd=%d): Z = rope(r * O.W^T)", T, Hq, Hkv, hd);
    check_close(what, Z, Z_ref, (size_t)M * Nq);
    free_all();
}

static void test_gemm_swiglu(void) {
    const int F = 23;
    const float *O = rand_f((size_t)M * K, 0.0, 1.0), *W = rand_f((size_t)2 * F * K, 0.0, 0.5);
    const float *r = rand_f(M, 1.0, 0.5);
    float *Z = nan_f((size_t)M * 2 * F), *act = nan_f((size_t)M * F);
    kc->gemm_swiglu(cctx, O, W, r, Z, act, M, F, K);

    double *Z_ref = zeros_d((size_t)M * 2 * F), *act_ref = zeros_d((size_t)M * F);
    ref_xwt(to_d(O, (size_t)M * K), to_d(W, (size_t)2 * F * K), Z_ref, M, 2 * F, K);
    scale_rows(Z_ref, to_d(r, M), M, 2 * F);
    for (size_t i = 0; i < (size_t)M * F; i++) act_ref[i] = silu(Z_ref[2 * i]) * Z_ref[2 * i + 1];
    check_close("gemm_swiglu: Z = r * O.W^T", Z, Z_ref, (size_t)M * 2 * F);
    check_close("gemm_swiglu: act = silu(G) * U", act, act_ref, (size_t)M * F);
    free_all();
}

static void test_gemm_rowscale(void) {
    const float *O = rand_f((size_t)M * K, 0.0, 1.0), *W = rand_f((size_t)N * K, 0.0, 1.0);
    const float *r = rand_f(M, 1.0, 0.5);
    float *Y = nan_f((size_t)M * N);
    kc->gemm_rowscale(cctx, O, W, r, Y, M, N, K);
    double *Y_ref = zeros_d((size_t)M * N);
    ref_xwt(to_d(O, (size_t)M * K), to_d(W, (size_t)N * K), Y_ref, M, N, K);
    scale_rows(Y_ref, to_d(r, M), M, N);
    check_close("gemm_rowscale: Y = r * O.W^T", Y, Y_ref, (size_t)M * N);
    free_all();
}

/* dscale * sum_m CE(z[m]) in double. */
static double ref_total_loss(const double *z, const int32_t *t, int V, double dscale) {
    double s = 0.0;
    for (int m = 0; m < M; m++) s += ref_cross_entropy(z + (size_t)m * V, t[m], V, 0.0, NULL);
    return dscale * s;
}

/* The LM head's gradient in double: dZ = r * g and c = <z, g> per row, then the reference outputs of lm_head_train:
 * dW0 + dZ^T O, dres = gamma G - (r^2/K) c x with G = dZ W, dgamma0 + sum_m G x. */
static void ref_lm_head_train(const double *z, const int32_t *tgt, const float *r, float dscale, const float *O,
                              const float *W, const float *x, const float *gamma, const float *dW0,
                              const float *dgamma0, int V, double *g, double *loss_ref, double *dW_ref,
                              double *dres_ref, double *dgamma_ref) {
    double *dZ = zeros_d((size_t)M * V), *c = zeros_d(M), *G = zeros_d((size_t)M * K);
    for (int m = 0; m < M; m++) {
        loss_ref[m] = ref_cross_entropy(z + (size_t)m * V, tgt[m], V, dscale, g + (size_t)m * V);
        c[m] = dot_d(z + (size_t)m * V, g + (size_t)m * V, V);
        for (int v = 0; v < V; v++) dZ[(size_t)m * V + v] = r[m] * g[(size_t)m * V + v];
    }
    for (size_t i = 0; i < (size_t)V * K; i++) dW_ref[i] = dW0[i];
    for (int v = 0; v < V; v++)
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) dW_ref[(size_t)v * K + k] += dZ[(size_t)m * V + v] * O[(size_t)m * K + k];
    ref_xw(dZ, to_d(W, (size_t)V * K), G, M, V, K);
    for (int k = 0; k < K; k++) dgamma_ref[k] = dgamma0[k];
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)m * K + k;
            dres_ref[i] = gamma[k] * G[i] - (double)r[m] * r[m] / K * c[m] * x[i];
            dgamma_ref[k] += G[i] * x[i];
        }
}

static void test_lm_head_loss(double logit_scale, const char *label) {
    const int V = 45;
    const float dscale = 0.7f / M;
    const float *O = rand_f((size_t)M * K, 0.0, logit_scale), *W = rand_f((size_t)V * K, 0.0, 1.0);
    const float *r = rand_f(M, 1.0, 0.5), *x = rand_f((size_t)M * K, 0.0, 1.0), *gamma = rand_f(K, 1.0, 0.5);
    const float *dW0 = rand_f((size_t)V * K, 0.0, 1.0), *dgamma0 = rand_f(K, 0.0, 1.0);
    const int32_t *tgt = rand_tokens(M, V);
    float *loss = nan_f(M), *loss_only = nan_f(M), *dres = nan_f((size_t)M * K);
    float *dW = copy_f(dW0, (size_t)V * K), *dgamma = copy_f(dgamma0, K);
    kc->lm_head_train(cctx, O, W, r, tgt, groups_of(tgt, M, V), dscale, x, gamma, loss, dW, dres, dgamma, M, V, K);
    kc->lm_head_loss(cctx, O, W, r, tgt, loss_only, M, V, K);

    double *z = zeros_d((size_t)M * V), *g = zeros_d((size_t)M * V), *loss_ref = zeros_d(M);
    double *dW_ref = zeros_d((size_t)V * K), *dres_ref = zeros_d((size_t)M * K), *dgamma_ref = zeros_d(K);
    ref_xwt(to_d(O, (size_t)M * K), to_d(W, (size_t)V * K), z, M, V, K);
    scale_rows(z, to_d(r, M), M, V);
    ref_lm_head_train(z, tgt, r, dscale, O, W, x, gamma, dW0, dgamma0, V, g, loss_ref, dW_ref, dres_ref, dgamma_ref);
    char what[160];
    snprintf(what, sizeof what, "lm_head_train (%s): loss = lse - logit[target]", label);
    check_close(what, loss, loss_ref, M);
    snprintf(what, sizeof what, "lm_head_train (%s): dW += (r g)^T O with g = dscale (softmax - onehot)", label);
    check_close(what, dW, dW_ref, (size_t)V * K);
    snprintf(what, sizeof what, "lm_head_train (%s): dres = gamma G - (r^2/K) c x, G = (r g) W, c = <logits, g>",
             label);
    check_close(what, dres, dres_ref, (size_t)M * K);
    snprintf(what, sizeof what, "lm_head_train (%s): dgamma += sum G x", label);
    check_close(what, dgamma, dgamma_ref, K);
    snprintf(what, sizeof what, "lm_head_loss (%s): the loss of lm_head_train, bit for bit", label);
    CHECK(memcmp(loss, loss_only, M * sizeof(float)) == 0, "%s", what);

    /* the reference g against finite differences of dscale * sum_m loss[m] with respect to the logits */
    const double *u = rand_dir((size_t)M * V);
    const double fd = (ref_total_loss(step_d(z, u, (size_t)M * V, 1.0), tgt, V, dscale) -
                       ref_total_loss(step_d(z, u, (size_t)M * V, -1.0), tgt, V, dscale)) /
                      (2 * FD_STEP);
    snprintf(what, sizeof what, "lm_head_train (%s): reference g", label);
    check_directional(what, g, u, (size_t)M * V, fd, FD_REF_TOL);
    free_all();
}

static void test_lm_head_uniform(void) {
    const int V = 45;
    const float *O = rand_f((size_t)M * K, 0.0, 1.0), *r = rand_f(M, 1.0, 0.5), *x = rand_f((size_t)M * K, 0.0, 1.0);
    const float *gamma = rand_f(K, 1.0, 0.5);
    float *W = talloc((size_t)V * K * sizeof(float));
    memset(W, 0, (size_t)V * K * sizeof(float)); /* all logits 0 */
    const int32_t *tgt = rand_tokens(M, V);
    float *loss = nan_f(M), *dres = nan_f((size_t)M * K), *dW = talloc((size_t)V * K * sizeof(float));
    float *dgamma = talloc(K * sizeof(float));
    memset(dW, 0, (size_t)V * K * sizeof(float));
    memset(dgamma, 0, K * sizeof(float));
    kc->lm_head_train(cctx, O, W, r, tgt, groups_of(tgt, M, V), 1.0f, x, gamma, loss, dW, dres, dgamma, M, V, K);
    double loss_err = 0.0, dW_err = 0.0, dres_max = 0.0;
    for (int m = 0; m < M; m++) loss_err = fmax(loss_err, fabs(loss[m] - log((double)V)));
    /* dZ = r (1/V - onehot), c = 0; W = 0 makes G and so dres 0 */
    for (int v = 0; v < V; v++)
        for (int k = 0; k < K; k++) {
            double ref = 0.0;
            for (int m = 0; m < M; m++) ref += r[m] * (1.0 / V - (v == tgt[m])) * O[(size_t)m * K + k];
            dW_err = fmax(dW_err, fabs(dW[(size_t)v * K + k] - ref));
        }
    for (size_t i = 0; i < (size_t)M * K; i++) dres_max = fmax(dres_max, fabs(dres[i]));
    CHECK(loss_err < 1e-6, "lm_head_train: uniform logits give loss ln(V) (max err %.2e, tol 1e-6)", loss_err);
    CHECK(dW_err < 1e-5 && dres_max == 0.0,
          "lm_head_train: uniform logits give dW = sum r (1/V - onehot) O (max err %.2e, tol 1e-5), dres 0", dW_err);
    free_all();
}

static void test_gemm_norm_backward(void) {
    const float *dZ = rand_f((size_t)M * N, 0.0, 1.0), *W = rand_f((size_t)N * K, 0.0, 0.5);
    const float *gamma = rand_f(K, 1.0, 0.5), *r = rand_f(M, 1.0, 0.5), *c = rand_f(M, 0.0, 2.0);
    const float *x = rand_f((size_t)M * K, 0.0, 1.0);
    const float *dgamma0 = rand_f(K, 0.0, 1.0), *dres0 = rand_f((size_t)M * K, 0.0, 1.0);

    double *G = zeros_d((size_t)M * K), *dx_ref = zeros_d((size_t)M * K), *dgamma_ref = to_d(dgamma0, K);
    ref_xw(to_d(dZ, (size_t)M * N), to_d(W, (size_t)N * K), G, M, N, K);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)m * K + k;
            dx_ref[i] = gamma[k] * G[i] - (double)r[m] * r[m] / K * c[m] * x[i];
            dgamma_ref[k] += G[i] * x[i];
        }

    float *dres = nan_f((size_t)M * K), *dgamma = copy_f(dgamma0, K);
    kc->gemm_norm_backward(cctx, dZ, W, gamma, r, c, x, dres, dgamma, 0, M, N, K);
    check_close("gemm_norm_backward (accumulate 0): dres = gamma*G - (r^2/K) c x", dres, dx_ref, (size_t)M * K);
    check_close("gemm_norm_backward: dgamma += sum_m G x", dgamma, dgamma_ref, K);

    float *dres_acc = copy_f(dres0, (size_t)M * K), *dgamma_acc = copy_f(dgamma0, K);
    kc->gemm_norm_backward(cctx, dZ, W, gamma, r, c, x, dres_acc, dgamma_acc, 1, M, N, K);
    double *dres_acc_ref = to_d(dres0, (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) dres_acc_ref[i] += dx_ref[i];
    check_close("gemm_norm_backward (accumulate 1): dres += dx", dres_acc, dres_acc_ref, (size_t)M * K);

    float *dgamma_1 = copy_f(dgamma0, K), *dgamma_3 = copy_f(dgamma0, K);
    float *dres_1 = copy_f(dres0, (size_t)M * K), *dres_3 = copy_f(dres0, (size_t)M * K);
    set_threads(1);
    kc->gemm_norm_backward(cctx, dZ, W, gamma, r, c, x, dres_1, dgamma_1, 1, M, N, K);
    set_threads(3);
    kc->gemm_norm_backward(cctx, dZ, W, gamma, r, c, x, dres_3, dgamma_3, 1, M, N, K);
    check_same_bits("gemm_norm_backward: dres", dres_1, dres_3, (size_t)M * K * sizeof(float));
    check_same_bits("gemm_norm_backward: dgamma", dgamma_1, dgamma_3, K * sizeof(float));
    free_all();
}

/* L = <z, w> with z = r(x) * ((x * gamma) . W^T), the forward that gemm_norm_backward differentiates. */
static double norm_chain_loss(const double *x, const double *gamma, const double *W, const double *w, double eps) {
    double *O = zeros_d((size_t)M * K), *z = zeros_d((size_t)M * N), *r = zeros_d(M);
    for (int m = 0; m < M; m++) {
        r[m] = ref_rms_rscale(x + (size_t)m * K, K, eps);
        for (int k = 0; k < K; k++) O[(size_t)m * K + k] = x[(size_t)m * K + k] * gamma[k];
    }
    ref_xwt(O, W, z, M, N, K);
    scale_rows(z, r, M, N);
    return dot_d(z, w, (size_t)M * N);
}

static void test_gemm_norm_backward_fd(void) {
    const double eps = 1e-5;
    const float *xf = rand_f((size_t)M * K, 0.0, 1.0), *gf = rand_f(K, 1.0, 0.5);
    const float *Wf = rand_f((size_t)N * K, 0.0, 0.5), *wf = rand_f((size_t)M * N, 0.0, 1.0);
    double *x = to_d(xf, (size_t)M * K), *gamma = to_d(gf, K), *W = to_d(Wf, (size_t)N * K),
           *w = to_d(wf, (size_t)M * N);

    /* The forward in double gives the kernel's inputs: dZ = r * dL/dz (= r w), c = <z, w>. */
    double *O = zeros_d((size_t)M * K), *z = zeros_d((size_t)M * N);
    float *r = talloc(M * sizeof(float)), *c = talloc(M * sizeof(float));
    float *dZ = talloc((size_t)M * N * sizeof(float));
    double *rd = zeros_d(M);
    for (int m = 0; m < M; m++) {
        rd[m] = ref_rms_rscale(x + (size_t)m * K, K, eps);
        r[m] = (float)rd[m];
        for (int k = 0; k < K; k++) O[(size_t)m * K + k] = x[(size_t)m * K + k] * gamma[k];
    }
    ref_xwt(O, W, z, M, N, K);
    scale_rows(z, rd, M, N);
    for (int m = 0; m < M; m++) {
        c[m] = (float)dot_d(z + (size_t)m * N, w + (size_t)m * N, N);
        for (int n = 0; n < N; n++) dZ[(size_t)m * N + n] = (float)(rd[m] * w[(size_t)m * N + n]);
    }
    float *dx = nan_f((size_t)M * K), *dgamma = talloc(K * sizeof(float));
    memset(dgamma, 0, K * sizeof(float));
    kc->gemm_norm_backward(cctx, dZ, Wf, gf, r, c, xf, dx, dgamma, 0, M, N, K);

    const double *u = rand_dir((size_t)M * K), *ug = rand_dir(K);
    const double fd_x = (norm_chain_loss(step_d(x, u, (size_t)M * K, 1.0), gamma, W, w, eps) -
                         norm_chain_loss(step_d(x, u, (size_t)M * K, -1.0), gamma, W, w, eps)) /
                        (2 * FD_STEP);
    const double fd_g = (norm_chain_loss(x, step_d(gamma, ug, K, 1.0), W, w, eps) -
                         norm_chain_loss(x, step_d(gamma, ug, K, -1.0), W, w, eps)) /
                        (2 * FD_STEP);
    check_directional("gemm_norm_backward: dres is dL/dx of L = <rmsnorm(x) . W^T, w>", to_d(dx, (size_t)M * K), u,
                      (size_t)M * K, fd_x, FD_TOL);
    check_directional("gemm_norm_backward: dgamma is dL/dgamma", to_d(dgamma, K), ug, K, fd_g, FD_TOL);
    free_all();
}

/* L = <(silu(G) * U) . W_down^T, dY> as a function of Z (interleaved G/U), the forward of swiglu_backward. */
static double swiglu_chain_loss(const double *Z, const double *W_down, const double *dY, int D, int F) {
    double *act = zeros_d((size_t)M * F), *y = zeros_d((size_t)M * D);
    for (size_t i = 0; i < (size_t)M * F; i++) act[i] = silu(Z[2 * i]) * Z[2 * i + 1];
    ref_xwt(act, W_down, y, M, D, F);
    return dot_d(y, dY, (size_t)M * D);
}

static void test_gemm_swiglu_backward(void) {
    const int D = 29, F = 23;
    const size_t nz = (size_t)M * 2 * F;
    const float *dY = rand_f((size_t)M * D, 0.0, 1.0), *W_down = rand_f((size_t)D * F, 0.0, 0.5);
    const float *Z = rand_f(nz, 0.0, 3.0), *r = rand_f(M, 1.0, 0.5);
    float *dZ = nan_f(nz), *c = nan_f(M), *act = nan_f((size_t)M * F), *Zfw = nan_f(nz), *act_fw = nan_f((size_t)M * F);
    kc->gemm_swiglu_backward(cctx, dY, W_down, Z, r, dZ, c, act, M, D, F);

    double *Zd = to_d(Z, nz), *Wd = to_d(W_down, (size_t)D * F), *dYd = to_d(dY, (size_t)M * D);
    double *dact = zeros_d((size_t)M * F), *dGU = zeros_d(nz), *dZ_ref = zeros_d(nz), *c_ref = zeros_d(M);
    ref_xw(dYd, Wd, dact, M, D, F);
    for (int m = 0; m < M; m++) {
        for (int j = 0; j < F; j++) {
            const size_t i = (size_t)m * F + j;
            const double g = Zd[2 * i], u = Zd[2 * i + 1], s = 1.0 / (1.0 + exp(-g));
            dGU[2 * i] = dact[i] * u * (s + g * s * (1.0 - s));
            dGU[2 * i + 1] = dact[i] * silu(g);
        }
        for (int n = 0; n < 2 * F; n++) dZ_ref[(size_t)m * 2 * F + n] = r[m] * dGU[(size_t)m * 2 * F + n];
        c_ref[m] = dot_d(Zd + (size_t)m * 2 * F, dGU + (size_t)m * 2 * F, 2 * F);
    }
    check_close("gemm_swiglu_backward: dZ = r * (dG, dU)", dZ, dZ_ref, nz);
    check_close("gemm_swiglu_backward: c = <Z, (dG, dU)>", c, c_ref, M);
    /* act again: the bits gemm_swiglu writes for this Z (a forward whose product is Z: r = 1, W = identity) */
    float *eye = talloc((size_t)2 * F * 2 * F * sizeof(float)), *ones = talloc(M * sizeof(float));
    memset(eye, 0, (size_t)2 * F * 2 * F * sizeof(float));
    for (int i = 0; i < 2 * F; i++) eye[(size_t)i * 2 * F + i] = 1.0f;
    for (int m = 0; m < M; m++) ones[m] = 1.0f;
    kc->gemm_swiglu(cctx, Z, eye, ones, Zfw, act_fw, M, F, 2 * F);
    CHECK(memcmp(Zfw, Z, nz * sizeof(float)) == 0 && memcmp(act, act_fw, (size_t)M * F * sizeof(float)) == 0,
          "gemm_swiglu_backward: act = silu(G) U is bitwise what gemm_swiglu writes for the same Z");

    const double *u = rand_dir(nz);
    const double fd = (swiglu_chain_loss(step_d(Zd, u, nz, 1.0), Wd, dYd, D, F) -
                       swiglu_chain_loss(step_d(Zd, u, nz, -1.0), Wd, dYd, D, F)) /
                      (2 * FD_STEP);
    double *dGU_kernel = to_d(dZ, nz);
    for (size_t i = 0; i < nz; i++) dGU_kernel[i] /= r[i / (2 * F)];
    check_directional("gemm_swiglu_backward: reference (dG, dU)", dGU, u, nz, fd, FD_REF_TOL);
    check_directional("gemm_swiglu_backward: dZ / r", dGU_kernel, u, nz, fd, FD_TOL);
    free_all();
}

static void test_gemm_dx(void) {
    const float *dY = rand_f((size_t)M * N, 0.0, 1.0), *W = rand_f((size_t)N * K, 0.0, 1.0);
    float *dX = nan_f((size_t)M * K);
    kc->gemm_dx(cctx, dY, W, dX, M, N, K);
    double *dX_ref = zeros_d((size_t)M * K);
    ref_xw(to_d(dY, (size_t)M * N), to_d(W, (size_t)N * K), dX_ref, M, N, K);
    check_close("gemm_dx: dX = dY.W", dX, dX_ref, (size_t)M * K);
    free_all();
}

/* dW += (dY^T.X) * col_scale on a pre-filled dW; dW = that on a NaN-filled one (nothing read); and sq. */
static void test_gemm_dw(void) {
    const float *dY = rand_f((size_t)M * N, 0.0, 1.0), *X = rand_f((size_t)M * K, 0.0, 1.0);
    const float *dW0 = rand_f((size_t)N * K, 0.0, 5.0), *scale = rand_f(K, 1.0, 0.5);
    char what[128];
    for (int scaled = 0; scaled <= 1; scaled++)
        for (int acc = 0; acc <= 1; acc++) {
            const float *cs = scaled ? scale : NULL;
            float *dW = acc ? copy_f(dW0, (size_t)N * K) : nan_f((size_t)N * K);
            double sq = NAN;
            kc->gemm_dw(cctx, dY, X, cs, dW, acc, &sq, M, N, K);
            double *dW_ref = acc ? to_d(dW0, (size_t)N * K) : zeros_d((size_t)N * K);
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    double sum = 0.0;
                    for (int m = 0; m < M; m++) sum += (double)dY[(size_t)m * N + n] * X[(size_t)m * K + k];
                    dW_ref[(size_t)n * K + k] += sum * (cs ? cs[k] : 1.0);
                }
            snprintf(what, sizeof what, "gemm_dw: dW %s (dY^T.X)%s", acc ? "+= (pre-filled)" : "= (NaN-filled)",
                     scaled ? " * col_scale" : "");
            check_close(what, dW, dW_ref, (size_t)N * K);
            double sq_ref = 0.0;
            for (size_t i = 0; i < (size_t)N * K; i++) sq_ref += (double)dW[i] * dW[i];
            CHECK(fabs(sq - sq_ref) <= 1e-12 * sq_ref, "%s: sq %.12e = the sum of squares of dW %.12e", what, sq,
                  sq_ref);
            float *dW_1 = copy_f(dW0, (size_t)N * K), *dW_3 = copy_f(dW0, (size_t)N * K);
            set_threads(1);
            kc->gemm_dw(cctx, dY, X, cs, dW_1, acc, NULL, M, N, K);
            set_threads(3);
            kc->gemm_dw(cctx, dY, X, cs, dW_3, acc, NULL, M, N, K);
            check_same_bits(what, dW_1, dW_3, (size_t)N * K * sizeof(float));
        }
    free_all();
}

/* f(qkv) = <y(qkv), w> for the attention forward in double. */
static double attention_dot(const double *qkv, const double *w, int B, int T, int Hq, int Hkv, int hd) {
    double *y = zeros_d((size_t)B * T * Hq * hd);
    ref_attention(qkv, y, NULL, NULL, NULL, B, T, Hq, Hkv, hd);
    return dot_d(y, w, (size_t)B * T * Hq * hd);
}

static void test_attention(int B, int T, int Hq, int Hkv, int hd) {
    const size_t n_qkv = (size_t)B * T * (Hq + 2 * Hkv) * hd, n_y = (size_t)B * T * Hq * hd;
    const size_t n_lse = (size_t)B * Hq * T;
    char what[192], shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d Hq=%d Hkv=%d hd=%d", B, T, Hq, Hkv, hd);
    const float *qkv = rand_f(n_qkv, 0.0, 1.5), *dy = rand_f(n_y, 0.0, 1.0);

    float *y = nan_f(n_y), *lse = nan_f(n_lse);
    kc->attention_forward(cctx, qkv, y, lse, B, T, Hq, Hkv, hd);
    double *qkv_d = to_d(qkv, n_qkv), *dy_d = to_d(dy, n_y);
    double *y_ref = zeros_d(n_y), *lse_ref = zeros_d(n_lse), *dqkv_ref = zeros_d(n_qkv);
    ref_attention(qkv_d, y_ref, lse_ref, dy_d, dqkv_ref, B, T, Hq, Hkv, hd);
    snprintf(what, sizeof what, "attention_forward (%s): y", shape);
    check_close(what, y, y_ref, n_y);
    snprintf(what, sizeof what, "attention_forward (%s): lse", shape);
    check_close(what, lse, lse_ref, n_lse);

    float *dqkv = nan_f(n_qkv);
    kc->attention_backward(cctx, qkv, y, lse, dy, NULL, NULL, NULL, dqkv, NULL, B, T, Hq, Hkv, hd);
    snprintf(what, sizeof what, "attention_backward (%s): dqkv vs materialized softmax backward", shape);
    check_close(what, dqkv, dqkv_ref, n_qkv);

    const double *u = rand_dir(n_qkv);
    const double fd = (attention_dot(step_d(qkv_d, u, n_qkv, 1.0), dy_d, B, T, Hq, Hkv, hd) -
                       attention_dot(step_d(qkv_d, u, n_qkv, -1.0), dy_d, B, T, Hq, Hkv, hd)) /
                      (2 * FD_STEP);
    snprintf(what, sizeof what, "attention_backward (%s): reference dqkv", shape);
    check_directional(what, dqkv_ref, u, n_qkv, fd, FD_REF_TOL);
    snprintf(what, sizeof what, "attention_backward (%s): dqkv", shape);
    check_directional(what, to_d(dqkv, n_qkv), u, n_qkv, fd, FD_TOL);

    float *dqkv_1 = nan_f(n_qkv), *dqkv_3 = nan_f(n_qkv);
    set_threads(1);
    kc->attention_backward(cctx, qkv, y, lse, dy, NULL, NULL, NULL, dqkv_1, NULL, B, T, Hq, Hkv, hd);
    set_threads(3);
    kc->attention_backward(cctx, qkv, y, lse, dy, NULL, NULL, NULL, dqkv_3, NULL, B, T, Hq, Hkv, hd);
    snprintf(what, sizeof what, "attention_backward (%s)", shape);
    check_same_bits(what, dqkv_1, dqkv_3, n_qkv * sizeof(float));
    free_all();
}

/* attention_backward with r: over the attention gradient G (the same call without r), the QKV projection's RoPE and
 * row-scale backward, dqkv = r * rope^T(G), and c = <qkv, G>. */
static void test_attention_rope_backward(void) {
    const int B = 2, T = 17, Hq = 4, Hkv = 2, hd = 8, Nq = (Hq + 2 * Hkv) * hd, n_rope = (Hq + Hkv) * hd, Mr = B * T;
    const size_t n = (size_t)Mr * Nq, n_y = (size_t)Mr * Hq * hd;
    float *cos_t, *sin_t;
    rope_tables(T, hd, &cos_t, &sin_t);
    const float *Z = rand_f(n, 0.0, 1.0), *dy = rand_f(n_y, 0.0, 1.0), *r = rand_f(Mr, 1.0, 0.5);
    float *y = nan_f(n_y), *lse = nan_f((size_t)B * Hq * T), *G = nan_f(n), *dZ_out = nan_f(n), *c = nan_f(Mr);
    kc->attention_forward(cctx, Z, y, lse, B, T, Hq, Hkv, hd);
    kc->attention_backward(cctx, Z, y, lse, dy, NULL, NULL, NULL, G, NULL, B, T, Hq, Hkv, hd);
    kc->attention_backward(cctx, Z, y, lse, dy, r, cos_t, sin_t, dZ_out, c, B, T, Hq, Hkv, hd);

    double *Zd = to_d(Z, n), *Gd = to_d(G, n), *dZ_ref = to_d(G, n), *c_ref = zeros_d(Mr);
    for (int m = 0; m < Mr; m++) {
        ref_rope_row(dZ_ref + (size_t)m * Nq, n_rope, hd, cos_t + (m % T) * hd / 2, sin_t + (m % T) * hd / 2, -1.0);
        for (int j = 0; j < Nq; j++) dZ_ref[(size_t)m * Nq + j] *= r[m];
        c_ref[m] = dot_d(Zd + (size_t)m * Nq, Gd + (size_t)m * Nq, Nq);
    }
    check_close("attention_backward with r: dqkv = r * rope^T(G)", dZ_out, dZ_ref, n);
    check_close("attention_backward with r: c = <qkv, G>", c, c_ref, Mr);

    /* Adjoint identity: <rope^T(G), u> = <G, rope(u)>, with rope the forward reference. */
    double *u = rand_dir(n), *rope_u = zeros_d(n);
    memcpy(rope_u, u, n * sizeof(double));
    for (int m = 0; m < Mr; m++)
        ref_rope_row(rope_u + (size_t)m * Nq, n_rope, hd, cos_t + (m % T) * hd / 2, sin_t + (m % T) * hd / 2, 1.0);
    double *unscaled = to_d(dZ_out, n);
    for (size_t i = 0; i < n; i++) unscaled[i] /= r[i / Nq];
    check_directional("attention_backward with r: dqkv / r is the adjoint of the forward RoPE applied to G", unscaled,
                      u, n, dot_d(Gd, rope_u, n), FD_TOL);
    free_all();
}

static void test_token_groups(void) {
    const int n = 37, V = 9;
    const int32_t *ids = rand_tokens(n, V);
    const int32_t *g = groups_of(ids, n, V);
    const int32_t *order = g + 1, *seg = g + 1 + n, *seg_id = g + 2 + 2 * n;
    int present = 0, ok = 1;
    for (int v = 0; v < V; v++) {
        int count = 0;
        for (int m = 0; m < n; m++) count += ids[m] == v;
        present += count > 0;
    }
    ok &= g[0] == present && seg[0] == 0 && seg[g[0]] == n;
    for (int u = 0; u < g[0]; u++) {
        ok &= u == 0 || seg_id[u] > seg_id[u - 1]; /* ids increase */
        for (int i = seg[u]; i < seg[u + 1]; i++)
            ok &= ids[order[i]] == seg_id[u] && (i == seg[u] || order[i] > order[i - 1]); /* rows increase */
    }
    int *seen = talloc(n * sizeof(int));
    memset(seen, 0, n * sizeof(int));
    for (int i = 0; i < n; i++) seen[order[i]]++;
    for (int m = 0; m < n; m++) ok &= seen[m] == 1;
    CHECK(ok, "token_groups_build: %d groups of increasing ids, each its rows ascending, every row once", g[0]);
    free_all();
}

static void test_embed_backward(void) {
    const int V = 11, D = 77; /* 3 column slices of 32 */
    const int32_t *tok = rand_tokens(M, V), *groups = groups_of(tok, M, V);
    const float *dx = rand_f((size_t)M * D, 0.0, 1.0), *dE0 = rand_f((size_t)V * D, 0.0, 1.0);
    float *dE = copy_f(dE0, (size_t)V * D);
    kc->embed_backward(cctx, tok, groups, dx, dE, M, D, V);
    double *dE_ref = to_d(dE0, (size_t)V * D);
    for (int m = 0; m < M; m++)
        for (int d = 0; d < D; d++) dE_ref[(size_t)tok[m] * D + d] += dx[(size_t)m * D + d];
    check_close("embed_backward: dE[tokens[m]] += dx[m] (pre-filled dE)", dE, dE_ref, (size_t)V * D);

    float *dE_1 = copy_f(dE0, (size_t)V * D), *dE_3 = copy_f(dE0, (size_t)V * D);
    set_threads(1);
    kc->embed_backward(cctx, tok, groups, dx, dE_1, M, D, V);
    set_threads(3);
    kc->embed_backward(cctx, tok, groups, dx, dE_3, M, D, V);
    check_same_bits("embed_backward", dE_1, dE_3, (size_t)V * D * sizeof(float));
    free_all();
}

static void test_sum_squares(void) {
    const size_t n = 100003; /* 13 chunks, the last one partial */
    const float *g = rand_f(n, 0.0, 2.0);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    double s1, s3, exact, none = -1.0;
    set_threads(1);
    kc->sum_squares(cctx, g, n, &s1);
    set_threads(3);
    kc->sum_squares(cctx, g, n, &s3);
    CHECK(fabs(s3 - ref) / ref < 1e-12, "sum_squares: rel err %.2e (tol 1e-12)", fabs(s3 - ref) / ref);
    check_same_bits("sum_squares", &s1, &s3, sizeof(double));
    const float small[3] = {1.0f, -2.0f, 0.5f};
    kc->sum_squares(cctx, small, 3, &exact);
    kc->sum_squares(cctx, small, 0, &none);
    CHECK(exact == 5.25 && none == 0.0, "sum_squares: exact on 3 elements and 0 on none");
    double plain = NAN, acc = 10.0;
    kc->sum(cctx, small, 3, &plain, 0);
    kc->sum(cctx, small, 3, &acc, 1);
    CHECK(plain == -0.5 && acc == 9.5, "sum: -0.5 written (%g), 9.5 when added to 10 (%g)", plain, acc);
    free_all();
}

static void test_clip_scale(void) {
    /* parts: a loss sum, then squares adding to 16 (norm 4) */
    const double parts[4] = {2.5, 9.0, 4.0, 3.0};
    float s_clip = 0, s_loose = 0, s_off = 0, s_noloss = 0;
    kc->clip_scale(cctx, parts, 1, 3, 1.0, &s_clip);
    kc->clip_scale(cctx, parts, 1, 3, 8.0, &s_loose);
    kc->clip_scale(cctx, parts, 1, 3, 0.0, &s_off);
    kc->clip_scale(cctx, parts + 1, 0, 3, 2.0, &s_noloss);
    CHECK(s_clip == (float)(1.0 / (4.0 + 1e-6)) && s_loose == 1.0f && s_off == 1.0f &&
              s_noloss == (float)(2.0 / (4.0 + 1e-6)),
          "clip_scale: min(1, max_norm / (norm + 1e-6)), 1 when off (%g %g %g %g)", s_clip, s_loose, s_off, s_noloss);
    const double bad_loss[3] = {NAN, 1.0, 1.0}, bad_sq[3] = {1.0, 1.0, INFINITY};
    float s_bad_loss = 0, s_bad_sq = 0, s_ignored = 0;
    kc->clip_scale(cctx, bad_loss, 1, 2, 1.0, &s_bad_loss);
    kc->clip_scale(cctx, bad_sq, 1, 2, 1.0, &s_bad_sq);
    kc->clip_scale(cctx, bad_loss + 1, 0, 2, 8.0, &s_ignored);
    CHECK(isnan(s_bad_loss) && isnan(s_bad_sq) && s_ignored == 1.0f,
          "clip_scale: NaN (no update) when a loss or a square is not finite");
}

static void test_adamw(void) {
    const int n = 7, steps = 3;
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, grad_scale = 0.5f;
    float *master = rand_f(n, 0.0, 1.0), *working = nan_f(n);
    float *m = talloc(n * sizeof(float)), *v = talloc(n * sizeof(float));
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    double *p_ref = to_d(master, n), *m_ref = zeros_d(n), *v_ref = zeros_d(n);
    for (int step = 1; step <= steps; step++) {
        const float *grad = rand_f(n, 0.0, 1.0);
        const AdamwScalars sc = adamw_scalars(lr, beta1, beta2, eps, wd, step);
        kc->adamw(cctx, master, working, grad, m, v, n, &sc, &grad_scale);
        for (int i = 0; i < n; i++) {
            const double g = (double)grad[i] * grad_scale;
            p_ref[i] *= 1.0 - (double)lr * wd;
            m_ref[i] = beta1 * m_ref[i] + (1.0 - beta1) * g;
            v_ref[i] = beta2 * v_ref[i] + (1.0 - beta2) * g * g;
            p_ref[i] -=
                lr / (1.0 - pow(beta1, step)) * m_ref[i] / (sqrt(v_ref[i]) / sqrt(1.0 - pow(beta2, step)) + eps);
        }
        char what[96];
        snprintf(what, sizeof what, "adamw step %d: master", step);
        check_close(what, master, p_ref, n);
        snprintf(what, sizeof what, "adamw step %d: m", step);
        check_close(what, m, m_ref, n);
        snprintf(what, sizeof what, "adamw step %d: v", step);
        check_close(what, v, v_ref, n);
        CHECK(memcmp(working, master, n * sizeof(float)) == 0, "adamw step %d: working == master", step);
    }
    /* a clip factor that is not finite leaves everything as it was */
    float *before = copy_f(master, n), *m_before = copy_f(m, n);
    const AdamwScalars sc = adamw_scalars(lr, beta1, beta2, eps, wd, steps + 1);
    const float nan_scale = NAN;
    kc->adamw(cctx, master, working, rand_f(n, 0.0, 1.0), m, v, n, &sc, &nan_scale);
    CHECK(memcmp(before, master, n * sizeof(float)) == 0 && memcmp(m_before, m, n * sizeof(float)) == 0,
          "adamw: a NaN clip factor changes nothing");
    free_all();
}

int main(void) {
    cctx = kc->context_create();
    rng_state = 0x243F6A8885A308D3ull; /* this file's fixed seed */
    default_threads = omp_get_max_threads();
    test_memory();
    test_embed_norm();
    test_gemm_residual_norm();
    test_gemm_rope(17, 4, 2, 8);
    test_gemm_rope(1, 2, 1, 16);
    test_gemm_rope(5, 4, 1, 16);
    test_gemm_swiglu();
    test_gemm_rowscale();
    test_lm_head_loss(1.0, "logits O(1)");
    test_lm_head_loss(300.0, "logits O(500)");
    test_lm_head_uniform();
    test_gemm_norm_backward();
    test_gemm_norm_backward_fd();
    test_gemm_swiglu_backward();
    test_gemm_dx();
    test_gemm_dw();
    test_attention(2, 17, 4, 2, 8);
    test_attention(1, 1, 2, 2, 16);
    test_attention(2, 17, 4, 1, 16);
    test_attention(1, 17, 3, 3, 8);
    test_attention_rope_backward();
    test_token_groups();
    test_embed_backward();
    test_sum_squares();
    test_clip_scale();
    test_adamw();
    return test_summary();
}
