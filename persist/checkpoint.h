/* checkpoint.h: the checkpoint directories of a run.
 *
 * RUN/step_NNNNNNNN (8 digits: the optimizer steps completed; step_00000000 holds the initial weights) holds
 *   model.safetensors  the weights in Hugging Face names and layout (hf_weights.h), F32 or BF16 (export_dtype)
 *   config.json        a Hugging Face LlamaConfig: transformers' LlamaForCausalLM.from_pretrained(dir) loads the directory
 *   train_config.json  the full effective configuration (config_to_json)
 *   state.bin          the resume state (state_file.h)
 * It is written as RUN/.step_NNNNNNNN.tmp, every file fsync'd, then renamed to step_NNNNNNNN and the run directory
 * fsync'd, so a directory named step_NNNNNNNN is always complete. Checkpoints are deleted through a rename to
 * RUN/.step_NNNNNNNN.deleting; leftovers of either kind (after a crash) are removed by checkpoint_clean_leftovers. */
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/model.h"
#include "persist/state_file.h"

#define CHECKPOINT_PATH_MAX 1100

/* RUN/step_NNNNNNNN */
void checkpoint_path(char *out, size_t cap, const char *run_dir, uint64_t step);

/* The steps of the complete checkpoints of run_dir, ascending (a missing run_dir has none). */
typedef struct CheckpointList {
    uint64_t *steps;
    int n;
} CheckpointList;
int checkpoint_list(const char *run_dir, CheckpointList *list, char *err, size_t errlen);
void checkpoint_list_free(CheckpointList *list);

/* The directory of model weights that dir names (--generate): dir itself when it holds config.json (a checkpoint or
 * a Hugging Face directory), else the newest complete checkpoint of dir as a run directory. 0, or -1 with a message
 * when dir is neither (or does not exist). */
int checkpoint_model_dir(const char *dir, char *out, size_t cap, char *err, size_t errlen);

/* Removes the leftovers of interrupted writes and deletions (.step_*.tmp, .step_*.deleting), printing each. */
int checkpoint_clean_leftovers(const char *run_dir, char *err, size_t errlen);

typedef struct CheckpointStats {
    char path[CHECKPOINT_PATH_MAX];
    uint64_t bytes;
    double seconds;
} CheckpointStats;

/* Writes the checkpoint of step s->step (replacing an existing one of that step only once the new one is complete). */
int checkpoint_write(const char *run_dir, const Model *m, const Config *cfg, const TrainState *s,
                     CheckpointStats *stats, char *err, size_t errlen);

/* Deletes all but the newest keep_last complete checkpoints (keep_last 0: keeps all). */
int checkpoint_prune(const char *run_dir, int keep_last, char *err, size_t errlen);

/* Moves a damaged checkpoint to RUN/damaged_step_NNNNNNNN (then neither resumed nor pruned); its new path into
 * moved_to. */
int checkpoint_set_aside(const char *run_dir, uint64_t step, char *moved_to, size_t cap, char *err, size_t errlen);

/* Removes every checkpoint of run_dir, complete, partial or set aside (--overwrite). */
int checkpoint_remove_all(const char *run_dir, char *err, size_t errlen);

/* Checks that dir holds the four files, that model.safetensors' header agrees with its size and that config.json
 * parses; the message names the file and the problem. */
int checkpoint_check_files(const char *dir, char *err, size_t errlen);
/* Reads dir/train_config.json (on top of the defaults) into cfg. */
int checkpoint_read_config(const char *dir, Config *cfg, char *err, size_t errlen);
/* Reads dir/state.bin into m and s, and checks that its step is the directory's. */
int checkpoint_load_state(const char *dir, uint64_t step, Model *m, TrainState *s, char *err, size_t errlen);

#endif
