/* cuda_gemm_cublas.cu: the GEMMs of the unfused path, through cuBLAS (bf16 operands, fp32 accumulation).
 * cuBLAS reads a row-major X[M,K] as the column-major X^T[K,M] (leading dimension K), so every product is computed
 * as its transpose, the column-major result being the row-major one (A, B: cuBLAS's operands, in that order):
 *   Y = X . W^T     ->  Y^T[N,M]  = W . X^T     (A = W, op T; B = X, op N)
 *   dX = dY . W     ->  dX^T[K,M] = W^T . dY^T  (A = W, op N; B = dY, op N)
 *   dW += dY^T . X  ->  dW^T[K,N] = X^T . dY    (A = X, op N; B = dY, op T) */
#include "kernels/cuda/cuda_common.cuh"

/* C = A' . B' + beta C, column-major, with A' = opA(A) [m, k] and B' = opB(B) [k, n]; nothing when C is empty. */
static void gemm(KernelContext *kc, cublasOperation_t opA, cublasOperation_t opB, int m, int n, int k, const void *A,
                 int lda, const void *B, int ldb, void *C, cudaDataType_t c_type, long ldc, float beta) {
    const float alpha = 1.0f;
    if (m <= 0 || n <= 0) return;
    CUBLAS_CHECK(cublasGemmEx(cuda_blas(kc), opA, opB, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta,
                              C, c_type, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_xwt_bf16(KernelContext *kc, const void *X, const void *W, void *Y, long ldy, int M, int N, int K,
                        float beta) {
    gemm(kc, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, W, K, X, K, Y, CUDA_R_16BF, ldy, beta);
}

void cuda_gemm_xwt_f32(KernelContext *kc, const void *X, const void *W, float *Y, int M, int N, int K) {
    gemm(kc, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, W, K, X, K, Y, CUDA_R_32F, N, 0.0f);
}

void cuda_gemm_dyw_bf16(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K) {
    gemm(kc, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, W, K, dY, N, dX, CUDA_R_16BF, K, 0.0f);
}

void cuda_gemm_dyw_f32(KernelContext *kc, const void *dY, const void *W, float *dX, int M, int N, int K) {
    gemm(kc, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, W, K, dY, N, dX, CUDA_R_32F, K, 0.0f);
}

void cuda_gemm_dw_f32(KernelContext *kc, const void *dY, const void *X, float *dW, int accumulate, int M, int N,
                      int K) {
    gemm(kc, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, X, K, dY, N, dW, CUDA_R_32F, K, accumulate ? 1.0f : 0.0f);
}
