/* cpu_rows.c: per-row helpers shared by the fused epilogues (double-accumulated dot, RMS scale, RoPE rotation). */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

double cpu_dot(const float *a, const float *b, int n) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++) acc += (double)a[i] * (double)b[i];
    return acc;
}

float cpu_rms_rscale(const float *x, int n, float eps) {
    return (float)(1.0 / sqrt(cpu_dot(x, x, n) / n + (double)eps));
}

void cpu_rope_scale_row(const float *in, float *out, float scale, const float *cos_row, const float *sin_row,
                        float sin_sign, int N, int n_rope_cols, int hd) {
    /* A pair (a, b) of head columns (2i, 2i+1) becomes (a cos - b sin, b cos + a sin); R^T negates sin. */
    for (int head = 0; head < n_rope_cols; head += hd) {
        const float *pin = in + head;
        float *pout = out + head;
        for (int i = 0; i < hd / 2; i++) {
            const float a = pin[2 * i], b = pin[2 * i + 1];
            const float cs = cos_row[i], sn = sin_sign * sin_row[i];
            pout[2 * i] = scale * (a * cs - b * sn);
            pout[2 * i + 1] = scale * (b * cs + a * sn);
        }
    }
    for (int n = n_rope_cols; n < N; n++) out[n] = scale * in[n];
}
