/* fused_coda.h: the CODA forward programs as launchers that take a launch (its config: gemm.h's ge_launch), for the
 * fused table's ops (fused_forward.cu) and for the engine's tests, which run them on every config: K_res, the
 * finish that turns its partials into RMSNorm's row scale, and the row-scaled GEMM. */
#ifndef FUSED_CODA_H
#define FUSED_CODA_H

#include "kernels/cuda/gemm/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* K_res: D = A . W^T + res; O = D * gamma (gamma broadcast over rows); part[m, t] = sum over columns
 * 128 t .. 128 t + 127 of D[m,:]^2, with D as stored (bf16). A [M,K], W [N,K], res/D/O [M,N] bf16, gamma [N] fp32,
 * part [M, ge_row_parts(N)] fp32. */
void fused_gemm_res_norm(const void *A, const void *W, const void *res, const float *gamma, void *D, void *O,
                         float *part, int M, int N, int K, ge_launch how);

/* r[m] = rsqrt(sum_t part[m, t] / N + eps): the RMSNorm row scale from K_res's partials. */
void fused_rms_finish(const float *part, int M, int N, float eps, float *r, cudaStream_t stream);

/* Row-scaled GEMM: Z = r * (O . W^T). O [M,K], W [N,K] bf16, r [M] fp32; Z [M,N] bf16 (z_f32 == 0) or fp32. */
void fused_gemm_rowscale(const void *O, const void *W, const float *r, void *Z, int z_f32, int M, int N, int K,
                         ge_launch how);

#ifdef __cplusplus
}
#endif

#endif
