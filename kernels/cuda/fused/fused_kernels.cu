/* fused_kernels.cu: the fused CUDA operation table (--fusion on, the default on a GPU): the unfused table
 * (kernels_cuda) with every GEMM operation replaced by its CODA epilogue program (fused_ops.h) and the attention
 * backward carrying the RoPE backward in its stores. The first layer's norm, the attention forward, the embedding,
 * memory and the optimizer are the unfused table's kernels (docs/DESIGN.md, "Fused step"). */
#include "kernels/cuda/attention/attn_ops.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fused/fused_ops.h"
#include "kernels/kernels.h"

/* What a call needs (kernels.h workspace_of): the fused op's request to cuda_workspace (and the sums' partials where
 * dW's sum of squares is asked for), or the unfused table's answer where the op falls back to the unfused one (the
 * test the op makes, with fused_ops.h's predicates) or is the unfused table's. */
static void cudaf_workspace_of(const KernelCall *c, KernelNeed *need) {
    const size_t M = (size_t)c->M;
    bool fused = true;
    size_t ask = 0;
    switch (c->op) {
    case KOP_GEMM_RESIDUAL_NORM:
        fused = fused_dim_ok(c->N) && fused_dim_ok(c->K);
        ask = cudaf_residual_norm_workspace(M, c->N);
        break;
    case KOP_GEMM_ROPE: fused = fused_dim_ok(c->K) && fused_head_dim_ok(c->hd); break;
    case KOP_GEMM_SWIGLU:
    case KOP_GEMM_ROWSCALE: fused = fused_dim_ok(c->K); break;
    case KOP_GEMM_DX: fused = fused_dim_ok(c->N) && fused_dim_ok(c->K); break;
    case KOP_GEMM_NORM_BACKWARD:
        fused = fused_dim_ok(c->N) && fused_dim_ok(c->K);
        ask = cudaf_norm_backward_workspace(M, c->K);
        break;
    case KOP_GEMM_SWIGLU_BACKWARD:
        fused = fused_dim_ok(c->D) && fused_dim_ok(c->F);
        ask = cudaf_swiglu_backward_workspace(M, c->F);
        break;
    case KOP_GEMM_DW:
        fused = fused_dim_ok(c->N) && fused_dim_ok(c->K);
        ask = cudaf_dw_workspace(c->N, c->K, c->accumulate, c->sq);
        break;
    case KOP_LM_HEAD_LOSS:
    case KOP_LM_HEAD_TRAIN:
        fused = fused_dim_ok(c->K);
        ask = cudaf_lm_head_workspace(c->M, c->V, c->K, c->op == KOP_LM_HEAD_TRAIN);
        break;
    case KOP_ATTENTION_BACKWARD: ask = cuda_attention_backward_workspace(c->B, c->T, c->Hq, c->Hkv, c->r); break;
    default: fused = false; /* the unfused table's operation */
    }
    if (!fused) {
        cuda_workspace_of(c, need);
        return;
    }
    need->scratch = cuda_workspace_rounded(ask);
    if (c->op == KOP_GEMM_DW && c->sq) need->held[CUDA_HELD_SUMS] = cuda_sum_scratch_bytes();
}

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
    k.workspace_of = cudaf_workspace_of;
    return k;
}

extern "C" const Kernels kernels_cuda_fused = fused_table();
