/* dry_run.c: the backend's workspace for a model (model.h, model_workspace), from the schedule itself: the model's
 * views are made and every path of a run taken on the backend's recording table (kernels.h, kernels_recording),
 * which allocates, copies and computes nothing and asks the backend what each call would need. */
#include <limits.h>

#include "model/model.h"
#include "model/optimizer.h"
#include "model/train_step.h"

/* Every path of a run on m, as the program takes it: the weight copies of the init, the import and the resume;
 * training steps with and without gradient accumulation, and a gradient norm over the whole gradient; an
 * evaluation; and sampling (a prompt of T - 1 tokens into the cache and a token after it, and the last T tokens
 * once the context is full). Returns 0, or -1 when the host has not the memory of a step's tables. */
static int run_paths(Model *m) {
    const int B = m->B, T = m->T;
    static const float one_weight = 1.0f;
    model_set_master(m, &one_weight, 0, 1);
    float weight_back;
    model_master_to_host(m, &weight_back, 0, 1); /* a checkpoint's snapshot and an export read them so */
    const TrainConfig t = {0};
    for (int accum = 1; accum <= 3; accum += 2) { /* three micro-batches: the first writes, the next add */
        TrainStep s;
        char err[256];
        if (train_step_create(&s, m, B, T, accum, 0, err, sizeof(err))) return -1;
        train_step_run(&s, &t, 0.0, 1);
        train_step_destroy(&s);
    }
    model_zero_grads(m);
    model_queue_grad_squares(m); /* no last micro-batch left its parts (model_grad_sum_squares) */
    model_forward_batch(m, &m->batch, B, T);
    model_loss_batch(m, &m->batch, B, T, 0.0f, 0);
    KvCache cache = kv_cache_empty(m); /* as the sampler: the prompt at once, then one token (no logits copied) */
    if (T > 1) model_decode_batch(m, &m->batch, &cache, T - 1, NULL);
    model_decode_batch(m, &m->batch, &cache, 1, NULL);
    model_forward_batch(m, &m->batch, 1, T);
    model_last_logits(m, 1, T, NULL);
    return 0;
}

int model_workspace(const ModelConfig *cfg, const Kernels *k, int B, int T, size_t *bytes, size_t *scratch) {
    if ((size_t)B * (size_t)T > INT_MAX) { /* the ops count rows in int: no run has more (config_validate) */
        *bytes = SIZE_MAX;
        if (scratch) *scratch = SIZE_MAX;
        return 0;
    }
    KernelsRecord rec;
    const Kernels recording = kernels_recording(&rec, k);
    Model m;
    char err[256];
    if (model_create_views(&m, cfg, &recording, kernels_recording_context(&rec), B, T, MODEL_GRADS_APART, err,
                           sizeof(err)))
        return -1;
    const int rc = run_paths(&m);
    model_destroy(&m);
    *bytes = kernels_recorded_bytes(&rec);
    if (scratch) *scratch = rec.scratch;
    return rc;
}
