/* cpu_optimizer.c: the optimizer ops (deterministic sums for the loss and the gradient norm, the clip factor,
 * AdamW). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

/* Elements per partial sum of sum_squares: a fixed chunking, so the result is independent of the thread count. */
#define SUMSQ_CHUNK 8192

size_t cpu_sum_squares_bytes(size_t n) { return size_mul((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, sizeof(double)); }

/* The sum of g[i]^2 (SQUARE) or g[i] over fixed chunks, added in chunk order. */
static double chunked_sum(KernelContext *kc, const float *g, size_t n, int square) {
    const size_t n_chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *partial = cpu_scratch(kc, cpu_sum_squares_bytes(n));
#pragma omp parallel for schedule(static)
    for (size_t chunk = 0; chunk < n_chunks; chunk++) {
        const size_t lo = chunk * SUMSQ_CHUNK, hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = lo; i < hi; i++) acc += square ? (double)g[i] * (double)g[i] : (double)g[i];
        partial[chunk] = acc;
    }
    double total = 0.0;
    for (size_t chunk = 0; chunk < n_chunks; chunk++) total += partial[chunk];
    cpu_free(kc, partial);
    return total;
}

void cpu_sum_squares(KernelContext *kc, const float *g, size_t n, double *out) { *out = chunked_sum(kc, g, n, 1); }

void cpu_sum(KernelContext *kc, const float *x, size_t n, double *out, int accumulate) {
    const double s = chunked_sum(kc, x, n, 0);
    *out = accumulate ? *out + s : s;
}

void cpu_clip_scale(KernelContext *kc, const double *parts, int n_loss, int n_sq, double max_norm, float *scale) {
    int finite = 1;
    for (int i = 0; i < n_loss; i++) finite &= isfinite(parts[i]) != 0;
    double sq = 0.0;
    for (int i = 0; i < n_sq; i++) sq += parts[n_loss + i];
    const double norm = sqrt(sq);
    if (!finite || !isfinite(norm)) {
        *scale = NAN;
        return;
    }
    const double s = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    *scale = (float)(s < 1.0 ? s : 1.0);
}

void cpu_adamw(KernelContext *kc, float *master, void *working, const float *grad, float *m, float *v, size_t n,
               const AdamwScalars *s, const float *grad_scale_p) {
    const float grad_scale = *grad_scale_p;
    if (!isfinite(grad_scale)) return;
    const float decay = s->decay, step_size = s->step_size, bias_correction2_sqrt = s->bc2_sqrt;
    const float beta2 = s->beta2, eps = s->eps, one_minus_beta1 = s->one_minus_beta1,
                one_minus_beta2 = s->one_minus_beta2;
    float *work = working;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i] * grad_scale;
        const float mi = m[i] + one_minus_beta1 * (g - m[i]); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
        const float vi = beta2 * v[i] + one_minus_beta2 * (g * g);
        const float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
        const float p = master[i] * decay - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        work[i] = p;
    }
}
