/* cpu_internal.h: declarations shared inside the CPU backend (GEMM core loops, row helpers, scratch, the ops). */
#ifndef CPU_INTERNAL_H
#define CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* Output rows per task of a row-parallel op. The split depends only on the problem size, never on the thread count,
 * so every reduction over blocks runs in the same order with any OMP_NUM_THREADS. */
#define CPU_ROW_BLOCK 16

static inline int cpu_min(int a, int b) { return a < b ? a : b; }

/* ---- memory (cpu_memory.c, cpu_available.c) ---- */

/* Scratch of an op, counted with the backend's buffers and freed with cpu_free. An op has no error path: when the
 * host has no more memory, this stops the program with a message and exit status 1. */
void *cpu_scratch(KernelContext *kc, size_t bytes);

/* The scratch sizes of the ops, in bytes: the ops allocate with these, and cpu_kernels.c's workspace_of says from
 * them what a call holds. */
/* one thread's rows of a row block: CPU_ROW_BLOCK rows of cols floats */
static inline size_t cpu_block_rows_bytes(size_t cols) { return size_mul(CPU_ROW_BLOCK * sizeof(float), cols); }
/* gemm_norm_backward's dgamma partials: K doubles per block of CPU_ROW_BLOCK of the M rows */
static inline size_t cpu_block_sums_bytes(size_t M, size_t K) {
    return size_mul((M + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK, size_mul(K, sizeof(double)));
}
/* lm_head_train's whole [M, V] gradient */
static inline size_t cpu_lm_grad_bytes(size_t M, size_t V) { return size_mul(size_mul(M, V), sizeof(float)); }
/* lm_head_train's c (at least one float) */
static inline size_t cpu_lm_c_bytes(size_t M) { return size_mul(M > 0 ? M : 1, sizeof(float)); }
/* sum_squares' partial sums of n values */
size_t cpu_sum_squares_bytes(size_t n);
/* attention_forward's and attention_cached's scores of one query: T floats per thread (the keys it sees) */
static inline size_t cpu_attention_row_bytes(size_t T) { return size_mul(T, sizeof(float)); }
/* gemm_norm_backward's scratch with `threads` threads: the dgamma partials and each thread's rows of G */
static inline size_t cpu_norm_backward_bytes(size_t M, size_t K, size_t threads) {
    return size_add(cpu_block_sums_bytes(M, K), size_mul(threads, cpu_block_rows_bytes(K)));
}

/* The host memory this process can still allocate: MemAvailable of proc_root/meminfo (sysconf where it is missing),
 * lowered to the room left under the memory limit of the process's cgroup and each of its parents (cgroup v2 or
 * v1, read under cgroup_root, page cache that can be reclaimed not counted as used); SIZE_MAX when nothing says.
 * proc_root is "/proc" and cgroup_root "/sys/fs/cgroup" but for tests. */
size_t cpu_host_available_bytes(const char *proc_root, const char *cgroup_root);
size_t cpu_available_bytes(void);

/* ---- GEMM core (cpu_gemm.c); all serial, callers parallelize over blocks of output rows ---- */

/* Y[rows,N] = X[rows,K] . W[N,K]^T (dot products along K). */
void cpu_gemm_xwt(const float *X, const float *W, float *Y, int rows, int N, int K);
/* dX[rows,K] = dY[rows,N] . W[N,K] (overwrites dX). */
void cpu_gemm_dyw(const float *dY, const float *W, float *dX, int rows, int N, int K);
/* dW[n_rows,K] += dY^T . X, where dY points at column 0 of the slice (row stride ldy, M rows) and X is [M,K].
 * Each element sums its M terms in order of m. */
void cpu_gemm_dw_rows(const float *dY, size_t ldy, const float *X, float *dW, int n_rows, int M, int K);

/* ---- row helpers (cpu_rows.c) ---- */

/* <a, b> accumulated in double. */
double cpu_dot(const float *a, const float *b, int n);
/* rsqrt(mean(x^2) + eps), the statistic accumulated in double. */
float cpu_rms_rscale(const float *x, int n, float eps);
/* out = scale * R(in) on one row of N columns, where R rotates the interleaved pairs of columns [0, n_rope_cols) in
 * heads of hd columns by the angles of one position (cos_row/sin_row [hd/2]); sin_sign -1 gives R^T. The other
 * columns are only scaled. out may alias in. */
void cpu_rope_scale_row(const float *in, float *out, float scale, const float *cos_row, const float *sin_row,
                        float sin_sign, int N, int n_rope_cols, int hd);

/* ---- the ops of kernels.h (one definition each, gathered into kernels_cpu by cpu_kernels.c) ---- */

KernelContext *cpu_context_create(void); /* counts the allocations made in it */
void cpu_context_free(KernelContext *kc);

void *cpu_alloc(KernelContext *kc, size_t bytes);
void cpu_free(KernelContext *kc, void *p); /* cpu_alloc's buffers and cpu_scratch's */
void cpu_memset_zero(KernelContext *kc, void *p, size_t bytes);
void cpu_copy(KernelContext *kc, void *dst, const void *src, size_t bytes);
void cpu_act_from_f32(KernelContext *kc, void *dst_act, const float *host_src, size_t n);
void cpu_act_to_f32(KernelContext *kc, float *host_dst, const void *src_act, size_t n);
void cpu_synchronize(KernelContext *kc);
size_t cpu_peak_bytes(KernelContext *kc);

void cpu_embed_norm(KernelContext *kc, const int32_t *tokens, const void *E, const float *gamma, float eps, void *x,
                    void *O, float *r, int M, int D);
void cpu_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res, const float *gamma,
                            float eps, void *h, void *O, float *r, int M, int N, int K);
void cpu_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                   const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T);
void cpu_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act, int M, int F,
                     int K);
void cpu_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M, int N, int K);
void cpu_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                      float *loss, int M, int V, int K);
void cpu_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                       const int32_t *target_groups, float dscale, const void *x, const float *gamma, float *loss,
                       float *dW, void *dres, float *dgamma, int M, int V, int K);

void cpu_attention_forward(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv,
                           int hd);
void cpu_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                            const float *r, const float *rope_cos, const float *rope_sin, void *dqkv, float *c, int B,
                            int T, int Hq, int Hkv, int hd);
void cpu_kv_cache_append(KernelContext *kc, const void *qkv, void *K, void *V, int pos0, int M, int Hq, int Hkv,
                         int hd);
void cpu_attention_cached(KernelContext *kc, const void *qkv, const void *K, const void *V, void *y, int pos0, int M,
                          int Hq, int Hkv, int hd);

void cpu_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma, const float *r,
                            const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M, int N,
                            int K);
void cpu_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z, const float *r,
                              void *dZ, float *c, void *act, int M, int D, int F);
void cpu_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K);
void cpu_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW, int accumulate,
                 double *sq, int M, int N, int K);
/* dZ_out = r * rope^T(dZ_in) on columns [0, n_rope_cols), r * dZ_in on the rest; c[m] = <Z[m], dZ_in[m]>; dZ_out
 * may alias dZ_in (attention_backward's tail). */
void cpu_rope_backward(KernelContext *kc, const void *Z, const void *dZ_in, const float *r, const float *rope_cos,
                       const float *rope_sin, void *dZ_out, float *c, int M, int N, int n_rope_cols, int hd, int T);
void cpu_embed_backward(KernelContext *kc, const int32_t *tokens, const int32_t *groups, const void *dx, float *dE,
                        int M, int D, int V);

void cpu_sum_squares(KernelContext *kc, const float *g, size_t n, double *out);
void cpu_sum(KernelContext *kc, const float *x, size_t n, double *out, int accumulate);
void cpu_clip_scale(KernelContext *kc, const double *parts, int n_loss, int n_sq, double max_norm, float *scale);
void cpu_adamw(KernelContext *kc, float *master, void *working, const float *grad, float *m, float *v, size_t n,
               const AdamwScalars *s, const float *grad_scale);

#endif
