/* kernels_host.c: the host-side helpers of the operation API (kernels.h) that every backend and the model share:
 * the token groups made beside a batch, and AdamW's per-step scalars. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

void token_groups_build(const int32_t *ids, int M, int V, int32_t *out, int32_t *count) {
    int32_t *order = out + 1, *seg = out + 1 + M, *seg_id = out + 2 + 2 * (size_t)M;
    /* a stable counting sort: rows ascending inside each id's group */
    memset(count, 0, (size_t)(V + 1) * sizeof(int32_t));
    for (int m = 0; m < M; m++) count[ids[m] + 1]++;
    for (int v = 0; v < V; v++) count[v + 1] += count[v];
    int n_seg = 0;
    for (int v = 0; v < V; v++)
        if (count[v + 1] > count[v]) {
            seg[n_seg] = count[v];
            seg_id[n_seg++] = v;
        }
    seg[n_seg] = M;
    for (int m = 0; m < M; m++) order[count[ids[m]]++] = m;
    out[0] = n_seg;
}

AdamwScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
    AdamwScalars s;
    s.decay = (float)(1.0 - (double)lr * weight_decay);
    s.step_size = (float)(lr / (1.0 - pow(beta1, step)));
    s.bc2_sqrt = (float)sqrt(1.0 - pow(beta2, step));
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.one_minus_beta1 = (float)(1.0 - beta1);
    s.one_minus_beta2 = (float)(1.0 - beta2);
    s.eps = eps;
    return s;
}
