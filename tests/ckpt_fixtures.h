/* ckpt_fixtures.h: helpers shared by the checkpoint tests (test_safetensors.c, test_hf_weights.c,
 * test_checkpoint.c): a small model, temporary directories, whole-file byte access. */
#ifndef CKPT_FIXTURES_H
#define CKPT_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/fsutil.h"
#include "model/model.h"
#include "tests/small_model.h"

/* A model of config c with the documented init of seed (and the Adam moments filled with something nonzero when
 * fill_moments, so that their round trip is meaningful). Exits on failure. */
static inline void create_model(Model *m, const ModelConfig *c, uint64_t seed, int fill_moments) {
    char err[512];
    if (model_create(m, c, &kernels_cpu, 2, 4, err, sizeof(err))) {
        fprintf(stderr, "model_create: %s\n", err);
        exit(2);
    }
    model_init_weights(m, seed);
    for (size_t i = 0; fill_moments && i < m->table.n_params; i++) {
        m->adam_m[i] = 0.001f * (float)(i % 97) - 0.03f;
        m->adam_v[i] = 1e-6f * (float)(i % 89);
    }
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
    return (unsigned char *)fs_read_all(path, n, err, sizeof(err));
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

#endif
