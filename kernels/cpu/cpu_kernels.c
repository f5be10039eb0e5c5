/* cpu_kernels.c: the CPU backend's operation table (plain fp32 C with OpenMP), and what each of its calls needs of
 * scratch. */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/kernels.h"

/* The most scratch a call holds at once, from the sizes the op allocates with (cpu_internal.h): a parallel region
 * holds one buffer per thread; nothing outlives its call, so nothing is held. */
static void cpu_workspace_of(const KernelCall *c, KernelNeed *need) {
    const size_t threads = (size_t)omp_get_max_threads();
    const size_t M = (size_t)c->M, K = (size_t)c->K;
    switch (c->op) {
    case KOP_ATTENTION_FORWARD: need->scratch = size_mul(threads, cpu_attention_row_bytes((size_t)c->T)); break;
    case KOP_ATTENTION_CACHED:
        need->scratch = size_mul(threads, cpu_attention_row_bytes((size_t)c->pos0 + M));
        break;
    case KOP_LM_HEAD_LOSS: need->scratch = size_mul(threads, cpu_block_rows_bytes((size_t)c->V)); break;
    case KOP_LM_HEAD_TRAIN: /* the whole gradient and c, held while its rows and then its norm backward run */
        need->scratch = size_add(size_add(cpu_lm_grad_bytes(M, (size_t)c->V), cpu_lm_c_bytes(M)),
                                 size_max(size_mul(threads, cpu_block_rows_bytes((size_t)c->V)),
                                          cpu_norm_backward_bytes(M, K, threads)));
        break;
    case KOP_GEMM_NORM_BACKWARD: need->scratch = cpu_norm_backward_bytes(M, K, threads); break;
    case KOP_GEMM_SWIGLU_BACKWARD: need->scratch = size_mul(threads, cpu_block_rows_bytes((size_t)c->F)); break;
    case KOP_GEMM_DW: /* a column scale's rows, freed before the sum of squares */
        need->scratch = size_max(c->col_scale ? size_mul(threads, cpu_block_rows_bytes(K)) : 0,
                                 c->sq ? cpu_sum_squares_bytes(size_mul((size_t)c->N, K)) : 0);
        break;
    case KOP_SUM_SQUARES:
    case KOP_SUM: need->scratch = cpu_sum_squares_bytes(c->n); break;
    default: break; /* no scratch */
    }
}

const Kernels kernels_cpu = {
    .name = "cpu",
    .act_bytes = sizeof(float),
    .memory_name = "host memory",

    .context_create = cpu_context_create,
    .context_free = cpu_context_free,
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
    .kv_cache_append = cpu_kv_cache_append,
    .attention_cached = cpu_attention_cached,
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

    .workspace_of = cpu_workspace_of,
    .available_bytes = cpu_available_bytes,
    .peak_bytes = cpu_peak_bytes,
};
