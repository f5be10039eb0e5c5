/* fuzz_input.h: what the fuzz harnesses share: one fuzz input split into several parts (files of a directory, the
 * arguments of a command line), a private scratch directory (on tmpfs where there is one) for the readers that take
 * paths, and a trap for a broken property. A harness's own failure (no scratch directory) aborts: it is not a finding
 * about the reader, and libFuzzer reports it as a crash. */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/ckpt_fixtures.h"
#include "util/fsutil.h"

/* The separator between the parts of a multi-file input (seed corpora are built with it: tests/fuzz/fuzz_seeds.c). */
#define FUZZ_SEPARATOR "@@PART@@"
#define FUZZ_MAX_PARTS 8

typedef struct FuzzPart {
    const uint8_t *data;
    size_t size;
} FuzzPart;

/* Splits data at each FUZZ_SEPARATOR into at most max parts (the last part keeps any further separators); returns
 * the count (at least 1). */
static inline int fuzz_split(const uint8_t *data, size_t size, FuzzPart *parts, int max) {
    const size_t sep = sizeof(FUZZ_SEPARATOR) - 1;
    int n = 0;
    for (;;) {
        const uint8_t *at = n + 1 < max ? memmem(data, size, FUZZ_SEPARATOR, sep) : NULL;
        if (!at) break;
        parts[n++] = (FuzzPart){data, (size_t)(at - data)};
        size -= (size_t)(at - data) + sep;
        data = at + sep;
    }
    parts[n++] = (FuzzPart){data, size};
    return n;
}

/* Stops the fuzzer with a message when a property of a reader does not hold. */
#define FUZZ_ASSERT(cond, ...)                                      \
    do {                                                            \
        if (!(cond)) {                                              \
            fprintf(stderr, "fuzz property broken: " __VA_ARGS__);  \
            fprintf(stderr, "\n");                                  \
            abort();                                                \
        }                                                           \
    } while (0)

static char fuzz_dir_path[256];

static void fuzz_remove_dir(void) {
    char err[256];
    if (fuzz_dir_path[0] && fs_remove_tree(fuzz_dir_path, err, sizeof(err))) fprintf(stderr, "%s\n", err);
}

/* The harness's scratch directory, emptied: created on the first call under $FUZZ_SCRATCH (where
 * tests/fuzz/run_fuzzers.sh puts one that it removes afterwards, as a crash skips the exit handlers), else /dev/shm,
 * $TMPDIR or /tmp, and removed when the process exits. */
static inline const char *fuzz_scratch_dir(void) {
    char err[256];
    if (!fuzz_dir_path[0]) {
        const char *base = getenv("FUZZ_SCRATCH");
        if (!base) base = fs_is_dir("/dev/shm") ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(fuzz_dir_path, sizeof(fuzz_dir_path), "%s/trainer_fuzz_XXXXXX", base);
        if (!mkdtemp(fuzz_dir_path)) {
            perror(fuzz_dir_path);
            abort();
        }
        atexit(fuzz_remove_dir);
        return fuzz_dir_path;
    }
    if (fs_remove_tree(fuzz_dir_path, err, sizeof(err)) || mkdir(fuzz_dir_path, 0700) != 0) {
        fprintf(stderr, "cannot empty the scratch directory %s: %s\n", fuzz_dir_path, err);
        abort();
    }
    return fuzz_dir_path;
}

/* Writes dir/name with the bytes of part. */
static inline void fuzz_write_file(const char *dir, const char *name, FuzzPart part) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (write_bytes(path, part.data, part.size) != 0) {
        perror(path);
        abort();
    }
}

#endif
