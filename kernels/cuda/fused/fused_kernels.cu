/* fused_kernels.cu: the fused CUDA operation table (--fusion on, the default on a GPU): every GEMM of the step with
 * its CODA epilogue program (fused_ops.h); the first layer's norm, attention, the embedding, the RoPE backward and
 * the optimizer are the unfused table's kernels (docs/DESIGN.md, "Fused step"). */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/kernels.h"

extern "C" const Kernels kernels_cuda_fused = {
    .name = "cuda",
    .detail = "fusion on (GEMM-epilogue programs)",
    .act_bytes = 2,

    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .act_from_f32 = cuda_act_from_f32,
    .act_to_f32 = cuda_act_to_f32,
    .synchronize = cuda_synchronize,

    .embed_norm = cuda_embed_norm,
    .gemm_residual_norm = cudaf_gemm_residual_norm,
    .gemm_rope = cudaf_gemm_rope,
    .gemm_swiglu = cudaf_gemm_swiglu,
    .gemm_rowscale = cudaf_gemm_rowscale,
    .attention_forward = cuda_attention_forward,
    .lm_head_loss = cudaf_lm_head_loss,
    .lm_head_train = cudaf_lm_head_train,

    .gemm_norm_backward = cudaf_gemm_norm_backward,
    .gemm_swiglu_backward = cudaf_gemm_swiglu_backward,
    .gemm_dx = cudaf_gemm_dx,
    .gemm_dw = cudaf_gemm_dw,
    .attention_backward = cuda_attention_backward,
    .rope_backward = cuda_rope_backward,
    .embed_backward = cuda_embed_backward,

    .sum_squares = cuda_sum_squares,
    .adamw = cuda_adamw,

    .peak_bytes = cuda_peak_bytes,
};
