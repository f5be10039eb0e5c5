/* cpu_gemm.c: the fp32 GEMM core loops (Y = X.W^T, dX = dY.W, dW += dY^T.X) on which every CPU GEMM op is built. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* fmaf is explicit because -std=c11 turns off FMA contraction; with -march=native it compiles to vector FMAs. */

void cpu_gemm_xwt(const float *X, const float *W, float *Y, int rows, int N, int K) {
    /* Four W rows at a time, so one load of x[k] feeds four FMAs; the four rows stay in L1 across the X rows.
     * A last group of fewer than four W rows repeats its first row and drops the extra results. */
    for (int n = 0; n < N; n += 4) {
        const int cols = cpu_min(4, N - n);
        const float *w0 = W + (size_t)n * K;
        const float *w1 = cols > 1 ? w0 + K : w0;
        const float *w2 = cols > 2 ? w0 + 2 * (size_t)K : w0;
        const float *w3 = cols > 3 ? w0 + 3 * (size_t)K : w0;
        for (int m = 0; m < rows; m++) {
            const float *x = X + (size_t)m * K;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
            for (int k = 0; k < K; k++) {
                a0 = fmaf(x[k], w0[k], a0);
                a1 = fmaf(x[k], w1[k], a1);
                a2 = fmaf(x[k], w2[k], a2);
                a3 = fmaf(x[k], w3[k], a3);
            }
            const float acc[4] = {a0, a1, a2, a3};
            memcpy(Y + (size_t)m * N + n, acc, (size_t)cols * sizeof(float));
        }
    }
}

/* out[0..K) += sum_{j < count} coef[j * coef_stride] * B[j*K .. j*K + K), the terms added in order of j, four rows
 * of B per pass over out. */
static void axpy_rows(float *restrict out, const float *coef, size_t coef_stride, const float *B, int count, int K) {
    int j = 0;
    for (; j + 4 <= count; j += 4) {
        const float a0 = coef[j * coef_stride], a1 = coef[(j + 1) * coef_stride];
        const float a2 = coef[(j + 2) * coef_stride], a3 = coef[(j + 3) * coef_stride];
        const float *b0 = B + (size_t)j * K, *b1 = b0 + K, *b2 = b1 + K, *b3 = b2 + K;
#pragma omp simd
        for (int k = 0; k < K; k++) out[k] = fmaf(a3, b3[k], fmaf(a2, b2[k], fmaf(a1, b1[k], fmaf(a0, b0[k], out[k]))));
    }
    for (; j < count; j++) {
        const float a = coef[j * coef_stride];
        const float *b = B + (size_t)j * K;
#pragma omp simd
        for (int k = 0; k < K; k++) out[k] = fmaf(a, b[k], out[k]);
    }
}

void cpu_gemm_dyw(const float *dY, const float *W, float *dX, int rows, int N, int K) {
    memset(dX, 0, (size_t)rows * K * sizeof(float));
    /* Four W rows at a time (they stay in L1) against every output row of the block. */
    for (int n = 0; n < N; n += 4)
        for (int m = 0; m < rows; m++)
            axpy_rows(dX + (size_t)m * K, dY + (size_t)m * N + n, 1, W + (size_t)n * K, cpu_min(4, N - n), K);
}

void cpu_gemm_dw_rows(const float *dY, size_t ldy, const float *X, float *dW, int n_rows, int M, int K) {
    /* Four X rows at a time (they stay in L1) into every dW row of the slice; m ascends for every element. */
    for (int m = 0; m < M; m += 4)
        for (int n = 0; n < n_rows; n++)
            axpy_rows(dW + (size_t)n * K, dY + (size_t)m * ldy + n, ldy, X + (size_t)m * K, cpu_min(4, M - m), K);
}
