/* test_gpu_decode.c: generation with a KV cache on both CUDA tables (kernels_cuda, kernels_cuda_fused) against the
 * CPU backend, on the same bf16-rounded inputs, outputs and caches poisoned with NaN first.
 *   - the ops: kv_cache_append then attention_cached for a prefill of P rows at once and then chunks of 1 to 3 rows
 *     (the cache rows are the qkv K/V columns bit for bit, the rows after them untouched; y against the CPU's
 *     attention_forward over the whole sequence, rel 1e-2 as a bf16 output); shapes with more keys than one chunk
 *     of the kernel (256), ragged head dims (6, 10: the scalar path; 24: groups that leave threads idle), GQA 1 to 8;
 *   - the model: model_decode's logits at every position after a prefill, then one token at a time, against the
 *     CPU's model_decode (the fp32 oracle, which test_decode checks against model_forward) and against the same
 *     table's model_forward of the prefix; a small model with a ragged F and vocabulary and one layer of the
 *     Llama-3.2-1B shape (D 2048, 32/8 heads of 64, F 8192), where the GEMMs run at M = 1.
 * Logit tolerances, ||a - b|| / ||b||: against the same table's model_forward 2e-2 (what the cache path changes:
 * the attention of the new row alone with its bf16 output, and the GEMMs at M = 1); against the CPU 5e-2, the bf16
 * forward's own error (activations stored in bf16 through a layer of the 1B width with weights of std 0.08, then
 * 128,256 logits), which the comparison with model_forward shows is not the cache's. */
#include "model/model.h"
#include "model/rng.h"
#include "tests/small_model.h"
#include "tests/gpu/gpu_test_util.h"

#define DECODE_Y_TOL 1e-2
#define LOGIT_TOL 5e-2      /* against the CPU's fp32 */
#define LOGIT_SELF_TOL 2e-2 /* against the same table's model_forward */

static void test_ops(int T, int prefill, int Hq, int Hkv, int hd) {
    const int ld = (Hq + 2 * Hkv) * hd, width = Hkv * hd, cap = T + 5;
    const size_t n_qkv = (size_t)T * ld, n_y = (size_t)T * Hq * hd;
    char shape[96], what[192];
    snprintf(shape, sizeof shape, "T=%d prefill %d Hq=%d Hkv=%d hd=%d", T, prefill, Hq, Hkv, hd);
    const float *qkv = rand_bf(n_qkv, 0.0, 2.0);
    float *y = nan_f(n_y), *lse = nan_f((size_t)T * Hq);
    kc->attention_forward(cctx(), qkv, y, lse, 1, T, Hq, Hkv, hd);
    void *gqkv = dev_act(qkv, n_qkv), *gy = dev_act_nan(n_y);
    void *gK = dev_act_nan((size_t)cap * width), *gV = dev_act_nan((size_t)cap * width);
    const size_t ab = kg->act_bytes;
    for (int pos0 = 0, step = 1; pos0 < T; pos0 += step, step = step % 3 + 1) {
        if (pos0 == 0) step = prefill;
        const int M = step < T - pos0 ? step : T - pos0;
        kg->kv_cache_append(gctx(), (const char *)gqkv + (size_t)pos0 * ld * ab, gK, gV, pos0, M, Hq, Hkv, hd);
        kg->attention_cached(gctx(), (const char *)gqkv + (size_t)pos0 * ld * ab, gK, gV,
                             (char *)gy + (size_t)pos0 * Hq * hd * ab, pos0, M, Hq, Hkv, hd);
    }
    const float *K = get_act(gK, (size_t)cap * width), *V = get_act(gV, (size_t)cap * width);
    int copied = 1, untouched = 1;
    for (int p = 0; p < cap; p++)
        for (int c = 0; c < width; c++) {
            const float kv = K[(size_t)p * width + c], vv = V[(size_t)p * width + c];
            if (p < T)
                copied &= kv == qkv[(size_t)p * ld + Hq * hd + c] && vv == qkv[(size_t)p * ld + (Hq + Hkv) * hd + c];
            else
                untouched &= isnan(kv) && isnan(vv);
        }
    CHECK(copied && untouched, "%s: kv_cache_append: the cache rows are the K/V columns, the rows after them "
          "untouched", shape);
    snprintf(what, sizeof what, "%s: attention_cached vs the CPU's attention_forward: y", shape);
    check_rel(what, get_act(gy, n_y), y, n_y, DECODE_Y_TOL);
    gpu_free_all();
}

/* Random weights (rounded to bf16, so that both backends hold the same values), norm weights around 1. */
static void set_weights(Model *cpu, Model *gpu, uint64_t seed) {
    const size_t n = cpu->table.n_params;
    float *w = halloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = bf16_round((float)(0.08 * rng_normal_at(seed, i)));
    for (int vi = 0; vi < cpu->table.n_views; vi++) {
        const ParamView *v = &cpu->table.views[vi];
        if (v->rows == 1)
            for (int j = 0; j < v->cols; j++)
                w[v->offset + j] = bf16_round((float)(1 + 0.2 * rng_normal_at(seed + 1, v->offset + j)));
    }
    model_set_master(cpu, w, 0, n);
    model_set_master(gpu, w, 0, n);
}

static void test_model(const char *label, ModelConfig c, int T, int prefill, uint64_t seed) {
    Model cpu, gpu;
    char err[256];
    if (model_create(&cpu, &c, kc, 1, T, MODEL_GRADS_APART, err, sizeof err) ||
        model_create(&gpu, &c, kg, 1, T, MODEL_GRADS_APART, err, sizeof err)) {
        CHECK(0, "%s: model_create: %s", label, err);
        return;
    }
    set_weights(&cpu, &gpu, seed);
    const int V = c.vocab_size;
    const int32_t *tok = rand_tokens(T, V);
    float *want = halloc((size_t)V * sizeof(float)), *got = halloc((size_t)V * sizeof(float));
    float *full = halloc((size_t)V * sizeof(float));
    KvCache cc = kv_cache_empty(&cpu), gc = kv_cache_empty(&gpu);
    const size_t cache_elems = gc.layer_bytes / kg->act_bytes * 2 * c.num_hidden_layers;
    kg->act_from_f32(gpu.kc, gc.buf, nan_f(cache_elems), cache_elems);
    double worst_cpu = 0, worst_full = 0;
    int positions = 0, finite = 1;
    for (int pos = 0; pos < T;) {
        const int n = pos == 0 ? prefill : 1;
        model_decode(&cpu, &cc, tok + pos, n, want);
        model_decode(&gpu, &gc, tok + pos, n, got);
        pos += n;
        model_forward(&gpu, tok, 1, pos);
        model_last_logits(&gpu, 1, pos, full);
        finite &= all_finite_f(got, V);
        const double e_cpu = rel_error_f(got, want, V), e_full = rel_error_f(got, full, V);
        worst_cpu = e_cpu > worst_cpu ? e_cpu : worst_cpu;
        worst_full = e_full > worst_full ? e_full : worst_full;
        positions++;
    }
    CHECK(finite && gc.len == T && worst_cpu <= LOGIT_TOL, "%s: T=%d, prefill %d then 1 at a time: the logits at %d "
          "positions against the CPU's model_decode: worst rel %.2e (tol %.0e)", label, T, prefill, positions,
          worst_cpu, LOGIT_TOL);
    CHECK(finite && worst_full <= LOGIT_SELF_TOL, "%s: against this table's model_forward of each prefix: worst rel "
          "%.2e (tol %.0e)", label, worst_full, LOGIT_SELF_TOL);
    model_destroy(&cpu);
    model_destroy(&gpu);
    gpu_free_all();
}

static void test_table(void) {
    test_ops(300, 17, 32, 8, 64);
    test_ops(530, 5, 8, 2, 128);
    test_ops(37, 1, 4, 2, 6);
    test_ops(20, 3, 3, 3, 24);
    test_ops(9, 2, 2, 1, 10);
    test_model("small, F and V ragged", small_model_shape(128, 200, 2, 4, 2, 64, 301, 1), 40, 9, 3);
    test_model("one layer of the 1B shape", small_model_shape(2048, 8192, 1, 32, 8, 64, 1000, 1), 24, 16, 4);
}

int main(void) {
    require_gpu();
    kg = &kernels_cuda;
    test_label = "[fusion off] ";
    test_table();
    kg = &kernels_cuda_fused;
    test_label = "[fusion on] ";
    test_table();
    return test_summary();
}
