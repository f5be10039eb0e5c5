/* cuda_common.cuh: what every CUDA file of the backend shares: checked calls (CUDA_CHECK / CUBLAS_CHECK /
 * LAUNCH_CHECK name the call, file and line and abort; out of memory, they exit with a message), host helpers for
 * grid and buffer sizes, bf16 vector loads and stores of 8 elements with a scalar fallback for ragged or unaligned
 * rows, warp and block reductions, and the backend's internal interface: the context (KernelContext) and the
 * functions that one CUDA file defines for the others. */
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/kernels.h"

typedef __nv_bfloat16 bf16;

/* A failed call: an internal error (a bug or a fault of the device; aborts) or, where the device or the host ran
 * out of memory (the run's size, not a bug), a message saying what to lower and exit status 1 (bytes: the size asked
 * for, or 0). */
void cuda_fail(const char *what, const char *detail, const char *file, int line);
void cuda_out_of_memory(const KernelContext *kc, const char *what, size_t bytes, const char *file, int line);

#define CUDA_CHECK(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t err_ = (call);                                                                                     \
        if (err_ == cudaErrorMemoryAllocation) cuda_out_of_memory(NULL, #call, 0, __FILE__, __LINE__);                 \
        if (err_ != cudaSuccess) cuda_fail(#call, cudaGetErrorString(err_), __FILE__, __LINE__);                       \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                             \
    do {                                                                                                               \
        cublasStatus_t st_ = (call);                                                                                   \
        if (st_ == CUBLAS_STATUS_ALLOC_FAILED) cuda_out_of_memory(NULL, #call, 0, __FILE__, __LINE__);                 \
        if (st_ != CUBLAS_STATUS_SUCCESS) cuda_fail(#call, cublasGetStatusString(st_), __FILE__, __LINE__);            \
    } while (0)

/* After every kernel launch: a launch error (bad configuration, too much shared memory) names the kernel. */
#define LAUNCH_CHECK(name)                                                                                             \
    do {                                                                                                               \
        cudaError_t err_ = cudaGetLastError();                                                                         \
        if (err_ == cudaErrorMemoryAllocation) cuda_out_of_memory(NULL, "launch of " name, 0, __FILE__, __LINE__);     \
        if (err_ != cudaSuccess) cuda_fail("launch of " name, cudaGetErrorString(err_), __FILE__, __LINE__);           \
    } while (0)

/* ---------------------------------------------------------------- grid and buffer sizes (host) */

static inline int cdiv(long a, long b) { return (int)((a + b - 1) / b); }

/* The blocks of a grid-stride launch over n items, per_block items a block: enough to cover them, at most
 * max_blocks. */
static inline int capped_blocks(long n, int per_block, int max_blocks) {
    return cdiv(n, per_block) < max_blocks ? cdiv(n, per_block) : max_blocks;
}

/* bytes rounded up to a multiple of grain (saturating: kernels.h's size_add), so that what follows in a buffer
 * carved from one allocation starts aligned. */
static inline size_t size_round_up(size_t bytes, size_t grain) { return size_add(bytes, grain - 1) / grain * grain; }

/* ---------------------------------------------------------------- bf16 vectors of 8 */

/* A row of bf16 values is accessed in chunks of 8 columns. `vec` says the 16-byte path is allowed (the row base is
 * 16-byte aligned and the row stride a multiple of 8); otherwise, and for the last partial chunk, scalar accesses
 * with the missing columns read as 0 and not written. */
__device__ __forceinline__ void load8(const bf16 *p, int valid, bool vec, float out[8]) {
    if (vec && valid >= 8) {
        const uint4 u = *reinterpret_cast<const uint4 *>(p);
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __bfloat1622float2(h[i]);
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = i < valid ? __bfloat162float(p[i]) : 0.0f;
    }
}

__device__ __forceinline__ void store8(bf16 *p, int valid, bool vec, const float in[8]) {
    if (vec && valid >= 8) {
        uint4 u;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
        for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
        *reinterpret_cast<uint4 *>(p) = u;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (i < valid) p[i] = __float2bfloat16(in[i]);
    }
}

/* 4 bf16 (8 bytes): the act output of SwiGLU, half a chunk of Z. */
__device__ __forceinline__ void store4(bf16 *p, int valid, bool vec, const float in[4]) {
    if (vec && valid >= 4) {
        uint2 u;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
        h[0] = __floats2bfloat162_rn(in[0], in[1]);
        h[1] = __floats2bfloat162_rn(in[2], in[3]);
        *reinterpret_cast<uint2 *>(p) = u;
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (i < valid) p[i] = __float2bfloat16(in[i]);
    }
}

/* 8 fp32 values (two 16-byte loads when allowed). */
__device__ __forceinline__ void load8f(const float *p, int valid, bool vec, float out[8]) {
    if (vec && valid >= 8) {
        const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = i < valid ? p[i] : 0.0f;
    }
}

/* 4 fp32 values (one 16-byte load when allowed). */
__device__ __forceinline__ void load4f(const float *p, int valid, bool vec, float out[4]) {
    if (vec && valid >= 4) {
        const float4 a = *reinterpret_cast<const float4 *>(p);
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) out[i] = i < valid ? p[i] : 0.0f;
    }
}

/* Whether rows of `ld` elements of `elem_bytes` starting at `p` allow the 16-byte path. */
static inline bool rows_vec_ok(const void *p, long ld, int elem_bytes) {
    return ((uintptr_t)p % 16 == 0) && ((ld * elem_bytes) % 16 == 0);
}

/* ---------------------------------------------------------------- reductions */

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result. The order of the
 * additions depends only on blockDim, so the result is deterministic. `scratch` holds 32 values. */
template <typename T>
__device__ __forceinline__ T block_sum(T v, T *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : T(0);
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

/* ---------------------------------------------------------------- internal API (one definition each) */

/* The CUDA backend's context (kernels.h): everything the operations keep between calls. Made by
 * cuda_context_create (cuda_context.cu), which also reads TRAIN_PRINT_GEMMS. */
#define CUDA_ALLOC_SLOTS 4096
#define CUDA_WORKSPACE_RETIRED 16
struct KernelContext {
    /* every kernel and copy of the context, in order: a blocking stream, so that copies on the legacy default stream
     * (a test's cudaMemcpy) still wait for the work queued on it */
    cudaStream_t stream;
    cublasHandle_t blas; /* made at the first cuBLAS GEMM (cuda_blas) */
    int print_gemms; /* TRAIN_PRINT_GEMMS=1: each engine GEMM's launch prints its config */
    /* cuda_memory.cu: the live allocations (open addressing, keyed by pointer) and their bytes now and at most */
    struct {
        void *p;
        size_t bytes;
    } allocs[CUDA_ALLOC_SLOTS];
    size_t bytes_live, bytes_peak;
    /* cuda_memory.cu: the workspace; while a captured step exists (it holds the workspace's address), one that is
     * outgrown is kept, not freed, until the last graph goes */
    void *ws;
    size_t ws_bytes;
    void *ws_retired[CUDA_WORKSPACE_RETIRED];
    int ws_n_retired, graphs;
    /* buffers kept from call to call (cuda_kernels.cu's CUDA_HELD_* slots count them) */
    char *lm_grad; /* cuda_loss.cu: the unfused LM head's gradient and c, grown to the largest call's */
    size_t lm_grad_bytes;
    double *sum_scratch; /* cuda_optimizer.cu: the sums' partials */
};

/* cuda_context.cu: the cuBLAS handle on the context's stream, made at its first use. */
cublasHandle_t cuda_blas(KernelContext *kc);
/* How an operation launches an engine GEMM (kernels/cuda/gemm): ge_pick's config, the context's stream, and `op` as
 * the name its launches print under when the context's print_gemms is set. */
ge_launch cuda_gemm_launch(KernelContext *kc, const char *op);

/* cuda_memory.cu: a tracked device allocator (out of memory, it exits with a message: the ops have no error
 * path), and one growing workspace. */
void *cuda_dev_alloc(KernelContext *kc, size_t bytes);
void cuda_dev_free(KernelContext *kc, void *p);
/* Device scratch of at least `bytes`, valid until the next call (the stream orders its uses). Grows, never shrinks. */
void *cuda_workspace(KernelContext *kc, size_t bytes);
/* The captured steps that exist (+1 when one is captured, -1 when it is freed), which keep the workspace's address. */
void cuda_workspace_graphs(KernelContext *kc, int delta);

/* The buffers the backend keeps (KernelNeed.held's slots): cuBLAS's workspace, the unfused LM head's gradient, the
 * sums' partials. */
enum { CUDA_HELD_BLAS, CUDA_HELD_LM_GRAD, CUDA_HELD_SUMS };
/* The device memory the ops take, in bytes, for the memory preflight: each op asks with its function here, and the
 * tables' workspace_of (cuda_kernels.cu, fused/fused_kernels.cu) say from them what a call needs. Saturating. */
size_t cuda_workspace_rounded(size_t bytes);  /* what cuda_workspace holds after a request of bytes */
size_t cuda_blas_workspace_bytes(void);       /* cuBLAS's, held from its first GEMM on */
size_t cuda_convert_workspace_bytes(void);    /* act_from_f32's and act_to_f32's staging */
size_t cuda_norm_backward_workspace(size_t M, size_t K);        /* cuda_gemm_norm_backward */
size_t cuda_dw_scaled_workspace(size_t M, size_t K);            /* cuda_gemm_dw with a column scale */
size_t cuda_lm_head_loss_workspace(size_t M, size_t V);         /* cuda_lm_head_loss */
size_t cuda_lm_head_grad_bytes(size_t M, size_t V);             /* cuda_lm_head_train's gradient and c, held */
size_t cuda_sum_scratch_bytes(void);                            /* the sums' partials, held */
/* the attention backward's; with_tail: the fused table's, with the RoPE backward's row partials */
size_t cuda_attention_backward_workspace(size_t B, size_t T, size_t Hq, size_t Hkv, int with_tail);

/* cuda_gemm_cublas.cu: row-major GEMMs on bf16 operands with fp32 accumulation (kernels.h's conventions). */
/* Y[M,N] (bf16, row stride ldy) = alpha * X[M,K] . W[N,K]^T + beta * Y. */
void cuda_gemm_xwt_bf16(KernelContext *kc, const void *X, const void *W, void *Y, long ldy, int M, int N, int K,
                        float beta);
/* Y[M,N] (fp32) = X . W^T. */
void cuda_gemm_xwt_f32(KernelContext *kc, const void *X, const void *W, float *Y, int M, int N, int K);
/* dX[M,K] = dY[M,N] . W[N,K], into bf16 or fp32. */
void cuda_gemm_dyw_bf16(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K);
void cuda_gemm_dyw_f32(KernelContext *kc, const void *dY, const void *W, float *dX, int M, int N, int K);
/* dW[N,K] (fp32) = dY^T . X, or += when accumulate. */
void cuda_gemm_dw_f32(KernelContext *kc, const void *dY, const void *X, float *dW, int accumulate, int M, int N, int K);

/* cuda_norm.cu: deterministic reductions of partials. out[k] += sum over b < n_blocks (in order) of
 * partial[b, k]; out[m] = sum over t < nparts (in order) of part[m, t]. */
void cuda_column_sum_add(KernelContext *kc, const float *partial, int n_blocks, float *out, int K);
void cuda_row_sum(KernelContext *kc, const float *part, int nparts, int M, float *out);

/* cuda_embedding.cu: dE[tokens[m]] += coef[m] * dx[m] (coef NULL: 1) for m < M, deterministic: from the tokens'
 * groups (kernels.h), each group summed in order of m in fp32 and added once. dx [M, D] bf16 rows (row stride D),
 * dE [V, D] fp32. */
void cuda_rows_scatter_add(KernelContext *kc, const int32_t *groups, const float *coef, const void *dx, float *dE,
                           int M, int D);

#endif
