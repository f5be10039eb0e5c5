/* cpu_optimizer.c: the optimizer ops (deterministic sum of squares for the gradient norm, AdamW). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

/* Elements per partial sum of sum_squares: a fixed chunking, so the result is independent of the thread count. */
#define SUMSQ_CHUNK 8192

size_t cpu_sum_squares_bytes(size_t n) { return size_mul((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, sizeof(double)); }

double cpu_sum_squares(const float *g, size_t n) {
    const size_t n_chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *partial = cpu_scratch(cpu_sum_squares_bytes(n));
#pragma omp parallel for schedule(static)
    for (size_t chunk = 0; chunk < n_chunks; chunk++) {
        const size_t lo = chunk * SUMSQ_CHUNK, hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = lo; i < hi; i++) acc += (double)g[i] * (double)g[i];
        partial[chunk] = acc;
    }
    double total = 0.0;
    for (size_t chunk = 0; chunk < n_chunks; chunk++) total += partial[chunk];
    cpu_free(partial);
    return total;
}

void cpu_adamw(float *master, void *working, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, float grad_scale, int step) {
    /* Scalars as PyTorch forms them: in double on the host, then used as fp32 in the elementwise math. */
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const float step_size = (float)(lr / (1.0 - pow(beta1, step)));
    const float bias_correction2_sqrt = (float)sqrt(1.0 - pow(beta2, step));
    const float one_minus_beta1 = (float)(1.0 - beta1), one_minus_beta2 = (float)(1.0 - beta2);
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
