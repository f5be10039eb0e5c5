/* verify_checkpoints.c: verify_checkpoints RUN... loads every checkpoint (step_NNNNNNNN directory) of each run
 * directory through the trainer's own readers, as --resume would: the four files present, model.safetensors' header
 * consistent with its size, config.json and train_config.json parsed, state.bin read into a model of that config with
 * every CRC checked and its step the directory's; then model.safetensors imported into a second model (every tensor
 * present with its shape) and, for an F32 export, found bitwise equal to the master weights of state.bin.
 * Prints "ok DIR" or "damaged DIR: why" per checkpoint and "N checkpoints" per run; exit status 1 if any is damaged
 * or cannot be read. A helper of tests/test_crash_consistency.sh, not a test of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/config.h"
#include "model/model.h"
#include "persist/checkpoint.h"
#include "persist/hf_weights.h"
#include "persist/state_file.h"

/* One checkpoint directory: 0 if it loads, else -1 with the reason in err. */
static int verify_checkpoint(const char *dir, uint64_t step, char *err, size_t errlen) {
    Config cfg;
    if (checkpoint_check_files(dir, err, errlen) || checkpoint_read_config(dir, &cfg, err, errlen)) return -1;
    Model state_model, export_model;
    if (model_create(&state_model, &cfg.model, &kernels_cpu, 1, 1, MODEL_GRADS_APART, err, errlen)) return -1;
    if (model_create(&export_model, &cfg.model, &kernels_cpu, 1, 1, MODEL_GRADS_APART, err, errlen)) {
        model_destroy(&state_model);
        return -1;
    }
    TrainState state;
    int rc = checkpoint_load_state(dir, step, &state_model, &state, err, errlen);
    if (rc == 0) rc = hf_import_weights(&export_model, dir, err, errlen);
    if (rc == 0 && strcmp(cfg.train.export_dtype, "f32") == 0 &&
        memcmp(state_model.master, export_model.master, state_model.table.n_params * sizeof(float)) != 0) {
        snprintf(err, errlen, "%s: model.safetensors holds other weights than state.bin", dir);
        rc = -1;
    }
    model_destroy(&export_model);
    model_destroy(&state_model);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s RUN...\n", argv[0]);
        return 2;
    }
    int damaged = 0;
    for (int a = 1; a < argc; a++) {
        char err[4096];
        CheckpointList list;
        if (checkpoint_list(argv[a], &list, err, sizeof(err))) {
            printf("damaged %s: %s\n", argv[a], err);
            damaged++;
            continue;
        }
        for (int i = 0; i < list.n; i++) {
            char dir[CHECKPOINT_PATH_MAX];
            checkpoint_path(dir, sizeof(dir), argv[a], list.steps[i]);
            if (verify_checkpoint(dir, list.steps[i], err, sizeof(err))) {
                printf("damaged %s: %s\n", dir, err);
                damaged++;
            } else {
                printf("ok %s\n", dir);
            }
        }
        printf("%d checkpoints in %s\n", list.n, argv[a]);
        checkpoint_list_free(&list);
    }
    return damaged ? 1 : 0;
}
