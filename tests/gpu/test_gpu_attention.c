/* test_gpu_attention.c: the CUDA attention (forward and backward, the Hopper wgmma kernels) against the naive
 * attention of the CPU backend (per query: all scores, softmax, weighted sum; validated against a double reference
 * with finite differences in test_cpu_ops), on the same bf16-rounded inputs, at T in {1, 17, 128, 333 (ragged: not a
 * multiple of any tile), 2048, 4096} and around the forward's 192-query tiles (191, 193, 383, 385), head dim 64
 * and 128 (the head dims the kernels take; the trainer refuses others on the GPU), GQA ratios 1, 2, 4 and 8 (and 3,
 * the 3B config's), outputs poisoned with NaN. The backward of both gets the same y (the CPU's, rounded to bf16)
 * and lse. Tolerances (||gpu - cpu|| / ||cpu||): y and dQ/dK/dV 1e-2 (bf16 outputs; P and dS are rounded to bf16 as
 * tensor-core operands), lse 1e-5 (fp32 statistics of exact bf16 products). Also: the backward gives the same bits
 * twice (no atomics). And the forward on scores that rise along the keys (test_attention_rising). --quick: only
 * T <= 385 (for the sanitizers). */
#include "tests/gpu/gpu_test_util.h"

#define ATT_BF16_TOL 1e-2
#define ATT_LSE_TOL 1e-5

/* ||a - b|| / max(||b||, floor) over the columns [c0, c0 + w) of rows of width ld. The floor (1e-3 x the norm of the
 * whole reference dqkv) keeps a part whose exact value is ~0 from being judged on its rounding noise: at T = 1 every
 * query sees only its own key, P = 1 and dS = P (dy.v - dy.y) = 0, so dQ and dK are 0 up to rounding. */
static double rel_err_cols(const float *a, const float *b, size_t rows, int ld, int c0, int w, double floor,
                           int *finite) {
    double num = 0, den = 0;
    for (size_t i = 0; i < rows; i++)
        for (int j = c0; j < c0 + w; j++) {
            const double x = a[i * ld + j], y = b[i * ld + j];
            if (!isfinite(x)) *finite = 0;
            num += (x - y) * (x - y);
            den += y * y;
        }
    return sqrt(num) / fmax(sqrt(den), floor);
}

static void test_attention(int B, int T, int Hq, int Hkv, int hd) {
    const int ld = (Hq + 2 * Hkv) * hd, ldy = Hq * hd;
    const size_t n_qkv = (size_t)B * T * ld, n_y = (size_t)B * T * ldy, n_lse = (size_t)B * Hq * T;
    char shape[96], what[192];
    snprintf(shape, sizeof shape, "B=%d T=%d Hq=%d Hkv=%d hd=%d", B, T, Hq, Hkv, hd);
    const float *qkv = rand_bf(n_qkv, 0.0, 2.0), *dy = rand_bf(n_y, 0.0, 1.0);

    float *y = nan_f(n_y), *lse = nan_f(n_lse);
    kc->attention_forward(cctx(), qkv, y, lse, B, T, Hq, Hkv, hd);
    void *gqkv = dev_act(qkv, n_qkv), *gy = dev_act_nan(n_y);
    float *glse = dev_f32_nan(n_lse);
    kg->attention_forward(gctx(), gqkv, gy, glse, B, T, Hq, Hkv, hd);
    snprintf(what, sizeof what, "attention_forward (%s): y", shape);
    check_rel(what, get_act(gy, n_y), y, n_y, ATT_BF16_TOL);
    snprintf(what, sizeof what, "attention_forward (%s): lse", shape);
    check_rel(what, get_f32(glse, n_lse), lse, n_lse, ATT_LSE_TOL);

    for (size_t i = 0; i < n_y; i++) y[i] = bf16_round(y[i]);
    float *dqkv = nan_f(n_qkv);
    kc->attention_backward(cctx(), qkv, y, lse, dy, NULL, NULL, NULL, dqkv, NULL, B, T, Hq, Hkv, hd);
    void *gy_in = dev_act(y, n_y), *gdy = dev_act(dy, n_y), *gd1 = dev_act_nan(n_qkv), *gd2 = dev_act_nan(n_qkv);
    float *glse_in = dev_f32(lse, n_lse);
    kg->attention_backward(gctx(), gqkv, gy_in, glse_in, gdy, NULL, NULL, NULL, gd1, NULL, B, T, Hq, Hkv, hd);
    kg->attention_backward(gctx(), gqkv, gy_in, glse_in, gdy, NULL, NULL, NULL, gd2, NULL, B, T, Hq, Hkv, hd);
    float *d1 = get_act(gd1, n_qkv);
    static const char *part[3] = {"dQ", "dK", "dV"};
    const int c0[3] = {0, Hq * hd, (Hq + Hkv) * hd}, w[3] = {Hq * hd, Hkv * hd, Hkv * hd};
    double ref_norm = 0;
    for (size_t i = 0; i < n_qkv; i++) ref_norm += (double)dqkv[i] * dqkv[i];
    for (int p = 0; p < 3; p++) {
        int finite = 1;
        const double err = rel_err_cols(d1, dqkv, (size_t)B * T, ld, c0[p], w[p], 1e-3 * sqrt(ref_norm), &finite);
        CHECK(finite && err <= ATT_BF16_TOL, "attention_backward (%s): %s rel err %.2e (tol %.0e)", shape, part[p], err,
              ATT_BF16_TOL);
    }
    CHECK(memcmp(d1, get_act(gd2, n_qkv), n_qkv * sizeof(float)) == 0, "attention_backward (%s): same bits twice",
          shape);
    gpu_free_all();
}

/* The forward on scores that rise along the keys, so that a row's later key blocks pass its running maximum (the
 * forward's rescue, attn_forward.cu): rising_qkv by KV head (slope * g / (Hkv - 1) for head g). In log2, a slope of 90
 * moves a row's maximum by about 100 a key block at T = 333 and head dim 64 (the rescue's rescale), by about 140 at
 * head dim 128 (also its second scoring), and by 5-23 a block at T = 2048 (a rescale once the growth passes 72); a
 * slope of 1500, by about 90 to far more than 124. A warp that took the rescue takes maxima afterwards, over the
 * tiles it goes on to (B 2, Hq 16, T 2048: more tiles than SMs). lse is also checked on its own over the query heads
 * of KV head 0, whose scores do not rise (elsewhere it reaches about 10^3 and dominates the norm). */
static void test_attention_rising(int B, int T, int Hq, int Hkv, int hd, double slope) {
    const int ld = (Hq + 2 * Hkv) * hd, ldy = Hq * hd;
    const size_t n_qkv = (size_t)B * T * ld, n_y = (size_t)B * T * ldy, n_lse = (size_t)B * Hq * T;
    char what[192];
    const float *qkv = rising_qkv(B, T, Hq, Hkv, hd, slope, 1);
    float *y = nan_f(n_y), *lse = nan_f(n_lse);
    kc->attention_forward(cctx(), qkv, y, lse, B, T, Hq, Hkv, hd);
    void *gqkv = dev_act(qkv, n_qkv), *gy = dev_act_nan(n_y);
    float *glse = dev_f32_nan(n_lse);
    kg->attention_forward(gctx(), gqkv, gy, glse, B, T, Hq, Hkv, hd);
    snprintf(what, sizeof what, "attention_forward (rising scores, slope %g, B=%d T=%d Hq=%d Hkv=%d hd=%d): y",
             slope, B, T, Hq, Hkv, hd);
    check_rel(what, get_act(gy, n_y), y, n_y, ATT_BF16_TOL);
    snprintf(what, sizeof what, "attention_forward (rising scores, slope %g, B=%d T=%d Hq=%d Hkv=%d hd=%d): lse",
             slope, B, T, Hq, Hkv, hd);
    const float *lse_gpu = get_f32(glse, n_lse);
    check_rel(what, lse_gpu, lse, n_lse, ATT_LSE_TOL);
    const int group = Hq / Hkv;
    const size_t n_flat = (size_t)B * group * T;
    float *flat_gpu = halloc(n_flat * sizeof(float)), *flat_cpu = halloc(n_flat * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < group; h++) {
            const size_t from = ((size_t)b * Hq + h) * T, to = ((size_t)b * group + h) * T;
            memcpy(flat_gpu + to, lse_gpu + from, T * sizeof(float));
            memcpy(flat_cpu + to, lse + from, T * sizeof(float));
        }
    snprintf(what, sizeof what,
             "attention_forward (rising scores, slope %g, B=%d T=%d Hq=%d Hkv=%d hd=%d): lse of KV head 0's heads",
             slope, B, T, Hq, Hkv, hd);
    check_rel(what, flat_gpu, flat_cpu, n_flat, ATT_LSE_TOL);
    gpu_free_all();
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    require_gpu();
    static const int hds[] = {64, 128};
    static const int ratios[] = {1, 2, 4, 8};
    static const int short_Ts[] = {1, 17, 128, 333};
    static const int tile_Ts[] = {191, 193, 383, 385}; /* around multiples of 192 (the forward's query tiles) */
    for (int hi = 0; hi < 2; hi++) {
        for (int ti = 0; ti < 4; ti++)
            for (int ri = 0; ri < 4; ri++) test_attention(2, short_Ts[ti], 2 * ratios[ri], 2, hds[hi]);
        for (int ti = 0; ti < 4; ti++) test_attention(2, tile_Ts[ti], 4, 2, hds[hi]);
        for (int si = 0; si < 2; si++) test_attention_rising(2, 333, 4, 2, hds[hi], si ? 1500.0 : 90.0);
        if (quick) continue;
        test_attention(1, 2048, 2, 2, hds[hi]);
        test_attention(1, 2048, 8, 2, hds[hi]);
        test_attention(1, 4096, 8, 1, hds[hi]);
        for (int si = 0; si < 2; si++) test_attention_rising(1, 2048, 8, 4, hds[hi], si ? 1500.0 : 90.0);
        test_attention_rising(2, 2048, 16, 4, hds[hi], 90.0);
    }
    test_attention(2, 77, 2, 1, 64);   /* the tiny config's heads */
    test_attention(1, 200, 32, 8, 64); /* the 1B config's heads */
    test_attention(2, 333, 24, 8, 128); /* the 3B config's heads: 3 query heads a KV head */
    return test_summary();
}
