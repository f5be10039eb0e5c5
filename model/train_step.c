/* train_step.c: one optimizer step queued whole, and captured as a graph where the backend can (train_step.h). */
#include "model/train_step.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/optimizer.h"

size_t train_step_bytes(int B, int T, int accum) { return size_mul(model_batch_bytes(B * T), (size_t)accum); }

int train_step_create(TrainStep *s, Model *m, int B, int T, int accum, int use_graph, char *err, size_t errlen) {
    *s = (TrainStep){.m = m, .B = B, .T = T, .accum = accum};
    if (accum > 1 && m->layout == MODEL_GRADS_SHARED) {
        snprintf(err, errlen, "a step of %d micro-batches keeps gradients between them: it needs a model made with "
                 "MODEL_GRADS_APART", accum);
        return -1;
    }
    s->grad_scale = (float)(1.0 / ((double)B * T * accum));
    s->use_graph = use_graph && m->k->capture_begin != NULL;
    s->slots = calloc((size_t)accum, sizeof(ModelBatch));
    s->slot_mem = s->slots ? m->k->alloc(s->m->kc, train_step_bytes(B, T, accum)) : NULL;
    if (!s->slot_mem) {
        snprintf(err, errlen, "out of %s for the step's %d micro-batches of %d x %d tokens",
                 s->slots ? m->k->memory_name : "host memory", accum, B, T);
        train_step_destroy(s);
        return -1;
    }
    for (int i = 0; i < accum; i++)
        model_batch_bind(&s->slots[i], (char *)s->slot_mem + (size_t)i * model_batch_bytes(B * T), B * T);
    return 0;
}

void train_step_destroy(TrainStep *s) {
    if (s->graph) s->m->k->graph_free(s->m->kc, s->graph);
    if (s->slot_mem) s->m->k->free(s->m->kc, s->slot_mem);
    free(s->slots);
    *s = (TrainStep){0};
}

void train_step_load(TrainStep *s, int micro, const int32_t *inputs, const int32_t *targets) {
    model_batch_load(s->m, &s->slots[micro], inputs, targets, s->B * s->T);
}

/* The step's work, in the order it runs. */
static void queue_step(TrainStep *s, const TrainConfig *t) {
    Model *m = s->m;
    model_zero_grads(m);
    for (int micro = 0; micro < s->accum; micro++) {
        const ModelBatch *b = &s->slots[micro];
        model_forward_batch(m, b, s->B, s->T);
        model_loss_batch(m, b, s->B, s->T, s->grad_scale, micro > 0);
        const int which = (micro == 0 ? MICRO_FIRST : 0) | (micro == s->accum - 1 ? MICRO_LAST : 0);
        model_backward_batch(m, b, s->B, s->T, which);
    }
    optimizer_queue(m, t, 1);
}

void train_step_run(TrainStep *s, const TrainConfig *t, double lr, int step) {
    const Kernels *k = s->m->k;
    optimizer_set_step(s->m, t, lr, step);
    if (s->use_graph && s->runs == 1) { /* the first run gave every workspace its size: capture the second */
        k->capture_begin(s->m->kc);
        queue_step(s, t);
        s->graph = k->capture_end(s->m->kc);
    }
    if (s->graph) k->replay(s->m->kc, s->graph);
    else queue_step(s, t);
    s->runs++;
}

void train_step_result(TrainStep *s, double *loss, double *norm) {
    double loss_sum;
    optimizer_read(s->m, &loss_sum, norm);
    *loss = loss_sum / ((double)s->B * s->T * s->accum);
}

int train_step_captured(const TrainStep *s) { return s->graph != NULL; }
