/* ckpt_fixtures.h: helpers shared by the checkpoint tests (test_safetensors.c, test_hf_weights.c,
 * test_checkpoint.c, and the fuzz harnesses): a small model, temporary directories, whole-file byte access, a
 * sharded copy of a safetensors file. */
#ifndef CKPT_FIXTURES_H
#define CKPT_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "persist/checkpoint.h"
#include "persist/safetensors.h"
#include "persist/state_file.h"
#include "tests/small_model.h"
#include "util/fsutil.h"

/* A model of config c with the documented init of seed (and the Adam moments filled with something nonzero when
 * fill_moments, so that their round trip is meaningful). Exits on failure. */
static inline void create_model(Model *m, const ModelConfig *c, uint64_t seed, int fill_moments) {
    char err[512];
    if (model_create(m, c, &kernels_cpu, 2, 4, MODEL_GRADS_APART, err, sizeof(err))) {
        fprintf(stderr, "model_create: %s\n", err);
        exit(2);
    }
    model_init_weights(m, seed);
    for (size_t i = 0; fill_moments && i < m->table.n_params; i++) {
        m->adam_m[i] = 0.001f * (float)(i % 97) - 0.03f;
        m->adam_v[i] = 1e-6f * (float)(i % 89);
    }
}

/* What state.bin holds of a CPU model (whose buffers are host memory), its master weights included. */
static inline StateData host_state_data(const Model *m, TrainState s, const char *config_json) {
    StateData d = {&m->cfg, m->table.n_params, m->master, m->adam_m, m->adam_v, 0, 0, s, config_json};
    return d;
}

/* Loads checkpoint ck of step into a fresh CPU model of config c: 0 when it loads and holds these master weights (its
 * working copy too) and AdamW moments, bitwise; else -1 with why in err. */
static inline int checkpoint_holds(const char *ck, uint64_t step, const ModelConfig *c, const float *master,
                                   const float *adam_m, const float *adam_v, char *err, size_t errlen) {
    ModelConfig copy = *c;
    Model back;
    create_model(&back, &copy, 8, 0);
    TrainState r;
    size_t n = back.table.n_params * sizeof(float);
    int rc = checkpoint_load_state(ck, step, &back, &r, err, errlen);
    if (rc == 0 && (memcmp(back.master, master, n) || memcmp(back.weights, master, n) ||
                    memcmp(back.adam_m, adam_m, n) || memcmp(back.adam_v, adam_v, n))) {
        snprintf(err, errlen, "%s holds other values than expected", ck);
        rc = -1;
    }
    model_destroy(&back);
    return rc;
}

/* A fresh directory under /tmp; exits on failure. */
static inline void make_temp_dir(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "/tmp/%s_XXXXXX", tag);
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        exit(2);
    }
}

static inline void remove_temp_dir(const char *dir) {
    char err[256];
    if (fs_remove_tree(dir, err, sizeof(err))) fprintf(stderr, "%s\n", err);
}

/* The whole file (the caller frees it), or NULL. */
static inline unsigned char *read_bytes(const char *path, size_t *n) {
    char err[256];
    return (unsigned char *)fs_read_all(path, SIZE_MAX, n, err, sizeof(err));
}

static inline int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static inline int copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = read_bytes(from, &n);
    int rc = b ? write_bytes(to, b, n) : -1;
    free(b);
    return rc;
}

/* Flips the lowest bit of byte `offset` of the file. */
static inline int flip_byte(const char *path, size_t offset) {
    size_t n;
    unsigned char *b = read_bytes(path, &n);
    int rc = -1;
    if (b && offset < n) {
        b[offset] ^= 1;
        rc = write_bytes(path, b, n);
    }
    free(b);
    return rc;
}

/* Keeps only the first n bytes of the file. */
static inline int truncate_to(const char *path, size_t n) {
    size_t have;
    unsigned char *b = read_bytes(path, &have);
    int rc = b && n <= have ? write_bytes(path, b, n) : -1;
    free(b);
    return rc;
}

static inline int files_equal(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = read_bytes(a, &na), *y = read_bytes(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

/* Splits the safetensors file src into two shards, model-00001-of-00002.safetensors and model-00002-of-00002.safetensors,
 * and their model.safetensors.index.json, in shard_dir. */
static inline int write_shards(const char *src, const char *shard_dir, char *err, size_t errlen) {
    StFile *f = st_open(src, err, errlen);
    if (!f) return -1;
    int n = st_count(f), half = n / 2, rc = 0;
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    cJSON_AddObjectToObject(index, "metadata");
    for (int part = 0; part < 2 && rc == 0; part++) {
        int lo = part ? half : 0, hi = part ? n : half;
        char name[64], path[700];
        snprintf(name, sizeof(name), "model-%05d-of-00002.safetensors", part + 1);
        snprintf(path, sizeof(path), "%s/%s", shard_dir, name);
        StTensorInfo *infos = malloc((size_t)(hi - lo) * sizeof(StTensorInfo));
        for (int i = lo; i < hi; i++) {
            infos[i - lo] = *st_tensor(f, i);
            cJSON_AddStringToObject(map, infos[i - lo].name, name);
        }
        StWriter *w = st_writer_open(path, infos, hi - lo, err, errlen);
        rc = w ? 0 : -1;
        for (int i = lo; i < hi && rc == 0; i++) {
            size_t numel = (size_t)st_numel(&infos[i - lo]);
            float *v = malloc(numel * sizeof(float) + 4);
            rc = st_read_f32(f, st_tensor(f, i), 0, numel, v, err, errlen) || st_writer_append_f32(w, v, numel, err, errlen);
            free(v);
        }
        if (w) rc |= rc ? (st_writer_abort(w), -1) : st_writer_close(w, err, errlen);
        free(infos);
    }
    char *text = cJSON_Print(index), path[700];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", shard_dir);
    if (rc == 0) rc = write_bytes(path, text, strlen(text));
    free(text);
    cJSON_Delete(index);
    st_close(f);
    return rc;
}

#endif
