/* fused_ops.h: the operations of kernels.h as the fused CUDA table defines them (kernels_cuda_fused, gathered by
 * fused_kernels.cu): each GEMM runs with its CODA epilogue program (fused_programs.cuh). The
 * engine's operands go through TMA, which needs every feature dimension to be a multiple of 8 elements (and the
 * RoPE program a power-of-two head dim): an op called on a shape it cannot take runs the unfused op instead
 * (cuda_ops.h), so every config trains; fused_shape_ok says which path a model's shapes take. */
#ifndef FUSED_OPS_H
#define FUSED_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if every op of a model with these dimensions runs its fused program (D, F, the QKV and query widths, the head
 * dim; V any), else 0. */
int fused_shape_ok(int D, int F, int n_qkv, int n_q, int hd);
/* The table's shape_note (kernels.h): what fused_shape_ok says, for the user. */
const char *cudaf_shape_note(const KernelShapes *s);

/* Whether a fused op takes a call, from its dimensions (else it runs the unfused op, and needs what that needs):
 * TMA takes rows of a multiple of 8 elements, the RoPE program a power-of-two head dim. */
static inline int fused_dim_ok(int n) { return n % 8 == 0; }
static inline int fused_head_dim_ok(int hd) { return hd > 0 && (hd & (hd - 1)) == 0; }

/* The workspace each fused op asks of cuda_workspace where it takes the call, in bytes, for cudaf_workspace_of
 * (dw: accumulating into dW or not, its sum of squares asked for or not). */
size_t cudaf_residual_norm_workspace(size_t M, int N);
size_t cudaf_norm_backward_workspace(size_t M, int K);
size_t cudaf_swiglu_backward_workspace(size_t M, int F);
size_t cudaf_dw_workspace(int N, int K, int accumulate, int sq);
size_t cudaf_lm_head_workspace(int M, int V, int K, int train);

/* fused_forward.cu */
void cudaf_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res, const float *gamma,
                              float eps, void *h, void *O, float *r, int M, int N, int K);
void cudaf_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                     const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T);
void cudaf_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act, int M,
                       int F, int K);
void cudaf_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M, int N,
                         int K);

/* fused_backward.cu */
void cudaf_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma, const float *r,
                              const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M, int N,
                              int K);
void cudaf_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z, const float *r,
                                void *dZ, float *c, void *act, int M, int D, int F);
void cudaf_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K);
void cudaf_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW, int accumulate,
                   double *sq, int M, int N, int K);
/* gemm_norm_backward's fused path with dZ's row stride ldz and the dgamma partials' scratch part [ceil(M/128), K];
 * with target != NULL the LM head's (dZ its E, with the row factors s, a: see FusedNormBwd; dres written). */
void fused_norm_backward(KernelContext *kc, const void *dZ, long ldz, const void *W, const float *gamma, const float *r,
                         const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M, int N, int K,
                         float *part, const float *s, const float *a, const int32_t *target);

/* fused_lm_head.cu */
void cudaf_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                        float *loss, int M, int V, int K);
/* How many times so far a chunk of the LM head ran its GEMM a second time because some row's best logit was far
 * above its target's (fused_lm_head.cu), for tests. */
long fused_lm_head_repasses(KernelContext *kc);
void cudaf_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                         const int32_t *target_groups, float dscale, const void *x, const float *gamma, float *loss,
                         float *dW, void *dres, float *dgamma, int M, int V, int K);

#ifdef __cplusplus
}
#endif

#endif
