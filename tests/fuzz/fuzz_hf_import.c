/* fuzz_hf_import.c: libFuzzer harness of the Hugging Face weight import (hf_import_weights, --init-from DIR) into
 * the fuzz model. The first byte picks the model (bit 0: tied embeddings) and the layout (bit 1: sharded); the rest
 * is split at FUZZ_SEPARATOR into files: one model.safetensors, or model.safetensors.index.json followed by the
 * shards, written as shard-1.safetensors, shard-2.safetensors, ... Property: an import that succeeds sets every
 * weight of the model from the files (two imports into the model filled with two different values beforehand give
 * the same bits). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "persist/hf_weights.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_model.h"

static Model models[2]; /* untied, tied */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int tied = 0; tied < 2; tied++) {
        ModelConfig c = fuzz_model_config(tied);
        create_model(&models[tied], &c, 1, 0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int tied = data[0] & 1, sharded = data[0] & 2;
    FuzzPart parts[FUZZ_MAX_PARTS];
    int n = fuzz_split(data + 1, size - 1, parts, FUZZ_MAX_PARTS);
    const char *dir = fuzz_scratch_dir();
    if (!sharded) {
        fuzz_write_file(dir, "model.safetensors", parts[0]);
    } else {
        fuzz_write_file(dir, "model.safetensors.index.json", parts[0]);
        for (int i = 1; i < n; i++) {
            char name[64];
            snprintf(name, sizeof(name), "shard-%d.safetensors", i);
            fuzz_write_file(dir, name, parts[i]);
        }
    }
    Model *m = &models[tied];
    size_t n_params = m->table.n_params;
    float *first = malloc(n_params * sizeof(float));
    if (!first) return 0;
    char err[2048];
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (size_t i = 0; i < n_params; i++) m->master[i] = pass ? -2.0f : 3.0f;
        rc = hf_import_weights(m, dir, err, sizeof(err));
        FUZZ_ASSERT(pass == 0 || rc == 0, "the second import of the same files failed: %s", err);
        if (pass == 0) memcpy(first, m->master, n_params * sizeof(float));
    }
    if (rc == 0)
        for (size_t i = 0; i < n_params; i++)
            FUZZ_ASSERT(memcmp(&first[i], &m->master[i], sizeof(float)) == 0,
                        "a successful import left parameter %zu as it was (%g, then %g)", i, first[i], m->master[i]);
    free(first);
    return 0;
}
