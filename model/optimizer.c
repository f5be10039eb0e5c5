/* optimizer.c: learning-rate schedules and the clipped AdamW step (see optimizer.h for the formulas). */
#include "model/optimizer.h"

#include <math.h>
#include <string.h>

double lr_at_step(const TrainConfig *t, int step) {
    double peak = t->learning_rate, floor_lr = peak * t->min_lr_frac;
    int W = t->warmup_steps, S = t->steps;
    if (step <= W) return peak * step / W;
    double p = S > W ? (double)(step - W) / (S - W) : 1.0;
    if (p > 1) p = 1;
    if (strcmp(t->lr_schedule, "cosine") == 0) return floor_lr + (peak - floor_lr) * 0.5 * (1 + cos(M_PI * p));
    if (strcmp(t->lr_schedule, "linear") == 0) return peak - (peak - floor_lr) * p;
    if (strcmp(t->lr_schedule, "wsd") == 0) {
        int K = (int)lround(t->wsd_decay_frac * S);
        int decay_start = S - K;
        if (step <= decay_start || K == 0) return peak;
        return peak - (peak - floor_lr) * (double)(step - decay_start) / K;
    }
    return peak; /* constant */
}

double optimizer_step(Model *m, const TrainConfig *t, double lr, int step) {
    const Kernels *k = m->k;
    size_t n = m->table.n_params, nd = m->table.n_decay;
    double norm = sqrt(model_grad_sum_squares(m));
    if (!isfinite(norm)) return norm;
    double scale = 1.0;
    if (t->grad_clip > 0) {
        scale = t->grad_clip / (norm + 1e-6);
        if (scale > 1) scale = 1;
    }
    size_t ab = k->act_bytes;
    k->adamw(m->master, m->weights, m->grads, m->adam_m, m->adam_v, nd, (float)lr, (float)t->beta1,
             (float)t->beta2, (float)t->adam_eps, (float)t->weight_decay, (float)scale, step);
    k->adamw(m->master + nd, (char *)m->weights + nd * ab, m->grads + nd, m->adam_m + nd, m->adam_v + nd, n - nd,
             (float)lr, (float)t->beta1, (float)t->beta2, (float)t->adam_eps, 0.0f, (float)scale, step);
    return norm;
}
