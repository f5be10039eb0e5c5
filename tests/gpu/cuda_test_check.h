/* cuda_test_check.h: checked CUDA and cuBLAS calls for the GPU test and benchmark programs that call the runtime
 * directly (test_gemm.cu, bench_gemm.cu, bench_fused.cu, and bench_timing.h's users): a failure names the call, file
 * and line and exits with status 2. */
#ifndef CUDA_TEST_CHECK_H
#define CUDA_TEST_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));        \
            exit(2);                                                                                      \
        }                                                                                                 \
    } while (0)
#define CB(call)                                                                                          \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, (int)s_);                \
            exit(2);                                                                                      \
        }                                                                                                 \
    } while (0)

#endif
