/* test_gpu_ops.c: every op of both CUDA tables (kernels_cuda, the unfused path, and kernels_cuda_fused, the
 * GEMM-epilogue programs) against kernels_cpu (the fp32 oracle) on fresh random inputs rounded to bf16 (both
 * backends see the same values), with every GPU output poisoned with NaN before the call. Shapes: ragged ones (M,
 * N, K not multiples of any tile or of 8: the fused table's fallback to the unfused op), ragged-but-TMA ones (feature
 * dimensions multiples of 8, not of the tile: the fused programs' edge tiles and masks) and aligned ones.
 * Tolerances (||gpu - cpu|| / ||cpu||):
 *   BF16_TOL 1e-2  an output stored in bf16 (the rounding alone is ~2e-3; a GEMM output rounded, then scaled and
 *                  rounded again, ~4e-3);
 *   STAT_TOL 1e-3  fp32 statistics computed from bf16-rounded intermediates (r of a bf16 h, c of bf16 Z) where the
 *                  rounding errors average out;
 *   LOSS_TOL 3e-3  the cross-entropy from bf16 logits (as PyTorch's bf16 autocast computes it): each logit z carries
 *                  an error up to |z| 2^-9, so for logits of size ~10 the loss moves by ~1e-3 of itself;
 *   F32_TOL  1e-5  fp32 outputs of exact bf16 products accumulated in fp32 (dW, G-derived dgamma, Y, dE, AdamW);
 *   ATT_TOL  1e-2  the attention gradient and what is made from it (P and dS are rounded to bf16 as tensor-core
 *                  operands; test_gpu_attention's tolerance).
 * Also: the ops that reduce (dgamma, dW, dE, c, sum_squares) give the same bits when run twice; the SwiGLU
 * backward's act is bitwise the forward's; the LM head's loss has the same bits in training and evaluation, also
 * when its second pass (a target far below the best logit) runs, which the fused table is checked to take. */
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/master_split.h"
#include "tests/gpu/gpu_test_util.h"

#define BF16_TOL 1e-2
#define STAT_TOL 1e-3
#define LOSS_TOL 3e-3
#define F32_TOL 1e-5
#define ATT_TOL 1e-2

static void test_memory(void) {
    CHECK(kg->act_bytes == 2 && strcmp(kg->name, "cuda") == 0 && kg->detail, "memory: name cuda, act_bytes 2 (%s)",
          kg->detail);
    const size_t n = 1001;
    float *zero = get_f32(dalloc(n * sizeof(float)), n);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += zero[i] != 0.0f;
    CHECK(nonzero == 0, "memory: alloc is zero-filled");
    const float *src = rand_f(n, 0.0, 3.0);
    float *d = dev_f32(src, n), *back = get_f32(d, n);
    CHECK(memcmp(src, back, n * sizeof(float)) == 0, "memory: copy_to_device then copy_to_host round-trips");
    kg->memset_zero(gctx(), d, n * sizeof(float));
    back = get_f32(d, n);
    nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += back[i] != 0.0f;
    CHECK(nonzero == 0, "memory: memset_zero");
    float *act = get_act(dev_act(src, n), n);
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= act[i] == bf16_round(src[i]);
    CHECK(exact, "memory: act_from_f32 rounds to nearest-even bf16, act_to_f32 reads it back exactly");
    gpu_free_all();
}

static void test_embed_norm(int M, int V, int D) {
    const float eps = 1e-5f;
    const int32_t *tok = rand_tokens(M, V);
    const float *E = rand_bf((size_t)V * D, 0.0, 1.0), *gamma = rand_f(D, 1.0, 0.5);
    float *x = nan_f((size_t)M * D), *O = nan_f((size_t)M * D), *r = nan_f(M);
    kc->embed_norm(cctx(), tok, E, gamma, eps, x, O, r, M, D);
    void *dx = dev_act_nan((size_t)M * D), *dO = dev_act_nan((size_t)M * D);
    float *dr = dev_f32_nan(M);
    kg->embed_norm(gctx(), dev_i32(tok, M), dev_act(E, (size_t)V * D), dev_f32(gamma, D), eps, dx, dO, dr, M, D);
    char what[128];
    snprintf(what, sizeof what, "embed_norm M=%d V=%d D=%d: x rows are the embedding rows (exact)", M, V, D);
    CHECK(memcmp(get_act(dx, (size_t)M * D), x, (size_t)M * D * sizeof(float)) == 0, "%s", what);
    snprintf(what, sizeof what, "embed_norm M=%d D=%d: O", M, D);
    check_rel(what, get_act(dO, (size_t)M * D), O, (size_t)M * D, BF16_TOL);
    snprintf(what, sizeof what, "embed_norm M=%d D=%d: r", M, D);
    check_rel(what, get_f32(dr, M), r, M, F32_TOL);
    gpu_free_all();
}

static void test_gemm_residual_norm(int M, int N, int K) {
    const float eps = 1e-5f;
    const float *A = rand_bf((size_t)M * K, 0.0, 1.0), *W = rand_bf((size_t)N * K, 0.0, 0.3);
    const float *res = rand_bf((size_t)M * N, 0.0, 1.0), *gamma = rand_f(N, 1.0, 0.5);
    float *h = nan_f((size_t)M * N), *O = nan_f((size_t)M * N), *r = nan_f(M);
    kc->gemm_residual_norm(cctx(), A, W, res, gamma, eps, h, O, r, M, N, K);
    void *dh = dev_act_nan((size_t)M * N), *dO = dev_act_nan((size_t)M * N);
    float *dr = dev_f32_nan(M);
    kg->gemm_residual_norm(gctx(), dev_act(A, (size_t)M * K), dev_act(W, (size_t)N * K), dev_act(res, (size_t)M * N),
                           dev_f32(gamma, N), eps, dh, dO, dr, M, N, K);
    char what[128];
    snprintf(what, sizeof what, "gemm_residual_norm %dx%dx%d: h", M, N, K);
    check_rel(what, get_act(dh, (size_t)M * N), h, (size_t)M * N, BF16_TOL);
    snprintf(what, sizeof what, "gemm_residual_norm %dx%dx%d: O", M, N, K);
    check_rel(what, get_act(dO, (size_t)M * N), O, (size_t)M * N, BF16_TOL);
    snprintf(what, sizeof what, "gemm_residual_norm %dx%dx%d: r", M, N, K);
    check_rel(what, get_f32(dr, M), r, M, STAT_TOL);
    gpu_free_all();
}

static void rope_tables(int T, int hd, float **cos_t, float **sin_t) {
    *cos_t = halloc((size_t)T * hd / 2 * sizeof(float));
    *sin_t = halloc((size_t)T * hd / 2 * sizeof(float));
    for (int pos = 0; pos < T; pos++)
        for (int i = 0; i < hd / 2; i++) {
            const double angle = pos * pow(10000.0, -2.0 * i / hd);
            (*cos_t)[pos * hd / 2 + i] = (float)cos(angle);
            (*sin_t)[pos * hd / 2 + i] = (float)sin(angle);
        }
}

static void test_gemm_rope(int M, int K, int T, int Hq, int Hkv, int hd) {
    const int N = (Hq + 2 * Hkv) * hd, n_rope = (Hq + Hkv) * hd;
    float *cs, *sn;
    rope_tables(T, hd, &cs, &sn);
    const float *O = rand_bf((size_t)M * K, 0.0, 1.0), *W = rand_bf((size_t)N * K, 0.0, 0.3), *r = rand_f(M, 1.0, 0.5);
    float *Z = nan_f((size_t)M * N);
    kc->gemm_rope(cctx(), O, W, r, cs, sn, Z, M, N, K, n_rope, hd, T);
    void *dZ = dev_act_nan((size_t)M * N);
    kg->gemm_rope(gctx(), dev_act(O, (size_t)M * K), dev_act(W, (size_t)N * K), dev_f32(r, M),
                  dev_f32(cs, (size_t)T * hd / 2), dev_f32(sn, (size_t)T * hd / 2), dZ, M, N, K, n_rope, hd, T);
    char what[128];
    snprintf(what, sizeof what, "gemm_rope M=%d K=%d T=%d Hq=%d Hkv=%d hd=%d: Z", M, K, T, Hq, Hkv, hd);
    check_rel(what, get_act(dZ, (size_t)M * N), Z, (size_t)M * N, BF16_TOL);
    gpu_free_all();
}

static void test_gemm_swiglu(int M, int F, int K) {
    const float *O = rand_bf((size_t)M * K, 0.0, 1.0), *W = rand_bf((size_t)2 * F * K, 0.0, 0.5), *r = rand_f(M, 1.0, 0.5);
    float *Z = nan_f((size_t)M * 2 * F), *act = nan_f((size_t)M * F);
    kc->gemm_swiglu(cctx(), O, W, r, Z, act, M, F, K);
    void *dZ = dev_act_nan((size_t)M * 2 * F), *dact = dev_act_nan((size_t)M * F);
    kg->gemm_swiglu(gctx(), dev_act(O, (size_t)M * K), dev_act(W, (size_t)2 * F * K), dev_f32(r, M), dZ, dact, M, F, K);
    char what[128];
    snprintf(what, sizeof what, "gemm_swiglu M=%d F=%d K=%d: Z", M, F, K);
    check_rel(what, get_act(dZ, (size_t)M * 2 * F), Z, (size_t)M * 2 * F, BF16_TOL);
    snprintf(what, sizeof what, "gemm_swiglu M=%d F=%d K=%d: act", M, F, K);
    check_rel(what, get_act(dact, (size_t)M * F), act, (size_t)M * F, BF16_TOL);
    gpu_free_all();
}

static void test_gemm_rowscale(int M, int N, int K) {
    const float *O = rand_bf((size_t)M * K, 0.0, 1.0), *W = rand_bf((size_t)N * K, 0.0, 1.0), *r = rand_f(M, 1.0, 0.5);
    float *Y = nan_f((size_t)M * N), *dY = dev_f32_nan((size_t)M * N);
    kc->gemm_rowscale(cctx(), O, W, r, Y, M, N, K);
    kg->gemm_rowscale(gctx(), dev_act(O, (size_t)M * K), dev_act(W, (size_t)N * K), dev_f32(r, M), dY, M, N, K);
    char what[128];
    snprintf(what, sizeof what, "gemm_rowscale %dx%dx%d: Y (fp32)", M, N, K);
    check_rel(what, get_f32(dY, (size_t)M * N), Y, (size_t)M * N, F32_TOL);
    gpu_free_all();
}

/* lm_head_train (loss, dW, dres, dgamma) and lm_head_loss against the CPU. expect_repass: 1 if the fused table
 * must take its second pass (logits spread far wider than 64), 0 if it must not, -1 either. */
static void test_lm_head(int M, int V, int K, double logit_scale, int expect_repass) {
    const float dscale = 0.7f / M;
    const float *O = rand_bf((size_t)M * K, 0.0, logit_scale), *W = rand_bf((size_t)V * K, 0.0, 1.0);
    const float *r = rand_f(M, 1.0, 0.5), *x = rand_bf((size_t)M * K, 0.0, 1.0), *gamma = rand_f(K, 1.0, 0.5);
    const float *dW0 = rand_f((size_t)V * K, 0.0, 1.0), *dgamma0 = rand_f(K, 0.0, 1.0);
    const int32_t *tgt = rand_tokens(M, V);
    float *loss = nan_f(M), *dres = nan_f((size_t)M * K), *dW = copy_f(dW0, (size_t)V * K);
    float *dgamma = copy_f(dgamma0, K);
    kc->lm_head_train(cctx(), O, W, r, tgt, host_groups(tgt, M, V), dscale, x, gamma, loss, dW, dres, dgamma, M, V, K);
    void *gO = dev_act(O, (size_t)M * K), *gW = dev_act(W, (size_t)V * K), *gx = dev_act(x, (size_t)M * K);
    float *gr = dev_f32(r, M), *ggamma = dev_f32(gamma, K), *gloss = dev_f32_nan(M), *gloss2 = dev_f32_nan(M);
    float *gdW = dev_f32(dW0, (size_t)V * K), *gdgamma = dev_f32(dgamma0, K);
    void *gdres = dev_act_nan((size_t)M * K);
    int32_t *gt = dev_i32(tgt, M);
    const long repass0 = fused_lm_head_repasses(gctx());
    kg->lm_head_train(gctx(), gO, gW, gr, gt, dev_groups(tgt, M, V), dscale, gx, ggamma, gloss, gdW, gdres, gdgamma, M,
                      V, K);
    kg->lm_head_loss(gctx(), gO, gW, gr, gt, gloss2, M, V, K);
    const long repassed = fused_lm_head_repasses(gctx()) - repass0;
    char what[200];
    snprintf(what, sizeof what, "lm_head_train M=%d V=%d K=%d logits O(%g): loss", M, V, K, logit_scale);
    float *l1 = get_f32(gloss, M);
    check_rel(what, l1, loss, M, LOSS_TOL);
    snprintf(what, sizeof what, "lm_head_train M=%d V=%d K=%d: dW += (r g)^T O (pre-filled, fp32)", M, V, K);
    check_rel(what, get_f32(gdW, (size_t)V * K), dW, (size_t)V * K, BF16_TOL);
    snprintf(what, sizeof what, "lm_head_train M=%d V=%d K=%d: dres (the final norm's backward)", M, V, K);
    check_rel(what, get_act(gdres, (size_t)M * K), dres, (size_t)M * K, BF16_TOL);
    snprintf(what, sizeof what, "lm_head_train M=%d V=%d K=%d: dgamma (pre-filled, fp32)", M, V, K);
    check_rel(what, get_f32(gdgamma, K), dgamma, K, BF16_TOL);
    CHECK(memcmp(l1, get_f32(gloss2, M), M * sizeof(float)) == 0,
          "lm_head_loss M=%d V=%d: evaluation gives the training loss's bits", M, V);
    if (kg == &kernels_cuda_fused && K % 8 == 0 && expect_repass >= 0)
        CHECK((repassed > 0) == (expect_repass > 0), "lm_head M=%d V=%d logits O(%g): the second pass ran %ld times "
              "(expected %s)", M, V, logit_scale, repassed, expect_repass ? "some" : "none");
    gpu_free_all();
}

static void test_gemm_norm_backward(int M, int N, int K) {
    const float *dZ = rand_bf((size_t)M * N, 0.0, 1.0), *W = rand_bf((size_t)N * K, 0.0, 0.5);
    const float *gamma = rand_f(K, 1.0, 0.5), *r = rand_f(M, 1.0, 0.5), *c = rand_f(M, 0.0, 2.0);
    const float *x = rand_bf((size_t)M * K, 0.0, 1.0), *dgamma0 = rand_f(K, 0.0, 1.0);
    const float *dres0 = rand_bf((size_t)M * K, 0.0, 1.0);
    void *gdZ = dev_act(dZ, (size_t)M * N), *gW = dev_act(W, (size_t)N * K), *gx = dev_act(x, (size_t)M * K);
    float *ggamma = dev_f32(gamma, K), *gr = dev_f32(r, M), *gc = dev_f32(c, M);
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        float *dres = accumulate ? copy_f(dres0, (size_t)M * K) : nan_f((size_t)M * K), *dgamma = copy_f(dgamma0, K);
        kc->gemm_norm_backward(cctx(), dZ, W, gamma, r, c, x, dres, dgamma, accumulate, M, N, K);
        void *gdres = accumulate ? dev_act(dres0, (size_t)M * K) : dev_act_nan((size_t)M * K);
        float *gdgamma = dev_f32(dgamma0, K);
        kg->gemm_norm_backward(gctx(), gdZ, gW, ggamma, gr, gc, gx, gdres, gdgamma, accumulate, M, N, K);
        char what[160];
        snprintf(what, sizeof what, "gemm_norm_backward %dx%dx%d accumulate %d: dres", M, N, K, accumulate);
        check_rel(what, get_act(gdres, (size_t)M * K), dres, (size_t)M * K, BF16_TOL);
        snprintf(what, sizeof what, "gemm_norm_backward %dx%dx%d accumulate %d: dgamma (fp32)", M, N, K, accumulate);
        float *dg1 = get_f32(gdgamma, K);
        check_rel(what, dg1, dgamma, K, F32_TOL);
        if (accumulate) { /* determinism: the same call on the same inputs gives the same bits */
            float *gdgamma2 = dev_f32(dgamma0, K);
            void *gdres2 = dev_act(dres0, (size_t)M * K);
            kg->gemm_norm_backward(gctx(), gdZ, gW, ggamma, gr, gc, gx, gdres2, gdgamma2, accumulate, M, N, K);
            CHECK(memcmp(dg1, get_f32(gdgamma2, K), K * sizeof(float)) == 0 &&
                      memcmp(get_act(gdres, (size_t)M * K), get_act(gdres2, (size_t)M * K),
                             (size_t)M * K * sizeof(float)) == 0,
                  "gemm_norm_backward %dx%dx%d: same bits twice", M, N, K);
        }
    }
    gpu_free_all();
}

static void test_gemm_swiglu_backward(int M, int D, int F) {
    const size_t nz = (size_t)M * 2 * F;
    const float *dY = rand_bf((size_t)M * D, 0.0, 1.0), *Wd = rand_bf((size_t)D * F, 0.0, 0.5);
    const float *Z = rand_bf(nz, 0.0, 3.0), *r = rand_f(M, 1.0, 0.5);
    float *dZ = nan_f(nz), *c = nan_f(M), *act = nan_f((size_t)M * F);
    kc->gemm_swiglu_backward(cctx(), dY, Wd, Z, r, dZ, c, act, M, D, F);
    void *gdZ = dev_act_nan(nz), *gact = dev_act_nan((size_t)M * F), *gZ = dev_act(Z, nz);
    float *gc = dev_f32_nan(M);
    kg->gemm_swiglu_backward(gctx(), dev_act(dY, (size_t)M * D), dev_act(Wd, (size_t)D * F), gZ, dev_f32(r, M), gdZ, gc,
                             gact, M, D, F);
    char what[128];
    snprintf(what, sizeof what, "gemm_swiglu_backward M=%d D=%d F=%d: dZ", M, D, F);
    check_rel(what, get_act(gdZ, nz), dZ, nz, BF16_TOL);
    snprintf(what, sizeof what, "gemm_swiglu_backward M=%d D=%d F=%d: c (fp32)", M, D, F);
    check_rel(what, get_f32(gc, M), c, M, STAT_TOL);
    snprintf(what, sizeof what, "gemm_swiglu_backward M=%d D=%d F=%d: act", M, D, F);
    float *act_b = get_act(gact, (size_t)M * F);
    check_rel(what, act_b, act, (size_t)M * F, BF16_TOL);
    /* the forward on the same Z (its product: Z . I with r = 1, exact) writes the same act bits */
    float *eye = halloc((size_t)4 * F * F * sizeof(float)), *ones = halloc(M * sizeof(float));
    memset(eye, 0, (size_t)4 * F * F * sizeof(float));
    for (int i = 0; i < 2 * F; i++) eye[(size_t)i * 2 * F + i] = 1.0f;
    for (int m = 0; m < M; m++) ones[m] = 1.0f;
    void *gZ2 = dev_act_nan(nz), *gact2 = dev_act_nan((size_t)M * F);
    kg->gemm_swiglu(gctx(), gZ, dev_act(eye, (size_t)4 * F * F), dev_f32(ones, M), gZ2, gact2, M, F, 2 * F);
    CHECK(memcmp(get_act(gZ2, nz), Z, nz * sizeof(float)) == 0 &&
              memcmp(get_act(gact2, (size_t)M * F), act_b, (size_t)M * F * sizeof(float)) == 0,
          "gemm_swiglu_backward M=%d F=%d: act is bitwise the forward's for the same Z", M, F);
    gpu_free_all();
}

static void test_gemm_dx_dw(int M, int N, int K) {
    const float *dY = rand_bf((size_t)M * N, 0.0, 1.0), *W = rand_bf((size_t)N * K, 0.0, 1.0);
    const float *X = rand_bf((size_t)M * K, 0.0, 1.0), *dW0 = rand_f((size_t)N * K, 0.0, 5.0);
    const float *scale = rand_f(K, 1.0, 0.5);
    float *dX = nan_f((size_t)M * K);
    kc->gemm_dx(cctx(), dY, W, dX, M, N, K);
    void *gdY = dev_act(dY, (size_t)M * N), *gdX = dev_act_nan((size_t)M * K), *gX = dev_act(X, (size_t)M * K);
    kg->gemm_dx(gctx(), gdY, dev_act(W, (size_t)N * K), gdX, M, N, K);
    char what[128];
    snprintf(what, sizeof what, "gemm_dx %dx%dx%d: dX", M, N, K);
    check_rel(what, get_act(gdX, (size_t)M * K), dX, (size_t)M * K, BF16_TOL);
    float *gscale = dev_f32(scale, K);
    double *gsq = (double *)dalloc(2 * sizeof(double));
    for (int scaled = 0; scaled <= 1; scaled++)
        for (int acc = 0; acc <= 1; acc++) { /* += on a pre-filled dW; = on a NaN-filled one (nothing read) */
            float *dW = acc ? copy_f(dW0, (size_t)N * K) : nan_f((size_t)N * K);
            kc->gemm_dw(cctx(), dY, X, scaled ? scale : NULL, dW, acc, NULL, M, N, K);
            float *gdW = acc ? dev_f32(dW0, (size_t)N * K) : dev_f32_nan((size_t)N * K);
            float *gdW2 = acc ? dev_f32(dW0, (size_t)N * K) : dev_f32_nan((size_t)N * K);
            kg->gemm_dw(gctx(), gdY, gX, scaled ? gscale : NULL, gdW, acc, gsq, M, N, K);
            kg->gemm_dw(gctx(), gdY, gX, scaled ? gscale : NULL, gdW2, acc, gsq + 1, M, N, K);
            /* with a column scale the unfused path (and the fused table's fallback for K or N not a multiple of 8)
             * multiplies X by it in bf16 first (its O), one rounding more */
            const int unfused_path = kg == &kernels_cuda || K % 8 || N % 8;
            snprintf(what, sizeof what, "gemm_dw %dx%dx%d: dW %s (dY^T X)%s (fp32)", M, N, K,
                     acc ? "+= (pre-filled)" : "= (NaN-filled)", scaled ? " * col_scale" : "");
            float *w1 = get_f32(gdW, (size_t)N * K);
            check_rel(what, w1, dW, (size_t)N * K, scaled && unfused_path ? BF16_TOL : F32_TOL);
            CHECK(memcmp(w1, get_f32(gdW2, (size_t)N * K), (size_t)N * K * sizeof(float)) == 0,
                  "%s: same bits twice", what);
            /* the sum of squares that global-norm clipping takes, against a separate sum of what was stored */
            double sq[2], ref = 0.0;
            kg->copy_to_host(gctx(), sq, gsq, sizeof sq);
            for (size_t i = 0; i < (size_t)N * K; i++) ref += (double)w1[i] * w1[i];
            CHECK(fabs(sq[0] - ref) <= 1e-6 * ref && memcmp(&sq[0], &sq[1], sizeof(double)) == 0,
                  "%s: sq %.9e against the sum of squares of dW %.9e (rel %.1e, tol 1e-6), same bits twice", what,
                  sq[0], ref, fabs(sq[0] - ref) / ref);
        }
    gpu_free_all();
}

/* attention_backward with r (the QKV projection's RoPE and row-scale backward over the attention gradient; the fused
 * table does it in the attention kernels' stores, the unfused one as a pass after them): dqkv per part and c. */
static void test_attention_rope_backward(int B, int T, int Hq, int Hkv, int hd) {
    const int M = B * T, N = (Hq + 2 * Hkv) * hd;
    const size_t n = (size_t)M * N, n_y = (size_t)M * Hq * hd, n_lse = (size_t)B * Hq * T;
    float *cs, *sn;
    rope_tables(T, hd, &cs, &sn);
    const float *qkv = rand_bf(n, 0.0, 2.0), *dy = rand_bf(n_y, 0.0, 1.0), *r = rand_f(M, 1.0, 0.5);
    float *y = nan_f(n_y), *lse = nan_f(n_lse), *dqkv = nan_f(n), *c = nan_f(M);
    kc->attention_forward(cctx(), qkv, y, lse, B, T, Hq, Hkv, hd);
    for (size_t i = 0; i < n_y; i++) y[i] = bf16_round(y[i]);
    kc->attention_backward(cctx(), qkv, y, lse, dy, r, cs, sn, dqkv, c, B, T, Hq, Hkv, hd);
    void *gqkv = dev_act(qkv, n), *gy = dev_act(y, n_y), *gdy = dev_act(dy, n_y);
    void *g1 = dev_act_nan(n), *g2 = dev_act_nan(n);
    float *glse = dev_f32(lse, n_lse), *gr = dev_f32(r, M), *gcs = dev_f32(cs, (size_t)T * hd / 2);
    float *gsn = dev_f32(sn, (size_t)T * hd / 2), *gc1 = dev_f32_nan(M), *gc2 = dev_f32_nan(M);
    kg->attention_backward(gctx(), gqkv, gy, glse, gdy, gr, gcs, gsn, g1, gc1, B, T, Hq, Hkv, hd);
    kg->attention_backward(gctx(), gqkv, gy, glse, gdy, gr, gcs, gsn, g2, gc2, B, T, Hq, Hkv, hd);
    char what[160];
    float *d1 = get_act(g1, n), *c1 = get_f32(gc1, M);
    snprintf(what, sizeof what, "attention_backward with RoPE B=%d T=%d Hq=%d Hkv=%d hd=%d: dqkv = r rope^T(G)", B, T,
             Hq, Hkv, hd);
    check_rel(what, d1, dqkv, n, ATT_TOL);
    snprintf(what, sizeof what, "attention_backward with RoPE T=%d hd=%d: c = <qkv, G>", T, hd);
    check_rel(what, c1, c, M, ATT_TOL);
    CHECK(memcmp(d1, get_act(g2, n), n * sizeof(float)) == 0 && memcmp(c1, get_f32(gc2, M), M * sizeof(float)) == 0,
          "attention_backward with RoPE T=%d hd=%d: same bits twice", T, hd);
    gpu_free_all();
}

static void test_embed_backward(int M, int D, int V) {
    const int32_t *tok = rand_tokens(M, V);
    const float *dx = rand_bf((size_t)M * D, 0.0, 1.0), *dE0 = rand_f((size_t)V * D, 0.0, 1.0);
    float *dE = copy_f(dE0, (size_t)V * D);
    kc->embed_backward(cctx(), tok, host_groups(tok, M, V), dx, dE, M, D, V);
    int32_t *gt = dev_i32(tok, M), *gg = dev_groups(tok, M, V);
    void *gdx = dev_act(dx, (size_t)M * D);
    float *g1 = dev_f32(dE0, (size_t)V * D), *g2 = dev_f32(dE0, (size_t)V * D);
    kg->embed_backward(gctx(), gt, gg, gdx, g1, M, D, V);
    kg->embed_backward(gctx(), gt, gg, gdx, g2, M, D, V);
    char what[128];
    snprintf(what, sizeof what, "embed_backward M=%d D=%d V=%d: dE[tokens] += dx (pre-filled, fp32)", M, D, V);
    float *h1 = get_f32(g1, (size_t)V * D);
    check_rel(what, h1, dE, (size_t)V * D, F32_TOL);
    CHECK(memcmp(h1, get_f32(g2, (size_t)V * D), (size_t)V * D * sizeof(float)) == 0,
          "embed_backward M=%d D=%d V=%d: same bits twice", M, D, V);
    gpu_free_all();
}

static void test_sum_squares(size_t n, size_t offset) {
    const float *g = rand_f(n + offset, 0.0, 2.0);
    float *dg = dev_f32(g, n + offset);
    double ref, s1, s2, *out = dalloc(2 * sizeof(double));
    kc->sum_squares(cctx(), g + offset, n, &ref);
    kg->sum_squares(gctx(), dg + offset, n, out);
    kg->copy_to_host(gctx(), &s1, out, sizeof(double));
    kg->sum_squares(gctx(), dg + offset, n, out);
    kg->copy_to_host(gctx(), &s2, out, sizeof(double));
    const double err = fabs(s1 - ref) / ref;
    CHECK(err < 1e-12 && s1 == s2, "sum_squares n=%zu offset %zu: rel err %.2e (tol 1e-12), same bits twice", n, offset,
          err);
    /* sum, written then added to */
    double sum_ref, sums[2];
    kc->sum(cctx(), g + offset, n, &sum_ref, 0);
    kg->sum(gctx(), dg + offset, n, out, 0);
    kg->sum(gctx(), dg + offset, n, out + 1, 0);
    kg->sum(gctx(), dg + offset, n, out + 1, 1);
    kg->copy_to_host(gctx(), sums, out, 2 * sizeof(double));
    CHECK(fabs(sums[0] - sum_ref) / fabs(sum_ref) < 1e-12 && sums[1] == sums[0] + sums[0],
          "sum n=%zu offset %zu: rel err %.2e (tol 1e-12); accumulated: twice it", n, offset,
          fabs(sums[0] - sum_ref) / fabs(sum_ref));
    gpu_free_all();
}

/* clip_scale against the CPU's: the same float bits, NaN for a part that is not finite. */
static void test_clip_scale(void) {
    const double cases[][4] = {{2.5, 9.0, 4.0, 3.0}, {2.5, 1e-3, 2e-3, 5e-4}, {NAN, 1.0, 1.0, 1.0},
                               {1.0, 1.0, INFINITY, 1.0}};
    const double norms[] = {1.0, 0.0, 7.5};
    double *dp = dalloc(4 * sizeof(double));
    float *ds = dalloc(sizeof(float));
    int same = 1;
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 3; k++)
            for (int n_loss = 0; n_loss < 2; n_loss++) {
                float ref, got;
                kc->clip_scale(cctx(), cases[c] + 1 - n_loss, n_loss, 3, norms[k], &ref);
                kg->copy_to_device(gctx(), dp, cases[c] + 1 - n_loss, (size_t)(3 + n_loss) * sizeof(double));
                kg->clip_scale(gctx(), dp, n_loss, 3, norms[k], ds);
                kg->copy_to_host(gctx(), &got, ds, sizeof(float));
                same &= memcmp(&ref, &got, sizeof(float)) == 0 || (isnan(ref) && isnan(got));
            }
    CHECK(same, "clip_scale: the CPU's factor bit for bit on 24 cases (NaN where a part is not finite)");
    gpu_free_all();
}

/* The weights' round trip through a split master (kernels/master_split.h): from host fp32 and back, bit for bit,
 * but for the ties (some weights made so), which come back one ulp toward their rounding, with the same bf16. master
 * becomes what the GPU holds, so that the CPU's adamw starts from it. */
static void check_split_round_trip(float *master, size_t n, uint16_t *glo, void *gwork) {
    for (size_t i = 0; i < n; i += 7) master[i] = f32_of_bits((f32_bits(master[i]) & 0xffff0000u) | 0x8000u);
    float *back = halloc(n * sizeof(float));
    kg->master_from_f32(gctx(), glo, gwork, master, n);
    kg->master_to_f32(gctx(), back, gwork, glo, n);
    size_t ties = 0, wrong = 0;
    for (size_t i = 0; i < n; i++) {
        const int tie = (f32_bits(master[i]) & 0xffffu) == 0x8000u;
        const uint32_t d = f32_bits(back[i]) - f32_bits(master[i]);
        ties += tie;
        wrong += tie ? (d != 1 && d != 0xffffffffu) || bf16_round(back[i]) != bf16_round(master[i]) : d != 0;
    }
    CHECK(wrong == 0 && ties > 0, "master_from_f32 then master_to_f32, n=%zu: the weights back bit for bit, the %zu "
          "ties one ulp toward their rounding with the same bf16 (%zu wrong)", n, ties, wrong);
    memcpy(master, back, n * sizeof(float));
}

/* The n words of a and b that differ bit for bit. */
static size_t words_differ(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += f32_bits(a[i]) != f32_bits(b[i]);
    return d;
}

/* adamw (split: adamw_split on master weights kept split) against the CPU's adamw on whole fp32 master weights, bit
 * for bit: the same operations in the same order. On split weights the CPU's master weights are moved off their ties
 * after each step, as the split does (kernels/master_split.h). */
static void test_adamw(size_t n, int split) {
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, grad_scale = 0.5f;
    float *master = rand_f(n, 0.0, 1.0), *m = rand_f(n, 0.0, 0.1), *v = rand_f(n, 0.2, 0.1), *work = nan_f(n);
    void *gwork = dev_act_nan(n);
    uint16_t *glo = split ? dalloc(n * sizeof(uint16_t)) : NULL;
    if (split) check_split_round_trip(master, n, glo, gwork);
    float *gmaster = split ? NULL : dev_f32(master, n), *gm = dev_f32(m, n), *gv = dev_f32(v, n);
    AdamwScalars *gs = dalloc(sizeof(AdamwScalars));
    float *gscale = dev_f32(&grad_scale, 1);
    for (int step = 1; step <= 4; step++) {
        const float *grad = rand_f(n, 0.0, 1.0);
        const AdamwScalars sc = adamw_scalars(lr, beta1, beta2, eps, wd, step);
        const float scale = step == 4 ? NAN : grad_scale; /* the last step: a NaN clip factor, no update */
        kg->copy_to_device(gctx(), gs, &sc, sizeof(sc));
        kg->copy_to_device(gctx(), gscale, &scale, sizeof(float));
        kc->adamw(cctx(), master, work, grad, m, v, n, &sc, &scale);
        for (size_t i = 0; split && i < n; i++) {
            uint16_t hi, lo;
            master_split(f32_bits(master[i]), &hi, &lo);
            master[i] = f32_of_bits(master_join(hi, lo));
        }
        if (split) kg->adamw_split(gctx(), glo, gwork, dev_f32(grad, n), gm, gv, n, gs, gscale);
        else kg->adamw(gctx(), gmaster, gwork, dev_f32(grad, n), gm, gv, n, gs, gscale);
    }
    float *hm = split ? halloc(n * sizeof(float)) : get_f32(gmaster, n), *hw = get_act(gwork, n);
    if (split) kg->master_to_f32(gctx(), hm, gwork, glo, n);
    const size_t dp = words_differ(hm, master, n), dm = words_differ(get_f32(gm, n), m, n);
    const size_t dv = words_differ(get_f32(gv, n), v, n);
    CHECK(dp == 0 && dm == 0 && dv == 0, "%s n=%zu, 3 steps and one with a NaN clip factor: master, m and v the CPU's "
          "bit for bit (%zu, %zu, %zu words differ)", split ? "adamw_split" : "adamw", n, dp, dm, dv);
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= hw[i] == bf16_round(hm[i]);
    CHECK(exact, "%s n=%zu: working == bf16(master)", split ? "adamw_split" : "adamw", n);
    gpu_free_all();
}

/* Every op of the table kg. */
static void test_table(int quick) {
    test_memory();
    test_embed_norm(37, 11, 29);
    if (!quick) test_embed_norm(64, 50, 2048);
    test_gemm_residual_norm(37, 45, 29);
    test_gemm_residual_norm(37, 40, 72);
    if (!quick) test_gemm_residual_norm(300, 2048, 512);
    test_gemm_rope(37, 29, 17, 4, 2, 16);
    test_gemm_rope(200, 136, 17, 4, 2, 16);
    test_gemm_rope(130, 64, 5, 4, 1, 64);
    test_gemm_rope(64, 128, 32, 2, 1, 128);
    test_gemm_swiglu(37, 23, 29);
    test_gemm_swiglu(37, 20, 72); /* act [37, 20]: a row TMA cannot describe (direct stores) */
    if (!quick) test_gemm_swiglu(200, 512, 256);
    test_gemm_rowscale(1, 1001, 64);
    test_gemm_rowscale(37, 45, 29);
    test_lm_head(37, 45, 29, 1.0, -1);
    test_lm_head(37, 45, 72, 2.0, 0);
    test_lm_head(37, 45, 72, 40.0, 1); /* logits spread over hundreds: targets > 64 below the best */
    if (!quick) test_lm_head(1500, 5003, 64, 1.0, 0);
    if (!quick) test_lm_head(4200, 128256, 64, 1.0, 0); /* two chunks (4096 + 104 rows) of the fused E buffer, Llama 3's vocabulary */
    test_gemm_norm_backward(37, 45, 29);
    test_gemm_norm_backward(200, 136, 72);
    if (!quick) test_gemm_norm_backward(300, 1024, 512);
    test_gemm_norm_backward(300, 1024, 2048); /* 128 x 256 tiles */
    test_gemm_swiglu_backward(37, 29, 23);
    test_gemm_swiglu_backward(130, 64, 40);
    if (!quick) test_gemm_swiglu_backward(200, 256, 512);
    test_gemm_swiglu_backward(5600, 64, 384); /* enough tiles for 128-wide ones (ge_pick's wave rule) */
    test_gemm_dx_dw(37, 45, 29);
    test_gemm_dx_dw(200, 136, 72);
    if (!quick) test_gemm_dx_dw(256, 512, 384);
    test_gemm_dx_dw(512, 3072, 2048);
    test_attention_rope_backward(2, 17, 2, 1, 64);
    test_attention_rope_backward(1, 130, 4, 1, 64);
    test_attention_rope_backward(2, 77, 8, 2, 128);
    test_embed_backward(37, 77, 11);
    if (!quick) test_embed_backward(4096, 256, 300);
    if (!quick) test_sum_squares(100003, 0);
    if (!quick) test_sum_squares(100003, 1);
    test_clip_scale();
    test_adamw(1001, 0);
    if (!quick) test_adamw(4096, 0);
    test_adamw(1001, 1); /* one weight per thread */
    test_adamw(1024, 1); /* four per thread */
}

/* test_gpu_ops [--quick] [--fused]: --quick leaves out the large shapes (for compute-sanitizer), --fused runs only
 * the fused table. */
int main(int argc, char **argv) {
    int quick = 0, fused_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--fused")) fused_only = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--fused]\n", argv[0]);
            return 2;
        }
    }
    require_gpu();
    if (!fused_only) {
        kg = &kernels_cuda;
        test_label = "[fusion off] ";
        test_table(quick);
    }
    kg = &kernels_cuda_fused;
    test_label = "[fusion on] ";
    test_table(quick);
    return test_summary();
}
