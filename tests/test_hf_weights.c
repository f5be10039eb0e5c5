/* test_hf_weights.c: Hugging Face import and export of the weights. The row maps between our layout and HF's are a
 * bijection onto every internal view and put known rows where HF has them (q/k heads un-interleaved, gate/up split);
 * an export holds every tensor with HF's name and shape and the un-interleaved rows; export + import gives the master
 * weights back bitwise (tied and untied, one file and sharded), and through BF16 gives the rounded weights; and each
 * bad input (missing, unexpected, misshapen or integer tensor, truncated file, missing untied LM head, a lying index)
 * is an error naming the file and the tensor that leaves the model untouched. */
#include <cjson/cJSON.h>
#include <string.h>

#include "persist/hf_layout.h"
#include "persist/hf_weights.h"
#include "persist/safetensors.h"
#include "tests/ckpt_fixtures.h"
#include "tests/test_util.h"

static char dir[256];

static void test_layout(void) {
    ModelConfig c = small_model_config(0);
    int n = hf_tensor_count(&c);
    HfTensor *ts = calloc((size_t)n, sizeof(HfTensor));
    hf_tensor_list(&c, ts);
    Model m;
    create_model(&m, &c, 1, 0);
    /* every internal row of every view is the image of exactly one HF row */
    int bijective = n == 9 * 2 + 3;
    for (int vi = 0; vi < m.table.n_views && bijective; vi++) {
        const ParamView *v = &m.table.views[vi];
        int *hits = calloc((size_t)v->rows, sizeof(int));
        for (int i = 0; i < n; i++) {
            if (strcmp(ts[i].view, v->name) != 0) continue;
            for (int r = 0; r < ts[i].rows; r++) {
                size_t ir = hf_internal_row(&ts[i], (size_t)r);
                if (ir < (size_t)v->rows) hits[ir]++;
                else bijective = 0;
            }
        }
        for (int r = 0; r < v->rows; r++) bijective &= hits[r] == 1;
        free(hits);
    }
    CHECK(bijective, "the %d HF tensors cover every row of every internal view exactly once", n);
    int hd = c.head_dim, half = hd / 2, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
    const HfTensor *q = &ts[1], *k = &ts[2], *v = &ts[3], *gate = &ts[5], *up = &ts[6];
    CHECK(strcmp(q->name, "model.layers.0.self_attn.q_proj.weight") == 0 && hf_internal_row(q, 1) == 2 &&
              hf_internal_row(q, (size_t)half) == 1 && hf_internal_row(q, (size_t)(hd + half + 1)) == (size_t)(hd + 3),
          "q_proj: HF rows 1, hd/2 and hd+hd/2+1 are internal rows 2, 1 and hd+3 (RoPE pairs interleaved)");
    CHECK(strcmp(k->name, "model.layers.0.self_attn.k_proj.weight") == 0 &&
              hf_internal_row(k, (size_t)half) == (size_t)(Hq * hd + 1) &&
              strcmp(v->name, "model.layers.0.self_attn.v_proj.weight") == 0 &&
              hf_internal_row(v, 3) == (size_t)((Hq + Hkv) * hd + 3),
          "k_proj rows follow the q heads (interleaved), v_proj rows follow the k heads (as they are)");
    CHECK(strcmp(gate->name, "model.layers.0.mlp.gate_proj.weight") == 0 && hf_internal_row(gate, 5) == 10 &&
              strcmp(up->name, "model.layers.0.mlp.up_proj.weight") == 0 && hf_internal_row(up, 5) == 11,
          "gate_proj row j is internal row 2j, up_proj row j is 2j+1");
    CHECK(strcmp(ts[n - 1].name, "lm_head.weight") == 0 && strcmp(ts[n - 2].name, "model.norm.weight") == 0 &&
              ts[n - 2].is_vector,
          "untied: lm_head.weight last, after the final norm (a vector)");
    ModelConfig tied = small_model_config(1);
    CHECK(hf_tensor_count(&tied) == n - 1, "tied: no lm_head.weight");
    model_destroy(&m);
    free(ts);
}

/* A value of master row `row` of a view, column col. */
static float master_at(const Model *m, const char *view, size_t row, size_t col) {
    const ParamView *v = model_find_param(m, view);
    return m->master[v->offset + row * (size_t)v->cols + col];
}

static void test_export_contents(void) {
    ModelConfig c = small_model_config(0);
    Model m;
    create_model(&m, &c, 5, 0);
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    int ok = hf_export_weights(&m, path, ST_F32, err, sizeof(err)) == 0;
    CHECK(ok, "export F32%s%s", ok ? "" : ": ", ok ? "" : err);
    StFile *f = ok ? st_open(path, err, sizeof(err)) : NULL;
    if (!f) {
        CHECK(0, "open the export: %s", err);
        model_destroy(&m);
        return;
    }
    int hd = c.head_dim, D = c.hidden_size;
    const StTensorInfo *q = st_find(f, "model.layers.1.self_attn.q_proj.weight");
    const StTensorInfo *up = st_find(f, "model.layers.0.mlp.up_proj.weight");
    const StTensorInfo *n1 = st_find(f, "model.layers.1.input_layernorm.weight");
    CHECK(st_count(f) == hf_tensor_count(&c) && q && q->shape[0] == c.num_attention_heads * hd && q->shape[1] == D &&
              up && up->shape[0] == c.intermediate_size && n1 && n1->ndim == 1 && n1->shape[0] == D &&
              st_find(f, "lm_head.weight") && st_find(f, "model.embed_tokens.weight"),
          "the export has HF's names and shapes ([out, in] matrices, [D] norm vectors)");
    float row[64];
    /* q_proj row hd/2 + 1 of head 1 (HF) is internal row hd + 3 of layers.1.wqkv */
    int q_ok = q && st_read_f32(f, q, (size_t)(hd + hd / 2 + 1) * D, (size_t)D, row, err, sizeof(err)) == 0;
    for (int col = 0; col < D && q_ok; col++) q_ok = row[col] == master_at(&m, "layers.1.wqkv", (size_t)hd + 3, col);
    CHECK(q_ok, "exported q_proj row hd+hd/2+1 is internal wqkv row hd+3: the RoPE pairs are un-interleaved");
    int up_ok = up && st_read_f32(f, up, 7 * (size_t)D, (size_t)D, row, err, sizeof(err)) == 0;
    for (int col = 0; col < D && up_ok; col++) up_ok = row[col] == master_at(&m, "layers.0.wgateup", 15, col);
    CHECK(up_ok, "exported up_proj row 7 is internal wgateup row 15");
    st_close(f);
    model_destroy(&m);
}

/* Exports a model of config c and imports it into a fresh one: the masters must be equal bitwise (dtype F32), or
 * the bf16 roundings of the original (BF16). */
static void check_round_trip(const char *label, int tied, StDtype dtype) {
    ModelConfig c = small_model_config(tied);
    Model a, b;
    create_model(&a, &c, 11, 0);
    create_model(&b, &c, 12, 0);
    char sub[512], path[600], err[1024];
    snprintf(sub, sizeof(sub), "%s/rt_%s", dir, label);
    fs_make_dirs(sub, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/model.safetensors", sub);
    int ok = hf_export_weights(&a, path, dtype, err, sizeof(err)) == 0 && hf_import_weights(&b, sub, err, sizeof(err)) == 0;
    size_t bad = 0;
    for (size_t i = 0; ok && i < a.table.n_params; i++) {
        float want = dtype == ST_BF16 ? st_bf16_to_f32(st_f32_to_bf16(a.master[i]))
                     : dtype == ST_F16 ? st_f16_to_f32(st_f32_to_f16(a.master[i])) : a.master[i];
        bad += memcmp(&b.master[i], &want, 4) != 0;
    }
    CHECK(ok && bad == 0, "%s: export + import gives the %s master weights (%zu of %zu differ)%s%s", label,
          dtype == ST_F32 ? "bitwise identical" : "rounded", bad, a.table.n_params, ok ? "" : ": ",
          ok ? "" : err);
    if (dtype != ST_F32 && ok) {
        char again[700];
        snprintf(again, sizeof(again), "%s/again.safetensors", sub);
        ok = hf_export_weights(&b, again, dtype, err, sizeof(err)) == 0 && files_equal(path, again);
        CHECK(ok, "%s: exporting the imported rounded weights again gives the same file byte for byte", label);
    }
    model_destroy(&a);
    model_destroy(&b);
}

static void test_sharded(void) {
    ModelConfig c = small_model_config(1);
    Model a, b;
    create_model(&a, &c, 21, 0);
    create_model(&b, &c, 22, 0);
    char one[512], shards[512], path[600], err[1024];
    snprintf(one, sizeof(one), "%s/single", dir);
    snprintf(shards, sizeof(shards), "%s/sharded", dir);
    fs_make_dirs(one, err, sizeof(err));
    fs_make_dirs(shards, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/model.safetensors", one);
    int ok = hf_export_weights(&a, path, ST_F32, err, sizeof(err)) == 0 && write_shards(path, shards, err, sizeof(err)) == 0 &&
             hf_import_weights(&b, shards, err, sizeof(err)) == 0;
    CHECK(ok && memcmp(a.master, b.master, a.table.n_params * 4) == 0,
          "two shards + model.safetensors.index.json import to the same weights bitwise%s%s", ok ? "" : ": ",
          ok ? "" : err);
    /* an index that puts a tensor in the wrong shard */
    char index[700];
    snprintf(index, sizeof(index), "%s/model.safetensors.index.json", shards);
    size_t n;
    char *text = (char *)read_bytes(index, &n);
    char *at = text ? strstr(text, "\"model.embed_tokens.weight\":\t\"model-00001") : NULL;
    if (at) {
        memcpy(strstr(at, "00001-of"), "00002-of", 8);
        write_bytes(index, text, n);
    }
    free(text);
    ok = at && hf_import_weights(&b, shards, err, sizeof(err)) != 0;
    CHECK(ok && strstr(err, index) && strstr(err, "model.embed_tokens.weight"),
          "an index that names the wrong shard for a tensor is an error naming the index and the tensor: %s", err);
    model_destroy(&a);
    model_destroy(&b);
}

/* ---------------------------------------------------------------- bad inputs */

/* Writes path with the given tensors (offsets assigned in order) and zero data, any dtype. */
static void write_zero_tensors(const char *path, const StTensorInfo *ts, int n, size_t cut) {
    cJSON *h = cJSON_CreateObject();
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, ts[i].name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(ts[i].dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < ts[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at));
        at += st_numel(&ts[i]) * st_dtype_size(ts[i].dtype);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at));
    }
    char *text = cJSON_PrintUnformatted(h);
    uint64_t hl = strlen(text);
    size_t total = 8 + hl + at - cut;
    unsigned char *b = calloc(1, 8 + hl + at);
    memcpy(b, &hl, 8);
    memcpy(b + 8, text, hl);
    if (write_bytes(path, b, total)) exit(2);
    free(b);
    free(text);
    cJSON_Delete(h);
}

/* The tensors of a correct export of c, as StTensorInfo (F32), into ts (room for hf_tensor_count(c) + 1). */
static int correct_tensors(const ModelConfig *c, StTensorInfo *ts) {
    int n = hf_tensor_count(c);
    HfTensor *hf = calloc((size_t)n, sizeof(HfTensor));
    hf_tensor_list(c, hf);
    for (int i = 0; i < n; i++) {
        memset(&ts[i], 0, sizeof(ts[i]));
        snprintf(ts[i].name, sizeof(ts[i].name), "%s", hf[i].name);
        ts[i].dtype = ST_F32;
        ts[i].ndim = hf[i].is_vector ? 1 : 2;
        ts[i].shape[0] = hf[i].is_vector ? hf[i].cols : hf[i].rows;
        ts[i].shape[1] = hf[i].cols;
    }
    free(hf);
    return n;
}

static int find_tensor(const StTensorInfo *ts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0) return i;
    fprintf(stderr, "no tensor %s\n", name);
    exit(2);
}

typedef enum { BAD_MISSING, BAD_EXTRA, BAD_SHAPE, BAD_DTYPE, BAD_TRUNCATED, BAD_NO_LM_HEAD, TIED_WITH_LM_HEAD } Bad;

/* Imports a damaged variant of a correct export; expects an error holding the file and `name` (and `word`), and
 * the model's weights untouched — or success for TIED_WITH_LM_HEAD. */
static void check_bad_import(const char *label, Bad bad, const char *name, const char *word) {
    ModelConfig c = small_model_config(bad == TIED_WITH_LM_HEAD);
    StTensorInfo ts[64];
    int n = correct_tensors(&c, ts);
    switch (bad) {
    case BAD_MISSING: {
        int i = find_tensor(ts, n, name);
        ts[i] = ts[n - 1];
        n--;
        break;
    }
    case BAD_EXTRA:
        ts[n] = ts[1];
        snprintf(ts[n++].name, ST_NAME_MAX, "%s", name);
        break;
    case BAD_SHAPE: {
        StTensorInfo *t = &ts[find_tensor(ts, n, name)];
        int64_t r = t->shape[0];
        t->shape[0] = t->shape[1];
        t->shape[1] = r;
        break;
    }
    case BAD_DTYPE: ts[find_tensor(ts, n, name)].dtype = ST_I32; break;
    case BAD_NO_LM_HEAD: n--; break;
    case TIED_WITH_LM_HEAD:
        ts[n] = ts[0];
        snprintf(ts[n++].name, ST_NAME_MAX, "lm_head.weight");
        break;
    case BAD_TRUNCATED: break;
    }
    char sub[512], path[600], err[1024] = "";
    snprintf(sub, sizeof(sub), "%s/bad_%d", dir, (int)bad);
    fs_make_dirs(sub, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/model.safetensors", sub);
    write_zero_tensors(path, ts, n, bad == BAD_TRUNCATED ? 100 : 0);
    Model m;
    create_model(&m, &c, 3, 0);
    float *before = malloc(m.table.n_params * 4);
    memcpy(before, m.master, m.table.n_params * 4);
    int rc = hf_import_weights(&m, sub, err, sizeof(err));
    if (bad == TIED_WITH_LM_HEAD) {
        CHECK(rc == 0, "%s: imports (the tied LM head is the embedding)%s%s", label, rc ? ": " : "", rc ? err : "");
    } else {
        CHECK(rc != 0 && strstr(err, path) && strstr(err, name) && (!word || strstr(err, word)) &&
                  memcmp(before, m.master, m.table.n_params * 4) == 0,
              "%s: an error naming the file and the tensor, the model untouched: %s", label, err);
    }
    free(before);
    model_destroy(&m);
}

static void test_bad_inputs(void) {
    check_bad_import("missing tensor", BAD_MISSING, "model.layers.1.mlp.down_proj.weight", "missing");
    check_bad_import("unexpected tensor", BAD_EXTRA, "model.layers.7.self_attn.q_proj.weight", "unexpected");
    check_bad_import("wrong shape", BAD_SHAPE, "model.layers.0.mlp.down_proj.weight", "shape");
    check_bad_import("wrong dtype", BAD_DTYPE, "model.layers.1.post_attention_layernorm.weight", "I32");
    check_bad_import("truncated file", BAD_TRUNCATED, "lm_head.weight", "truncated");
    check_bad_import("untied model without lm_head", BAD_NO_LM_HEAD, "lm_head.weight", "tie_word_embeddings");
    check_bad_import("tied model with an lm_head.weight", TIED_WITH_LM_HEAD, "", NULL);
    ModelConfig c = small_model_config(1);
    Model m;
    create_model(&m, &c, 3, 0);
    char empty[512], err[1024];
    snprintf(empty, sizeof(empty), "%s/empty", dir);
    fs_make_dirs(empty, err, sizeof(err));
    CHECK(hf_import_weights(&m, empty, err, sizeof(err)) != 0 && strstr(err, empty) &&
              strstr(err, "model.safetensors.index.json"),
          "a directory without weights: %s", err);
    model_destroy(&m);
}

int main(void) {
    make_temp_dir(dir, sizeof(dir), "test_hf_weights");
    test_layout();
    test_export_contents();
    check_round_trip("untied f32", 0, ST_F32);
    check_round_trip("tied f32", 1, ST_F32);
    check_round_trip("untied bf16", 0, ST_BF16);
    check_round_trip("tied f16", 1, ST_F16);
    test_sharded();
    test_bad_inputs();
    remove_temp_dir(dir);
    return test_summary();
}
