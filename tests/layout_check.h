/* layout_check.h: the shared layout (model.h, ModelLayout) against the apart one on one backend table, shared by the
 * CPU test (test_model.c) and the GPU one (gpu/test_gpu_layout.c). Two models of one config and init train the same
 * batch side by side, four optimizer steps of one micro-batch (train_step.h, captured where the table can and
 * use_graph asks), with an evaluation between the steps: their losses, gradient norms, evaluation losses and master
 * weights must agree bit for bit. A block's activations placed over gradients that its backward writes, or read
 * after a gradient overwrote them, changes the numbers. Also checked: where each block's activations landed (in the
 * gradients of the blocks below it, clear of the next block's, or in the arena), how many blocks are in the
 * gradients, and that a step of two micro-batches is refused on the shared layout. */
#ifndef LAYOUT_CHECK_H
#define LAYOUT_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/train_step.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

/* The bytes of block l's saved activations: from its first piece (x) to the end of its last (Zgu). */
static void layout_block_extent(const Model *m, int l, const char **lo, const char **hi) {
    const size_t M = (size_t)m->B * m->T, F = m->cfg.intermediate_size;
    *lo = m->layers[l].x;
    *hi = (const char *)m->layers[l].Zgu + M * 2 * F * m->k->act_bytes;
}

/* Where the shared model's blocks landed: each either in the arena or inside [the first block's gradients, its own
 * gradients) and below the block above it; the blocks in the gradients are the top `want_shared` ones. */
static void layout_check_placement(const Model *m, int want_shared, const char *label) {
    const int L = m->cfg.num_hidden_layers;
    const char *grads = (const char *)m->grads;
    const char *floor = grads + model_find_param(m, "layers.0.wqkv")->offset * sizeof(float);
    int shared = 0, lowest = L, ok = 1;
    const char *above = NULL; /* the lowest byte of the block above that is in the gradients */
    for (int l = L - 1; l >= 0; l--) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.wqkv", l);
        const char *own = grads + model_find_param(m, name)->offset * sizeof(float);
        const char *lo, *hi;
        layout_block_extent(m, l, &lo, &hi);
        const int in_grads = lo >= grads && lo < grads + m->table.n_params * sizeof(float);
        if (!in_grads) continue;
        shared++;
        lowest = l;
        ok &= lo >= floor && hi <= own && (!above || hi <= above) && (lo - grads) % 256 == 0;
        above = lo;
    }
    CHECK(ok && shared == want_shared && lowest == L - shared,
          "%s: %d of %d blocks' activations lie in the gradients of the blocks below them (want the top %d), clear of "
          "their own and of each other's, at multiples of 256 bytes into the buffer", label, shared, L, want_shared);
}

/* Trains the apart and the shared model of c (B x T) side by side on k and compares them (see the top). */
static void check_layouts(const Kernels *k, int use_graph, const ModelConfig *c, int B, int T, int want_shared,
                          const char *label) {
    enum { STEPS = 4 };
    const int M = B * T, V = c->vocab_size;
    Model m[2];
    TrainStep s[2];
    char err[256];
    const ModelLayout layouts[2] = {MODEL_GRADS_APART, MODEL_GRADS_SHARED};
    for (int i = 0; i < 2; i++)
        if (model_create(&m[i], c, k, B, T, layouts[i], err, sizeof err) ||
            train_step_create(&s[i], &m[i], B, T, 1, use_graph, err, sizeof err)) {
            CHECK(0, "%s: model_create and train_step_create (%s layout): %s", label, i ? "shared" : "apart", err);
            exit(1);
        }
    layout_check_placement(&m[1], want_shared, label);
    TrainStep refused;
    CHECK(train_step_create(&refused, &m[1], B, T, 2, use_graph, err, sizeof err) != 0 && strstr(err, "APART"),
          "%s: a step of 2 micro-batches on the shared layout is refused: %s", label, err);

    int32_t *tok = malloc((size_t)M * sizeof(int32_t)), *tgt = malloc((size_t)M * sizeof(int32_t));
    const size_t n = m[0].table.n_params;
    float *w[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    if (!tok || !tgt || !w[0] || !w[1]) {
        CHECK(0, "%s: host buffers", label);
        exit(1);
    }
    const TrainConfig t = small_train_config(3e-3);
    for (int i = 0; i < 2; i++) model_init_weights(&m[i], 5);
    int same = 1;
    double first = 0, last = 0;
    for (int i = 0; i < M; i++) {
        tok[i] = (int32_t)((rnd() + 1) * 0.5 * V) % V;
        tgt[i] = (tok[i] * 7 + 3) % V; /* a pattern to learn */
    }
    for (int step = 1; step <= STEPS; step++) { /* the same batch each step, so that its loss falls */
        double loss[2], norm[2], eval[2];
        for (int i = 0; i < 2; i++) {
            train_step_load(&s[i], 0, tok, tgt);
            train_step_run(&s[i], &t, t.learning_rate, step);
            train_step_result(&s[i], &loss[i], &norm[i]);
            model_forward(&m[i], tgt, B, T); /* an evaluation between steps, on other rows */
            eval[i] = model_loss(&m[i], tok, B, T, 0.0f);
        }
        if (step == 1) first = loss[0];
        last = loss[0];
        const int equal = memcmp(&loss[0], &loss[1], sizeof(double)) == 0 &&
                          memcmp(&norm[0], &norm[1], sizeof(double)) == 0 &&
                          memcmp(&eval[0], &eval[1], sizeof(double)) == 0;
        if (!equal)
            printf("# %s, step %d: apart loss %.9g norm %.9g eval %.9g, shared %.9g %.9g %.9g\n", label, step, loss[0],
                   norm[0], eval[0], loss[1], norm[1], eval[1]);
        same &= equal && isfinite(loss[0]) && isfinite(eval[0]);
    }
    for (int i = 0; i < 2; i++) model_master_to_host(&m[i], w[i], 0, n);
    CHECK(same && memcmp(w[0], w[1], n * sizeof(float)) == 0 && last < first,
          "%s: %d steps with an evaluation between them: losses, gradient norms, evaluation losses and master weights "
          "bit for bit the same in both layouts (loss %.6f -> %.6f)%s", label, STEPS, first, last,
          use_graph && k->capture_begin ? ", the steps replayed from captured graphs" : "");
    if (use_graph && k->capture_begin)
        CHECK(train_step_captured(&s[0]) && train_step_captured(&s[1]), "%s: both steps were captured", label);
    for (int i = 0; i < 2; i++) {
        train_step_destroy(&s[i]);
        model_destroy(&m[i]);
        free(w[i]);
    }
    free(tok);
    free(tgt);
}

#endif
