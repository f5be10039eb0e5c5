/* test_gpu_layout.c: the shared layout (model.h, ModelLayout) against the apart one on both CUDA tables, each step
 * captured as a graph and replayed (layout_check.h): a small model whose every block above the first fits in the
 * gradients, and a larger batch where only the top block does. */
#include "tests/layout_check.h"
#include "tests/small_model.h"
#include "tests/gpu/gpu_test_util.h"

int main(void) {
    require_gpu();
    const ModelConfig c = small_model_shape(256, 512, 4, 4, 2, 64, 1000, 1);
    for (int fused = 1; fused >= 0; fused--) {
        const Kernels *k = fused ? &kernels_cuda_fused : &kernels_cuda;
        test_label = fused ? "fusion on, " : "fusion off, ";
        check_layouts(k, 1, &c, 2, 128, 3, "2 x 128 (every block above the first fits)");
        check_layouts(k, 1, &c, 4, 256, 1, "4 x 256 (one block fits)");
    }
    return test_summary();
}
