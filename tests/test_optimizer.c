/* test_optimizer.c: the learning-rate schedules against hand-computed values, and one optimizer step (global-norm
 * clipping, AdamW with and without weight decay) against the formula evaluated here in double. */
#include <string.h>

#include "model/optimizer.h"
#include "tests/test_util.h"

static TrainConfig schedule_config(const char *kind) {
    TrainConfig t;
    memset(&t, 0, sizeof(t));
    snprintf(t.lr_schedule, sizeof(t.lr_schedule), "%s", kind);
    t.learning_rate = 1e-3;
    t.min_lr_frac = 0.1;
    t.warmup_steps = 10;
    t.steps = 110;
    t.wsd_decay_frac = 0.2;
    return t;
}

static void check_lr(const char *kind, int step, double expected) {
    TrainConfig t = schedule_config(kind);
    double got = lr_at_step(&t, step);
    CHECK(fabs(got - expected) <= 1e-12, "%s schedule, step %d: lr %.10e, expected %.10e", kind, step, got, expected);
}

static void test_schedules(void) {
    /* peak 1e-3, floor 1e-4, warmup 10, 110 steps: p = (s - 10) / 100 after warmup */
    check_lr("cosine", 1, 1e-4);
    check_lr("cosine", 5, 5e-4);
    check_lr("cosine", 10, 1e-3);
    check_lr("cosine", 35, 8.6819805153394640e-4); /* 1e-4 + 9e-4 * (1 + cos(pi/4)) / 2 */
    check_lr("cosine", 60, 5.5e-4);
    check_lr("cosine", 110, 1e-4);
    check_lr("linear", 35, 7.75e-4);
    check_lr("linear", 60, 5.5e-4);
    check_lr("linear", 110, 1e-4);
    check_lr("constant", 60, 1e-3);
    check_lr("constant", 110, 1e-3);
    /* wsd: K = round(0.2 * 110) = 22 decay steps starting after step 88 */
    check_lr("wsd", 50, 1e-3);
    check_lr("wsd", 88, 1e-3);
    check_lr("wsd", 99, 5.5e-4);
    check_lr("wsd", 110, 1e-4);
    TrainConfig t = schedule_config("cosine");
    t.warmup_steps = 0;
    CHECK(fabs(lr_at_step(&t, 1) - (1e-4 + 9e-4 * 0.5 * (1 + cos(M_PI / 110)))) < 1e-12,
          "cosine without warmup: step 1 is already 1/110 of the way down");
}

/* AdamW's first two steps on one element, in double (PyTorch's formula). */
static double adamw_two_steps(double p, double g1, double g2, double lr, double wd, double b1, double b2,
                              double eps) {
    double m = 0, v = 0, gs[2] = {g1, g2};
    for (int s = 1; s <= 2; s++) {
        double g = gs[s - 1];
        p *= 1 - lr * wd;
        m = b1 * m + (1 - b1) * g;
        v = b2 * v + (1 - b2) * g * g;
        p -= lr / (1 - pow(b1, s)) * m / (sqrt(v) / sqrt(1 - pow(b2, s)) + eps);
    }
    return p;
}

static void test_step(void) {
    ModelConfig c = {0};
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.vocab_size = 32;
    c.max_position_embeddings = 8;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000;
    c.initializer_range = 0.02;
    Model m;
    char err[256];
    if (model_create(&m, &c, &kernels_cpu, 1, 4, MODEL_GRADS_APART, err, sizeof(err))) {
        CHECK(0, "model_create: %s", err);
        return;
    }
    model_init_weights(&m, 5);
    size_t n = m.table.n_params, nd = m.table.n_decay;
    CHECK(nd < n && (size_t)config_num_parameters(&c) == n, "parameter table: %zu parameters (%zu decayed), as "
          "config_num_parameters says", n, nd);
    float *p0 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *p2 = malloc(n * sizeof(float));
    m.k->copy_to_host(m.kc, p0, m.master, n * sizeof(float));
    TrainConfig t = schedule_config("constant");
    t.weight_decay = 0.1;
    t.beta1 = 0.9;
    t.beta2 = 0.95;
    t.adam_eps = 1e-8;
    t.grad_clip = 0.5;
    double gstep[2][2] = {{0.01, 0.02}, {-0.03, 0.005}}; /* [step][decayed, norm] */
    double norms[2];
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)(i < nd ? gstep[s][0] : gstep[s][1]);
        m.k->copy_to_device(m.kc, m.grads, g, n * sizeof(float));
        norms[s] = optimizer_step(&m, &t, 1e-3, s + 1);
    }
    m.k->copy_to_host(m.kc, p2, m.master, n * sizeof(float));
    double clip[2];
    for (int s = 0; s < 2; s++) {
        float gd = (float)gstep[s][0], gn = (float)gstep[s][1];
        double expected = sqrt((double)nd * gd * gd + (double)(n - nd) * gn * gn);
        CHECK(fabs(norms[s] - expected) / expected < 1e-6, "step %d: global grad norm %.8f, expected %.8f", s + 1,
              norms[s], expected);
        clip[s] = 0.5 / (expected + 1e-6);
        if (clip[s] > 1) clip[s] = 1;
    }
    CHECK(clip[0] < 1 && clip[1] < 1, "the test gradients are large enough to be clipped");
    size_t idx[2] = {3, nd + 2}; /* one decayed matrix element, one norm weight */
    for (int k = 0; k < 2; k++) {
        size_t i = idx[k];
        double e = adamw_two_steps(p0[i], (float)gstep[0][k] * clip[0], (float)gstep[1][k] * clip[1], 1e-3,
                                   k == 0 ? 0.1 : 0.0, 0.9, 0.95, 1e-8);
        CHECK(fabs(p2[i] - e) <= 1e-6 * fabs(e) + 1e-9, "%s element after two clipped AdamW steps: %.9f, expected "
              "%.9f", k == 0 ? "decayed" : "norm (no decay)", p2[i], e);
    }
    float *wk = malloc(n * sizeof(float));
    m.k->act_to_f32(m.kc, wk, m.weights, n);
    CHECK(memcmp(wk, p2, n * sizeof(float)) == 0, "the working weights follow the master weights");
    free(wk);
    free(p0);
    free(g);
    free(p2);
    model_destroy(&m);
}

int main(void) {
    test_schedules();
    test_step();
    return test_summary();
}
