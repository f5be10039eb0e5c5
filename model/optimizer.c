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

void optimizer_set_step(Model *m, const TrainConfig *t, double lr, int step) {
    const AdamwScalars s[2] = {
        adamw_scalars((float)lr, (float)t->beta1, (float)t->beta2, (float)t->adam_eps, (float)t->weight_decay, step),
        adamw_scalars((float)lr, (float)t->beta1, (float)t->beta2, (float)t->adam_eps, 0.0f, step)};
    m->k->copy_to_device(m->kc, m->adam_scalars, s, sizeof(s));
}

void optimizer_queue(Model *m, const TrainConfig *t, int n_loss) {
    const Kernels *k = m->k;
    size_t n = m->table.n_params, nd = m->table.n_decay, ab = k->act_bytes;
    m->n_sq = model_queue_grad_squares(m);
    k->clip_scale(m->kc, m->stats + 1 - n_loss, n_loss, m->n_sq, t->grad_clip, m->clip_scale);
    if (m->master_lo) /* split master weights: the decayed ones are exactly the split ones */
        k->adamw_split(m->kc, m->master_lo, m->weights, m->grads, m->adam_m, m->adam_v, nd, &m->adam_scalars[0],
                       m->clip_scale);
    else
        k->adamw(m->kc, m->master, m->weights, m->grads, m->adam_m, m->adam_v, nd, &m->adam_scalars[0], m->clip_scale);
    k->adamw(m->kc, m->master + (nd - m->master_first), (char *)m->weights + nd * ab, m->grads + nd, m->adam_m + nd,
             m->adam_v + nd, n - nd, &m->adam_scalars[1], m->clip_scale);
}

void optimizer_read(Model *m, double *loss_sum, double *norm) {
    m->k->copy_to_host(m->kc, m->host_stats, m->stats, (size_t)(1 + m->n_sq) * sizeof(double));
    double sq = 0.0;
    for (int i = 0; i < m->n_sq; i++) sq += m->host_stats[1 + i];
    *loss_sum = m->host_stats[0];
    *norm = sqrt(sq);
}

double optimizer_step(Model *m, const TrainConfig *t, double lr, int step) {
    optimizer_set_step(m, t, lr, step);
    optimizer_queue(m, t, 0);
    double loss_sum, norm;
    optimizer_read(m, &loss_sum, &norm);
    return norm;
}
