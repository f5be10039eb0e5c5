/* cuda_context.cu: the CUDA backend's context (kernels.h; cuda_common.cuh defines what it holds): made with its
 * stream, freed with what it holds; its cuBLAS handle, how an operation launches an engine GEMM, and the step capture
 * of kernels.h (CUDA graphs recorded from the context's stream). */
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

#define CUBLAS_WORKSPACE_BYTES (32u << 20)

size_t cuda_blas_workspace_bytes(void) { return CUBLAS_WORKSPACE_BYTES; }

/* A context (kernels.h): its stream, and TRAIN_PRINT_GEMMS read. The rest is zero-filled: no allocation, no
 * workspace, no cuBLAS handle yet. */
extern "C" KernelContext *cuda_context_create(void) {
    KernelContext *kc = (KernelContext *)calloc(1, sizeof(KernelContext));
    if (!kc) {
        fprintf(stderr, "error: out of host memory: the CUDA backend's context could not be allocated\n");
        exit(1);
    }
    CUDA_CHECK(cudaStreamCreate(&kc->stream));
    const char *print = getenv("TRAIN_PRINT_GEMMS");
    kc->print_gemms = print && strcmp(print, "1") == 0;
    return kc;
}

/* After the model's buffers are freed: cuBLAS's handle, every allocation still in the context's table (the workspace
 * and the buffers retired from it, the kept buffers, cuBLAS's workspace), then the stream. */
extern "C" void cuda_context_free(KernelContext *kc) {
    if (!kc) return;
    CUDA_CHECK(cudaStreamSynchronize(kc->stream));
    if (kc->blas) CUBLAS_CHECK(cublasDestroy(kc->blas));
    for (int i = 0; i < CUDA_ALLOC_SLOTS; i++)
        if (kc->allocs[i].p) CUDA_CHECK(cudaFree(kc->allocs[i].p));
    CUDA_CHECK(cudaStreamDestroy(kc->stream));
    free(kc);
}

ge_launch cuda_gemm_launch(KernelContext *kc, const char *op) {
    const ge_launch how = {GE_AUTO, kc->stream, op, kc->print_gemms};
    return how;
}

cublasHandle_t cuda_blas(KernelContext *kc) {
    if (!kc->blas) {
        CUBLAS_CHECK(cublasCreate(&kc->blas));
        CUBLAS_CHECK(cublasSetStream(kc->blas, kc->stream));
        /* A fixed workspace keeps cuBLAS's algorithm choice (and so its bits) the same from call to call. */
        CUBLAS_CHECK(cublasSetWorkspace(kc->blas, cuda_dev_alloc(kc, CUBLAS_WORKSPACE_BYTES), CUBLAS_WORKSPACE_BYTES));
        CUBLAS_CHECK(cublasSetMathMode(kc->blas, CUBLAS_DEFAULT_MATH));
    }
    return kc->blas;
}

/* A captured step must have run once before (train_step.c), so that every buffer and handle it uses exists. */
extern "C" void cuda_capture_begin(KernelContext *kc) {
    CUDA_CHECK(cudaStreamBeginCapture(kc->stream, cudaStreamCaptureModeThreadLocal));
}

extern "C" void *cuda_capture_end(KernelContext *kc) {
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamEndCapture(kc->stream, &graph));
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    cuda_workspace_graphs(kc, 1);
    return exec;
}

extern "C" void cuda_replay(KernelContext *kc, void *graph) {
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, kc->stream));
}

extern "C" void cuda_graph_free(KernelContext *kc, void *graph) {
    CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
    cuda_workspace_graphs(kc, -1);
}
