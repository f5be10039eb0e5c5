/* fused_kernels.cu: the fused CUDA operation table (--fusion on, the default on a GPU): the unfused table
 * (kernels_cuda) with every GEMM operation replaced by its CODA epilogue program (fused_ops.h) and the attention
 * backward carrying the RoPE backward in its stores. The first layer's norm, the attention forward, the embedding,
 * memory and the optimizer are the unfused table's kernels
 * (docs/DESIGN.md, "Fused step"). */
#include "kernels/cuda/attention/attn_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/kernels.h"

/* kernels_cuda is constant-initialized (addresses only), so it is complete before this dynamic initialization. */
static Kernels fused_table(void) {
    Kernels k = kernels_cuda;
    k.detail = "fusion on (GEMM-epilogue programs)";
    k.leaner = NULL;
    k.leaner_flag = NULL;
    k.shape_note = cudaf_shape_note;
    k.gemm_residual_norm = cudaf_gemm_residual_norm;
    k.gemm_rope = cudaf_gemm_rope;
    k.gemm_swiglu = cudaf_gemm_swiglu;
    k.gemm_rowscale = cudaf_gemm_rowscale;
    k.lm_head_loss = cudaf_lm_head_loss;
    k.lm_head_train = cudaf_lm_head_train;
    k.gemm_norm_backward = cudaf_gemm_norm_backward;
    k.gemm_swiglu_backward = cudaf_gemm_swiglu_backward;
    k.gemm_dx = cudaf_gemm_dx;
    k.gemm_dw = cudaf_gemm_dw;
    k.attention_backward = cudaf_attention_backward;
    k.workspace_bytes = cudaf_workspace_bytes;
    return k;
}

extern "C" const Kernels kernels_cuda_fused = fused_table();
