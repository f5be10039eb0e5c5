/* test_gpu_memory.c: the memory preflight on the GPU: model_memory's estimate against the device memory that each
 * CUDA table really holds (its tracked allocator: the model's buffers, the workspace, cuBLAS's workspace and the
 * buffers the backend keeps) for the shapes that take different paths: the GPU tiny config with one and two
 * micro-batches, head dim 128, shapes that make fused ops fall back to the unfused ones (F or D not a multiple of 8),
 * a vocabulary whose LM head runs in chunks, and Llama 3.2 1B (memory_check.h). Each case runs in a child process
 * of its own (CUDA is first touched there). Also checks that the device memory taken beyond the tracked peak (the
 * cuBLAS handle, kernel modules) stays within the reserve the preflight keeps for it. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "tests/memory_check.h"

typedef struct GpuCase {
    MemoryCase c;
    int fused;
} GpuCase;

static void gpu_case(const void *arg) {
    const GpuCase *gc = arg;
    const Kernels *k = gc->fused ? &kernels_cuda_fused : &kernels_cuda;
    char why[256];
    if (!kernels_cuda_available(why, sizeof(why))) {
        CHECK(0, "no usable GPU: %s", why);
        return;
    }
    test_label = gc->fused ? "fusion on, " : "fusion off, ";
    double beyond = 0;
    memory_case_run(k, &gc->c, 0.0, &beyond);
    CHECK(beyond <= (double)cuda_untracked_reserve_bytes(),
          "%s: the device memory taken beyond the tracked, %.1f MiB, is within the preflight's reserve of %.0f MiB",
          gc->c.name, beyond / 1048576.0, cuda_untracked_reserve_bytes() / 1048576.0);
}

int main(void) {
    const ModelConfig tiny = memory_case_config(256, 384, 4, 4, 2, 64, 256, 1);
    const ModelConfig llama_1b = memory_case_config(2048, 8192, 16, 32, 8, 64, 128256, 1);
    const MemoryCase cases[] = {
        {"GPU tiny config, batch 8 x 256", tiny, 8, 256, 1},
        {"GPU tiny config untied, 2 micro-batches of 4 x 128", memory_case_config(256, 384, 4, 4, 2, 64, 256, 0), 4,
         128, 2},
        {"head dim 128, batch 4 x 128", memory_case_config(256, 384, 2, 2, 1, 128, 256, 1), 4, 128, 1},
        {"F 100 (fused fallbacks), batch 2 x 100", memory_case_config(256, 100, 2, 4, 2, 64, 300, 0), 2, 100, 1},
        {"D 260 (the LM head falls back), batch 2 x 64", memory_case_config(260, 384, 2, 4, 2, 64, 300, 1), 2, 64, 1},
        {"vocabulary 128256 (the LM head in chunks), batch 4 x 2048", memory_case_config(256, 512, 1, 4, 2, 64, 128256, 1),
         4, 2048, 1},
        {"Llama 3.2 1B, batch 4 x 2048", llama_1b, 4, 2048, 1},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int fused = 1; fused >= 0; fused--) {
            const GpuCase gc = {cases[i], fused};
            failed |= memory_in_child(gpu_case, &gc);
        }
    const int rc = test_summary();
    return rc || failed;
}
