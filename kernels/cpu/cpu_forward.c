/* cpu_forward.c: the forward ops (embedding + first norm, and the GEMMs with their row epilogues, LM head loss). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* Each GEMM op below is a parallel loop over blocks of CPU_ROW_BLOCK output rows: the block's product comes from
 * the GEMM core, then a per-row epilogue runs on it while it is still in cache. */

void cpu_embed_norm(KernelContext *kc, const int32_t *tokens, const void *E, const float *gamma, float eps, void *x,
                    void *O, float *r, int M, int D) {
    const float *emb = E;
    float *xf = x, *Of = O;
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++) {
        float *xm = xf + (size_t)m * D, *Om = Of + (size_t)m * D;
        memcpy(xm, emb + (size_t)tokens[m] * D, (size_t)D * sizeof(float));
        for (int d = 0; d < D; d++) Om[d] = xm[d] * gamma[d];
        r[m] = cpu_rms_rscale(xm, D, eps);
    }
}

void cpu_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res, const float *gamma,
                            float eps, void *h, void *O, float *r, int M, int N, int K) {
    const float *resf = res;
    float *hf = h, *Of = O;
#pragma omp parallel for schedule(static)
    for (int m0 = 0; m0 < M; m0 += CPU_ROW_BLOCK) {
        const int rows = cpu_min(CPU_ROW_BLOCK, M - m0);
        cpu_gemm_xwt((const float *)A + (size_t)m0 * K, W, hf + (size_t)m0 * N, rows, N, K);
        for (int m = m0; m < m0 + rows; m++) {
            float *hm = hf + (size_t)m * N, *Om = Of + (size_t)m * N;
            const float *rm = resf + (size_t)m * N;
            for (int n = 0; n < N; n++) {
                hm[n] += rm[n];
                Om[n] = hm[n] * gamma[n];
            }
            r[m] = cpu_rms_rscale(hm, N, eps);
        }
    }
}

void cpu_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                   const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T) {
    float *Zf = Z;
    const int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int m0 = 0; m0 < M; m0 += CPU_ROW_BLOCK) {
        const int rows = cpu_min(CPU_ROW_BLOCK, M - m0);
        cpu_gemm_xwt((const float *)O + (size_t)m0 * K, W, Zf + (size_t)m0 * N, rows, N, K);
        for (int m = m0; m < m0 + rows; m++) {
            const size_t pos = (size_t)(m % T);
            float *zm = Zf + (size_t)m * N;
            cpu_rope_scale_row(zm, zm, r[m], rope_cos + pos * half, rope_sin + pos * half, 1.0f, N, n_rope_cols, hd);
        }
    }
}

void cpu_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act, int M, int F,
                     int K) {
    float *Zf = Z, *actf = act;
    const int N = 2 * F;
#pragma omp parallel for schedule(static)
    for (int m0 = 0; m0 < M; m0 += CPU_ROW_BLOCK) {
        const int rows = cpu_min(CPU_ROW_BLOCK, M - m0);
        cpu_gemm_xwt((const float *)O + (size_t)m0 * K, W, Zf + (size_t)m0 * N, rows, N, K);
        for (int m = m0; m < m0 + rows; m++) {
            float *zm = Zf + (size_t)m * N, *am = actf + (size_t)m * F;
            for (int j = 0; j < F; j++) {
                const float g = r[m] * zm[2 * j], u = r[m] * zm[2 * j + 1];
                zm[2 * j] = g;
                zm[2 * j + 1] = u;
                am[j] = g / (1.0f + expf(-g)) * u;
            }
        }
    }
}

/* Sampling's logits (M = 1 when generating): tasks of one row and CPU_COL_BLOCK columns, so that every thread has
 * a share of the vocabulary. */
void cpu_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M, int N, int K) {
    enum { CPU_COL_BLOCK = 1024 };
#pragma omp parallel for collapse(2) schedule(static)
    for (int m = 0; m < M; m++)
        for (int n0 = 0; n0 < N; n0 += CPU_COL_BLOCK) {
            const int cols = cpu_min(CPU_COL_BLOCK, N - n0);
            float *y = Y + (size_t)m * N + n0;
            cpu_gemm_xwt((const float *)O + (size_t)m * K, (const float *)W + (size_t)n0 * K, y, 1, cols, K);
            for (int n = 0; n < cols; n++) y[n] *= r[m];
        }
}

/* Cross-entropy of one row of logits z [V] (already scaled by r). Returns lse - z[target]; if dz != NULL also writes
 * dz = r * g with g = dscale * (softmax(z) - onehot(target)) and returns c = <z, g> in *c. */
static float cross_entropy_row(const float *z, int target, int V, float r, float dscale, float *dz, float *c) {
    float zmax = z[0];
    for (int v = 1; v < V; v++) zmax = fmaxf(zmax, z[v]);
    double sum_exp = 0.0;
    for (int v = 0; v < V; v++) sum_exp += expf(z[v] - zmax);
    const double lse = zmax + log(sum_exp);
    if (dz) {
        const float inv_sum = (float)(1.0 / sum_exp);
        double zg = 0.0;
        for (int v = 0; v < V; v++) {
            const float g = dscale * (expf(z[v] - zmax) * inv_sum - (v == target ? 1.0f : 0.0f));
            dz[v] = r * g;
            zg += (double)z[v] * g;
        }
        *c = (float)zg;
    }
    return (float)(lse - z[target]);
}

/* Loss per row (and, with dZ != NULL, dZ = r * g and c = <z, g> per row) of rows [0, M). */
static void lm_head_rows(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                         float dscale, float *loss, float *dZf, float *c, int M, int V, int K) {
#pragma omp parallel
    {
        float *logits = cpu_scratch(kc, cpu_block_rows_bytes((size_t)V));
#pragma omp for schedule(static)
        for (int m0 = 0; m0 < M; m0 += CPU_ROW_BLOCK) {
            const int rows = cpu_min(CPU_ROW_BLOCK, M - m0);
            cpu_gemm_xwt((const float *)O + (size_t)m0 * K, W, logits, rows, V, K);
            for (int i = 0; i < rows; i++) {
                const int m = m0 + i;
                float *z = logits + (size_t)i * V;
                for (int v = 0; v < V; v++) z[v] *= r[m];
                loss[m] = cross_entropy_row(z, targets[m], V, r[m], dscale, dZf ? dZf + (size_t)m * V : NULL,
                                            dZf ? c + m : NULL);
            }
        }
        cpu_free(kc, logits);
    }
}

void cpu_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                      float *loss, int M, int V, int K) {
    lm_head_rows(kc, O, W, r, targets, 0.0f, loss, NULL, NULL, M, V, K);
}

void cpu_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                       const int32_t *target_groups, float dscale, const void *x, const float *gamma, float *loss,
                       float *dW, void *dres, float *dgamma, int M, int V, int K) {
    (void)target_groups; /* the weight gradient is one GEMM over the whole [M, V] gradient */
    /* the whole [M, V] gradient at once: the CPU runs small configs */
    float *dZ = cpu_scratch(kc, cpu_lm_grad_bytes((size_t)M, (size_t)V)),
          *c = cpu_scratch(kc, cpu_lm_c_bytes((size_t)M));
    lm_head_rows(kc, O, W, r, targets, dscale, loss, dZ, c, M, V, K);
    cpu_gemm_dw(kc, dZ, O, NULL, dW, 1, NULL, M, V, K);
    cpu_gemm_norm_backward(kc, dZ, W, gamma, r, c, x, dres, dgamma, 0, M, V, K);
    cpu_free(kc, dZ);
    cpu_free(kc, c);
}
