/* cpu_backward.c: the backward ops (data-gradient GEMMs with RMSNorm/SwiGLU epilogues, dW, RoPE, embedding). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* Column slice of dE per task of embed_backward: 32 floats, two cache lines, so tasks do not share lines. */
#define EMBED_COLS 32

void cpu_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma, const float *r,
                            const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M, int N,
                            int K) {
    if (M <= 0) return; /* nothing to add (and no partials to sum) */
    const float *xf = x;
    float *dresf = dres;
    /* dgamma is a sum over rows: each row block writes its own partial column sums (in double), which are then
     * added in block order, so the result does not depend on which thread ran which block. */
    const int n_blocks = (M + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
    double *partial = cpu_scratch(kc, cpu_block_sums_bytes((size_t)M, (size_t)K));
#pragma omp parallel
    {
        float *G = cpu_scratch(kc, cpu_block_rows_bytes((size_t)K));
#pragma omp for schedule(static)
        for (int b = 0; b < n_blocks; b++) {
            const int m0 = b * CPU_ROW_BLOCK, rows = cpu_min(CPU_ROW_BLOCK, M - m0);
            cpu_gemm_dyw((const float *)dZ + (size_t)m0 * N, W, G, rows, N, K);
            double *pg = partial + (size_t)b * K;
            memset(pg, 0, (size_t)K * sizeof(double));
            for (int i = 0; i < rows; i++) {
                const int m = m0 + i;
                const float *g = G + (size_t)i * K, *xm = xf + (size_t)m * K;
                float *dx = dresf + (size_t)m * K;
                const float x_coef = r[m] * r[m] / (float)K * c[m];
                for (int k = 0; k < K; k++) {
                    const float grad = gamma[k] * g[k] - x_coef * xm[k];
                    dx[k] = accumulate ? dx[k] + grad : grad;
                    pg[k] += (double)g[k] * xm[k];
                }
            }
        }
        cpu_free(kc, G);
    }
    for (int b = 1; b < n_blocks; b++)
        for (int k = 0; k < K; k++) partial[k] += partial[(size_t)b * K + k];
    for (int k = 0; k < K; k++) dgamma[k] += (float)partial[k];
    cpu_free(kc, partial);
}

void cpu_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z, const float *r,
                              void *dZ, float *c, void *act, int M, int D, int F) {
    const float *Zf = Z;
    float *dZf = dZ, *actf = act;
#pragma omp parallel
    {
        float *dact = cpu_scratch(kc, cpu_block_rows_bytes((size_t)F));
#pragma omp for schedule(static)
        for (int m0 = 0; m0 < M; m0 += CPU_ROW_BLOCK) {
            const int rows = cpu_min(CPU_ROW_BLOCK, M - m0);
            cpu_gemm_dyw((const float *)dY + (size_t)m0 * D, W_down, dact, rows, D, F);
            for (int i = 0; i < rows; i++) {
                const int m = m0 + i;
                const float *zm = Zf + (size_t)m * 2 * F, *da = dact + (size_t)i * F;
                float *dzm = dZf + (size_t)m * 2 * F, *am = actf + (size_t)m * F;
                double zdz = 0.0;
                for (int j = 0; j < F; j++) {
                    /* silu(g) = g s with s = sigmoid(g); silu'(g) = s (1 + g (1 - s)). */
                    const float g = zm[2 * j], u = zm[2 * j + 1];
                    const float s = 1.0f / (1.0f + expf(-g));
                    const float dg = da[j] * u * (s * (1.0f + g * (1.0f - s)));
                    const float du = da[j] * (g * s);
                    am[j] = g / (1.0f + expf(-g)) * u; /* as cpu_gemm_swiglu computes it */
                    zdz += (double)g * dg + (double)u * du;
                    dzm[2 * j] = r[m] * dg;
                    dzm[2 * j + 1] = r[m] * du;
                }
                c[m] = (float)zdz;
            }
        }
        cpu_free(kc, dact);
    }
}

void cpu_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K) {
#pragma omp parallel for schedule(static)
    for (int m0 = 0; m0 < M; m0 += CPU_ROW_BLOCK)
        cpu_gemm_dyw((const float *)dY + (size_t)m0 * N, W, (float *)dX + (size_t)m0 * K,
                     cpu_min(CPU_ROW_BLOCK, M - m0), N, K);
}

void cpu_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW, int accumulate,
                 double *sq, int M, int N, int K) {
    if (!accumulate) memset(dW, 0, (size_t)N * K * sizeof(float));
    /* Parallel over blocks of dW rows: one thread owns each dW element and sums its M terms in order (into dW
     * itself, or with a column scale into scratch that is then scaled and added). */
#pragma omp parallel
    {
        float *part = col_scale ? cpu_scratch(kc, cpu_block_rows_bytes((size_t)K)) : NULL;
#pragma omp for schedule(static)
        for (int n0 = 0; n0 < N; n0 += CPU_ROW_BLOCK) {
            const int rows = cpu_min(CPU_ROW_BLOCK, N - n0);
            float *out = dW + (size_t)n0 * K;
            if (!col_scale) {
                cpu_gemm_dw_rows((const float *)dY + n0, (size_t)N, X, out, rows, M, K);
                continue;
            }
            memset(part, 0, (size_t)rows * K * sizeof(float));
            cpu_gemm_dw_rows((const float *)dY + n0, (size_t)N, X, part, rows, M, K);
            for (int i = 0; i < rows; i++)
                for (int k = 0; k < K; k++) out[(size_t)i * K + k] += part[(size_t)i * K + k] * col_scale[k];
        }
        cpu_free(kc, part);
    }
    if (sq) cpu_sum_squares(kc, dW, (size_t)N * K, sq);
}

void cpu_rope_backward(KernelContext *kc, const void *Z, const void *dZ_in, const float *r, const float *rope_cos,
                       const float *rope_sin, void *dZ_out, float *c, int M, int N, int n_rope_cols, int hd, int T) {
    const float *Zf = Z, *dinf = dZ_in;
    float *doutf = dZ_out;
    const int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++) {
        const size_t pos = (size_t)(m % T);
        const float *din = dinf + (size_t)m * N;
        c[m] = (float)cpu_dot(Zf + (size_t)m * N, din, N); /* before dZ_out (which may alias dZ_in) is written */
        cpu_rope_scale_row(din, doutf + (size_t)m * N, r[m], rope_cos + pos * half, rope_sin + pos * half, -1.0f, N,
                           n_rope_cols, hd);
    }
}

void cpu_embed_backward(KernelContext *kc, const int32_t *tokens, const int32_t *groups, const void *dx, float *dE,
                        int M, int D, int V) {
    (void)V;      /* dE's row count: every token is < V */
    (void)groups; /* each thread adds its columns' rows in order of m: no grouping needed */
    const float *dxf = dx;
    /* Parallel over column slices: one thread owns each dE element and adds its rows in order of m. */
#pragma omp parallel for schedule(static)
    for (int d0 = 0; d0 < D; d0 += EMBED_COLS) {
        const int d1 = cpu_min(D, d0 + EMBED_COLS);
        for (int m = 0; m < M; m++) {
            float *row = dE + (size_t)tokens[m] * D;
            const float *g = dxf + (size_t)m * D;
            for (int d = d0; d < d1; d++) row[d] += g[d];
        }
    }
}
