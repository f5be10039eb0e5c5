/* gemm.h: the C API of the GEMM-epilogue engine (kernels/cuda/gemm): plain bf16 GEMMs in the three layouts that
 * training needs, and the two fused programs of DESIGN §4 built on the engine (K_res and the row-scaled GEMM).
 * All matrices are row-major and packed (row stride = column count); operands bf16, accumulation fp32.
 * TMA needs every operand's row length (its contiguous dimension) to be a multiple of 8 elements and its base
 * 16-byte aligned; the launchers stop with a message otherwise. M, N, K need not be multiples of the tile.
 * With gemm_engine.cuh's ge_pdl = 1 the kernels launch with programmatic dependent launch; they still wait for the
 * previous kernel in the stream to complete before touching memory, so they follow any kernel safely. */
#ifndef GEMM_ENGINE_H
#define GEMM_ENGINE_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The product C[M,N] = op(A) . op(B), named by how A and B are stored:
 *   GE_ABT: A [M,K], B [N,K], C = A . B^T   (forward Y = X . W^T: both operands K-major)
 *   GE_AB:  A [M,K], B [K,N], C = A . B     (data gradient dX = dY . W: B is N-major)
 *   GE_ATB: A [K,M], B [K,N], C = A^T . B   (weight gradient dW = dY^T . X: both operands M/N-major) */
typedef enum { GE_ABT = 0, GE_AB = 1, GE_ATB = 2 } ge_layout;

/* C (bf16) = op(A) . op(B). */
void ge_gemm_bf16(ge_layout layout, const void *A, const void *B, void *C, int M, int N, int K, cudaStream_t stream);

/* C (fp32) = op(A) . op(B), or C += op(A) . op(B) when accumulate != 0. */
void ge_gemm_f32(ge_layout layout, const void *A, const void *B, float *C, int accumulate, int M, int N, int K,
                 cudaStream_t stream);

/* K_res: D = A . W^T + res; O = D * gamma (gamma broadcast over rows); part[m, t] = sum over columns
 * 128 t .. 128 t + 127 of D[m,:]^2, with D as stored (bf16). A [M,K], W [N,K], res/D/O [M,N] bf16, gamma [N] fp32,
 * part [M, ge_row_parts(N)] fp32. */
void ge_gemm_res_norm(const void *A, const void *W, const void *res, const float *gamma, void *D, void *O,
                      float *part, int M, int N, int K, cudaStream_t stream);

/* K_res without the second output: D = A . W^T + res; part[m, t] = sum over columns 128 t .. 128 t + 127 of
 * D[m,:]^2 (D as stored).
 * For a next GEMM that takes gamma folded into its weight (ge_fold_gamma): r * ((D * gamma) . W2^T) =
 * r * (D . (W2 * gamma)^T), so O need not be written, and backward needs D (the residual stream, kept anyway), not O.
 * Needs N a multiple of 8 (D is the next GEMM's K-major operand) and 16-byte aligned res and D. */
void ge_gemm_res_rms(const void *A, const void *W, const void *res, void *D, float *part, int M, int N, int K,
                     cudaStream_t stream);

/* Wg[n, k] = W[n, k] * gamma[k] (bf16, rounded once): an [N, K] weight with RMSNorm's gamma folded into its
 * columns, for ge_gemm_res_rms's next GEMM. K a multiple of 8, W and Wg 16-byte aligned. */
void ge_fold_gamma(const void *W, const float *gamma, void *Wg, int N, int K, cudaStream_t stream);

/* Partials per row that a row-partial program writes for an output of N columns: one per 128 columns, on either
 * schedule. */
int ge_row_parts(int N);

/* r[m] = rsqrt(sum_t part[m, t] / N + eps): the RMSNorm row scale from K_res's partials. */
void ge_rms_finish(const float *part, int M, int N, float eps, float *r, cudaStream_t stream);

/* Row-scaled GEMM: Z = r * (O . W^T). O [M,K], W [N,K] bf16, r [M] fp32; Z [M,N] bf16 (z_f32 == 0) or fp32. */
void ge_gemm_rowscale(const void *O, const void *W, const float *r, void *Z, int z_f32, int M, int N, int K,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
