/* model.h: the LLaMA-3 model on one backend: parameters (one contiguous buffer with a table of named views), the
 * activation arena, and the forward/backward schedule of CODA operations (kernels/kernels.h). */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "model/config.h"

typedef enum {
    PARAM_EMBED,      /* [V, D] token embedding (also the LM head when tied) */
    PARAM_WQKV,       /* [(Hq+2Hkv)*hd, D] q/k/v projections, internal layout (kernels.h) */
    PARAM_WO,         /* [D, Hq*hd] */
    PARAM_WGATEUP,    /* [2F, D] gate/up rows interleaved */
    PARAM_WDOWN,      /* [D, F] */
    PARAM_LM_HEAD,    /* [V, D] when untied */
    PARAM_ATTN_NORM,  /* [D] */
    PARAM_MLP_NORM,   /* [D] */
    PARAM_FINAL_NORM, /* [D] */
} ParamKind;

typedef struct ParamView {
    char name[64];  /* internal name, e.g. "layers.3.wqkv" */
    ParamKind kind;
    int layer;      /* -1 for embed, lm_head, final_norm */
    size_t offset;  /* in elements, into every parameter-shaped buffer */
    int rows, cols; /* a norm weight is 1 x D */
    int decay;      /* AdamW weight decay applies (matrices) */
} ParamView;

/* Parameters are laid out matrices first, norms last, so [0, n_decay) is decayed and [n_decay, n_params) is not. */
typedef struct ParamTable {
    ParamView *views;
    int n_views;
    size_t n_params;
    size_t n_decay;
} ParamTable;

/* Per-layer views of the activations saved by the forward pass for the backward (in the arena, or in the gradients:
 * ModelLayout; act unless fp32). What is not saved: the norm outputs O = x * gamma (the weight gradients take x and
 * gamma instead) and SwiGLU's act (the backward's SwiGLU epilogue writes it again); each lives in one buffer that
 * the next GEMM reads right away. */
typedef struct LayerActs {
    void *x;      /* [M, D] block input (residual stream) */
    float *r1;    /* [M] */
    void *qkv;    /* [M, (Hq+2Hkv)*hd] after RoPE */
    void *y;      /* [M, Hq*hd] attention output */
    float *lse;   /* [B, Hq, T] */
    void *h;      /* [M, D] after the attention residual */
    float *r2;    /* [M] */
    void *Zgu;    /* [M, 2F] r2 * (O2 . Wgateup^T) */
} LayerActs;

/* One micro-batch in backend memory: its ids and targets and their token groups (kernels.h), each half
 * contiguous so that model_batch_load copies it at once: [tokens M | token_groups], [targets M | target_groups]. */
typedef struct ModelBatch {
    int32_t *tokens, *token_groups;
    int32_t *targets, *target_groups;
} ModelBatch;

/* The backend bytes of a batch of M rows, and its fields pointed into mem (that many bytes of backend memory). */
size_t model_batch_bytes(int M);
void model_batch_bind(ModelBatch *b, void *mem, int M);

/* Where the blocks' saved activations (LayerActs) live. A step of one micro-batch can keep them in the block weights'
 * gradients: those hold nothing from AdamW until the backward writes them, and block l's are written only after the
 * backward of the blocks above l is done. So block l's activations go, top down, into the gradient bytes of blocks
 * 0 .. l-1 (below its own gradients and the block above's activations); block 0's, and those that do not fit, stay
 * in the arena. Gradient accumulation needs the gradients kept between micro-batches: apart. */
typedef enum {
    MODEL_GRADS_APART,  /* every activation in the arena */
    MODEL_GRADS_SHARED, /* the blocks' activations in the block-weight gradients where they fit */
} ModelLayout;

/* The layout of a run of micro_steps micro-batches per optimizer step: shared for one, apart for more. */
ModelLayout model_layout_for(int64_t micro_steps);

typedef struct Model {
    ModelConfig cfg;
    const Kernels *k;
    KernelContext *kc; /* the backend's context every operation of the model runs in */
    int owns_kc; /* model_create made kc (model_destroy frees it); model_create_views was given it */
    ParamTable table;
    int B, T;              /* the largest batch the arena holds */
    ModelLayout layout;
    /* parameter-shaped buffers */
    /* The fp32 master weights. With a table that keeps them split (Kernels.adamw_split: a bf16 working copy), those
     * of the decayed parameters, 0 .. n_decay - 1, are their working copy's bf16 with master_lo beside it
     * (kernels/master_split.h), and master holds the rest (the norm weights, which the kernels read in fp32):
     * master[i - master_first] is parameter i's for i >= master_first (0, or n_decay when split). Read and written
     * whole through model_master_to_host and model_set_master. */
    float *master;
    size_t master_first;
    uint16_t *master_lo;   /* [n_decay] when split, else NULL */
    void *weights;         /* act working copy used by the kernels */
    float *grads, *adam_m, *adam_v;
    /* activations */
    void *arena;
    LayerActs *layers;     /* [L] in the arena, or in grads (layout) */
    void *O;               /* [M, D] the latest RMSNorm output x * gamma (before r), read by the next GEMM; after
                            * the forward, the final norm's (the LM head's input) */
    void *act;             /* [M, F] silu(G) * U of the latest SwiGLU (forward, or backward's recomputation) */
    void *x_final;         /* [M, D] the last block's output */
    float *r_final;        /* [M] */
    float *rope_cos, *rope_sin; /* [T, hd/2] */
    ModelBatch batch;           /* the batch of model_forward and model_loss */
    float *losses;              /* [M] per-row loss */
    void *dres;                 /* [M, D] residual-stream gradient */
    void *dZgu;                 /* [M, 2F] */
    void *dqkv;                 /* [M, (Hq+2Hkv)*hd] */
    void *dy;                   /* [M, Hq*hd] */
    float *c;                   /* [M] RMSNorm-backward row scalars */
    float *logits_row;          /* [V] fp32, for sampling */
    void *kv_cache;             /* [2 L, T, Hkv*hd] per layer K then V: the KV cache of generation (model_decode), in
                                 * the memory of dres .. dy (a backward overwrites it) */
    int32_t *host_batch;        /* a batch half being made: ids and their groups (token_groups_ints(M) + M) */
    int32_t *host_count;        /* [V + 1] the grouping's scratch */
    /* A step's results in backend memory (stats, fp64), read once per step: stats[0] the loss sum, then the
     * gradient's sums of squares in the order of their sum (the accumulated runs', then grad_sq's). The block
     * weights' gradients come from gemm_dw, which leaves their sums of squares on the last micro-batch; every
     * other gradient (embedding, LM head, norms) lies in the runs below. */
    double *stats;              /* [1 + n_views + 4 L] */
    double *grad_sq;            /* = stats + 1 + n_acc_runs: [4 L] per layer Wqkv, Wo, Wgateup, Wdown */
    double *host_stats;
    int n_sq;                   /* the sums of squares the last optimizer_queue added */
    float *clip_scale;          /* clip_scale's factor (backend memory) */
    AdamwScalars *adam_scalars; /* [2] the step's AdamW scalars (backend memory): decayed and not */
    int grad_sq_ready;          /* 1 after a last micro-batch's backward, until the gradients are zeroed */
    size_t (*acc_runs)[2];      /* [n_acc_runs] (offset, length) of the accumulated gradients, in order */
    int n_acc_runs;
} Model;

/* Makes a context of k (kernels.h) and allocates in it everything for micro-batches of up to B sequences of T
 * tokens, the activations laid out by layout. Returns 0, or -1 with a message (the backend's memory cannot hold a
 * buffer). */
int model_create(Model *m, const ModelConfig *cfg, const Kernels *k, int B, int T, ModelLayout layout, char *err,
                 size_t errlen);
/* model_create's backend buffers, allocated in the context kc of k that the caller keeps, and the views into them
 * only, without its host buffers (a batch's staging, the statistics read back) and the RoPE tables' values: what
 * model_workspace's dry run makes on a recording table. On it run only what loads and reads back nothing: the
 * functions of a loaded batch (model_*_batch), the gradients' and the optimizer's queues, model_last_logits. */
int model_create_views(Model *m, const ModelConfig *cfg, const Kernels *k, KernelContext *kc, int B, int T,
                       ModelLayout layout, char *err, size_t errlen);

/* The backend memory of a model, by kind, in bytes (saturating at SIZE_MAX for configs beyond any machine). */
typedef struct ModelMemory {
    size_t params;      /* fp32 master weights (or their low halves, split) and the working copy */
    size_t grads;       /* fp32 gradients and the per-layer sums of squares */
    size_t adam;        /* AdamW's m and v */
    size_t activations; /* the activation arena */
    size_t workspace;   /* the backend's own (model_workspace) */
    size_t total;
    size_t n_params;    /* the parameters (what the checkpoint snapshot beside the model holds 3 x 4 bytes of) */
} ModelMemory;

/* The backend's note on how it runs this model's shapes (Kernels.shape_note), or NULL. */
const char *model_backend_note(const Model *m);

/* The memory preflight: what model_create(cfg, k, B, T, layout) allocates on the backend, from the same list of buffers
 * that model_create allocates, and the backend's workspace (model_workspace); nothing of the backend is allocated.
 * Returns 0, or -1 when the host cannot hold the model's tables. */
int model_memory(const ModelConfig *cfg, const Kernels *k, int B, int T, ModelLayout layout, ModelMemory *mem);
/* The most backend memory that k's operations hold beyond their arguments at any moment of a run of this model
 * (model/dry_run.c): the model made and every path of a run taken (training steps with and without gradient
 * accumulation, evaluation, sampling, the weight copies) on k's recording table, which allocates and computes
 * nothing and asks k what each call needs (Kernels.workspace_of). SIZE_MAX for more than INT_MAX rows. Returns 0, or
 * -1 when the host cannot hold the model's tables. *scratch (unless NULL): the part of it that is the largest scratch
 * request, which model_create reserves (Kernels.reserve_scratch). */
int model_workspace(const ModelConfig *cfg, const Kernels *k, int B, int T, size_t *bytes, size_t *scratch);
void model_destroy(Model *m);

/* The documented init: every matrix element ~ N(0, initializer_range) (the normal number of index = the element's
 * offset in the master buffer, stream = seed), every norm weight 1; Adam moments zero. */
void model_init_weights(Model *m, uint64_t seed);
/* Sets master weights [offset, offset+n) from host fp32 values and refreshes the working copy of that range (a split
 * master moves a value whose low half is a bf16 tie by one ulp: kernels/master_split.h). */
void model_set_master(Model *m, const float *host, size_t offset, size_t n);
/* Copies master weights [offset, offset+n) into host fp32 (joined where split). */
void model_master_to_host(const Model *m, float *host, size_t offset, size_t n);

/* The view of a name ("layers.3.wqkv"), or NULL. */
const ParamView *param_table_find(const ParamTable *t, const char *name);
const ParamView *model_find_param(const Model *m, const char *name);

/* Groups the host ids on the host and copies them with their groups into b, each of inputs and targets that is
 * not NULL in one copy (M rows). */
void model_batch_load(Model *m, const ModelBatch *b, const int32_t *inputs, const int32_t *targets, int M);

/* Forward of B sequences of T tokens (host ids), through the final norm (x_final, O, r_final). */
void model_forward(Model *m, const int32_t *tokens, int B, int T);
/* Mean cross-entropy of the last forward against targets (host ids). With grad_scale != 0 also the backward of the
 * LM head and the final norm for grad_scale * sum of the row losses: accumulates their gradients into m->grads and
 * leaves the residual-stream gradient for model_backward. */
double model_loss(Model *m, const int32_t *targets, int B, int T, float grad_scale);
/* Which micro-batch of an optimizer step a backward is (flags): the first writes the block weights' gradients instead
 * of adding to them (so model_zero_grads need not zero them), the last also leaves their sums of squares for
 * model_grad_sum_squares. The one micro-batch of a step is both. */
enum { MICRO_FIRST = 1, MICRO_LAST = 2 };
/* Backward of the blocks after model_loss(grad_scale != 0): into m->grads (see MICRO_FIRST). With the shared layout
 * a forward overwrites the block weights' gradients, and a backward the saved activations (ModelLayout); micro must
 * be MICRO_FIRST | MICRO_LAST there (else the program stops with a message). */
void model_backward(Model *m, int B, int T, int micro);

/* The same three on a loaded batch, queued with nothing read back (what a training step runs, and captures): the
 * loss sum goes to m->stats[0] (added to it when accumulate != 0). */
void model_forward_batch(Model *m, const ModelBatch *b, int B, int T);
void model_loss_batch(Model *m, const ModelBatch *b, int B, int T, float grad_scale, int accumulate);
void model_backward_batch(Model *m, const ModelBatch *b, int B, int T, int micro);
/* Logits of the last row of the last forward, into host logits[V]. */
void model_last_logits(Model *m, int B, int T, float *logits);

/* Generation with a KV cache (model/kv_cache.c): the post-RoPE keys and the values of every layer for the positions
 * 0 .. len-1 of one sequence, so that a new token runs through the model alone (docs/DESIGN.md, "Generation with a
 * KV cache"). Its buffer is the model's kv_cache (in the arena, so the memory preflight counts it): one sequence at
 * a time per model, and a training step's backward overwrites it (the sampler makes a new one each time). */
typedef struct KvCache {
    void *buf;          /* the model's kv_cache: per layer K then V, each [capacity, Hkv*hd] act */
    size_t layer_bytes; /* of one layer's K (or V) */
    int capacity;       /* the positions it can hold: the model's T (its RoPE tables' rows) */
    int len;            /* the positions it holds */
} KvCache;

/* An empty cache in m's buffer (what an earlier cache of m held is then overwritten as this one grows). */
KvCache kv_cache_empty(const Model *m);
/* Layer l's K and V buffers. */
void *kv_cache_keys(const KvCache *cache, int l);
void *kv_cache_values(const KvCache *cache, int l);

/* Runs the n tokens (host ids) at positions cache->len .. cache->len + n - 1 through the model, attending to the
 * cached positions and to each other causally; appends their keys and values (cache->len grows by n) and writes
 * the logits of the last into host logits[V]. With an empty cache this is model_forward of one sequence of n
 * tokens (the prefill); then one token at a time. Needs cache->len + n <= cache->capacity and n <= m->B * m->T. */
void model_decode(Model *m, KvCache *cache, const int32_t *tokens, int n, float *logits);
/* The same on n tokens loaded into b (model_batch_load). */
void model_decode_batch(Model *m, const ModelBatch *b, KvCache *cache, int n, float *logits);

/* Starts an optimizer step's gradients: zeroes every gradient that the backward adds to (all but the block weights',
 * which the MICRO_FIRST backward writes). */
void model_zero_grads(Model *m);
/* The sum of squares of the whole gradient (fp64): after a MICRO_LAST backward, the block weights' shares from its
 * weight-gradient GEMMs and passes over the rest only; otherwise one pass over all of it. model_queue_grad_squares
 * queues the parts into m->stats[1 ...] and returns their count; model_grad_sum_squares also waits and adds them. */
int model_queue_grad_squares(Model *m);
double model_grad_sum_squares(Model *m);

/* The RoPE inverse frequencies of the config (Llama-3 scaling applied), inv_freq[hd/2]. */
void model_rope_inv_freq(const ModelConfig *cfg, double *inv_freq);

#endif
