/* cuda_ops.h: the operations of kernels.h as the unfused CUDA table defines them, each once, in the file named above
 * it; cuda_kernels.cu gathers them into kernels_cuda, and the fused table (fused/fused_ops.h) falls back to them. */
#ifndef CUDA_OPS_H
#define CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda_context.cu: the context (what it holds: cuda_common.cuh) */
KernelContext *cuda_context_create(void);
void cuda_context_free(KernelContext *kc);

/* cuda_memory.cu */
void *cuda_alloc(KernelContext *kc, size_t bytes);
void cuda_free(KernelContext *kc, void *p);
void cuda_memset_zero(KernelContext *kc, void *p, size_t bytes);
void cuda_copy_to_device(KernelContext *kc, void *dst, const void *host_src, size_t bytes);
void cuda_copy_to_host(KernelContext *kc, void *host_dst, const void *src, size_t bytes);
void cuda_act_from_f32(KernelContext *kc, void *dst_act, const float *host_src, size_t n);
void cuda_act_to_f32(KernelContext *kc, float *host_dst, const void *src_act, size_t n);
void cuda_master_from_f32(KernelContext *kc, uint16_t *lo, void *working, const float *host_src, size_t n);
void cuda_master_to_f32(KernelContext *kc, float *host_dst, const void *working, const uint16_t *lo, size_t n);
void cuda_synchronize(KernelContext *kc);
/* page-locked host memory (NULL when the host has not got it) */
void *cuda_host_alloc(KernelContext *kc, size_t bytes);
void cuda_host_free(KernelContext *kc, void *p);
size_t cuda_available_bytes(void); /* the free device memory less cuda_untracked_reserve_bytes */
size_t cuda_untracked_reserve_bytes(void);
size_t cuda_peak_bytes(KernelContext *kc);
/* cuda_workspace(kc, bytes) now (kernels.h reserve_scratch) */
void cuda_reserve_scratch(KernelContext *kc, size_t bytes);
const char *cuda_device_name(void); /* the current device's name, read once */

/* cuda_kernels.cu: the table's workspace_of (kernels.h) */
void cuda_workspace_of(const KernelCall *c, KernelNeed *need);

/* cuda_norm.cu */
void cuda_embed_norm(KernelContext *kc, const int32_t *tokens, const void *E, const float *gamma, float eps, void *x,
                     void *O, float *r, int M, int D);
void cuda_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res, const float *gamma,
                             float eps, void *h, void *O, float *r, int M, int N, int K);
void cuda_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma, const float *r,
                             const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M, int N,
                             int K);

/* cuda_elementwise.cu */
void cuda_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                    const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T);
void cuda_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act, int M, int F,
                      int K);
void cuda_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M, int N, int K);
void cuda_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z, const float *r,
                               void *dZ, float *c, void *act, int M, int D, int F);
void cuda_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K);
void cuda_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW, int accumulate,
                  double *sq, int M, int N, int K);
/* the RoPE backward pass of the unfused attention_backward (kernels.h rope semantics: r * rope^T(dZ_in), c) */
void cuda_rope_backward(KernelContext *kc, const void *Z, const void *dZ_in, const float *r, const float *rope_cos,
                        const float *rope_sin, void *dZ_out, float *c, int M, int N, int n_rope_cols, int hd, int T);

/* cuda_loss.cu */
void cuda_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                       float *loss, int M, int V, int K);
void cuda_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                        const int32_t *target_groups, float dscale, const void *x, const float *gamma, float *loss,
                        float *dW, void *dres, float *dgamma, int M, int V, int K);

/* attention/attn_forward.cu, attention/attn_backward.cu (head dim 64 and 128) */
void cuda_attention_forward(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv,
                            int hd);
void cuda_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                             const float *r, const float *rope_cos, const float *rope_sin, void *dqkv, float *c, int B,
                             int T, int Hq, int Hkv, int hd);

/* cuda_decode.cu: the KV cache of generation */
void cuda_kv_cache_append(KernelContext *kc, const void *qkv, void *K, void *V, int pos0, int M, int Hq, int Hkv,
                          int hd);
void cuda_attention_cached(KernelContext *kc, const void *qkv, const void *K, const void *V, void *y, int pos0, int M,
                           int Hq, int Hkv, int hd);

/* cuda_embedding.cu */
void cuda_embed_backward(KernelContext *kc, const int32_t *tokens, const int32_t *groups, const void *dx, float *dE,
                         int M, int D, int V);

/* cuda_optimizer.cu */
void cuda_sum_squares(KernelContext *kc, const float *g, size_t n, double *out);
void cuda_sum(KernelContext *kc, const float *x, size_t n, double *out, int accumulate);
void cuda_clip_scale(KernelContext *kc, const double *parts, int n_loss, int n_sq, double max_norm, float *scale);
void cuda_adamw(KernelContext *kc, float *master, void *working, const float *grad, float *m, float *v, size_t n,
                const AdamwScalars *s, const float *grad_scale);
void cuda_adamw_split(KernelContext *kc, uint16_t *lo, void *working, const float *grad, float *m, float *v, size_t n,
                      const AdamwScalars *s, const float *grad_scale);

/* cuda_context.cu: the step capture */
void cuda_capture_begin(KernelContext *kc);
void *cuda_capture_end(KernelContext *kc);
void cuda_replay(KernelContext *kc, void *graph);
void cuda_graph_free(KernelContext *kc, void *graph);

#ifdef __cplusplus
}
#endif

#endif
