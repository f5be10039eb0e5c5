/* fused_workspace_plan.cu: the fused table's workspace for a model's shapes (Kernels.workspace_bytes): the largest
 * request to cuda_workspace over the calls of model.c's schedule (each op's size function, the one it asks with,
 * which is the unfused op's where the shape falls back), as cuda_workspace holds it, and the buffers the backend
 * keeps: cuBLAS's workspace when some op falls back, the LM head's gradient when it does, the sums' scratch. */
#include <limits.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fused/fused_ops.h"

extern "C" size_t cudaf_workspace_bytes(const KernelShapes *s) {
    const size_t M = (size_t)s->B * (size_t)s->T;
    if (M > INT_MAX) return SIZE_MAX; /* the ops count rows in int: no run has more (config_validate) */
    const int D = s->D, F = s->F, Dq = s->Hq * s->hd, Nqkv = (s->Hq + 2 * s->Hkv) * s->hd;
    /* forward: the attention output and the MLP's down projection, each with the residual and the next norm */
    size_t ask = size_max(cudaf_residual_norm_workspace(M, D, Dq), cudaf_residual_norm_workspace(M, D, F));
    /* backward: the norms under gate/up and QKV, the SwiGLU's, the weight gradients (sums of squares written) */
    ask = size_max(ask, cudaf_norm_backward_workspace(M, 2 * F, D));
    ask = size_max(ask, cudaf_norm_backward_workspace(M, Nqkv, D));
    ask = size_max(ask, cudaf_swiglu_backward_workspace(M, D, F));
    ask = size_max(ask, cudaf_dw_workspace(M, D, F, 0, 1));
    ask = size_max(ask, cudaf_dw_workspace(M, 2 * F, D, 1, 1));
    ask = size_max(ask, cudaf_dw_workspace(M, D, Dq, 0, 1));
    ask = size_max(ask, cudaf_dw_workspace(M, Nqkv, D, 1, 1));
    ask = size_max(ask, cuda_attention_backward_workspace(s->B, s->T, s->Hq, s->Hkv, 1));
    /* the LM head: evaluation and training */
    size_t held_eval, held_train;
    ask = size_max(ask, cudaf_lm_head_workspace((int)M, s->V, D, 0, &held_eval));
    ask = size_max(ask, cudaf_lm_head_workspace((int)M, s->V, D, 1, &held_train));
    const size_t blas = fused_shape_ok(D, F, Nqkv, Dq, s->hd) ? 0 : cuda_blas_workspace_bytes();
    return cuda_plan_total(ask, size_add(blas, size_add(held_eval, held_train)));
}
