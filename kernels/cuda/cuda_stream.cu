/* cuda_stream.cu: the CUDA backend's stream and cuBLAS handle, which every operation queues its work on, how an
 * operation launches an engine GEMM, and the step capture of kernels.h (CUDA graphs recorded from that stream).
 * The stream is a blocking one, so that copies on the legacy default stream (a test's cudaMemcpy) still wait for
 * the work queued on it. */
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

#define CUBLAS_WORKSPACE_BYTES (32u << 20)

size_t cuda_blas_workspace_bytes(void) { return CUBLAS_WORKSPACE_BYTES; }

/* The backend's state beside its memory: created on first use, kept for the process. */
static struct {
    cudaStream_t stream;
    cublasHandle_t blas;
    int print_gemms; /* TRAIN_PRINT_GEMMS=1: each engine GEMM's launch prints its config (cuda_gemm_launch) */
} ctx;

cudaStream_t cuda_stream(void) {
    if (!ctx.stream) {
        CUDA_CHECK(cudaStreamCreate(&ctx.stream));
        const char *print = getenv("TRAIN_PRINT_GEMMS");
        ctx.print_gemms = print && strcmp(print, "1") == 0;
    }
    return ctx.stream;
}

ge_launch cuda_gemm_launch(const char *op) {
    const cudaStream_t stream = cuda_stream(); /* the backend's start: reads TRAIN_PRINT_GEMMS */
    const ge_launch how = {GE_AUTO, stream, op, ctx.print_gemms};
    return how;
}

cublasHandle_t cuda_blas(void) {
    if (!ctx.blas) {
        CUBLAS_CHECK(cublasCreate(&ctx.blas));
        CUBLAS_CHECK(cublasSetStream(ctx.blas, cuda_stream()));
        /* A fixed workspace keeps cuBLAS's algorithm choice (and so its bits) the same from call to call. */
        CUBLAS_CHECK(cublasSetWorkspace(ctx.blas, cuda_dev_alloc(CUBLAS_WORKSPACE_BYTES), CUBLAS_WORKSPACE_BYTES));
        CUBLAS_CHECK(cublasSetMathMode(ctx.blas, CUBLAS_DEFAULT_MATH));
    }
    return ctx.blas;
}

/* A captured step must have run once before (train_step.c), so that every buffer and handle it uses exists. */
extern "C" void cuda_capture_begin(void) {
    CUDA_CHECK(cudaStreamBeginCapture(cuda_stream(), cudaStreamCaptureModeThreadLocal));
}

extern "C" void *cuda_capture_end(void) {
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamEndCapture(cuda_stream(), &graph));
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    cuda_workspace_graphs(1);
    return exec;
}

extern "C" void cuda_replay(void *graph) { CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cuda_stream())); }

extern "C" void cuda_graph_free(void *graph) {
    CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
    cuda_workspace_graphs(-1);
}
