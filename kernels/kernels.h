/* kernels.h: the operation API of the trainer, the CODA schedule's fused operations stated semantically.
 *
 * The model code (model/) calls only these operations, through a table of function pointers (struct Kernels), so it
 * never knows which backend runs them (docs/DESIGN.md, "The schedule" and "Fused step"). Backends: kernels/cpu
 * (kernels_cpu: plain fp32 C with OpenMP, the oracle of the other tables) and kernels/cuda, built WITH_CUDA (bf16
 * activations; kernels_cuda_fused, --fusion on, whose GEMMs carry these operations in their epilogues on the engine
 * of kernels/cuda/gemm, and kernels_cuda, --fusion off, cuBLAS GEMMs followed by one-pass kernels; both run the
 * attention kernels of kernels/cuda/attention). Nothing here states tiles or launch shapes.
 *
 * Conventions
 * - All matrices are row-major. A weight W of a linear layer is [N, K] (out x in, like torch.nn.Linear), so a
 *   forward product is Y[M,N] = X[M,K] . W^T, the data gradient is dX[M,K] = dY[M,N] . W, and the weight gradient
 *   is dW[N,K] += dY^T . X.
 * - "act" tensors (activations, activation gradients, working weights) are in the backend's activation type:
 *   fp32 on the CPU, bf16 on the GPU; their element size is Kernels.act_bytes. They are passed as void pointers.
 *   Per-row statistics (r, c, lse, per-row loss) and everything the optimizer touches (master weights, parameter
 *   gradients, AdamW moments) are fp32.
 * - Parameter gradients are ACCUMULATED (+=): the caller zeroes them at the start of an optimizer step, which
 *   makes gradient accumulation free. gemm_dw alone can also overwrite (its first micro-batch then needs no zeroed
 *   buffer) and report the sum of squares of what it leaves, for global-norm clipping without a pass.
 * - RMSNorm: for a row x of width D, r = 1/sqrt(mean(x^2) + eps). The CODA reparameterization stores O = x*gamma
 *   and r separately and applies r after the next GEMM, using diag(r) (X diag(gamma)) W^T = diag(r) ((X*gamma) W^T).
 * - Internal weight layouts (import/export permute to Hugging Face's):
 *   * W_qkv [(Hq + 2*Hkv)*hd, D]: rows of all Q heads, then all K heads, then all V heads. Inside each Q and K head
 *     the RoPE pairs are interleaved: internal rows (2i, 2i+1) of a head are HF rows (i, i + hd/2). V is unpermuted.
 *     So Z_qkv columns [0, Hq*hd) are Q, [Hq*hd, (Hq+Hkv)*hd) are K, the rest V, and a RoPE pair is two adjacent
 *     columns (2i, 2i+1) of a head, rotated by the angle pos*inv_freq[i].
 *   * W_gateup [2F, D]: row 2j is gate_proj row j, row 2j+1 is up_proj row j, so (G_j, U_j) are adjacent columns.
 * - RoPE: for a pair (a, b) at position pos with cos/sin tables [T_max, hd/2] (row pos, column i):
 *   a' = a*cos - b*sin, b' = b*cos + a*sin (HF's rotate_half convention, in interleaved storage). Rows of a batch are
 *   sequences of T tokens, so the position of row m is m % T.
 * - Attention operates on Z_qkv rows directly. Output y [B*T, Hq*hd] (head h at columns [h*hd, (h+1)*hd), HF's
 *   o_proj input layout), lse [B, Hq, T] = log-sum-exp of the scaled, causally masked scores of each query.
 *   KV head of query head h is h / (Hq/Hkv). Scale 1/sqrt(hd).
 * - In-place use is allowed only where a comment says so (never h == res, dZ == Z).
 * - Shapes the callers guarantee: Hq % Hkv == 0, hd even, n_rope_cols a multiple of hd, RoPE tables of >= T rows.
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Byte counts that saturate at SIZE_MAX instead of wrapping around, for the memory estimates of configs that no
 * machine holds (the preflight then reports them as too large). */
static inline size_t size_mul(size_t a, size_t b) { return a && b > SIZE_MAX / a ? SIZE_MAX : a * b; }
static inline size_t size_add(size_t a, size_t b) { return b > SIZE_MAX - a ? SIZE_MAX : a + b; }
static inline size_t size_max(size_t a, size_t b) { return a > b ? a : b; }

/* A model's dimensions, for a table's shape_note: micro-batches of B sequences of T tokens, width D, SwiGLU width F,
 * Hq query and Hkv key/value heads of hd, vocabulary V. */
typedef struct KernelShapes {
    int B, T, D, F, Hq, Hkv, hd, V;
} KernelShapes;

/* ---- what an operation needs of the backend's memory (for the memory preflight) ----
 * One call of an operation as the workspace sizes see it: which operation, its dimensions named as in its signature
 * (those it lacks 0), and which of its optional pointers are given. model_memory runs model.c's schedule through
 * a recording table (kernels_recording) that describes each call so. */
typedef enum KernelOp {
    KOP_ACT_FROM_F32, KOP_ACT_TO_F32, KOP_EMBED_NORM, KOP_GEMM_RESIDUAL_NORM, KOP_GEMM_ROPE, KOP_GEMM_SWIGLU,
    KOP_GEMM_ROWSCALE, KOP_ATTENTION_FORWARD, KOP_KV_CACHE_APPEND, KOP_ATTENTION_CACHED, KOP_LM_HEAD_LOSS,
    KOP_LM_HEAD_TRAIN, KOP_GEMM_NORM_BACKWARD, KOP_GEMM_SWIGLU_BACKWARD, KOP_GEMM_DX, KOP_GEMM_DW,
    KOP_ATTENTION_BACKWARD, KOP_EMBED_BACKWARD, KOP_SUM_SQUARES, KOP_SUM, KOP_CLIP_SCALE, KOP_ADAMW,
    KOP_MASTER_FROM_F32, KOP_MASTER_TO_F32, KOP_ADAMW_SPLIT
} KernelOp;

typedef struct KernelCall {
    KernelOp op;
    int M, N, K, D, F, V, B, T, Hq, Hkv, hd, pos0, n_rope_cols, accumulate;
    size_t n;
    int col_scale, sq, r; /* gemm_dw's col_scale and sq, attention_backward's r: 1 when given (not NULL) */
} KernelCall;

/* What a call needs beyond its arguments: scratch held only while it runs (what the backend's scratch holds after
 * the request), and buffers the backend keeps from the call on, each in a slot of the backend's own numbering
 * (the same buffer in the same slot), grown to the largest call's. */
enum { KERNELS_HELD_SLOTS = 4 };
typedef struct KernelNeed {
    size_t scratch;
    size_t held[KERNELS_HELD_SLOTS];
} KernelNeed;

/* Token groups: the rows of a micro-batch grouped by token id, made on the host beside the batch
 * (token_groups_build) and copied to backend memory with it, so that no operation has to bring ids back to group
 * them. token_groups_ints(M) int32s: [0] = n_seg, the number of distinct ids; then order [M] (the rows, grouped
 * by id in increasing id order, rows ascending inside a group); then seg [M + 1] (group u is order[seg[u] ..
 * seg[u+1])); then seg_id [M] (group u's id). Entries past n_seg are unused. */
static inline size_t token_groups_ints(size_t M) { return 3 * M + 2; }
/* Groups ids[0..M) (each in [0, V)) into out[token_groups_ints(M)]; count is host scratch of V + 1 ints. */
void token_groups_build(const int32_t *ids, int M, int V, int32_t *out, int32_t *count);

/* The per-step scalars of an AdamW update, formed on the host in double (as PyTorch does) from the learning rate,
 * the hyperparameters and the step, and read by adamw from backend memory (so that a captured step reads the
 * current step's values): decay = 1 - lr*weight_decay, step_size = lr / (1 - beta1^step), bc2_sqrt =
 * sqrt(1 - beta2^step). */
typedef struct AdamwScalars {
    float decay, step_size, bc2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
} AdamwScalars;
AdamwScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int step);

/* A backend's state for one model: the queue its work runs on (the GPU's stream), library handles, the scratch
 * workspace, the buffers it keeps between calls and its memory counts. A table makes one (context_create), every
 * memory function and operation runs in the one it is given, and nothing of it is shared between contexts. The
 * tables of one backend (the two CUDA tables) make the same kind: a context of one serves the other. */
typedef struct KernelContext KernelContext;

typedef struct Kernels {
    const char *name;   /* "cpu" or "cuda" */
    const char *detail; /* which path runs, for the user (the CUDA tables: fusion on or off), or NULL */
    size_t act_bytes;  /* bytes of one act element: 4 (fp32) or 2 (bf16) */
    const char *memory_name; /* where its buffers live, for messages: "host memory" or "GPU memory" */
    /* The table of the same backend that needs less memory for a model, and the flag that selects it (the unfused
     * CUDA table's: the fused one, "--fusion on"), or NULL: the memory preflight names it when only it fits. */
    const struct Kernels *leaner;
    const char *leaner_flag;
    /* What a user should know about how this table runs a model of these shapes (the fused table: the GEMMs its
     * engine cannot take run unfused), or NULL; NULL function: nothing ever. */
    const char *(*shape_note)(const struct KernelShapes *s);

    /* ---- the context ---- */
    /* A new context (a failure to start the backend stops the program with a message and exit status 1); NULL
     * function: a table that is only recorded (kernels_recording). context_free frees it, after every buffer
     * allocated in it has been freed. */
    KernelContext *(*context_create)(void);
    void (*context_free)(KernelContext *kc);

    /* ---- memory (device memory for the GPU backend, host memory for the CPU backend) ---- */
    /* zero-filled; NULL when the backend's memory cannot hold it (the caller says so) */
    void *(*alloc)(KernelContext *kc, size_t bytes);
    void (*free)(KernelContext *kc, void *p);
    void (*memset_zero)(KernelContext *kc, void *p, size_t bytes);
    void (*copy_to_device)(KernelContext *kc, void *dst, const void *host_src, size_t bytes);
    void (*copy_to_host)(KernelContext *kc, void *host_dst, const void *src, size_t bytes);
    void (*act_from_f32)(KernelContext *kc, void *dst_act, const float *host_src, size_t n); /* rounds on bf16 */
    void (*act_to_f32)(KernelContext *kc, float *host_dst, const void *src_act, size_t n);
    /* Master weights kept split (kernels/master_split.h), in the tables whose working copy is bf16; NULL in a table
     * that keeps them whole in fp32 (the CPU's). From host fp32: working gets each weight's bf16, lo its low half;
     * to host fp32: the halves joined. Through the staging of act_from_f32 and act_to_f32. */
    void (*master_from_f32)(KernelContext *kc, uint16_t *lo, void *working, const float *host_src, size_t n);
    void (*master_to_f32)(KernelContext *kc, float *host_dst, const void *working, const uint16_t *lo, size_t n);
    void (*synchronize)(KernelContext *kc);
    /* Host memory that copies from the backend's memory run fastest into (page-locked on the GPU, plain on the CPU),
     * for the checkpoint snapshot; NULL when the host has not the memory. */
    void *(*host_alloc)(KernelContext *kc, size_t bytes);
    void (*host_free)(KernelContext *kc, void *p);
    /* Step capture, NULL in a table that cannot: capture_begin() records the operations called after it instead of
     * running them (no copy to or from the host may be among them), capture_end() returns the recording, replay
     * runs it again with whatever the backend memory it reads holds then, graph_free frees it. */
    void (*capture_begin)(KernelContext *kc);
    void *(*capture_end)(KernelContext *kc);
    void (*replay)(KernelContext *kc, void *graph);
    void (*graph_free)(KernelContext *kc, void *graph);
    /* Gives the backend's scratch workspace `bytes` at once (model_create, with the most that any call of the run
     * will ask: the dry run's), so that no later call grows it: a captured step holds the workspace's address, and a
     * workspace outgrown while one exists stays allocated beside the new one. NULL in a table whose operations
     * allocate their own scratch. */
    void (*reserve_scratch)(KernelContext *kc, size_t bytes);

    /* ---- forward ---- */

    /* The first layer's input norm (an exception to CODA: nothing precedes it). For m < M:
     * x[m] = E[tokens[m]] (E is [V, D] act), O[m] = x[m] * gamma, r[m] = rsqrt(mean(x[m]^2) + eps). */
    void (*embed_norm)(KernelContext *kc, const int32_t *tokens, const void *E, const float *gamma, float eps, void *x,
                       void *O, float *r, int M, int D);

    /* K_res: h = A . W^T + res; O = h * gamma; r = rsqrt(mean(h^2) + eps).
     * A [M,K], W [N,K], res/h/O [M,N], gamma [N] (fp32), r [M]. */
    void (*gemm_residual_norm)(KernelContext *kc, const void *A, const void *W, const void *res, const float *gamma,
                               float eps, void *h, void *O, float *r, int M, int N, int K);

    /* K_rope: Z = r * (O . W^T), then RoPE on columns [0, n_rope_cols) in heads of hd columns, position m % T.
     * O [M,K], W [N,K], Z [M,N]; rope_cos/rope_sin [T, hd/2] fp32. */
    void (*gemm_rope)(KernelContext *kc, const void *O, const void *W, const float *r, const float *rope_cos,
                      const float *rope_sin, void *Z, int M, int N, int K, int n_rope_cols, int hd, int T);

    /* K_swiglu: Z = r * (O . W^T) with N = 2F interleaved (G_j, U_j) columns; act[m,j] = silu(G_j) * U_j.
     * O [M,K], W [2F,K], Z [M,2F], act [M,F]. silu(g) = g / (1 + exp(-g)). */
    void (*gemm_swiglu)(KernelContext *kc, const void *O, const void *W, const float *r, void *Z, void *act, int M,
                        int F, int K);

    /* Row-scaled GEMM: Y = r * (O . W^T). Used for logits when sampling. O [M,K], W [N,K], Y [M,N] fp32. */
    void (*gemm_rowscale)(KernelContext *kc, const void *O, const void *W, const float *r, float *Y, int M, int N,
                          int K);

    /* Causal grouped-query attention on qkv [B*T, (Hq+2Hkv)*hd] (Z_qkv after RoPE): y [B*T, Hq*hd], lse [B,Hq,T]. */
    void (*attention_forward)(KernelContext *kc, const void *qkv, void *y, float *lse, int B, int T, int Hq, int Hkv,
                              int hd);

    /* ---- generation with a KV cache (model.h's model_decode) ----
     * A layer's cache is two act buffers K, V [T_max, Hkv*hd]: row p holds the post-RoPE keys (the qkv columns
     * [Hq*hd, (Hq+Hkv)*hd)) and the values (the columns [(Hq+Hkv)*hd, (Hq+2Hkv)*hd)) of the token at position p.
     * The new rows' RoPE at positions pos0.. comes from gemm_rope given the tables from row pos0 on and T = M. */

    /* K[pos0 + i] = the K columns of qkv[i], V[pos0 + i] = its V columns, for i < M (qkv [M, (Hq+2Hkv)*hd]). */
    void (*kv_cache_append)(KernelContext *kc, const void *qkv, void *K, void *V, int pos0, int M, int Hq, int Hkv,
                            int hd);

    /* Attention of M new query rows at positions pos0 + i against the cache that holds them (kv_cache_append first):
     * for query head h (KV head g = h / (Hq/Hkv)) of row i, with q = qkv[i, h*hd .. (h+1)*hd) and
     * s_j = <q, K[j, g*hd ..]> / sqrt(hd) for j <= pos0 + i (causal):
     * y[i, h*hd + d] = sum_j softmax(s)_j V[j, g*hd + d]. qkv [M, (Hq+2Hkv)*hd], y [M, Hq*hd]. With pos0 = 0 this is
     * attention_forward of one sequence of M tokens (its lse aside). */
    void (*attention_cached)(KernelContext *kc, const void *qkv, const void *K, const void *V, void *y, int pos0, int M,
                             int Hq, int Hkv, int hd);

    /* LM head and cross-entropy, without the caller materializing logits: logits = r * (O . W^T), O [M,K],
     * W [V,K]. loss[m] = logsumexp(logits[m]) - logits[m, targets[m]] (fp32, per row). Every target must be in
     * [0, V) (the data loader checks). */
    void (*lm_head_loss)(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                         float *loss, int M, int V, int K);

    /* The same loss, and the backward of the LM head and of the final RMSNorm in the same call (so that no
     * backend needs the [M, V] gradient of all rows at once). With g = dscale * (softmax(logits[m]) -
     * onehot(targets[m])) the gradient of  dscale * sum_m loss[m]  with respect to the logits, dZ = r * g and
     * c[m] = <logits[m], g[m]>: dW [V,K] += dZ^T . O (fp32), and the final norm's backward as gemm_norm_backward
     * with accumulate == 0 (x [M,K] the norm's input, gamma/dgamma [K]): dres [M,K] = gamma * G - (r^2/K) c x with
     * G = dZ . W, dgamma += sum_m G x. target_groups: the targets' token groups (backend memory). */
    void (*lm_head_train)(KernelContext *kc, const void *O, const void *W, const float *r, const int32_t *targets,
                          const int32_t *target_groups, float dscale, const void *x, const float *gamma, float *loss,
                          float *dW, void *dres, float *dgamma, int M, int V, int K);

    /* ---- backward ---- */

    /* RMSNorm backward in the epilogue of the data-gradient GEMM. The forward was z = r * (O . W^T), O = x * gamma,
     * and dZ holds r * (dLoss/dz), c[m] = <z[m], dLoss/dz[m]>. With G = dZ . W [M,K]:
     * dx = gamma * G - (r^2 / K) * c * x;  dres = dx (accumulate == 0) or dres += dx (accumulate == 1);
     * dgamma[k] += sum_m G[m,k] * x[m,k].  dZ [M,N], W [N,K], x/dres [M,K], gamma/dgamma [K] fp32. */
    void (*gemm_norm_backward)(KernelContext *kc, const void *dZ, const void *W, const float *gamma, const float *r,
                               const float *c, const void *x, void *dres, float *dgamma, int accumulate, int M, int N,
                               int K);

    /* SwiGLU backward in the epilogue of dact = dY . W_down. dY [M,D], W_down [D,F], Z [M,2F] (the forward's Z,
     * interleaved G/U), r [M] (the forward's row scale). With dG = dact * U * silu'(G), dU = dact * silu(G):
     * dZ [M,2F] = r * (dG, dU) interleaved like Z; c[m] = <Z[m], (dG, dU)[m]>; act [M,F] = silu(G) * U again,
     * the same values gemm_swiglu wrote (so the forward need not keep them for the weight gradient). */
    void (*gemm_swiglu_backward)(KernelContext *kc, const void *dY, const void *W_down, const void *Z, const float *r,
                                 void *dZ, float *c, void *act, int M, int D, int F);

    /* Plain data-gradient GEMM: dX = dY . W. dY [M,N], W [N,K], dX [M,K]. */
    void (*gemm_dx)(KernelContext *kc, const void *dY, const void *W, void *dX, int M, int N, int K);

    /* Weight-gradient GEMM: dW = (dY^T . X) * col_scale, or dW += that when accumulate != 0 (col_scale [K] fp32
     * multiplies column k; NULL: 1). dY [M,N] act, X [M,K] act, dW [N,K] fp32. With X = x and col_scale = gamma
     * this is the gradient of a weight whose input was O = x * gamma, without O. sq != NULL: also *sq = the sum of
     * squares of dW as left by the call (one fp64 in backend memory; the fused table forms it in the GEMM's
     * epilogue when it overwrites). */
    void (*gemm_dw)(KernelContext *kc, const void *dY, const void *X, const float *col_scale, float *dW, int accumulate,
                    double *sq, int M, int N, int K);

    /* Attention backward, and with r the backward of the QKV projection's RoPE and row scale in the same call (the
     * CODA schedule: the fused table does it in the stores of the attention kernels). From dy [B*T, Hq*hd] and the
     * forward's qkv, y, lse, let G [B*T, (Hq+2Hkv)*hd] be the gradient with respect to qkv (post-RoPE Q and K),
     * laid out like qkv. r == NULL: dqkv = G (rope_cos, rope_sin, c unused). Otherwise, with qkv = rope(r * P) the
     * forward (RoPE on the Q and K columns, position m % T): dqkv = r * rope^T(G) (the gradient with respect to the
     * pre-RoPE product P, scaled by r, which is what the QKV weight and norm backward take) and c[m] = <qkv[m], G[m]>
     * (RoPE is orthogonal, so this is the pre-RoPE dot product). rope_cos/rope_sin [T, hd/2], r and c [B*T]. */
    void (*attention_backward)(KernelContext *kc, const void *qkv, const void *y, const float *lse, const void *dy,
                               const float *r, const float *rope_cos, const float *rope_sin, void *dqkv, float *c,
                               int B, int T, int Hq, int Hkv, int hd);

    /* Embedding backward: dE[tokens[m]] += dx[m], deterministic (the same bits for the same inputs). dE [V,D] fp32.
     * groups: the tokens' token groups (backend memory). */
    void (*embed_backward)(KernelContext *kc, const int32_t *tokens, const int32_t *groups, const void *dx, float *dE,
                           int M, int D, int V);

    /* ---- optimizer ---- */

    /* Sums, deterministic, into one fp64 in backend memory (nothing waits for the backend): *out = the sum of
     * squares of g[0..n); *out = sum of x[0..n) (+ the old *out when accumulate != 0). */
    void (*sum_squares)(KernelContext *kc, const float *g, size_t n, double *out);
    void (*sum)(KernelContext *kc, const float *x, size_t n, double *out, int accumulate);

    /* Global-norm clipping's factor, in backend memory: parts[0..n_loss) are loss sums and parts[n_loss ..
     * n_loss + n_sq) sums of squares of the gradient. With norm = sqrt(parts[n_loss] + ... + parts[n_loss+n_sq-1])
     * (added in that order, in fp64): *scale = NaN if a part is not finite (no update), else
     * min(1, max_norm / (norm + 1e-6)) when max_norm > 0, else 1. */
    void (*clip_scale)(KernelContext *kc, const double *parts, int n_loss, int n_sq, double max_norm, float *scale);

    /* AdamW on n parameters (PyTorch's torch.optim.AdamW semantics), with the gradient multiplied by *grad_scale
     * first (global-norm clipping's factor; not finite: nothing changes) and s the step's scalars, both in backend
     * memory:  g = grad*scale; p *= decay; m = m + (1-beta1)*(g - m) (torch's lerp); v = beta2*v + (1-beta2)*g^2;
     * p -= step_size * m / (sqrt(v) / bc2_sqrt + eps); then working = act(p). master/m/v/grad fp32, working act. */
    void (*adamw)(KernelContext *kc, float *master, void *working, const float *grad, float *m, float *v, size_t n,
                  const AdamwScalars *s, const float *grad_scale);
    /* adamw on split master weights (master_from_f32): p = master_join(working, lo) before, and after, the updated p
     * stored as its halves, working (its bf16, as adamw writes it) and lo. NULL where master_from_f32 is. */
    void (*adamw_split)(KernelContext *kc, uint16_t *lo, void *working, const float *grad, float *m, float *v,
                        size_t n, const AdamwScalars *s, const float *grad_scale);

    /* ---- memory: the preflight and reporting ---- */

    /* What one call of an operation of this table needs of the backend's memory beyond its arguments (its scratch,
     * the backend's workspaces and the buffers it keeps, a library's workspace), saturating at SIZE_MAX: the size
     * functions that the operations themselves allocate with. (An operation that cannot get its scratch stops the
     * program with a message and exit status 1: it has no error path.) */
    void (*workspace_of)(const KernelCall *call, KernelNeed *need);

    /* The backend memory that can still be allocated (the GPU's free memory; the host's available memory within the
     * process's cgroup limits), or SIZE_MAX when it cannot be known. */
    size_t (*available_bytes)(void);

    /* The most bytes of backend memory held at once so far in kc: every allocation made in it, its buffers and its
     * scratch or workspaces. */
    size_t (*peak_bytes)(KernelContext *kc);

    /* The name of the GPU it runs on (cudaGetDeviceProperties), from which the MFU's peak is known; NULL in a table
     * that runs on no GPU (the CPU). */
    const char *(*device_name)(void);
} Kernels;

/* The recording table of a table `of`: its operations run nothing and touch no memory (alloc returns a pointer that
 * nothing may read or write; it has no host_alloc, no capture, no memory counts), and each call asks of.workspace_of
 * what the call needs and keeps in the record that is its context the most scratch and each held buffer at its
 * largest. Its context is kernels_recording_context(rec): it has no context_create. */
typedef struct KernelsRecord {
    const struct Kernels *of;
    size_t scratch;
    size_t held[KERNELS_HELD_SLOTS];
} KernelsRecord;
Kernels kernels_recording(KernelsRecord *rec, const Kernels *of);
KernelContext *kernels_recording_context(KernelsRecord *rec);
/* The backend memory the recorded calls need beyond their arguments at most: the largest scratch and the held
 * buffers (saturating). */
size_t kernels_recorded_bytes(const KernelsRecord *rec);

extern const Kernels kernels_cpu;
#ifdef WITH_CUDA
extern const Kernels kernels_cuda;       /* cuBLAS GEMMs + one-pass epilogue kernels (--fusion off) */
extern const Kernels kernels_cuda_fused; /* the GEMM-epilogue programs (--fusion on) */
/* 1 if a GPU that this build runs on is present (why = its name), else 0 (why = the reason). */
int kernels_cuda_available(char *why, size_t len);
/* 1 if the CUDA attention kernels take this head dim (64 and 128), else 0. */
int kernels_cuda_supports_head_dim(int hd);
#endif

#ifdef __cplusplus
}
#endif

#endif
