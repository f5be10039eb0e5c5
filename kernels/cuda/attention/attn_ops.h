/* attn_ops.h: the fused table's attention backward, which attention/ defines (attn_backward.cu) and
 * fused/fused_kernels.cu puts in the table: kernels.h's attention_backward with the RoPE backward and c in the
 * stores of dQ, dK and dV. (The unfused table's attention ops are in cuda_ops.h.) */
#ifndef ATTN_OPS_H
#define ATTN_OPS_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

void cudaf_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                              const float *r, const float *rope_cos, const float *rope_sin, void *dqkv, float *c, int B,
                              int T, int Hq, int Hkv, int hd);

#ifdef __cplusplus
}
#endif

#endif
