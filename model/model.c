/* model.c: the parameter table, the activation arena, the init, and the CODA forward/backward schedule of one
 * LLaMA-3 model. Every computation goes through the backend's Kernels table (kernels/kernels.h).
 *
 * Forward of block l (x: residual stream, r: RMSNorm row scales, O = x * gamma):
 *   qkv = rope(r1 * (O1 . Wqkv^T))                 gemm_rope
 *   y, lse = attention(qkv)                        attention_forward
 *   h = y . Wo^T + x;  O2 = h * g2;  r2            gemm_residual_norm
 *   Zgu = r2 * (O2 . Wgu^T);  act = silu(G) * U    gemm_swiglu
 *   x' = act . Wdown^T + h;  O1' = x' * g1'; r1'   gemm_residual_norm (g1' = the next block's attn_norm or the final
 *                                                  norm)
 * and the LM head + loss read (O, r_final); in training the same call runs the LM head's and the final norm's
 * backward (lm_head_train). The backward of the blocks runs the mirror image, with the RMSNorm backward in the
 * epilogue of each data-gradient GEMM (gemm_norm_backward) accumulating into the residual-stream gradient dres.
 * O and act are not saved per layer: a weight gradient takes x and gamma instead of O (gemm_dw's column scale) and
 * the SwiGLU backward writes act again (docs/DESIGN.md, "Memory"). The block weights' gradients are written by the
 * first micro-batch's gemm_dw and report their sums of squares on the last, for global-norm clipping.
 * Generation runs the same forward on new tokens at later positions, with their keys and values kept in a KV cache
 * (kv_cache_append) and their attention against it (attention_cached): model_decode. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/rng.h"

/* ---------------------------------------------------------------- parameter table */

static void add_view(ParamTable *t, ParamKind kind, int layer, int rows, int cols, int decay) {
    static const char *names[] = {"embed", "wqkv", "wo", "wgateup", "wdown", "lm_head", "attn_norm", "mlp_norm",
                                  "final_norm"};
    ParamView *v = &t->views[t->n_views++];
    if (layer >= 0) snprintf(v->name, sizeof(v->name), "layers.%d.%s", layer, names[kind]);
    else snprintf(v->name, sizeof(v->name), "%s", names[kind]);
    v->kind = kind;
    v->layer = layer;
    v->offset = t->n_params;
    v->rows = rows;
    v->cols = cols;
    v->decay = decay;
    t->n_params += (size_t)rows * cols;
}

static int build_param_table(ParamTable *t, const ModelConfig *c) {
    int L = c->num_hidden_layers, D = c->hidden_size;
    t->views = calloc((size_t)6 * L + 3, sizeof(ParamView));
    if (!t->views) return -1;
    add_view(t, PARAM_EMBED, -1, c->vocab_size, D, 1);
    for (int l = 0; l < L; l++) {
        add_view(t, PARAM_WQKV, l, config_qkv_dim(c), D, 1);
        add_view(t, PARAM_WO, l, D, c->num_attention_heads * c->head_dim, 1);
        add_view(t, PARAM_WGATEUP, l, 2 * c->intermediate_size, D, 1);
        add_view(t, PARAM_WDOWN, l, D, c->intermediate_size, 1);
    }
    if (!c->tie_word_embeddings) add_view(t, PARAM_LM_HEAD, -1, c->vocab_size, D, 1);
    t->n_decay = t->n_params;
    for (int l = 0; l < L; l++) {
        add_view(t, PARAM_ATTN_NORM, l, 1, D, 0);
        add_view(t, PARAM_MLP_NORM, l, 1, D, 0);
    }
    add_view(t, PARAM_FINAL_NORM, -1, 1, D, 0);
    return 0;
}

const ParamView *param_table_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->n_views; i++)
        if (strcmp(t->views[i].name, name) == 0) return &t->views[i];
    return NULL;
}

const ParamView *model_find_param(const Model *m, const char *name) { return param_table_find(&m->table, name); }

/* The view of a kind in a layer (layer -1 for the global ones). */
static const ParamView *view_of(const Model *m, ParamKind kind, int layer) {
    for (int i = 0; i < m->table.n_views; i++) {
        const ParamView *v = &m->table.views[i];
        if (v->kind == kind && v->layer == layer) return v;
    }
    return NULL;
}

/* Pointers into the parameter-shaped buffers. */
static const void *W(const Model *m, ParamKind kind, int layer) {
    return (const char *)m->weights + view_of(m, kind, layer)->offset * m->k->act_bytes;
}
static const float *gamma_of(const Model *m, ParamKind kind, int layer) {
    return m->master + (view_of(m, kind, layer)->offset - m->master_first); /* the norms are never decayed */
}
static float *grad_of(const Model *m, ParamKind kind, int layer) { return m->grads + view_of(m, kind, layer)->offset; }
static ParamKind lm_head_kind(const Model *m) {
    return m->cfg.tie_word_embeddings ? PARAM_EMBED : PARAM_LM_HEAD;
}

/* ---------------------------------------------------------------- activation arena */

/* Carves the arena into 256-byte aligned pieces. With base == NULL it only measures (saturating, for the
 * preflight of configs that no machine holds). */
typedef struct Carver {
    char *base;
    size_t used;
} Carver;

/* A piece of rows x cols elements of elem bytes. */
static void *take(Carver *cv, size_t rows, size_t cols, size_t elem) {
    size_t at = cv->used, bytes = size_mul(size_mul(rows, cols), elem);
    cv->used = size_add(cv->used, size_add(bytes, 255) / 256 * 256);
    return cv->base ? cv->base + at : NULL;
}

/* Block l's saved activations, carved from cv. */
static void take_block(Carver *cv, const Model *m, LayerActs *a) {
    const ModelConfig *c = &m->cfg;
    size_t M = (size_t)m->B * m->T, D = c->hidden_size, F = c->intermediate_size;
    size_t Nqkv = config_qkv_dim(c), Dq = (size_t)c->num_attention_heads * c->head_dim, ab = m->k->act_bytes;
    a->x = take(cv, M, D, ab);
    a->r1 = take(cv, M, 1, 4);
    a->qkv = take(cv, M, Nqkv, ab);
    a->y = take(cv, M, Dq, ab);
    a->lse = take(cv, M, c->num_attention_heads, 4);
    a->h = take(cv, M, D, ab);
    a->r2 = take(cv, M, 1, 4);
    a->Zgu = take(cv, M, 2 * F, ab);
}

/* The shared layout's placement (ModelLayout): carves the saved activations of blocks L-1, L-2, ... top down into the
 * block-weight gradients below each block's own, while they fit (grads: that buffer, or NULL to measure only).
 * Returns the lowest block placed there (L if none): the blocks below it go in the arena. */
static int take_blocks_in_grads(Model *m, char *grads) {
    Carver probe = {NULL, 0};
    LayerActs unused;
    take_block(&probe, m, &unused);
    /* the first whole 256 bytes of block 0's gradients: below them lie the embedding's, which are accumulated */
    const size_t need = probe.used, floor = (view_of(m, PARAM_WQKV, 0)->offset * sizeof(float) + 255) / 256 * 256;
    int lowest = m->cfg.num_hidden_layers;
    size_t top = SIZE_MAX; /* the lowest byte taken so far */
    for (int l = m->cfg.num_hidden_layers - 1; l >= 1; l--) {
        const size_t own = view_of(m, PARAM_WQKV, l)->offset * sizeof(float);
        if (own < top) top = own;
        if (top < floor || top - floor < need) break; /* a lower block has less room still */
        top = (top - need) / 256 * 256;
        Carver cv = {grads ? grads + top : NULL, 0};
        take_block(&cv, m, &m->layers[l]);
        lowest = l;
    }
    return lowest;
}

/* Returns the bytes the arena needs; sets every activation pointer when base != NULL (and grads, the gradients'
 * buffer, with the shared layout). */
static size_t plan_arena(Model *m, char *base, char *grads) {
    const ModelConfig *c = &m->cfg;
    size_t M = (size_t)m->B * m->T, D = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    size_t Nqkv = config_qkv_dim(c), Dq = (size_t)c->num_attention_heads * c->head_dim, ab = m->k->act_bytes;
    Carver cv = {base, 0};
    const int in_arena = m->layout == MODEL_GRADS_SHARED ? take_blocks_in_grads(m, grads) : c->num_hidden_layers;
    for (int l = 0; l < in_arena; l++) take_block(&cv, m, &m->layers[l]);
    m->O = take(&cv, M, D, ab);
    m->act = take(&cv, M, F, ab);
    m->x_final = take(&cv, M, D, ab);
    m->r_final = take(&cv, M, 1, 4);
    m->rope_cos = take(&cv, m->T, c->head_dim / 2, 4);
    m->rope_sin = take(&cv, m->T, c->head_dim / 2, 4);
    void *batch = take(&cv, model_batch_bytes((int)M), 1, 1);
    if (base) model_batch_bind(&m->batch, batch, (int)M);
    m->losses = take(&cv, M, 1, 4);
    m->c = take(&cv, M, 1, 4);
    m->logits_row = take(&cv, V, 1, 4);
    /* The backward's buffers hold nothing between micro-batches, and the sampler's KV cache lives only between
     * steps: the cache shares their memory. */
    Carver shared = cv;
    m->dres = take(&cv, M, D, ab);
    m->dZgu = take(&cv, M, 2 * F, ab);
    m->dqkv = take(&cv, M, Nqkv, ab);
    m->dy = take(&cv, M, Dq, ab);
    m->kv_cache = take(&shared, (size_t)2 * c->num_hidden_layers * m->T, (size_t)c->num_key_value_heads * c->head_dim,
                       ab);
    return cv.used > shared.used ? cv.used : shared.used;
}

/* ---------------------------------------------------------------- the backend buffers */

/* What model_create allocates on the backend, one buffer each. */
enum { BUF_MASTER, BUF_WEIGHTS, BUF_GRADS, BUF_STATS, BUF_ADAM_M, BUF_ADAM_V, BUF_ARENA, N_BUFS };
static const char *const BUF_NAMES[N_BUFS] = {"master weights", "working weights", "gradients",
                                              "step results and scalars", "AdamW m", "AdamW v", "activation arena"};

/* The step buffer (BUF_STATS): the stats doubles, then the clip factor, then the two AdamW scalar sets. */
static size_t stats_count(const Model *m) {
    return 1 + (size_t)m->table.n_views + 4 * (size_t)m->cfg.num_hidden_layers;
}
static size_t stats_scale_at(const Model *m) { return stats_count(m) * sizeof(double); }
static size_t stats_scalars_at(const Model *m) { return stats_scale_at(m) + 16; }
static size_t stats_bytes(const Model *m) { return stats_scalars_at(m) + 2 * sizeof(AdamwScalars); }

/* Whether m's table keeps the decayed parameters' master weights split (model.h), and the bytes of their low halves
 * at the start of the master buffer (the fp32 rest after them). */
static int keeps_split(const Model *m) { return m->k->adamw_split != NULL; }
static size_t master_lo_bytes(const Model *m) {
    return keeps_split(m) ? size_add(size_mul(m->table.n_decay, sizeof(uint16_t)), 255) / 256 * 256 : 0;
}

/* The sizes of the backend buffers of m (its cfg, k, B, T, table and layers set): the one list that model_create
 * allocates and model_memory counts. */
static void buffer_sizes(Model *m, size_t bytes[N_BUFS]) {
    const size_t n = m->table.n_params, first = keeps_split(m) ? m->table.n_decay : 0;
    bytes[BUF_MASTER] = size_add(master_lo_bytes(m), size_mul(n - first, sizeof(float)));
    bytes[BUF_WEIGHTS] = size_mul(n, m->k->act_bytes);
    bytes[BUF_GRADS] = size_mul(n, sizeof(float));
    bytes[BUF_STATS] = stats_bytes(m);
    bytes[BUF_ADAM_M] = size_mul(n, sizeof(float));
    bytes[BUF_ADAM_V] = size_mul(n, sizeof(float));
    bytes[BUF_ARENA] = plan_arena(m, NULL, NULL);
}

/* The shapes of m's calls of the operations (kernels.h). */
static KernelShapes kernel_shapes(const Model *m) {
    const ModelConfig *c = &m->cfg;
    return (KernelShapes){m->B, m->T, c->hidden_size, c->intermediate_size, c->num_attention_heads,
                          c->num_key_value_heads, c->head_dim, c->vocab_size};
}

/* m's fields before any buffer: the config, the backend, the batch, the parameter table and the layers' views.
 * Returns 0 or -1 (out of host memory). */
static int model_begin(Model *m, const ModelConfig *cfg, const Kernels *k, KernelContext *kc, int B, int T,
                       ModelLayout layout) {
    memset(m, 0, sizeof(*m));
    m->layout = layout;
    m->cfg = *cfg;
    m->k = k;
    m->kc = kc;
    m->B = B;
    m->T = T;
    m->layers = calloc(cfg->num_hidden_layers, sizeof(LayerActs));
    return m->layers && build_param_table(&m->table, cfg) == 0 ? 0 : -1;
}

const char *model_backend_note(const Model *m) {
    const KernelShapes shapes = kernel_shapes(m);
    return m->k->shape_note ? m->k->shape_note(&shapes) : NULL;
}

ModelLayout model_layout_for(int64_t micro_steps) {
    return micro_steps == 1 ? MODEL_GRADS_SHARED : MODEL_GRADS_APART;
}

int model_memory(const ModelConfig *cfg, const Kernels *k, int B, int T, ModelLayout layout, ModelMemory *mem) {
    Model m;
    const int rc =
        model_begin(&m, cfg, k, NULL, B, T, layout) || model_workspace(cfg, k, B, T, &mem->workspace, NULL) ? -1 : 0;
    if (rc == 0) {
        size_t bytes[N_BUFS];
        buffer_sizes(&m, bytes);
        mem->params = size_add(bytes[BUF_MASTER], bytes[BUF_WEIGHTS]);
        mem->grads = size_add(bytes[BUF_GRADS], bytes[BUF_STATS]);
        mem->adam = size_add(bytes[BUF_ADAM_M], bytes[BUF_ADAM_V]);
        mem->activations = bytes[BUF_ARENA];
        mem->n_params = m.table.n_params;
        mem->total = size_add(size_add(size_add(mem->params, mem->grads), size_add(mem->adam, mem->activations)),
                              mem->workspace);
    }
    free(m.layers);
    free(m.table.views);
    return rc;
}

void model_rope_inv_freq(const ModelConfig *c, double *inv_freq) {
    int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* HF: 1 / theta^(2i/hd), in fp32. */
        double f = (float)(1.0 / pow(c->rope_theta, (double)(float)(2.0 * i / c->head_dim)));
        if (c->rope_llama3) {
            /* transformers' _compute_llama3_parameters */
            double old = c->rope_original_max_position_embeddings;
            double low_wavelen = old / c->rope_low_freq_factor, high_wavelen = old / c->rope_high_freq_factor;
            double wavelen = 2 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / c->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (old / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - smooth) * f / c->rope_factor + smooth * f;
            }
            f = (float)f;
        }
        inv_freq[i] = f;
    }
}

static int upload_rope_tables(Model *m) {
    int half = m->cfg.head_dim / 2;
    size_t n = (size_t)m->T * half;
    double *inv = malloc(half * sizeof(double));
    float *cs = malloc(2 * n * sizeof(float));
    if (!inv || !cs) {
        free(inv);
        free(cs);
        return -1;
    }
    model_rope_inv_freq(&m->cfg, inv);
    for (int t = 0; t < m->T; t++)
        for (int i = 0; i < half; i++) {
            float angle = (float)inv[i] * (float)t; /* one fp32 product, as HF computes it */
            cs[(size_t)t * half + i] = (float)cos(angle);
            cs[n + (size_t)t * half + i] = (float)sin(angle);
        }
    m->k->copy_to_device(m->kc, m->rope_cos, cs, n * sizeof(float));
    m->k->copy_to_device(m->kc, m->rope_sin, cs + n, n * sizeof(float));
    free(inv);
    free(cs);
    return 0;
}

/* The block weights, whose gradients come from one gemm_dw per micro-batch (the other kinds are accumulated). */
static int is_block_weight(ParamKind kind) {
    return kind == PARAM_WQKV || kind == PARAM_WO || kind == PARAM_WGATEUP || kind == PARAM_WDOWN;
}

/* The maximal runs of consecutive views that are not block weights (the views are in offset order). */
static int plan_accumulated_runs(Model *m) {
    m->acc_runs = calloc(m->table.n_views, sizeof(*m->acc_runs));
    if (!m->acc_runs) return -1;
    for (int i = 0; i < m->table.n_views; i++) {
        const ParamView *v = &m->table.views[i];
        if (is_block_weight(v->kind)) continue;
        const size_t len = (size_t)v->rows * v->cols;
        size_t *last = m->n_acc_runs ? m->acc_runs[m->n_acc_runs - 1] : NULL;
        if (last && last[0] + last[1] == v->offset) {
            last[1] += len;
        } else {
            m->acc_runs[m->n_acc_runs][0] = v->offset;
            m->acc_runs[m->n_acc_runs][1] = len;
            m->n_acc_runs++;
        }
    }
    return 0;
}

int model_create_views(Model *m, const ModelConfig *cfg, const Kernels *k, KernelContext *kc, int B, int T,
                       ModelLayout layout, char *err, size_t errlen) {
    if (model_begin(m, cfg, k, kc, B, T, layout)) {
        snprintf(err, errlen, "out of host memory for the model tables");
        model_destroy(m);
        return -1;
    }
    size_t bytes[N_BUFS];
    void *buf[N_BUFS] = {NULL};
    buffer_sizes(m, bytes);
    for (int i = 0; i < N_BUFS; i++)
        if (!(buf[i] = k->alloc(m->kc, bytes[i]))) {
            snprintf(err, errlen, "out of %s: the %s (%.1f MiB) could not be allocated; lower batch_size or "
                     "seq_len, or use a smaller model", k->memory_name, BUF_NAMES[i], bytes[i] / 1048576.0);
            for (int j = 0; j < i; j++) k->free(m->kc, buf[j]);
            model_destroy(m);
            return -1;
        }
    m->master_first = keeps_split(m) ? m->table.n_decay : 0;
    m->master_lo = keeps_split(m) ? buf[BUF_MASTER] : NULL;
    m->master = (float *)((char *)buf[BUF_MASTER] + master_lo_bytes(m));
    m->weights = buf[BUF_WEIGHTS];
    m->grads = buf[BUF_GRADS];
    m->stats = buf[BUF_STATS];
    m->clip_scale = (float *)((char *)m->stats + stats_scale_at(m));
    m->adam_scalars = (AdamwScalars *)((char *)m->stats + stats_scalars_at(m));
    m->adam_m = buf[BUF_ADAM_M];
    m->adam_v = buf[BUF_ADAM_V];
    m->arena = buf[BUF_ARENA];
    plan_arena(m, m->arena, (char *)m->grads);
    if (plan_accumulated_runs(m)) {
        snprintf(err, errlen, "out of host memory");
        model_destroy(m);
        return -1;
    }
    m->grad_sq = m->stats + 1 + m->n_acc_runs;
    return 0;
}

int model_create(Model *m, const ModelConfig *cfg, const Kernels *k, int B, int T, ModelLayout layout, char *err,
                 size_t errlen) {
    KernelContext *kc = k->context_create();
    if (model_create_views(m, cfg, k, kc, B, T, layout, err, errlen)) {
        k->context_free(kc);
        return -1;
    }
    m->owns_kc = 1;
    if (k->reserve_scratch) { /* the workspace at its largest now: no later call grows it (kernels.h) */
        size_t total, scratch;
        if (model_workspace(cfg, k, B, T, &total, &scratch)) {
            snprintf(err, errlen, "out of host memory for the model tables");
            model_destroy(m);
            return -1;
        }
        k->reserve_scratch(m->kc, scratch);
    }
    m->host_batch = malloc(size_mul(token_groups_ints((size_t)B * T) + (size_t)B * T, sizeof(int32_t)));
    m->host_count = malloc(((size_t)cfg->vocab_size + 1) * sizeof(int32_t));
    m->host_stats = malloc(stats_count(m) * sizeof(double));
    if (!m->host_batch || !m->host_count || !m->host_stats || upload_rope_tables(m)) {
        snprintf(err, errlen, "out of host memory");
        model_destroy(m);
        return -1;
    }
    return 0;
}

void model_destroy(Model *m) {
    if (!m->k) return;
    const Kernels *k = m->k;
    k->free(m->kc, m->master_lo ? (void *)m->master_lo : m->master);
    k->free(m->kc, m->weights);
    k->free(m->kc, m->grads);
    k->free(m->kc, m->adam_m);
    k->free(m->kc, m->adam_v);
    k->free(m->kc, m->arena);
    free(m->layers);
    free(m->table.views);
    free(m->host_batch);
    free(m->host_count);
    k->free(m->kc, m->stats);
    free(m->host_stats);
    free(m->acc_runs);
    if (m->owns_kc) k->context_free(m->kc);
    memset(m, 0, sizeof(*m));
}

/* [offset, offset + n) in two parts: [offset, offset + n_split) split, the rest whole in fp32. */
static size_t split_part(const Model *m, size_t offset, size_t n) {
    return offset < m->master_first ? (m->master_first - offset < n ? m->master_first - offset : n) : 0;
}

void model_set_master(Model *m, const float *host, size_t offset, size_t n) {
    const size_t ns = split_part(m, offset, n);
    char *working = (char *)m->weights + offset * m->k->act_bytes;
    if (ns) m->k->master_from_f32(m->kc, m->master_lo + offset, working, host, ns);
    if (n > ns) {
        m->k->copy_to_device(m->kc, m->master + (offset + ns - m->master_first), host + ns, (n - ns) * sizeof(float));
        m->k->act_from_f32(m->kc, working + ns * m->k->act_bytes, host + ns, n - ns);
    }
}

void model_master_to_host(const Model *m, float *host, size_t offset, size_t n) {
    const size_t ns = split_part(m, offset, n);
    if (ns) m->k->master_to_f32(m->kc, host, (const char *)m->weights + offset * m->k->act_bytes, m->master_lo + offset,
                                ns);
    if (n > ns)
        m->k->copy_to_host(m->kc, host + ns, m->master + (offset + ns - m->master_first), (n - ns) * sizeof(float));
}

void model_init_weights(Model *m, uint64_t seed) {
    enum { CHUNK = 1 << 20 };
    float *buf = malloc(CHUNK * sizeof(float));
    if (!buf) {
        fprintf(stderr, "error: out of host memory while initializing the weights\n");
        exit(1);
    }
    double std = m->cfg.initializer_range;
    for (int vi = 0; vi < m->table.n_views; vi++) {
        const ParamView *v = &m->table.views[vi];
        size_t n = (size_t)v->rows * v->cols;
        int is_norm = v->kind == PARAM_ATTN_NORM || v->kind == PARAM_MLP_NORM || v->kind == PARAM_FINAL_NORM;
        for (size_t start = 0; start < n; start += CHUNK) {
            size_t len = n - start < CHUNK ? n - start : CHUNK;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < len; i++)
                buf[i] = is_norm ? 1.0f : (float)(std * rng_normal_at(seed, v->offset + start + i));
            model_set_master(m, buf, v->offset + start, len);
        }
    }
    free(buf);
    m->k->memset_zero(m->kc, m->adam_m, m->table.n_params * sizeof(float));
    m->k->memset_zero(m->kc, m->adam_v, m->table.n_params * sizeof(float));
}

void model_zero_grads(Model *m) {
    for (int i = 0; i < m->n_acc_runs; i++)
        m->k->memset_zero(m->kc, m->grads + m->acc_runs[i][0], m->acc_runs[i][1] * sizeof(float));
    m->grad_sq_ready = 0;
}

int model_queue_grad_squares(Model *m) {
    const Kernels *k = m->k;
    double *parts = m->stats + 1;
    if (!m->grad_sq_ready) {
        k->sum_squares(m->kc, m->grads, m->table.n_params, parts);
        return 1;
    }
    for (int i = 0; i < m->n_acc_runs; i++)
        k->sum_squares(m->kc, m->grads + m->acc_runs[i][0], m->acc_runs[i][1], parts + i);
    return m->n_acc_runs + 4 * m->cfg.num_hidden_layers; /* the layers' parts, grad_sq, follow the runs' */
}

double model_grad_sum_squares(Model *m) {
    const int n = model_queue_grad_squares(m);
    m->k->copy_to_host(m->kc, m->host_stats, m->stats + 1, (size_t)n * sizeof(double));
    double s = 0.0;
    for (int i = 0; i < n; i++) s += m->host_stats[i];
    return s;
}

/* ---------------------------------------------------------------- batches */

size_t model_batch_bytes(int M) { return 2 * (token_groups_ints((size_t)M) + (size_t)M) * sizeof(int32_t); }

void model_batch_bind(ModelBatch *b, void *mem, int M) {
    int32_t *p = mem;
    const size_t half = token_groups_ints((size_t)M) + (size_t)M;
    b->tokens = p;
    b->token_groups = p + M;
    b->targets = p + half;
    b->target_groups = p + half + M;
}

void model_batch_load(Model *m, const ModelBatch *b, const int32_t *inputs, const int32_t *targets, int M) {
    const size_t half = token_groups_ints((size_t)M) + (size_t)M;
    for (int which = 0; which < 2; which++) {
        const int32_t *ids = which ? targets : inputs;
        if (!ids) continue;
        memcpy(m->host_batch, ids, (size_t)M * sizeof(int32_t));
        token_groups_build(ids, M, m->cfg.vocab_size, m->host_batch + M, m->host_count);
        m->k->copy_to_device(m->kc, which ? b->targets : b->tokens, m->host_batch, half * sizeof(int32_t));
    }
}

/* ---------------------------------------------------------------- forward / backward */

/* The activations that the forward pass of block l writes its output into: the next block's input, or the final. */
static void block_output(Model *m, int l, void **x, float **r) {
    if (l + 1 < m->cfg.num_hidden_layers) {
        *x = m->layers[l + 1].x;
        *r = m->layers[l + 1].r1;
    } else {
        *x = m->x_final;
        *r = m->r_final;
    }
}

/* The forward of B sequences of T tokens of batch b; with a cache (B = 1) the tokens are at positions pos0 =
 * cache->len on: their RoPE angles are the tables' rows from pos0 on, their keys and values are appended to the
 * cache, and after the prefill (pos0 > 0) their attention reads the cache. */
static void forward_rows(Model *m, const ModelBatch *b, int B, int T, KvCache *cache) {
    const Kernels *k = m->k;
    const ModelConfig *c = &m->cfg;
    int M = B * T, D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    int Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, Nqkv = config_qkv_dim(c);
    float eps = (float)c->rms_norm_eps;
    const int pos0 = cache ? cache->len : 0;
    const float *rope_cos = m->rope_cos + (size_t)pos0 * (hd / 2), *rope_sin = m->rope_sin + (size_t)pos0 * (hd / 2);
    LayerActs *a0 = &m->layers[0];
    k->embed_norm(m->kc, b->tokens, W(m, PARAM_EMBED, -1), gamma_of(m, PARAM_ATTN_NORM, 0), eps, a0->x, m->O, a0->r1, M,
                  D);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        LayerActs *a = &m->layers[l];
        void *x_next;
        float *r_next;
        block_output(m, l, &x_next, &r_next);
        const float *g_next = l + 1 < c->num_hidden_layers ? gamma_of(m, PARAM_ATTN_NORM, l + 1)
                                                           : gamma_of(m, PARAM_FINAL_NORM, -1);
        k->gemm_rope(m->kc, m->O, W(m, PARAM_WQKV, l), a->r1, rope_cos, rope_sin, a->qkv, M, Nqkv, D, (Hq + Hkv) * hd,
                     hd, T);
        if (cache)
            k->kv_cache_append(m->kc, a->qkv, kv_cache_keys(cache, l), kv_cache_values(cache, l), pos0, M, Hq, Hkv, hd);
        if (cache && pos0 > 0)
            k->attention_cached(m->kc, a->qkv, kv_cache_keys(cache, l), kv_cache_values(cache, l), a->y, pos0, M, Hq,
                                Hkv, hd);
        else
            k->attention_forward(m->kc, a->qkv, a->y, a->lse, B, T, Hq, Hkv, hd);
        k->gemm_residual_norm(m->kc, a->y, W(m, PARAM_WO, l), a->x, gamma_of(m, PARAM_MLP_NORM, l), eps, a->h, m->O,
                              a->r2, M, D, Hq * hd);
        k->gemm_swiglu(m->kc, m->O, W(m, PARAM_WGATEUP, l), a->r2, a->Zgu, m->act, M, F, D);
        k->gemm_residual_norm(m->kc, m->act, W(m, PARAM_WDOWN, l), a->h, g_next, eps, x_next, m->O, r_next, M, D, F);
    }
    if (cache) cache->len += M;
}

void model_forward(Model *m, const int32_t *tokens, int B, int T) {
    model_batch_load(m, &m->batch, tokens, NULL, B * T);
    forward_rows(m, &m->batch, B, T, NULL);
}

void model_forward_batch(Model *m, const ModelBatch *b, int B, int T) { forward_rows(m, b, B, T, NULL); }

void model_decode(Model *m, KvCache *cache, const int32_t *tokens, int n, float *logits) {
    model_batch_load(m, &m->batch, tokens, NULL, n);
    model_decode_batch(m, &m->batch, cache, n, logits);
}

void model_decode_batch(Model *m, const ModelBatch *b, KvCache *cache, int n, float *logits) {
    forward_rows(m, b, 1, n, cache);
    model_last_logits(m, 1, n, logits);
}

double model_loss(Model *m, const int32_t *targets, int B, int T, float grad_scale) {
    model_batch_load(m, &m->batch, NULL, targets, B * T);
    model_loss_batch(m, &m->batch, B, T, grad_scale, 0);
    double sum;
    m->k->copy_to_host(m->kc, &sum, m->stats, sizeof(double));
    return sum / ((double)B * T);
}

void model_loss_batch(Model *m, const ModelBatch *b, int B, int T, float grad_scale, int accumulate) {
    const Kernels *k = m->k;
    int M = B * T;
    const int V = m->cfg.vocab_size, D = m->cfg.hidden_size;
    ParamKind lm = lm_head_kind(m);
    if (grad_scale != 0)
        k->lm_head_train(m->kc, m->O, W(m, lm, -1), m->r_final, b->targets, b->target_groups, grad_scale, m->x_final,
                         gamma_of(m, PARAM_FINAL_NORM, -1), m->losses, grad_of(m, lm, -1), m->dres,
                         grad_of(m, PARAM_FINAL_NORM, -1), M, V, D);
    else
        k->lm_head_loss(m->kc, m->O, W(m, lm, -1), m->r_final, b->targets, m->losses, M, V, D);
    k->sum(m->kc, m->losses, (size_t)M, m->stats, accumulate);
}

void model_backward(Model *m, int B, int T, int micro) { model_backward_batch(m, &m->batch, B, T, micro); }

void model_backward_batch(Model *m, const ModelBatch *b, int B, int T, int micro) {
    if (m->layout == MODEL_GRADS_SHARED && micro != (MICRO_FIRST | MICRO_LAST)) {
        /* a programming error: the gradients of another micro-batch would be added into saved activations */
        fprintf(stderr, "error: model_backward: the shared layout takes one micro-batch a step (ModelLayout)\n");
        exit(1);
    }
    const Kernels *k = m->k;
    const ModelConfig *c = &m->cfg;
    int M = B * T, D = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    int Hq = c->num_attention_heads, Hkv = c->num_key_value_heads, Nqkv = config_qkv_dim(c);
    const int acc = !(micro & MICRO_FIRST);
#define SQ(l, i) ((micro & MICRO_LAST) ? m->grad_sq + 4 * (l) + (i) : NULL)
    /* dres holds dL/dx_final (model_loss ran the LM head's and the final norm's backward). */
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        LayerActs *a = &m->layers[l];
        /* MLP: dres holds dL/dx'. The weight gradients take h with gamma as a column scale: O2 = h * g2. */
        k->gemm_swiglu_backward(m->kc, m->dres, W(m, PARAM_WDOWN, l), a->Zgu, a->r2, m->dZgu, m->c, m->act, M, D, F);
        k->gemm_dw(m->kc, m->dres, m->act, NULL, grad_of(m, PARAM_WDOWN, l), acc, SQ(l, 3), M, D, F);
        k->gemm_dw(m->kc, m->dZgu, a->h, gamma_of(m, PARAM_MLP_NORM, l), grad_of(m, PARAM_WGATEUP, l), acc, SQ(l, 2), M,
                   2 * F, D);
        k->gemm_norm_backward(m->kc, m->dZgu, W(m, PARAM_WGATEUP, l), gamma_of(m, PARAM_MLP_NORM, l), a->r2, m->c, a->h,
                              m->dres, grad_of(m, PARAM_MLP_NORM, l), 1, M, 2 * F, D);
        /* Attention: dres now holds dL/dh. */
        k->gemm_dx(m->kc, m->dres, W(m, PARAM_WO, l), m->dy, M, D, Hq * hd);
        k->gemm_dw(m->kc, m->dres, a->y, NULL, grad_of(m, PARAM_WO, l), acc, SQ(l, 1), M, D, Hq * hd);
        k->attention_backward(m->kc, a->qkv, a->y, a->lse, m->dy, a->r1, m->rope_cos, m->rope_sin, m->dqkv, m->c, B, T,
                              Hq, Hkv, hd);
        k->gemm_dw(m->kc, m->dqkv, a->x, gamma_of(m, PARAM_ATTN_NORM, l), grad_of(m, PARAM_WQKV, l), acc, SQ(l, 0), M,
                   Nqkv, D);
        k->gemm_norm_backward(m->kc, m->dqkv, W(m, PARAM_WQKV, l), gamma_of(m, PARAM_ATTN_NORM, l), a->r1, m->c, a->x,
                              m->dres, grad_of(m, PARAM_ATTN_NORM, l), 1, M, Nqkv, D);
    }
#undef SQ
    k->embed_backward(m->kc, b->tokens, b->token_groups, m->dres, grad_of(m, PARAM_EMBED, -1), M, D, V);
    m->grad_sq_ready = (micro & MICRO_LAST) != 0;
}

void model_last_logits(Model *m, int B, int T, float *logits) {
    const Kernels *k = m->k;
    size_t last = (size_t)B * T - 1, D = m->cfg.hidden_size;
    k->gemm_rowscale(m->kc, (const char *)m->O + last * D * k->act_bytes, W(m, lm_head_kind(m), -1), m->r_final + last,
                     m->logits_row, 1, m->cfg.vocab_size, (int)D);
    k->copy_to_host(m->kc, logits, m->logits_row, (size_t)m->cfg.vocab_size * sizeof(float));
}
