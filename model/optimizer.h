/* optimizer.h: the learning-rate schedule and one optimizer step (global-norm clipping + AdamW, no weight decay on
 * norm weights) over the model's contiguous parameter buffers. */
#ifndef OPTIMIZER_H
#define OPTIMIZER_H

#include "model/config.h"
#include "model/model.h"

/* The learning rate of step s (1-based, s in [1, steps]). With peak = learning_rate, floor = peak * min_lr_frac,
 * W = warmup_steps, S = steps:
 *   s <= W:   peak * s / W                                   (linear warmup)
 *   after:    p = (s - W) / (S - W) in (0, 1]
 *     cosine:   floor + (peak - floor) * (1 + cos(pi * p)) / 2
 *     linear:   peak - (peak - floor) * p
 *     constant: peak
 *     wsd:      peak until s > S - K, K = round(wsd_decay_frac * S) decay steps; then
 *               peak - (peak - floor) * (s - (S - K)) / K    (warmup-stable-decay) */
double lr_at_step(const TrainConfig *t, int step);

/* Global gradient norm over all parameter gradients, then AdamW on the decayed range [0, n_decay) with
 * weight_decay and on the norm weights without, the gradients scaled by min(1, grad_clip / (norm + 1e-6)) when
 * grad_clip > 0 (torch.nn.utils.clip_grad_norm_). Returns the norm before clipping; when it is not finite, no
 * update is applied (it would make every weight NaN). */
double optimizer_step(Model *m, const TrainConfig *t, double lr, int step);

/* optimizer_step in three parts, so that a step can be queued whole (and captured) with one read at its end:
 * optimizer_set_step copies the AdamW scalars of (lr, step) to the backend, for the queued work to read when it
 * runs; optimizer_queue queues the gradient's sums of squares, the clip factor and AdamW, where n_loss = 1 makes
 * a loss sum in m->stats[0] that is not finite stop the update too (0: the norm alone decides); nothing waits.
 * optimizer_read waits and returns the loss sum (n_loss = 1) and the norm of the last queued step. */
void optimizer_set_step(Model *m, const TrainConfig *t, double lr, int step);
void optimizer_queue(Model *m, const TrainConfig *t, int n_loss);
void optimizer_read(Model *m, double *loss_sum, double *norm);

#endif
