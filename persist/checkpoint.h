/* checkpoint.h: the checkpoint directories of a run.
 *
 * RUN/step_NNNNNNNN (8 digits: the optimizer steps completed; step_00000000 holds the initial weights) holds
 *   model.safetensors  the weights in Hugging Face names and layout (hf_weights.h), F32 or BF16 (export_dtype)
 *   config.json        a Hugging Face LlamaConfig: transformers' LlamaForCausalLM.from_pretrained(dir) loads the directory
 *   train_config.json  the full effective configuration (config_to_json)
 *   state.bin          the resume state (state_file.h); with the F32 export it refers to model.safetensors (its size and
 *                      CRC32) for the master weights instead of holding them a second time
 *   tokenizer.model    a copy of the run's tokenizer file when it has one (not for the byte vocabulary, which
 *                      train_config.json names), so that the directory generates text wherever it is copied
 * It is written as RUN/.step_NNNNNNNN.tmp, every file fsync'd, then renamed to step_NNNNNNNN and the run directory
 * fsync'd, so a directory named step_NNNNNNNN is always complete. Checkpoints are deleted through a rename to
 * RUN/.step_NNNNNNNN.deleting; leftovers of either kind (after a crash) are removed by checkpoint_clean_leftovers.
 *
 * A checkpoint is written from a snapshot: a host copy of the training state taken at a step boundary, so that
 * training can go on while the snapshot is written (checkpoint_writer.h). */
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

/* The training state of one step in host memory: what a checkpoint holds. */
typedef struct CheckpointSnapshot {
    const Kernels *k; /* whose host_alloc holds the buffers, */
    KernelContext *kc; /* in this context (the model's, which outlives the snapshot) */
    const ModelConfig *model;   /* the model's config and parameter table (the model outlives the snapshot) */
    const ParamTable *table;
    float *master, *adam_m, *adam_v; /* n_params each */
    int bf16_export;            /* export_dtype */
    TrainState state;
    char *train_config;         /* config_to_json of the run's configuration */
    char *tokenizer;            /* the bytes of the run's tokenizer file (NULL: none, e.g. the byte vocabulary) */
    size_t tokenizer_len;
    char tokenizer_path[CONFIG_PATH_MAX]; /* the file they were read from, once */
    int test_pause_ms;          /* the test hook's pause (TRAIN_TEST_CHECKPOINT_PAUSE_MS), 0 without it */
} CheckpointSnapshot;

/* Allocates the snapshot's buffers for model m in the host memory of its backend (page-locked for the GPU).
 * A test hook: with TRAIN_TEST_CHECKPOINT_PAUSE_MS=N in the environment, each checkpoint of this snapshot pauses N ms
 * in the middle of the snapshot (after the master weights, before the moments) and again once its files are complete,
 * before the rename, and first says so on stderr ("checkpoint test pause: snapshot of step S", "... rename of step S"),
 * so that tests/crash_consistency.py can kill the trainer at those moments. */
int checkpoint_snapshot_alloc(CheckpointSnapshot *snap, const Model *m, char *err, size_t errlen);
/* Copies m's master weights and AdamW moments, s and cfg into the snapshot (the backend's queue drains first), and
 * the file of cfg's tokenizer when it names one (read once; a run's tokenizer does not change). */
int checkpoint_snapshot_take(CheckpointSnapshot *snap, const Model *m, const Config *cfg, const TrainState *s,
                             char *err, size_t errlen);
void checkpoint_snapshot_free(CheckpointSnapshot *snap);
/* The host memory a snapshot of a model of n_params parameters takes. */
size_t checkpoint_snapshot_bytes(size_t n_params);

/* Writes the checkpoint of snap->state.step (replacing an existing one of that step only once the new one is
 * complete). Reads only the snapshot: it may run beside training. */
int checkpoint_write(const char *run_dir, const CheckpointSnapshot *snap, CheckpointStats *stats, char *err,
                     size_t errlen);
/* Snapshot and write in one call, waiting for both (the initial checkpoint, tests). */
int checkpoint_save(const char *run_dir, const Model *m, const Config *cfg, const TrainState *s,
                    CheckpointStats *stats, char *err, size_t errlen);

/* Deletes all but the newest keep_last complete checkpoints (keep_last 0: keeps all). */
int checkpoint_prune(const char *run_dir, int keep_last, char *err, size_t errlen);

/* Moves a damaged checkpoint to RUN/damaged_step_NNNNNNNN (then neither resumed nor pruned); its new path into
 * moved_to. */
int checkpoint_set_aside(const char *run_dir, uint64_t step, char *moved_to, size_t cap, char *err, size_t errlen);

/* Checks that dir holds the four files, that model.safetensors' header agrees with its size and that config.json
 * parses; the message names the file and the problem. */
int checkpoint_check_files(const char *dir, char *err, size_t errlen);
/* Reads dir/train_config.json (on top of the defaults) into cfg. */
int checkpoint_read_config(const char *dir, Config *cfg, char *err, size_t errlen);
/* Reads dir/state.bin into m and s, and checks that its step is the directory's; when state.bin refers to
 * model.safetensors for the master weights, checks that file's size and CRC32 and loads them from it. */
int checkpoint_load_state(const char *dir, uint64_t step, Model *m, TrainState *s, char *err, size_t errlen);

#endif
