/* gemm.h: the C API of the GEMM-epilogue engine (kernels/cuda/gemm): plain GEMMs in the three layouts that training
 * needs, how a launch is made (its config: gemm_config.h), and the partials of row-partial programs. The CODA
 * programs of the trainer (kernels/cuda/fused) are built on the same engine.
 * All matrices are row-major and packed (row stride = column count) unless their strides are given; operands bf16,
 * accumulation fp32. TMA needs every operand's row stride (packed: its row length, the contiguous dimension) to be
 * a multiple of 8 elements and its base 16-byte aligned; the launchers stop with a message otherwise. M, N, K need
 * not be multiples of the tile. */
#ifndef GEMM_H
#define GEMM_H

#include <cuda_runtime.h>

#include "kernels/cuda/gemm/gemm_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The product C[M,N] = op(A) . op(B), named by how A and B are stored:
 *   GE_ABT: A [M,K], B [N,K], C = A . B^T   (forward Y = X . W^T: both operands K-major)
 *   GE_AB:  A [M,K], B [K,N], C = A . B     (data gradient dX = dY . W: B is N-major)
 *   GE_ATB: A [K,M], B [K,N], C = A^T . B   (weight gradient dW = dY^T . X: both operands M/N-major) */
typedef enum { GE_ABT = 0, GE_AB = 1, GE_ATB = 2 } ge_layout;

/* How a launch is made: its config (GE_AUTO: ge_pick's for the launch's shape), its stream, the name of the
 * operation it runs for (named by every failure message of the launch), and print: nonzero where each kernel launch
 * prints one line to stderr (the op, M N K, the config, its ring stages and staging buffers: TRAIN_PRINT_GEMMS,
 * docs/cuda.md). */
typedef struct {
    ge_config cfg;
    cudaStream_t stream;
    const char *op;
    int print;
} ge_launch;

/* C (bf16) = op(A) . op(B). */
void ge_gemm_bf16(ge_layout layout, const void *A, const void *B, void *C, int M, int N, int K, ge_launch how);

/* C (fp32) = op(A) . op(B), or C += op(A) . op(B) when accumulate != 0. */
void ge_gemm_f32(ge_layout layout, const void *A, const void *B, float *C, int accumulate, int M, int N, int K,
                 ge_launch how);
/* The same with the row strides given (elements; A and B as stored, C [M, N]). */
void ge_gemm_f32_strided(ge_layout layout, const void *A, long lda, const void *B, long ldb, float *C, long ldc,
                         int accumulate, int M, int N, int K, ge_launch how);

/* Partials per row that a row-partial program writes for an output of N columns: one per 128 columns, on either
 * schedule. */
int ge_row_parts(int N);

#ifdef __cplusplus
}
#endif

#endif
