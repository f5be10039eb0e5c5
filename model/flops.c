/* flops.c: the FLOP count per training token and the table of GPU peaks (flops.h). */
#include "model/flops.h"

#include <string.h>

double flops_per_token(const ModelConfig *m, int64_t n_params, int T) {
    return 6.0 * (double)n_params +
           6.0 * m->num_hidden_layers * m->num_attention_heads * (double)m->head_dim * T;
}

/* Datasheet peaks, dense (without sparsity). The first entry whose text occurs in the name decides: the NVL parts
 * (other clocks and peaks, not in this table) before the plain names that their names also contain. */
static const struct {
    const char *name_part;
    double peak;
} PEAKS[] = {
    {"H100 NVL", 0},
    {"H200 NVL", 0},
    {"H100 PCIe", 756e12},
    {"H100", 989.4e12}, /* SXM5: "NVIDIA H100 80GB HBM3" */
    {"H200", 989.4e12},
};

double gpu_peak_bf16_flops(const char *device_name) {
    if (!device_name) return 0;
    for (size_t i = 0; i < sizeof(PEAKS) / sizeof(PEAKS[0]); i++)
        if (strstr(device_name, PEAKS[i].name_part)) return PEAKS[i].peak;
    return 0;
}
