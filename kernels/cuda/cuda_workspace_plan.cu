/* cuda_workspace_plan.cu: the unfused table's workspace for a model's shapes (Kernels.workspace_bytes): the largest
 * request to cuda_workspace over the calls of model.c's schedule (each op's size function, the one it asks with),
 * as cuda_workspace holds it, and the buffers the backend keeps: cuBLAS's workspace, the LM head's gradient, the
 * sums' scratch. */
#include <limits.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

size_t cuda_plan_total(size_t ask, size_t held) {
    ask = size_max(ask, cuda_convert_workspace_bytes()); /* the init's, the import's and the resume's weight copies */
    held = size_add(held, cuda_sum_scratch_bytes());
    return size_add(cuda_workspace_rounded(ask), held);
}

extern "C" size_t cuda_workspace_bytes(const KernelShapes *s) {
    const size_t M = (size_t)s->B * (size_t)s->T, D = (size_t)s->D, V = (size_t)s->V;
    if (M > INT_MAX) return SIZE_MAX; /* the ops count rows in int: no run has more (config_validate) */
    size_t ask = cuda_norm_backward_workspace(M, D);                 /* every norm backward has K = D */
    ask = size_max(ask, cuda_dw_scaled_workspace(M, D));              /* the column-scaled weight gradients: K = D */
    ask = size_max(ask, cuda_lm_head_loss_workspace(M, V));           /* evaluation */
    ask = size_max(ask, cuda_attention_backward_workspace(s->B, s->T, s->Hq, s->Hkv, 0));
    const size_t held = size_add(cuda_blas_workspace_bytes(), cuda_lm_head_grad_bytes(M, V));
    return cuda_plan_total(ask, held);
}
