/* kernels_record.c: the recording table (kernels.h, kernels_recording): operations that run nothing and touch no
 * memory, each describing its call (KernelCall) to the table being planned for, whose workspace_of says what the
 * call needs; the recording keeps the most. */
#include "kernels/kernels.h"

/* The context of a recording is its record. */
KernelContext *kernels_recording_context(KernelsRecord *rec) { return (KernelContext *)rec; }

static void record(KernelContext *kc, KernelCall call) {
    KernelsRecord *rec = (KernelsRecord *)kc;
    KernelNeed need = {0};
    rec->of->workspace_of(&call, &need);
    rec->scratch = size_max(rec->scratch, need.scratch);
    for (int i = 0; i < KERNELS_HELD_SLOTS; i++) rec->held[i] = size_max(rec->held[i], need.held[i]);
}

size_t kernels_recorded_bytes(const KernelsRecord *rec) {
    size_t total = rec->scratch;
    for (int i = 0; i < KERNELS_HELD_SLOTS; i++) total = size_add(total, rec->held[i]);
    return total;
}

/* ---- memory: nothing is allocated, copied or cleared ---- */

static void *rec_alloc(KernelContext *kc, size_t bytes) {
    static max_align_t nothing; /* what every buffer points at: never read or written */
    return &nothing;
}
static void rec_free(KernelContext *kc, void *p) {}
static void rec_memset_zero(KernelContext *kc, void *p, size_t bytes) {}
static void rec_copy_to_device(KernelContext *kc, void *dst, const void *host_src, size_t bytes) {}
static void rec_copy_to_host(KernelContext *kc, void *host_dst, const void *src, size_t bytes) {}
static void rec_synchronize(KernelContext *kc) {}
static void rec_act_from_f32(KernelContext *kc, void *dst_act, const float *host_src, size_t n) {
    record(kc, (KernelCall){.op = KOP_ACT_FROM_F32, .n = n});
}
static void rec_act_to_f32(KernelContext *kc, float *host_dst, const void *src_act, size_t n) {
    record(kc, (KernelCall){.op = KOP_ACT_TO_F32, .n = n});
}

static void rec_master_from_f32(KernelContext *kc, uint16_t *lo, void *working, const float *host_src, size_t n) {
    record(kc, (KernelCall){.op = KOP_MASTER_FROM_F32, .n = n});
}
static void rec_master_to_f32(KernelContext *kc, float *host_dst, const void *working, const uint16_t *lo, size_t n) {
    record(kc, (KernelCall){.op = KOP_MASTER_TO_F32, .n = n});
}

/* ---- the operations: their calls described ---- */

static void rec_embed_norm(KernelContext *kc, const int32_t *tokens, const void *E, const float *gamma, float eps,
                           void *x, void *O, float *r, int M, int D) {
    record(kc, (KernelCall){.op = KOP_EMBED_NORM, .M = M, .D = D});
}
static void rec_gemm_residual_norm(KernelContext *kc, const void *A, const void *W, const void *res, const float *gamma,
                                   float eps, void *h, void *O, float *r, int M, int N, int K) {
    record(kc, (KernelCall){.op = KOP_GEMM_RESIDUAL_NORM, .M = M, .N = N, .K = K});
}
static void rec_gemm_rope(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                          const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T) {
    record(kc, (KernelCall){.op = KOP_GEMM_ROPE, .M = M, .N = N, .K = K, .n_rope_cols = n_rope_cols, .hd = hd, .T = T});
}
static void rec_gemm_swiglu(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act, int M,
                            int F, int K) {
    record(kc, (KernelCall){.op = KOP_GEMM_SWIGLU, .M = M, .F = F, .K = K});
}
static void rec_gemm_rowscale(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M, int N,
                              int K) {
    record(kc, (KernelCall){.op = KOP_GEMM_ROWSCALE, .M = M, .N = N, .K = K});
}
static void rec_attention_forward(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq,
                                  int Hkv, int hd) {
    record(kc, (KernelCall){.op = KOP_ATTENTION_FORWARD, .B = B, .T = T, .Hq = Hq, .Hkv = Hkv, .hd = hd});
}
static void rec_kv_cache_append(KernelContext *kc, const void *qkv, void *K, void *V, int pos0, int M, int Hq, int Hkv,
                                int hd) {
    record(kc, (KernelCall){.op = KOP_KV_CACHE_APPEND, .pos0 = pos0, .M = M, .Hq = Hq, .Hkv = Hkv, .hd = hd});
}
static void rec_attention_cached(KernelContext *kc, const void *qkv, const void *K, const void *V, void *y, int pos0,
                                 int M, int Hq, int Hkv, int hd) {
    record(kc, (KernelCall){.op = KOP_ATTENTION_CACHED, .pos0 = pos0, .M = M, .Hq = Hq, .Hkv = Hkv, .hd = hd});
}
static void rec_lm_head_loss(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                             float *loss, int M, int V, int K) {
    record(kc, (KernelCall){.op = KOP_LM_HEAD_LOSS, .M = M, .V = V, .K = K});
}
static void rec_lm_head_train(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                              const int32_t *target_groups, float dscale, const void *x, const float *gamma,
                              float *loss, float *dW, void *dres, float *dgamma, int M, int V, int K) {
    record(kc, (KernelCall){.op = KOP_LM_HEAD_TRAIN, .M = M, .V = V, .K = K});
}
static void rec_gemm_norm_backward(KernelContext *kc, const void *dZ, const void *W, const float *gamma, const float *r,
                                   const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M,
                                   int N, int K) {
    record(kc, (KernelCall){.op = KOP_GEMM_NORM_BACKWARD, .accumulate = accumulate, .M = M, .N = N, .K = K});
}
static void rec_gemm_swiglu_backward(KernelContext *kc, const void *dY, const void *W_down, const void *Z,
                                     const float *r, void *dZ, float *c, void *act, int M, int D, int F) {
    record(kc, (KernelCall){.op = KOP_GEMM_SWIGLU_BACKWARD, .M = M, .D = D, .F = F});
}
static void rec_gemm_dx(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K) {
    record(kc, (KernelCall){.op = KOP_GEMM_DX, .M = M, .N = N, .K = K});
}
static void rec_gemm_dw(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW,
                        int accumulate, double *sq, int M, int N, int K) {
    record(kc, (KernelCall){.op = KOP_GEMM_DW,
                            .col_scale = col_scale != NULL,
                            .accumulate = accumulate,
                            .sq = sq != NULL,
                            .M = M,
                            .N = N,
                            .K = K});
}
static void rec_attention_backward(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                                   const float *r, const float *rope_cos, const float *rope_sin, void *dqkv, float *c,
                                   int B, int T, int Hq, int Hkv, int hd) {
    record(kc,
           (KernelCall){.op = KOP_ATTENTION_BACKWARD, .r = r != NULL, .B = B, .T = T, .Hq = Hq, .Hkv = Hkv, .hd = hd});
}
static void rec_embed_backward(KernelContext *kc, const int32_t *tokens, const int32_t *groups, const void *dx,
                               float *dE, int M, int D, int V) {
    record(kc, (KernelCall){.op = KOP_EMBED_BACKWARD, .M = M, .D = D, .V = V});
}
static void rec_sum_squares(KernelContext *kc, const float *g, size_t n, double *out) {
    record(kc, (KernelCall){.op = KOP_SUM_SQUARES, .n = n});
}
static void rec_sum(KernelContext *kc, const float *x, size_t n, double *out, int accumulate) {
    record(kc, (KernelCall){.op = KOP_SUM, .n = n, .accumulate = accumulate});
}
static void rec_clip_scale(KernelContext *kc, const double *parts, int n_loss, int n_sq, double max_norm,
                           float *scale) {
    record(kc, (KernelCall){.op = KOP_CLIP_SCALE});
}
static void rec_adamw(KernelContext *kc, float *master, void *working, const float *grad, float *m, float *v, size_t n,
                      const AdamwScalars *s, const float *grad_scale) {
    record(kc, (KernelCall){.op = KOP_ADAMW, .n = n});
}

static void rec_adamw_split(KernelContext *kc, uint16_t *lo, void *working, const float *grad, float *m, float *v,
                            size_t n, const AdamwScalars *s, const float *grad_scale) {
    record(kc, (KernelCall){.op = KOP_ADAMW_SPLIT, .n = n});
}

Kernels kernels_recording(KernelsRecord *rec, const Kernels *of) {
    *rec = (KernelsRecord){.of = of};
    return (Kernels){
        .name = of->name,
        .detail = of->detail,
        .act_bytes = of->act_bytes,
        .memory_name = of->memory_name,

        .alloc = rec_alloc,
        .free = rec_free,
        .memset_zero = rec_memset_zero,
        .copy_to_device = rec_copy_to_device,
        .copy_to_host = rec_copy_to_host,
        .act_from_f32 = rec_act_from_f32,
        .act_to_f32 = rec_act_to_f32,
        .master_from_f32 = of->master_from_f32 ? rec_master_from_f32 : NULL,
        .master_to_f32 = of->master_to_f32 ? rec_master_to_f32 : NULL,
        .synchronize = rec_synchronize,

        .embed_norm = rec_embed_norm,
        .gemm_residual_norm = rec_gemm_residual_norm,
        .gemm_rope = rec_gemm_rope,
        .gemm_swiglu = rec_gemm_swiglu,
        .gemm_rowscale = rec_gemm_rowscale,
        .attention_forward = rec_attention_forward,
        .kv_cache_append = rec_kv_cache_append,
        .attention_cached = rec_attention_cached,
        .lm_head_loss = rec_lm_head_loss,
        .lm_head_train = rec_lm_head_train,

        .gemm_norm_backward = rec_gemm_norm_backward,
        .gemm_swiglu_backward = rec_gemm_swiglu_backward,
        .gemm_dx = rec_gemm_dx,
        .gemm_dw = rec_gemm_dw,
        .attention_backward = rec_attention_backward,
        .embed_backward = rec_embed_backward,

        .sum_squares = rec_sum_squares,
        .sum = rec_sum,
        .clip_scale = rec_clip_scale,
        .adamw = rec_adamw,
        .adamw_split = of->adamw_split ? rec_adamw_split : NULL,
    };
}
