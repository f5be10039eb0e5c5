/* test_decode.c: generation with a KV cache on the CPU backend.
 *   - the ops: kv_cache_append copies the K and V columns of the new rows into the cache rows pos0.. and nothing
 *     else; attention_cached of rows appended in chunks of 1 to 4 gives attention_forward's rows over the whole
 *     sequence (ragged head dims, GQA groups of 1 to 8);
 *   - the model: model_decode's logits, after a prefill and then one or a few tokens at a time, are at every
 *     position the logits of model_forward over the whole prefix (tied and untied, llama3 RoPE scaling);
 *   - the sampler: greedy sample_generate is the argmax path of full recomputes, also past the model's T (where
 *     the context slides and the cache is not used). */
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "model/model.h"
#include "model/rng.h"
#include "model/sampler.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

/* The CPU computes a cached row with the same arithmetic as the full forward, so the results agree to rounding of
 * the order of a few ulps at most. */
#define DECODE_TOL 1e-6

static int min_int(int a, int b) { return a < b ? a : b; }

static float *random_floats(size_t n, double scale) {
    float *a = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = (float)(scale * rnd());
    return a;
}

static void test_ops(int T, int Hq, int Hkv, int hd) {
    const Kernels *k = &kernels_cpu;
    KernelContext *kc = k->context_create();
    const int Nqkv = (Hq + 2 * Hkv) * hd, width = Hkv * hd, cap = T + 3;
    float *qkv = random_floats((size_t)T * Nqkv, 1.0);
    float *y_ref = malloc((size_t)T * Hq * hd * sizeof(float)), *lse = malloc((size_t)T * Hq * sizeof(float));
    float *y = malloc((size_t)T * Hq * hd * sizeof(float));
    float *K = malloc((size_t)cap * width * sizeof(float)), *V = malloc((size_t)cap * width * sizeof(float));
    for (size_t i = 0; i < (size_t)cap * width; i++) K[i] = V[i] = NAN;
    for (size_t i = 0; i < (size_t)T * Hq * hd; i++) y[i] = NAN;
    k->attention_forward(kc, qkv, y_ref, lse, 1, T, Hq, Hkv, hd);
    for (int pos0 = 0, chunk = 1; pos0 < T; pos0 += chunk, chunk = chunk % 4 + 1) {
        const int M = min_int(chunk, T - pos0);
        k->kv_cache_append(kc, qkv + (size_t)pos0 * Nqkv, K, V, pos0, M, Hq, Hkv, hd);
        k->attention_cached(kc, qkv + (size_t)pos0 * Nqkv, K, V, y + (size_t)pos0 * Hq * hd, pos0, M, Hq, Hkv, hd);
    }
    int copied = 1, untouched = 1;
    for (int p = 0; p < cap; p++)
        for (int c = 0; c < width; c++) {
            const float kv = K[(size_t)p * width + c], vv = V[(size_t)p * width + c];
            if (p < T)
                copied &= kv == qkv[(size_t)p * Nqkv + Hq * hd + c] &&
                          vv == qkv[(size_t)p * Nqkv + (Hq + Hkv) * hd + c];
            else
                untouched &= isnan(kv) && isnan(vv);
        }
    CHECK(copied && untouched, "T=%d Hq=%d Hkv=%d hd=%d: kv_cache_append fills rows 0..%d with the K and V columns, "
          "and leaves the rows after them", T, Hq, Hkv, hd, T - 1);
    const double err = rel_error_f(y, y_ref, (size_t)T * Hq * hd);
    CHECK(all_finite_f(y, (size_t)T * Hq * hd) && err <= DECODE_TOL, "T=%d Hq=%d Hkv=%d hd=%d: attention_cached in "
          "chunks of 1 to 4 rows is attention_forward (rel %.1e)", T, Hq, Hkv, hd, err);
    free(qkv);
    free(y_ref);
    k->context_free(kc);
    free(lse);
    free(y);
    free(K);
    free(V);
}

/* Weights larger than the init and norm weights away from 1, so that every term matters. */
static void set_random_weights(Model *m, uint64_t seed) {
    const size_t n = m->table.n_params;
    float *w = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = (float)(0.15 * rng_normal_at(seed, i));
    for (int vi = 0; vi < m->table.n_views; vi++) {
        const ParamView *v = &m->table.views[vi];
        if (v->rows == 1)
            for (int j = 0; j < v->cols; j++)
                w[v->offset + j] = (float)(1 + 0.3 * rng_normal_at(seed + 1, v->offset + j));
    }
    model_set_master(m, w, 0, n);
    free(w);
}

/* Decodes T tokens with a prefill of `prefill` tokens, then `step` tokens at a time, against model_forward of each
 * prefix. */
static void test_model_decode(const char *label, ModelConfig c, int T, int prefill, int step, uint64_t seed) {
    Model m;
    char err[256];
    if (model_create(&m, &c, &kernels_cpu, 1, T, MODEL_GRADS_APART, err, sizeof(err))) {
        CHECK(0, "%s: model_create: %s", label, err);
        return;
    }
    set_random_weights(&m, seed);
    const int V = c.vocab_size;
    int32_t *tok = malloc(T * sizeof(int32_t));
    uint64_t rs = seed;
    for (int i = 0; i < T; i++) tok[i] = (int32_t)(rng_next(&rs) % V);
    float *ref = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
    KvCache cache = kv_cache_empty(&m);
    CHECK(cache.capacity == T && cache.len == 0, "%s: an empty cache of %d positions", label, T);
    double worst = 0;
    int positions = 0, len_ok = 1;
    for (int pos = 0; pos < T;) {
        const int n = pos == 0 ? prefill : min_int(step, T - pos);
        model_decode(&m, &cache, tok + pos, n, got);
        pos += n;
        len_ok &= cache.len == pos;
        model_forward(&m, tok, 1, pos);
        model_last_logits(&m, 1, pos, ref);
        const double e = all_finite_f(got, V) ? rel_error_f(got, ref, V) : INFINITY;
        worst = e > worst ? e : worst;
        positions++;
    }
    CHECK(len_ok && worst <= DECODE_TOL, "%s: T=%d, prefill %d then %d at a time: the logits at %d positions are "
          "model_forward's of the prefix (worst rel %.1e)", label, T, prefill, step, positions, worst);
    free(tok);
    free(ref);
    free(got);
    model_destroy(&m);
}

static void ignore_piece(const char *piece, size_t len, void *ctx) {}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Greedy generation of n_new tokens after a prompt of 3 on a model of T positions. */
static void test_sampler(int T, int n_new) {
    ModelConfig c = small_model_config(1);
    c.vocab_size = 256;
    Model m;
    char err[256];
    Tokenizer *tok = tokenizer_open("byte", err, sizeof(err));
    if (!tok || model_create(&m, &c, &kernels_cpu, 1, T, MODEL_GRADS_APART, err, sizeof(err))) {
        CHECK(0, "sampler setup: %s", err);
        return;
    }
    set_random_weights(&m, 31);
    const int n0 = 3;
    int32_t *ids = malloc((size_t)(n0 + n_new) * sizeof(int32_t));
    int32_t *want = malloc((size_t)(n0 + n_new) * sizeof(int32_t));
    float *logits = malloc(256 * sizeof(float));
    for (int i = 0; i < n0; i++) ids[i] = want[i] = 'A' + i;
    for (int n = n0; n < n0 + n_new; n++) {
        const int ctx = n < T ? n : T;
        model_forward(&m, want + n - ctx, 1, ctx);
        model_last_logits(&m, 1, ctx, logits);
        want[n] = argmax(logits, 256);
    }
    const SampleSettings greedy = {.n_new = n_new, .temperature = 0, .top_k = 0, .stop_id = -1};
    uint64_t rng = 1;
    const int g = sample_generate(&m, tok, ids, n0, &greedy, &rng, ignore_piece, NULL);
    CHECK(g == n_new && memcmp(ids, want, (size_t)(n0 + n_new) * sizeof(int32_t)) == 0, "greedy sample_generate of "
          "%d tokens on a model of T=%d (3 prompt ids) is the argmax path of full recomputes", n_new, T);
    free(ids);
    free(want);
    free(logits);
    tokenizer_close(tok);
    model_destroy(&m);
}

int main(void) {
    test_ops(11, 4, 2, 6);
    test_ops(9, 6, 2, 8);
    test_ops(1, 3, 3, 4);
    test_ops(20, 8, 1, 16);

    ModelConfig c = small_model_config(1);
    test_model_decode("tied, GQA 2", c, 13, 1, 1, 5);
    test_model_decode("tied, GQA 2", c, 13, 4, 1, 6);
    test_model_decode("tied, GQA 2", c, 12, 2, 3, 7);
    c.tie_word_embeddings = 0;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.rope_llama3 = 1;
    c.rope_factor = 32;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_position_embeddings = 16;
    test_model_decode("untied, GQA 4, llama3 RoPE", c, 40, 7, 1, 8);

    test_sampler(24, 12); /* within T: the cache throughout */
    test_sampler(10, 14); /* past T: the context slides */
    return test_summary();
}
