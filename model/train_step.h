/* train_step.h: one optimizer step queued on the backend whole (zero the gradients; forward, loss and backward of
 * each micro-batch; the gradient norm, the clip factor and AdamW), with one read of its results at the end, and
 * replayed as a captured graph where the backend can capture (kernels.h, capture_begin). */
#ifndef TRAIN_STEP_H
#define TRAIN_STEP_H

#include "model/config.h"
#include "model/model.h"

typedef struct TrainStep {
    Model *m;
    int B, T, accum;
    float grad_scale;   /* 1 / the step's tokens: the loss of a step is the mean over all of them */
    ModelBatch *slots;  /* [accum] the step's micro-batches, in backend memory */
    void *slot_mem;
    int use_graph;      /* capture the step (on a backend that can) */
    int runs;           /* steps queued so far */
    void *graph;        /* the captured step, once captured */
} TrainStep;

/* The bytes of backend memory a step of accum micro-batches of B x T holds beside the model. */
size_t train_step_bytes(int B, int T, int accum);

/* Returns 0, or -1 with a message (the backend's memory cannot hold the micro-batches, or accum > 1 on a model of
 * the shared layout). use_graph: capture the
 * step on its second run (the first runs as it is, so that every workspace has its size) and replay it after. */
int train_step_create(TrainStep *s, Model *m, int B, int T, int accum, int use_graph, char *err, size_t errlen);
void train_step_destroy(TrainStep *s);

/* Copies micro-batch `micro` (host ids and targets, B x T each) to its slot, grouped (model_batch_load). */
void train_step_load(TrainStep *s, int micro, const int32_t *inputs, const int32_t *targets);

/* Queues (or replays) the step at learning rate lr, step `step` (1-based); nothing waits. */
void train_step_run(TrainStep *s, const TrainConfig *t, double lr, int step);

/* Waits for the step and returns its mean loss and its gradient norm. */
void train_step_result(TrainStep *s, double *loss, double *norm);

/* 1 when steps are replayed from a captured graph (after the second run with use_graph on a backend that can). */
int train_step_captured(const TrainStep *s);

#endif
