/* cuda_kernels.cu: the unfused CUDA operation table (--fusion off): bf16 activations, cuBLAS GEMMs followed by
 * one-pass epilogue kernels, the Hopper attention kernels (kernels/cuda/attention). The baseline of the fused table
 * (kernels/cuda/fused) and a second GPU oracle for it. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernels.h"

/* What a call needs (cuda_common.cuh's sizes): its request to cuda_workspace, as the workspace holds it; cuBLAS's
 * workspace where it runs a cuBLAS GEMM; the LM head's gradient; the sums' partials. */
extern "C" void cuda_workspace_of(const KernelCall *c, KernelNeed *need) {
    const size_t M = (size_t)c->M, K = (size_t)c->K, V = (size_t)c->V;
    size_t ask = 0;
    bool blas = false;
    switch (c->op) {
    case KOP_ACT_FROM_F32:
    case KOP_ACT_TO_F32:
    case KOP_MASTER_FROM_F32:
    case KOP_MASTER_TO_F32: ask = c->n ? cuda_convert_workspace_bytes() : 0; break;
    case KOP_GEMM_RESIDUAL_NORM:
    case KOP_GEMM_ROPE:
    case KOP_GEMM_SWIGLU:
    case KOP_GEMM_ROWSCALE:
    case KOP_GEMM_SWIGLU_BACKWARD:
    case KOP_GEMM_DX: blas = true; break; /* cuBLAS, then a pass */
    case KOP_GEMM_NORM_BACKWARD:
        ask = cuda_norm_backward_workspace(M, K);
        blas = true;
        break;
    case KOP_GEMM_DW:
        ask = c->col_scale ? cuda_dw_scaled_workspace(M, K) : 0;
        if (c->sq) need->held[CUDA_HELD_SUMS] = cuda_sum_scratch_bytes();
        blas = true;
        break;
    case KOP_LM_HEAD_LOSS:
        ask = cuda_lm_head_loss_workspace(M, V);
        blas = true;
        break;
    case KOP_LM_HEAD_TRAIN: /* its norm backward's request; its gradient, held */
        ask = cuda_norm_backward_workspace(M, K);
        need->held[CUDA_HELD_LM_GRAD] = cuda_lm_head_grad_bytes(M, V);
        blas = true;
        break;
    case KOP_ATTENTION_BACKWARD: ask = cuda_attention_backward_workspace(c->B, c->T, c->Hq, c->Hkv, 0); break;
    case KOP_SUM_SQUARES:
    case KOP_SUM: need->held[CUDA_HELD_SUMS] = cuda_sum_scratch_bytes(); break;
    default: break; /* nothing beyond its arguments */
    }
    need->scratch = cuda_workspace_rounded(ask);
    if (blas) need->held[CUDA_HELD_BLAS] = cuda_blas_workspace_bytes();
}

extern "C" const Kernels kernels_cuda = {
    .name = "cuda",
    .detail = "fusion off (cuBLAS GEMMs + separate epilogue passes)",
    .act_bytes = 2,
    .memory_name = "GPU memory",
    .leaner = &kernels_cuda_fused,
    .leaner_flag = "--fusion on",

    .context_create = cuda_context_create,
    .context_free = cuda_context_free,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .act_from_f32 = cuda_act_from_f32,
    .act_to_f32 = cuda_act_to_f32,
    .master_from_f32 = cuda_master_from_f32,
    .master_to_f32 = cuda_master_to_f32,
    .synchronize = cuda_synchronize,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .graph_free = cuda_graph_free,
    .reserve_scratch = cuda_reserve_scratch,

    .embed_norm = cuda_embed_norm,
    .gemm_residual_norm = cuda_gemm_residual_norm,
    .gemm_rope = cuda_gemm_rope,
    .gemm_swiglu = cuda_gemm_swiglu,
    .gemm_rowscale = cuda_gemm_rowscale,
    .attention_forward = cuda_attention_forward,
    .kv_cache_append = cuda_kv_cache_append,
    .attention_cached = cuda_attention_cached,
    .lm_head_loss = cuda_lm_head_loss,
    .lm_head_train = cuda_lm_head_train,

    .gemm_norm_backward = cuda_gemm_norm_backward,
    .gemm_swiglu_backward = cuda_gemm_swiglu_backward,
    .gemm_dx = cuda_gemm_dx,
    .gemm_dw = cuda_gemm_dw,
    .attention_backward = cuda_attention_backward,
    .embed_backward = cuda_embed_backward,

    .sum_squares = cuda_sum_squares,
    .sum = cuda_sum,
    .clip_scale = cuda_clip_scale,
    .adamw = cuda_adamw,
    .adamw_split = cuda_adamw_split,

    .workspace_of = cuda_workspace_of,
    .available_bytes = cuda_available_bytes,
    .peak_bytes = cuda_peak_bytes,
    .device_name = cuda_device_name,
};
