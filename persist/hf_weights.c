/* hf_weights.c: export of the master weights to a Hugging Face safetensors file and import from one or from a
 * sharded set (see hf_weights.h). Rows move in chunks between the device's master buffer and the file, through the
 * row maps of hf_layout.c. */
#include "persist/hf_weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist/hf_layout.h"
#include "util/fsutil.h"

#define CHUNK_ELEMS (4u << 20) /* fp32 values per row chunk (16 MiB) */

/* A chunk of HF rows [r0, r1) of one tensor and the span of internal rows [lo, hi) that holds them. */
typedef struct RowChunk {
    size_t r0, r1, lo, hi;
} RowChunk;

/* Rows per chunk, and the host buffers of a transfer: `rows` for HF rows, `span` for the internal rows they map to
 * (at most 2 chunks + 2 heads of rows: gate/up rows are every other internal row, q/k rows permute inside heads). */
typedef struct Transfer {
    size_t chunk_rows, span_cap_rows;
    float *rows, *span;
} Transfer;

/* Buffers for chunks of CHUNK_ELEMS values of the widest of the n tensors ts (fewer when the largest tensor is
 * smaller). */
static int transfer_alloc(Transfer *x, const ModelConfig *c, const HfTensor *ts, int n) {
    size_t max_rows = 1, max_cols = 1;
    for (int i = 0; i < n; i++) {
        if ((size_t)ts[i].rows > max_rows) max_rows = (size_t)ts[i].rows;
        if ((size_t)ts[i].cols > max_cols) max_cols = (size_t)ts[i].cols;
    }
    x->chunk_rows = CHUNK_ELEMS / max_cols;
    if (x->chunk_rows > max_rows) x->chunk_rows = max_rows;
    if (x->chunk_rows == 0) x->chunk_rows = 1;
    x->span_cap_rows = 2 * x->chunk_rows + 2 * (size_t)c->head_dim;
    x->rows = malloc(x->chunk_rows * max_cols * sizeof(float));
    x->span = malloc(x->span_cap_rows * max_cols * sizeof(float));
    return x->rows && x->span ? 0 : -1;
}

static void transfer_free(Transfer *x) {
    free(x->rows);
    free(x->span);
}

static RowChunk chunk_at(const HfTensor *t, size_t r0, size_t chunk_rows) {
    RowChunk ch = {r0, r0 + chunk_rows < (size_t)t->rows ? r0 + chunk_rows : (size_t)t->rows, (size_t)-1, 0};
    for (size_t r = ch.r0; r < ch.r1; r++) {
        size_t ir = hf_internal_row(t, r);
        if (ir < ch.lo) ch.lo = ir;
        if (ir + 1 > ch.hi) ch.hi = ir + 1;
    }
    return ch;
}

/* The view of t in a model's table; the table and the layout agree by construction, so a mismatch is a programming
 * error (an internal invariant, never the user's input: abort). */
static const ParamView *view_for(const ParamTable *table, const HfTensor *t) {
    const ParamView *v = param_table_find(table, t->view);
    if (!v || v->cols != t->cols) {
        fprintf(stderr, "internal error: no parameter view %s of width %d for %s\n", t->view, t->cols, t->name);
        abort();
    }
    return v;
}

/* ---------------------------------------------------------------- export */

int hf_export_master(const HfMaster *src, const char *path, StDtype dtype, uint32_t *crc, uint64_t *bytes, char *err,
                     size_t errlen) {
    int n = hf_tensor_count(src->cfg);
    HfTensor *ts = calloc((size_t)n, sizeof(HfTensor));
    StTensorInfo *infos = calloc((size_t)n, sizeof(StTensorInfo));
    Transfer x = {0};
    StWriter *w = NULL;
    int rc = -1;
    if (!ts || !infos) {
        snprintf(err, errlen, "%s: out of host memory", path);
        goto done;
    }
    hf_tensor_list(src->cfg, ts);
    for (int i = 0; i < n; i++) {
        snprintf(infos[i].name, sizeof(infos[i].name), "%s", ts[i].name);
        infos[i].dtype = dtype;
        infos[i].ndim = ts[i].is_vector ? 1 : 2;
        infos[i].shape[0] = ts[i].is_vector ? ts[i].cols : ts[i].rows;
        infos[i].shape[1] = ts[i].cols;
    }
    if (transfer_alloc(&x, src->cfg, ts, n)) {
        snprintf(err, errlen, "%s: out of host memory", path);
        goto done;
    }
    w = st_writer_open(path, infos, n, err, errlen);
    if (!w) goto done;
    for (int i = 0; i < n; i++) {
        const HfTensor *t = &ts[i];
        const ParamView *v = view_for(src->table, t);
        size_t cols = (size_t)t->cols;
        for (size_t r0 = 0; r0 < (size_t)t->rows; r0 += x.chunk_rows) {
            RowChunk ch = chunk_at(t, r0, x.chunk_rows);
            const float *span = x.span;
            if (src->master) span = src->master + v->offset + ch.lo * cols;
            else model_master_to_host(src->model, x.span, v->offset + ch.lo * cols, (ch.hi - ch.lo) * cols);
            for (size_t r = ch.r0; r < ch.r1; r++)
                memcpy(x.rows + (r - ch.r0) * cols, span + (hf_internal_row(t, r) - ch.lo) * cols,
                       cols * sizeof(float));
            if (st_writer_append_f32(w, x.rows, (ch.r1 - ch.r0) * cols, err, errlen)) goto done;
        }
    }
    if (crc) *crc = st_writer_crc32(w);
    if (bytes) *bytes = st_writer_bytes(w);
    rc = st_writer_close(w, err, errlen);
    w = NULL;
done:
    if (w) st_writer_abort(w);
    transfer_free(&x);
    free(ts);
    free(infos);
    return rc;
}

int hf_export_weights(const Model *m, const char *path, StDtype dtype, char *err, size_t errlen) {
    const HfMaster src = {&m->cfg, &m->table, NULL, m};
    return hf_export_master(&src, path, dtype, NULL, NULL, err, errlen);
}

/* ---------------------------------------------------------------- import */

/* The safetensors files of a directory: one model.safetensors, or the shards of model.safetensors.index.json. */
typedef struct HfSource {
    char where[1200]; /* the file to name in messages about the set as a whole */
    StFile **files;
    int n_files;
} HfSource;

static void source_close(HfSource *s) {
    for (int i = 0; i < s->n_files; i++) st_close(s->files[i]);
    free(s->files);
    s->files = NULL;
    s->n_files = 0;
}

static StFile *source_find(const HfSource *s, const char *name, const StTensorInfo **info) {
    for (int i = 0; i < s->n_files; i++)
        if ((*info = st_find(s->files[i], name))) return s->files[i];
    return NULL;
}

static int source_add_file(HfSource *s, const char *path, char *err, size_t errlen) {
    StFile **grown = realloc(s->files, (size_t)(s->n_files + 1) * sizeof(StFile *));
    if (!grown) {
        snprintf(err, errlen, "%s: out of host memory", path);
        return -1;
    }
    s->files = grown;
    s->files[s->n_files] = st_open(path, err, errlen);
    if (!s->files[s->n_files]) return -1;
    s->n_files++;
    return 0;
}

/* Opens every shard named in the index's weight_map and checks that each tensor is where the index says. */
static int source_open_sharded(HfSource *s, const char *dir, const char *index_path, char *err, size_t errlen) {
    char where[1300];
    snprintf(where, sizeof(where), "index %s", index_path);
    cJSON *root = fs_read_json(index_path, where, err, errlen);
    if (!root) return -1;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int rc = 0;
    if (!cJSON_IsObject(map) || !map->child) {
        snprintf(err, errlen, "index %s: no \"weight_map\" object", index_path);
        rc = -1;
    }
    for (const cJSON *e = map ? map->child : NULL; e && rc == 0; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
            snprintf(err, errlen, "index %s: weight_map[\"%s\"] must be a file name in %s", index_path, e->string, dir);
            rc = -1;
            break;
        }
        char path[1100];
        snprintf(path, sizeof(path), "%s/%s", dir, e->valuestring);
        int known = 0;
        for (int i = 0; i < s->n_files; i++) known |= strcmp(st_path(s->files[i]), path) == 0;
        if (!known) rc = source_add_file(s, path, err, errlen);
    }
    /* a tensor in two shards is ambiguous */
    for (int i = 0; i < s->n_files && rc == 0; i++)
        for (int j = 0; j < st_count(s->files[i]) && rc == 0; j++)
            for (int k = i + 1; k < s->n_files && rc == 0; k++)
                if (st_find(s->files[k], st_tensor(s->files[i], j)->name)) {
                    snprintf(err, errlen, "index %s: tensor %s is in both %s and %s", index_path,
                             st_tensor(s->files[i], j)->name, st_path(s->files[i]), st_path(s->files[k]));
                    rc = -1;
                }
    for (const cJSON *e = map ? map->child : NULL; e && rc == 0; e = e->next) {
        const StTensorInfo *info;
        StFile *f = source_find(s, e->string, &info);
        char path[1100];
        snprintf(path, sizeof(path), "%s/%s", dir, e->valuestring);
        if (!f || strcmp(st_path(f), path) != 0) {
            snprintf(err, errlen, "index %s: tensor %s should be in %s, but that file's header does not have it",
                     index_path, e->string, path);
            rc = -1;
        }
    }
    cJSON_Delete(root);
    return rc;
}

static int source_open(HfSource *s, const char *dir, char *err, size_t errlen) {
    char single[1100], index[1100];
    snprintf(single, sizeof(single), "%s/model.safetensors", dir);
    snprintf(index, sizeof(index), "%s/model.safetensors.index.json", dir);
    int rc;
    if (fs_exists(single)) {
        snprintf(s->where, sizeof(s->where), "%s", single);
        rc = source_add_file(s, single, err, errlen);
    } else if (fs_exists(index)) {
        snprintf(s->where, sizeof(s->where), "%s", index);
        rc = source_open_sharded(s, dir, index, err, errlen);
    } else {
        snprintf(err, errlen, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
        return -1;
    }
    if (rc) source_close(s);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Every tensor the config needs is present with its shape and a readable dtype; nothing unknown is present. */
static int check_tensors(const HfSource *s, const ModelConfig *c, const HfTensor *ts, int n, char *err,
                         size_t errlen) {
    for (int i = 0; i < n; i++) {
        const HfTensor *t = &ts[i];
        const StTensorInfo *info;
        StFile *f = source_find(s, t->name, &info);
        char want[64];
        if (t->is_vector) snprintf(want, sizeof(want), "[%d]", t->cols);
        else snprintf(want, sizeof(want), "[%d, %d]", t->rows, t->cols);
        if (!f) {
            snprintf(err, errlen, "%s: missing tensor %s (shape %s)%s", s->where, t->name, want,
                     strcmp(t->name, "lm_head.weight") == 0 ? ": the config says tie_word_embeddings is false, so "
                                                              "the model needs its own LM head" : "");
            return -1;
        }
        int shape_ok = info->ndim == (t->is_vector ? 1 : 2) &&
                       (t->is_vector ? info->shape[0] == t->cols
                                     : info->shape[0] == t->rows && info->shape[1] == t->cols);
        if (!shape_ok) {
            char got[160] = "[";
            for (int d = 0; d < info->ndim; d++)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", d ? ", " : "",
                         (long long)info->shape[d]);
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "]");
            snprintf(err, errlen, "%s: tensor %s has shape %s, but the config needs %s", st_path(f), t->name, got,
                     want);
            return -1;
        }
        if (info->dtype != ST_F32 && info->dtype != ST_BF16 && info->dtype != ST_F16) {
            snprintf(err, errlen, "%s: tensor %s has dtype %s; expected F32, BF16 or F16", st_path(f), t->name,
                     st_dtype_name(info->dtype));
            return -1;
        }
    }
    for (int fi = 0; fi < s->n_files; fi++)
        for (int j = 0; j < st_count(s->files[fi]); j++) {
            const char *name = st_tensor(s->files[fi], j)->name;
            int known = (c->tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) ||
                        ends_with(name, ".rotary_emb.inv_freq");
            for (int i = 0; i < n && !known; i++) known = strcmp(ts[i].name, name) == 0;
            if (!known) {
                snprintf(err, errlen, "%s: unexpected tensor %s (not a weight of a LlamaForCausalLM with this config: "
                         "%d layers, %s embeddings)", st_path(s->files[fi]), name, c->num_hidden_layers,
                         c->tie_word_embeddings ? "tied" : "untied");
                return -1;
            }
        }
    return 0;
}

/* -1 with a message naming the tensor and element when one of the n values read is not finite: a model that would
 * compute NaN from its first token (damaged weights, or those of a run that diverged). */
static int check_finite(const char *dir, const HfTensor *t, size_t first, const float *v, size_t n, char *err,
                        size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            snprintf(err, errlen, "the weights of %s: tensor %s holds %s at element %zu: weights that are not finite "
                     "are damaged or come from a run that diverged", dir, t->name, isnan(v[i]) ? "NaN" : "an infinity",
                     first + i);
            return -1;
        }
    return 0;
}

static int load_tensor(Model *m, const char *dir, StFile *f, const StTensorInfo *info, const HfTensor *t, Transfer *x,
                       char *err, size_t errlen) {
    const ParamView *v = view_for(&m->table, t);
    size_t cols = (size_t)t->cols;
    for (size_t r0 = 0; r0 < (size_t)t->rows; r0 += x->chunk_rows) {
        RowChunk ch = chunk_at(t, r0, x->chunk_rows);
        size_t n_rows = ch.r1 - ch.r0, span_rows = ch.hi - ch.lo;
        if (st_read_f32(f, info, ch.r0 * cols, n_rows * cols, x->rows, err, errlen) ||
            check_finite(dir, t, ch.r0 * cols, x->rows, n_rows * cols, err, errlen))
            return -1;
        /* the span also holds rows of another HF tensor (gate/up): keep them */
        if (span_rows != n_rows) model_master_to_host(m, x->span, v->offset + ch.lo * cols, span_rows * cols);
        for (size_t r = ch.r0; r < ch.r1; r++)
            memcpy(x->span + (hf_internal_row(t, r) - ch.lo) * cols, x->rows + (r - ch.r0) * cols,
                   cols * sizeof(float));
        model_set_master(m, x->span, v->offset + ch.lo * cols, span_rows * cols);
    }
    return 0;
}

int hf_import_weights(Model *m, const char *dir, char *err, size_t errlen) {
    HfSource s = {0};
    int n = hf_tensor_count(&m->cfg);
    HfTensor *ts = calloc((size_t)n, sizeof(HfTensor));
    Transfer x = {0};
    int rc = -1;
    if (!ts) {
        snprintf(err, errlen, "the weights of %s: out of host memory", dir);
        goto done;
    }
    hf_tensor_list(&m->cfg, ts);
    if (source_open(&s, dir, err, errlen) || check_tensors(&s, &m->cfg, ts, n, err, errlen)) goto done;
    if (transfer_alloc(&x, &m->cfg, ts, n)) {
        snprintf(err, errlen, "the weights of %s: out of host memory", dir);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const StTensorInfo *info;
        StFile *f = source_find(&s, ts[i].name, &info);
        if (load_tensor(m, dir, f, info, &ts[i], &x, err, errlen)) goto done;
    }
    rc = 0;
done:
    transfer_free(&x);
    source_close(&s);
    free(ts);
    return rc;
}
