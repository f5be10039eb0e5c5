/* test_model.c: the whole model on the CPU backend against an independent, naive fp64 LLaMA written here in Hugging
 * Face's layout and conventions (rotate_half RoPE on un-permuted q/k rows, separate gate/up projections, explicit
 * GQA attention, RMSNorm, tied or untied LM head). Checks the forward loss, and every parameter tensor's gradient
 * against central finite differences of the fp64 model along random directions. Also the shared layout against the
 * apart one, trained side by side (layout_check.h). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/rng.h"
#include "tests/layout_check.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

/* ---------------------------------------------------------------- the naive fp64 model */

typedef struct Naive {
    const ModelConfig *c;
    const Model *m;   /* for the parameter table only */
    const double *p;  /* all parameters, the model's internal order */
} Naive;

static const double *tensor(const Naive *n, const char *name) {
    const ParamView *v = model_find_param(n->m, name);
    if (!v) {
        fprintf(stderr, "missing parameter %s\n", name);
        exit(2);
    }
    return n->p + v->offset;
}

/* Row `hf_row` of HF's q_proj (part 0) or k_proj (part 1) or v_proj (part 2) inside the internal fused W_qkv. */
static const double *qkv_row(const Naive *n, int l, int part, int hf_row) {
    const ModelConfig *c = n->c;
    int hd = c->head_dim, half = hd / 2;
    char name[64];
    snprintf(name, sizeof(name), "layers.%d.wqkv", l);
    int base = part == 0 ? 0 : part == 1 ? c->num_attention_heads * hd : (c->num_attention_heads + c->num_key_value_heads) * hd;
    int row = hf_row;
    if (part < 2) {
        int head = hf_row / hd, i = hf_row % hd;
        row = head * hd + (i < half ? 2 * i : 2 * (i - half) + 1);
    }
    return tensor(n, name) + (size_t)(base + row) * c->hidden_size;
}

static void rmsnorm(const double *x, const double *g, double eps, int D, double *out) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += x[i] * x[i];
    double r = 1 / sqrt(ss / D + eps);
    for (int i = 0; i < D; i++) out[i] = x[i] * r * g[i];
}

static double dot(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* transformers' default and llama3 inverse frequencies, in double. */
static void naive_inv_freq(const ModelConfig *c, double *f) {
    for (int i = 0; i < c->head_dim / 2; i++) {
        double inv = 1.0 / pow(c->rope_theta, 2.0 * i / c->head_dim);
        if (c->rope_llama3) {
            double old = c->rope_original_max_position_embeddings;
            double wavelen = 2 * M_PI / inv;
            if (wavelen < old / c->rope_high_freq_factor) {
                /* high frequency: unchanged */
            } else if (wavelen > old / c->rope_low_freq_factor) {
                inv /= c->rope_factor;
            } else {
                double s = (old / wavelen - c->rope_low_freq_factor) /
                           (c->rope_high_freq_factor - c->rope_low_freq_factor);
                inv = (1 - s) * inv / c->rope_factor + s * inv;
            }
        }
        f[i] = inv;
    }
}

/* HF apply_rotary_pos_emb on one head vector: x*cos + rotate_half(x)*sin, cos/sin = cat(freqs, freqs). */
static void rope_hf(double *x, int hd, int pos, const double *inv) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double cs = cos(pos * inv[i]), sn = sin(pos * inv[i]);
        double a = x[i], b = x[i + half];
        x[i] = a * cs - b * sn;
        x[i + half] = b * cs + a * sn;
    }
}

static double naive_loss(const Naive *n, const int32_t *tok, const int32_t *tgt, int B, int T) {
    const ModelConfig *c = n->c;
    int D = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    int Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, M = B * T, Dq = Hq * hd, Dk = Hkv * hd;
    double eps = c->rms_norm_eps;
    double *x = malloc(sizeof(double) * M * D), *nx = malloc(sizeof(double) * M * D);
    double *q = malloc(sizeof(double) * M * Dq), *k = malloc(sizeof(double) * M * Dk),
           *v = malloc(sizeof(double) * M * Dk), *att = malloc(sizeof(double) * M * Dq);
    double *gu = malloc(sizeof(double) * F), *sc = malloc(sizeof(double) * T), inv[512];
    naive_inv_freq(c, inv);
    const double *E = tensor(n, "embed");
    for (int t = 0; t < M; t++) memcpy(x + (size_t)t * D, E + (size_t)tok[t] * D, sizeof(double) * D);
    char name[64];
    for (int l = 0; l < c->num_hidden_layers; l++) {
        snprintf(name, sizeof(name), "layers.%d.attn_norm", l);
        const double *g1 = tensor(n, name);
        for (int t = 0; t < M; t++) rmsnorm(x + (size_t)t * D, g1, eps, D, nx + (size_t)t * D);
        for (int t = 0; t < M; t++) {
            for (int j = 0; j < Dq; j++) q[(size_t)t * Dq + j] = dot(nx + (size_t)t * D, qkv_row(n, l, 0, j), D);
            for (int j = 0; j < Dk; j++) k[(size_t)t * Dk + j] = dot(nx + (size_t)t * D, qkv_row(n, l, 1, j), D);
            for (int j = 0; j < Dk; j++) v[(size_t)t * Dk + j] = dot(nx + (size_t)t * D, qkv_row(n, l, 2, j), D);
            for (int h = 0; h < Hq; h++) rope_hf(q + (size_t)t * Dq + h * hd, hd, t % T, inv);
            for (int h = 0; h < Hkv; h++) rope_hf(k + (size_t)t * Dk + h * hd, hd, t % T, inv);
        }
        for (int b = 0; b < B; b++)
            for (int h = 0; h < Hq; h++) {
                int kh = h / (Hq / Hkv);
                for (int i = 0; i < T; i++) {
                    const double *qi = q + (size_t)(b * T + i) * Dq + h * hd;
                    double mx = -1e300, sum = 0;
                    for (int j = 0; j <= i; j++) {
                        sc[j] = dot(qi, k + (size_t)(b * T + j) * Dk + kh * hd, hd) / sqrt(hd);
                        if (sc[j] > mx) mx = sc[j];
                    }
                    for (int j = 0; j <= i; j++) sum += (sc[j] = exp(sc[j] - mx));
                    double *o = att + (size_t)(b * T + i) * Dq + h * hd;
                    for (int d = 0; d < hd; d++) {
                        double s = 0;
                        for (int j = 0; j <= i; j++) s += sc[j] / sum * v[(size_t)(b * T + j) * Dk + kh * hd + d];
                        o[d] = s;
                    }
                }
            }
        snprintf(name, sizeof(name), "layers.%d.wo", l);
        const double *Wo = tensor(n, name);
        for (int t = 0; t < M; t++)
            for (int j = 0; j < D; j++) x[(size_t)t * D + j] += dot(att + (size_t)t * Dq, Wo + (size_t)j * Dq, Dq);
        snprintf(name, sizeof(name), "layers.%d.mlp_norm", l);
        const double *g2 = tensor(n, name);
        snprintf(name, sizeof(name), "layers.%d.wgateup", l);
        const double *Wgu = tensor(n, name);
        snprintf(name, sizeof(name), "layers.%d.wdown", l);
        const double *Wd = tensor(n, name);
        for (int t = 0; t < M; t++) {
            double *xt = x + (size_t)t * D, *nt = nx + (size_t)t * D;
            rmsnorm(xt, g2, eps, D, nt);
            for (int j = 0; j < F; j++) {
                double gate = dot(nt, Wgu + (size_t)(2 * j) * D, D);   /* gate_proj row j */
                double up = dot(nt, Wgu + (size_t)(2 * j + 1) * D, D); /* up_proj row j */
                gu[j] = gate / (1 + exp(-gate)) * up;
            }
            for (int j = 0; j < D; j++) xt[j] += dot(gu, Wd + (size_t)j * F, F);
        }
    }
    const double *gf = tensor(n, "final_norm");
    const double *Wlm = c->tie_word_embeddings ? E : tensor(n, "lm_head");
    double total = 0;
    double *logits = malloc(sizeof(double) * V);
    for (int t = 0; t < M; t++) {
        rmsnorm(x + (size_t)t * D, gf, eps, D, nx + (size_t)t * D);
        double mx = -1e300, s = 0;
        for (int j = 0; j < V; j++) {
            logits[j] = dot(nx + (size_t)t * D, Wlm + (size_t)j * D, D);
            if (logits[j] > mx) mx = logits[j];
        }
        for (int j = 0; j < V; j++) s += exp(logits[j] - mx);
        total += mx + log(s) - logits[tgt[t]];
    }
    free(x); free(nx); free(q); free(k); free(v); free(att); free(gu); free(sc); free(logits);
    return total / M;
}

/* ---------------------------------------------------------------- the checks */

static void run_case(const char *label, ModelConfig c, int B, int T, uint64_t seed) {
    Model m;
    char err[256];
    if (model_create(&m, &c, &kernels_cpu, B, T, MODEL_GRADS_APART, err, sizeof(err))) {
        CHECK(0, "%s: model_create: %s", label, err);
        return;
    }
    model_init_weights(&m, seed);
    size_t n = m.table.n_params;
    /* Bigger-than-init random weights and non-unit norm weights, so that every term matters. */
    float *w = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = (float)(0.15 * rng_normal_at(seed + 1, i));
    for (int vi = 0; vi < m.table.n_views; vi++) {
        const ParamView *v = &m.table.views[vi];
        if (v->rows == 1)
            for (int j = 0; j < v->cols; j++) w[v->offset + j] = (float)(1 + 0.3 * rng_normal_at(seed + 2, v->offset + j));
    }
    model_set_master(&m, w, 0, n);
    int M = B * T;
    int32_t *tok = malloc(M * sizeof(int32_t)), *tgt = malloc(M * sizeof(int32_t));
    uint64_t rs = seed;
    for (int i = 0; i < M; i++) {
        tok[i] = (int32_t)(rng_next(&rs) % c.vocab_size);
        tgt[i] = (int32_t)(rng_next(&rs) % c.vocab_size);
    }
    double *p = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) p[i] = w[i];
    Naive nv = {&c, &m, p};

    /* forward */
    model_forward(&m, tok, B, T);
    model_zero_grads(&m);
    double ours = model_loss(&m, tgt, B, T, 1.0f / M);
    double ref = naive_loss(&nv, tok, tgt, B, T);
    CHECK(fabs(ours - ref) / fabs(ref) < 2e-6, "%s: forward loss %.9f vs naive fp64 %.9f (rel %.2e)", label, ours,
          ref, fabs(ours - ref) / fabs(ref));

    /* backward: every tensor's gradient along a random direction vs central differences in fp64 */
    model_backward(&m, B, T, MICRO_FIRST | MICRO_LAST);
    float *g = malloc(n * sizeof(float));
    m.k->copy_to_host(m.kc, g, m.grads, n * sizeof(float));
    CHECK(all_finite_f(g, n), "%s: gradient is finite", label);
    double sq_ref = 0;
    for (size_t i = 0; i < n; i++) sq_ref += (double)g[i] * g[i];
    const double sq = model_grad_sum_squares(&m);
    CHECK(m.grad_sq_ready && fabs(sq - sq_ref) <= 1e-10 * sq_ref, "%s: the gradient's sum of squares from the "
          "weight-gradient GEMMs' shares %.12e, from all elements %.12e", label, sq, sq_ref);
    double worst = 0;
    const char *worst_name = "";
    for (int vi = 0; vi < m.table.n_views; vi++) {
        const ParamView *v = &m.table.views[vi];
        size_t len = (size_t)v->rows * v->cols;
        double analytic = 0, h = 1e-5;
        double *u = malloc(len * sizeof(double));
        for (size_t i = 0; i < len; i++) {
            u[i] = rng_normal_at(seed + 100 + vi, i);
            analytic += g[v->offset + i] * u[i];
        }
        for (size_t i = 0; i < len; i++) p[v->offset + i] = w[v->offset + i] + h * u[i];
        double lp = naive_loss(&nv, tok, tgt, B, T);
        for (size_t i = 0; i < len; i++) p[v->offset + i] = w[v->offset + i] - h * u[i];
        double lm = naive_loss(&nv, tok, tgt, B, T);
        for (size_t i = 0; i < len; i++) p[v->offset + i] = w[v->offset + i];
        double fd = (lp - lm) / (2 * h);
        double rel = fabs(analytic - fd) / (fabs(fd) + 1e-9);
        if (rel > worst) {
            worst = rel;
            worst_name = v->name;
        }
        CHECK(rel < 1e-4, "%s: d loss / d %s along a random direction: backward %.8e, finite differences %.8e "
              "(rel %.1e)", label, v->name, analytic, fd, rel);
        free(u);
    }
    printf("# %s: worst relative gradient error %.2e (%s)\n", label, worst, worst_name);

    /* accumulation: a second backward of the same batch (not the first micro-batch) doubles the gradient */
    model_forward(&m, tok, B, T);
    model_loss(&m, tgt, B, T, 1.0f / M);
    model_backward(&m, B, T, 0);
    float *g2 = malloc(n * sizeof(float));
    m.k->copy_to_host(m.kc, g2, m.grads, n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] *= 2;
    CHECK(rel_error_f(g2, g, n) < 1e-6, "%s: gradients accumulate over two backward passes (rel %.1e)", label,
          rel_error_f(g2, g, n));
    free(g2);
    free(g);
    free(w);
    free(p);
    free(tok);
    free(tgt);
    model_destroy(&m);
}

int main(void) {
    ModelConfig c = small_model_config(1);
    run_case("tied, GQA 2, plain RoPE", c, 2, 7, 11);

    c.tie_word_embeddings = 0;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.rope_theta = 10000;
    c.rope_llama3 = 1;
    c.rope_factor = 32;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_position_embeddings = 64; /* wavelengths 6.3, 63, 628, 6283 at hd 8: all three bands */
    run_case("untied, GQA 4, llama3 RoPE scaling", c, 3, 5, 12);

    c.num_key_value_heads = 4;
    c.num_hidden_layers = 1;
    run_case("MHA, one layer, T=1", c, 4, 1, 13);

    ModelConfig four = small_model_config(1);
    four.num_hidden_layers = 4;
    check_layouts(&kernels_cpu, 0, &four, 2, 8, 3, "layouts, 4 layers, 2 x 8 (every block above the first fits)");
    check_layouts(&kernels_cpu, 0, &four, 3, 16, 1, "layouts, 4 layers, 3 x 16 (one block fits)");
    /* V D = 888 floats: block 0's gradients start 224 bytes past a multiple of 256. At 1 x 43 the top block's
     * activations end at its own gradients and start on the first 256-byte boundary inside block 0's; at 4 x 11
     * (256 bytes more) the boundary below would be inside the embedding's gradients, so no block fits. */
    ModelConfig three = small_model_config(1);
    three.num_hidden_layers = 3;
    check_layouts(&kernels_cpu, 0, &three, 1, 43, 1, "layouts, 3 layers, 1 x 43 (a block just above the embedding)");
    check_layouts(&kernels_cpu, 0, &three, 4, 11, 0, "layouts, 3 layers, 4 x 11 (no room above the embedding)");
    return test_summary();
}
