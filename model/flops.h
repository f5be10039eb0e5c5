/* flops.h: model FLOPs utilization (MFU): the FLOPs of one training token and the peak dense bf16 FLOP/s of the GPUs
 * this trainer knows by name. */
#ifndef FLOPS_H
#define FLOPS_H

#include <stdint.h>

#include "model/config.h"

/* The FLOPs of training on one token of a sequence of T tokens: 6 per parameter (forward and backward of every
 * matrix product, the embedding and norms counted as parameters too) plus the causal half of the attention matmuls,
 * forward and backward: 6 * layers * Hq * hd * T. */
double flops_per_token(const ModelConfig *m, int64_t n_params, int T);

/* The peak dense bf16 tensor-core FLOP/s of a GPU from its name (cudaGetDeviceProperties): H100 SXM 989.4e12,
 * H100 PCIe 756e12, H200 989.4e12; 0 for a name it does not know (or NULL: no GPU), so that no MFU is shown. */
double gpu_peak_bf16_flops(const char *device_name);

#endif
