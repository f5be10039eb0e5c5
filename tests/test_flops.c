/* test_flops.c: the FLOPs per training token (6 x parameters + the causal half of the attention matmuls) against
 * values worked out by hand for the shipped configs, the MFU this gives for RESULTS.md's measured Llama-3.2-1B row
 * (section 1, 4 x 2048), and the GPU peak lookup by device name (known GPUs, their variants with other peaks, unknown GPUs and none). */
#include "model/config.h"
#include "model/flops.h"
#include "tests/test_util.h"

static int load(const char *path, Config *c) {
    char err[512];
    char *argv[] = {"train", "-c", (char *)path};
    int rc = config_from_args(c, 3, argv, err, sizeof(err));
    if (rc) CHECK(0, "load %s: %s", path, err);
    return rc;
}

static void test_flops_per_token(void) {
    Config c;
    if (load("configs/llama3_1b.json", &c) == 0) {
        /* 6 * 1,235,814,400 + 6 * 16 layers * 32 heads * 64 * 2048 = 7,414,886,400 + 402,653,184 */
        double f = flops_per_token(&c.model, config_num_parameters(&c.model), 2048);
        CHECK(f == 7817539584.0, "Llama 3.2 1B at T 2048: %.0f FLOPs per token (want 7,817,539,584)", f);
        /* RESULTS.md section 1 (results/bench_shapes.json): fusion on at 4 x 2048, 65,769 tokens/s on an H100 SXM, is
         * 52.0% MFU */
        double mfu = 65769 * f / gpu_peak_bf16_flops("NVIDIA H100 80GB HBM3");
        CHECK(fabs(mfu - 0.5197) < 5e-4, "65,769 tokens/s of it on an H100 SXM is %.2f%% MFU (docs/training.md: 52.0%%)",
              100 * mfu);
    }
    if (load("configs/llama3_tiny.json", &c) == 0) {
        /* 820,352 parameters: embedding 256*128 + 4 x (qkv 256*128 + wo 128*128 + 3*384*128 + 2*128) + 128;
         * attention 6 * 4 layers * 4 heads * 32 * 256 = 786,432 */
        double f = flops_per_token(&c.model, config_num_parameters(&c.model), 256);
        CHECK(config_num_parameters(&c.model) == 820352 && f == 6.0 * 820352 + 786432,
              "the tiny config at T 256: %.0f FLOPs per token (want 5,708,544)", f);
        double f1 = flops_per_token(&c.model, config_num_parameters(&c.model), 1);
        CHECK(f - f1 == 6.0 * 4 * 4 * 32 * 255, "the attention term grows linearly with T (%.0f more at 256 than 1)",
              f - f1);
    }
}

static void test_peaks(void) {
    static const struct {
        const char *name;
        double peak;
    } cases[] = {
        {"NVIDIA H100 80GB HBM3", 989.4e12}, /* SXM5 */
        {"NVIDIA H100 PCIe", 756e12},
        {"NVIDIA H200", 989.4e12},
        {"NVIDIA H100 NVL", 0},              /* other clocks: not in the table, no MFU rather than a wrong one */
        {"NVIDIA H200 NVL", 0},
        {"NVIDIA A100-SXM4-80GB", 0},
        {"", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double p = gpu_peak_bf16_flops(cases[i].name);
        CHECK(p == cases[i].peak, "peak of \"%s\": %g FLOP/s (want %g)", cases[i].name, p, cases[i].peak);
    }
    CHECK(gpu_peak_bf16_flops(NULL) == 0, "no GPU (the CPU backend): no peak, so no MFU");
}

int main(void) {
    test_flops_per_token();
    test_peaks();
    return test_summary();
}
