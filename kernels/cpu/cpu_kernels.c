/* cpu_kernels.c: the CPU backend's operation table (plain fp32 C with OpenMP). */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/kernels.h"

const Kernels kernels_cpu = {
    .name = "cpu",
    .act_bytes = sizeof(float),
    .memory_name = "host memory",

    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset_zero = cpu_memset_zero,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .act_from_f32 = cpu_act_from_f32,
    .act_to_f32 = cpu_act_to_f32,
    .synchronize = cpu_synchronize,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,

    .embed_norm = cpu_embed_norm,
    .gemm_residual_norm = cpu_gemm_residual_norm,
    .gemm_rope = cpu_gemm_rope,
    .gemm_swiglu = cpu_gemm_swiglu,
    .gemm_rowscale = cpu_gemm_rowscale,
    .attention_forward = cpu_attention_forward,
    .lm_head_loss = cpu_lm_head_loss,
    .lm_head_train = cpu_lm_head_train,

    .gemm_norm_backward = cpu_gemm_norm_backward,
    .gemm_swiglu_backward = cpu_gemm_swiglu_backward,
    .gemm_dx = cpu_gemm_dx,
    .gemm_dw = cpu_gemm_dw,
    .attention_backward = cpu_attention_backward,
    .embed_backward = cpu_embed_backward,

    .sum_squares = cpu_sum_squares,
    .sum = cpu_sum,
    .clip_scale = cpu_clip_scale,
    .adamw = cpu_adamw,

    .workspace_bytes = cpu_workspace_bytes,
    .available_bytes = cpu_available_bytes,
    .peak_bytes = cpu_peak_bytes,
};
