/* cpu_workspace.c: the CPU backend's workspace for a model's shapes (kernels.h workspace_bytes): the scratch of each
 * op of model.c's schedule, as the op allocates it (cpu_internal.h's sizes), with one per-thread buffer for every
 * thread of a parallel region; the ops run one after another and free their scratch, so the most of them. */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"

size_t cpu_workspace_bytes(const KernelShapes *s) {
    const size_t threads = (size_t)omp_get_max_threads();
    const size_t M = (size_t)s->B * (size_t)s->T, D = (size_t)s->D, F = (size_t)s->F, V = (size_t)s->V;
    /* gemm_norm_backward: every call of the schedule has K = D (the block's two norms, and the final norm's in
     * lm_head_train) */
    const size_t norm_backward = size_add(cpu_block_sums_bytes(M, D), size_mul(threads, cpu_block_rows_bytes(D)));
    /* lm_head_loss: a row block of logits per thread; lm_head_train: the whole gradient and c, held while its rows
     * and then gemm_norm_backward run (its gemm_dw takes no scratch) */
    const size_t lm_rows = size_mul(threads, cpu_block_rows_bytes(V));
    const size_t lm_train = size_add(size_add(cpu_lm_grad_bytes(M, V), cpu_lm_c_bytes(M)),
                                     size_max(lm_rows, norm_backward));
    size_t most = size_max(norm_backward, lm_train);
    most = size_max(most, size_mul(threads, cpu_block_rows_bytes(F)));         /* gemm_swiglu_backward */
    most = size_max(most, size_mul(threads, cpu_block_rows_bytes(D)));         /* gemm_dw with a column scale: K = D */
    /* attention_forward, attention_cached (whose cache holds at most T positions) */
    most = size_max(most, size_mul(threads, cpu_attention_row_bytes((size_t)s->T)));
    return size_max(most, cpu_sum_squares_bytes(s->n_params)); /* sum_squares (also gemm_dw's), at most n_params */
}
