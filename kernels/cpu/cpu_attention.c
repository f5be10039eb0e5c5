/* cpu_attention.c: causal grouped-query attention, forward and backward, naive per (batch, head, query) in fp32;
 * and generation's: the KV cache's append and the attention of new rows against it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* Row layout of qkv/dqkv: Q heads [0, Hq), then K heads, then V heads, hd columns each. */
typedef struct {
    int Hq, Hkv, hd;
    size_t ld_qkv, ld_y; /* row strides of qkv/dqkv and y/dy */
    float scale;         /* 1/sqrt(hd) */
} AttnShape;

static AttnShape attn_shape(int Hq, int Hkv, int hd) {
    return (AttnShape){Hq, Hkv, hd, (size_t)(Hq + 2 * Hkv) * hd, (size_t)Hq * hd, 1.0f / sqrtf((float)hd)};
}

/* Offsets of head h's Q, K and V vectors inside a qkv row (h < Hq for Q, h < Hkv for K and V). */
static size_t q_col(const AttnShape *s, int h) { return (size_t)h * s->hd; }
static size_t k_col(const AttnShape *s, int h) { return (size_t)(s->Hq + h) * s->hd; }
static size_t v_col(const AttnShape *s, int h) { return (size_t)(s->Hq + s->Hkv + h) * s->hd; }

static float dot_f32(const float *a, const float *b, int n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++) acc = fmaf(a[i], b[i], acc);
    return acc;
}

static void axpy_f32(float *restrict y, float a, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

/* The scaled score of a query against a key; forward and backward both use this so that P = exp(s - lse) in the
 * backward reproduces the forward's probabilities. */
static float score(const AttnShape *s, const float *q, const float *k) { return s->scale * dot_f32(q, k, s->hd); }

/* Query q against the n keys k_j = kbase + j*ld and values v_j = vbase + j*ld: y = softmax(s) . V with the scores
 * s_j of score() (p: n floats of scratch). Returns the log-sum-exp of the scores. */
static float attend(const AttnShape *s, const float *q, const float *kbase, const float *vbase, size_t ld, int n,
                    float *p, float *y) {
    float pmax = -INFINITY;
    for (int j = 0; j < n; j++) {
        p[j] = score(s, q, kbase + j * ld);
        pmax = fmaxf(pmax, p[j]);
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        p[j] = expf(p[j] - pmax);
        sum += p[j];
    }
    memset(y, 0, (size_t)s->hd * sizeof(float));
    for (int j = 0; j < n; j++) axpy_f32(y, p[j], vbase + j * ld, s->hd);
    const float inv_sum = (float)(1.0 / sum);
    for (int d = 0; d < s->hd; d++) y[d] *= inv_sum;
    return (float)(pmax + log(sum));
}

void cpu_attention_forward(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv,
                           int hd) {
    const AttnShape s = attn_shape(Hq, Hkv, hd);
    const float *qkvf = qkv;
    float *yf = y;
    const int group = Hq / Hkv;
#pragma omp parallel
    {
        float *p = cpu_scratch(kc, cpu_attention_row_bytes((size_t)T)); /* scores, then unnormalized probabilities */
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < Hq; h++) {
                const float *base = qkvf + (size_t)b * T * s.ld_qkv;
                const size_t kc = k_col(&s, h / group), vc = v_col(&s, h / group);
                for (int i = 0; i < T; i++)
                    lse[((size_t)b * Hq + h) * T + i] =
                        attend(&s, base + i * s.ld_qkv + q_col(&s, h), base + kc, base + vc, s.ld_qkv, i + 1, p,
                               yf + ((size_t)b * T + i) * s.ld_y + q_col(&s, h));
            }
        cpu_free(kc, p);
    }
}

void cpu_kv_cache_append(KernelContext *kc, const void *qkv, void *K, void *V, int pos0, int M, int Hq, int Hkv,
                         int hd) {
    const AttnShape s = attn_shape(Hq, Hkv, hd);
    const size_t width = (size_t)Hkv * hd;
    for (int i = 0; i < M; i++) {
        const float *row = (const float *)qkv + i * s.ld_qkv;
        memcpy((float *)K + (pos0 + i) * width, row + k_col(&s, 0), width * sizeof(float));
        memcpy((float *)V + (pos0 + i) * width, row + v_col(&s, 0), width * sizeof(float));
    }
}

void cpu_attention_cached(KernelContext *kc, const void *qkv, const void *K, const void *V, void *y, int pos0, int M,
                          int Hq, int Hkv, int hd) {
    const AttnShape s = attn_shape(Hq, Hkv, hd);
    const size_t width = (size_t)Hkv * hd;
    const int group = Hq / Hkv;
#pragma omp parallel
    {
        float *p = cpu_scratch(kc, cpu_attention_row_bytes((size_t)pos0 + M));
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < M; i++)
            for (int h = 0; h < Hq; h++) {
                const size_t kv = (size_t)(h / group) * hd;
                attend(&s, (const float *)qkv + i * s.ld_qkv + q_col(&s, h), (const float *)K + kv,
                       (const float *)V + kv, width, pos0 + i + 1, p, (float *)y + i * s.ld_y + q_col(&s, h));
            }
        cpu_free(kc, p);
    }
}

/* With P = exp(s - lse), dP_ij = <dy_i, v_j>, D_i = <dy_i, y_i> and dS = P (dP - D_i):
 * dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dy_i (sums over the group's heads
 * for dk and dv). One task per (batch, KV head) owns those dk/dv rows and adds their terms in a fixed order. */
static void attention_grad(const void *qkv, const void *y, const float *lse, const void *dy, void *dqkv, int B, int T,
                           int Hq, int Hkv, int hd) {
    const AttnShape s = attn_shape(Hq, Hkv, hd);
    const float *qkvf = qkv, *yf = y, *dyf = dy;
    float *dqkvf = dqkv;
    const int group = Hq / Hkv;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Hkv; g++) {
            const float *base = qkvf + (size_t)b * T * s.ld_qkv;
            float *dbase = dqkvf + (size_t)b * T * s.ld_qkv;
            const size_t kc = k_col(&s, g), vc = v_col(&s, g);
            for (int j = 0; j < T; j++) {
                memset(dbase + j * s.ld_qkv + kc, 0, (size_t)hd * sizeof(float));
                memset(dbase + j * s.ld_qkv + vc, 0, (size_t)hd * sizeof(float));
            }
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i = 0; i < T; i++) {
                    const size_t row = (size_t)b * T + i;
                    const float *q = base + i * s.ld_qkv + q_col(&s, h);
                    const float *dyi = dyf + row * s.ld_y + q_col(&s, h);
                    const float Di = (float)cpu_dot(dyi, yf + row * s.ld_y + q_col(&s, h), hd);
                    const float lse_i = lse[((size_t)b * Hq + h) * T + i];
                    float *dq = dbase + i * s.ld_qkv + q_col(&s, h);
                    memset(dq, 0, (size_t)hd * sizeof(float));
                    for (int j = 0; j <= i; j++) {
                        const float *k = base + j * s.ld_qkv + kc, *v = base + j * s.ld_qkv + vc;
                        const float P = expf(score(&s, q, k) - lse_i);
                        const float dS = P * (dot_f32(dyi, v, hd) - Di);
                        axpy_f32(dq, s.scale * dS, k, hd);
                        axpy_f32(dbase + j * s.ld_qkv + kc, s.scale * dS, q, hd);
                        axpy_f32(dbase + j * s.ld_qkv + vc, P, dyi, hd);
                    }
                }
        }
}

/* The gradient, then (with r) the QKV projection's RoPE and row-scale backward over it in place (kernels.h). */
void cpu_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                            const float *r, const float *rope_cos, const float *rope_sin, void *dqkv, float *c, int B,
                            int T, int Hq, int Hkv, int hd) {
    attention_grad(qkv, y, lse, dy, dqkv, B, T, Hq, Hkv, hd);
    if (r)
        cpu_rope_backward(kc, qkv, dqkv, r, rope_cos, rope_sin, dqkv, c, B * T, (Hq + 2 * Hkv) * hd, (Hq + Hkv) * hd,
                          hd, T);
}
