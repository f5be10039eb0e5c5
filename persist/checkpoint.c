/* checkpoint.c: writing checkpoint directories atomically, listing, pruning and cleaning them, and reading one back
 * (see checkpoint.h). */
#include "persist/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "persist/hf_config.h"
#include "persist/hf_weights.h"
#include "persist/safetensors.h"
#include "util/fsutil.h"

static const char *FILES[] = {"model.safetensors", "config.json", "train_config.json", "state.bin"};
/* beside them when the run's tokenizer is a file */
static const char TOKENIZER_FILE[] = "tokenizer.model";
#define N_FILES ((int)(sizeof(FILES) / sizeof(FILES[0])))

void checkpoint_path(char *out, size_t cap, const char *run_dir, uint64_t step) {
    snprintf(out, cap, "%s/step_%08llu", run_dir, (unsigned long long)step);
}

/* RUN/.step_NNNNNNNN.SUFFIX */
static void hidden_path(char *out, size_t cap, const char *run_dir, uint64_t step, const char *suffix) {
    snprintf(out, cap, "%s/.step_%08llu.%s", run_dir, (unsigned long long)step, suffix);
}

/* The step of a name "<prefix>NNNNNNNN<suffix>" (exactly 8 digits), or -1. */
static int64_t parse_step_name(const char *name, const char *prefix, const char *suffix) {
    size_t np = strlen(prefix), ns = strlen(suffix), n = strlen(name);
    if (n != np + 8 + ns || strncmp(name, prefix, np) != 0 || strcmp(name + np + 8, suffix) != 0) return -1;
    int64_t step = 0;
    for (size_t i = np; i < np + 8; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int checkpoint_list(const char *run_dir, CheckpointList *list, char *err, size_t errlen) {
    list->steps = NULL;
    list->n = 0;
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "cannot read the run directory %s: %s", run_dir, strerror(errno));
        return -1;
    }
    int cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step = parse_step_name(e->d_name, "step_", "");
        char path[CHECKPOINT_PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", run_dir, e->d_name);
        if (step < 0 || !fs_is_dir(path)) continue;
        if (list->n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *grown = realloc(list->steps, (size_t)cap * sizeof(uint64_t));
            if (!grown) {
                snprintf(err, errlen, "out of memory listing %s", run_dir);
                rc = -1;
                break;
            }
            list->steps = grown;
        }
        list->steps[list->n++] = (uint64_t)step;
    }
    closedir(d);
    if (rc) checkpoint_list_free(list);
    else if (list->n) qsort(list->steps, (size_t)list->n, sizeof(uint64_t), cmp_u64);
    return rc;
}

void checkpoint_list_free(CheckpointList *list) {
    free(list->steps);
    list->steps = NULL;
    list->n = 0;
}

/* Removes the entries of run_dir whose name matches prefix + 8 digits + one of the suffixes; verbose prints them. */
static int remove_matching(const char *run_dir, const char *prefix, const char *const *suffixes, int n_suffixes,
                           int verbose, char *err, size_t errlen) {
    DIR *d = opendir(run_dir);
    if (!d) return errno == ENOENT ? 0 : (snprintf(err, errlen, "cannot read %s: %s", run_dir, strerror(errno)), -1);
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        int match = 0;
        for (int i = 0; i < n_suffixes; i++) match |= parse_step_name(e->d_name, prefix, suffixes[i]) >= 0;
        if (!match) continue;
        char path[CHECKPOINT_PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", run_dir, e->d_name);
        rc = fs_remove_tree(path, err, errlen);
        if (rc == 0 && verbose) printf("removed %s (left by an interrupted checkpoint write or deletion)\n", path);
    }
    closedir(d);
    return rc;
}

int checkpoint_model_dir(const char *dir, char *out, size_t cap, char *err, size_t errlen) {
    char config[CHECKPOINT_PATH_MAX];
    snprintf(config, sizeof(config), "%s/config.json", dir);
    if (!fs_is_dir(dir)) {
        snprintf(err, errlen, "%s is not a directory (a checkpoint, a run directory or a Hugging Face model)", dir);
        return -1;
    }
    if (fs_exists(config)) {
        snprintf(out, cap, "%s", dir);
        return 0;
    }
    CheckpointList list;
    if (checkpoint_list(dir, &list, err, errlen)) return -1;
    if (list.n == 0) {
        snprintf(err, errlen, "%s holds neither a config.json (a checkpoint or a Hugging Face model) nor a complete "
                 "checkpoint step_NNNNNNNN (a run directory)", dir);
        return -1;
    }
    checkpoint_path(out, cap, dir, list.steps[list.n - 1]);
    checkpoint_list_free(&list);
    return 0;
}

int checkpoint_clean_leftovers(const char *run_dir, char *err, size_t errlen) {
    static const char *const suffixes[] = {".tmp", ".deleting"};
    return remove_matching(run_dir, ".step_", suffixes, 2, 1, err, errlen);
}

/* Renames a complete checkpoint out of sight (so it never looks complete half-deleted), then deletes it. */
static int delete_checkpoint(const char *run_dir, uint64_t step, char *err, size_t errlen) {
    char path[CHECKPOINT_PATH_MAX], doomed[CHECKPOINT_PATH_MAX];
    checkpoint_path(path, sizeof(path), run_dir, step);
    hidden_path(doomed, sizeof(doomed), run_dir, step, "deleting");
    if (fs_remove_tree(doomed, err, errlen)) return -1;
    if (rename(path, doomed) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", path, doomed, strerror(errno));
        return -1;
    }
    if (fs_sync_dir(run_dir, err, errlen)) return -1;
    return fs_remove_tree(doomed, err, errlen);
}

int checkpoint_prune(const char *run_dir, int keep_last, char *err, size_t errlen) {
    if (keep_last <= 0) return 0;
    CheckpointList list;
    if (checkpoint_list(run_dir, &list, err, errlen)) return -1;
    int rc = 0;
    for (int i = 0; i + keep_last < list.n && rc == 0; i++) rc = delete_checkpoint(run_dir, list.steps[i], err, errlen);
    checkpoint_list_free(&list);
    return rc;
}

int checkpoint_set_aside(const char *run_dir, uint64_t step, char *moved_to, size_t cap, char *err, size_t errlen) {
    char path[CHECKPOINT_PATH_MAX];
    checkpoint_path(path, sizeof(path), run_dir, step);
    snprintf(moved_to, cap, "%s/damaged_step_%08llu", run_dir, (unsigned long long)step);
    if (fs_remove_tree(moved_to, err, errlen)) return -1;
    if (rename(path, moved_to) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", path, moved_to, strerror(errno));
        return -1;
    }
    return fs_sync_dir(run_dir, err, errlen);
}

/* ---------------------------------------------------------------- writing */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

size_t checkpoint_snapshot_bytes(size_t n_params) { return size_mul(size_mul(3, n_params), sizeof(float)); }

/* The test hook of checkpoint_snapshot_alloc. */
static void test_pause(const CheckpointSnapshot *snap, const char *phase) {
    if (snap->test_pause_ms <= 0) return;
    fprintf(stderr, "checkpoint test pause: %s of step %llu\n", phase, (unsigned long long)snap->state.step);
    fflush(stderr);
    struct timespec ts = {snap->test_pause_ms / 1000, (long)(snap->test_pause_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int checkpoint_snapshot_alloc(CheckpointSnapshot *snap, const Model *m, char *err, size_t errlen) {
    memset(snap, 0, sizeof(*snap));
    const char *pause = getenv("TRAIN_TEST_CHECKPOINT_PAUSE_MS");
    snap->test_pause_ms = pause ? atoi(pause) : 0;
    snap->k = m->k;
    snap->kc = m->kc;
    snap->model = &m->cfg;
    snap->table = &m->table;
    const size_t bytes = m->table.n_params * sizeof(float);
    float **bufs[3] = {&snap->master, &snap->adam_m, &snap->adam_v};
    for (int i = 0; i < 3; i++)
        if (!(*bufs[i] = m->k->host_alloc(m->kc, bytes))) {
            checkpoint_snapshot_free(snap);
            snprintf(err, errlen, "out of host memory for the checkpoint snapshot (3 x %.2f GiB)",
                     bytes / 1073741824.0);
            return -1;
        }
    return 0;
}

/* The bytes of the tokenizer file that spec names ("byte", "auto" or "" name none) into the snapshot, unless they
 * are there already. */
static int snapshot_tokenizer(CheckpointSnapshot *snap, const char *spec, char *err, size_t errlen) {
    const int none = !spec[0] || strcmp(spec, "byte") == 0 || strcmp(spec, "auto") == 0;
    if (!none && snap->tokenizer && strcmp(spec, snap->tokenizer_path) == 0) return 0;
    free(snap->tokenizer);
    snap->tokenizer = NULL;
    snap->tokenizer_len = 0;
    snap->tokenizer_path[0] = 0;
    if (none) return 0;
    char inner[512];
    if (!(snap->tokenizer = fs_read_all(spec, SIZE_MAX, &snap->tokenizer_len, inner, sizeof(inner)))) {
        snprintf(err, errlen, "the tokenizer file that checkpoints copy: %s", inner);
        return -1;
    }
    snprintf(snap->tokenizer_path, sizeof(snap->tokenizer_path), "%s", spec);
    return 0;
}

int checkpoint_snapshot_take(CheckpointSnapshot *snap, const Model *m, const Config *cfg, const TrainState *s,
                             char *err, size_t errlen) {
    const size_t bytes = m->table.n_params * sizeof(float);
    snap->state = *s;
    model_master_to_host(m, snap->master, 0, m->table.n_params);
    test_pause(snap, "snapshot");
    m->k->copy_to_host(m->kc, snap->adam_m, m->adam_m, bytes);
    m->k->copy_to_host(m->kc, snap->adam_v, m->adam_v, bytes);
    snap->bf16_export = strcmp(cfg->train.export_dtype, "bf16") == 0;
    free(snap->train_config);
    if (!(snap->train_config = config_to_json(cfg))) {
        snprintf(err, errlen, "the checkpoint of step %llu: out of host memory", (unsigned long long)s->step);
        return -1;
    }
    return snapshot_tokenizer(snap, cfg->train.tokenizer, err, errlen);
}

void checkpoint_snapshot_free(CheckpointSnapshot *snap) {
    if (snap->k) {
        snap->k->host_free(snap->kc, snap->master);
        snap->k->host_free(snap->kc, snap->adam_m);
        snap->k->host_free(snap->kc, snap->adam_v);
    }
    free(snap->train_config);
    free(snap->tokenizer);
    memset(snap, 0, sizeof(*snap));
}

/* The four files of a checkpoint, into the (new, empty) directory dir. */
static int write_files(const char *dir, const CheckpointSnapshot *snap, char *err, size_t errlen) {
    const int bf16 = snap->bf16_export;
    char path[CHECKPOINT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    const HfMaster src = {snap->model, snap->table, snap->master, NULL};
    uint32_t crc;
    uint64_t bytes;
    if (hf_export_master(&src, path, bf16 ? ST_BF16 : ST_F32, &crc, &bytes, err, errlen)) return -1;
    char *hf = hf_export_config(snap->model, bf16 ? "bfloat16" : "float32");
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if (!hf) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int rc = fs_write_durable(path, hf, strlen(hf), err, errlen);
    free(hf);
    if (rc) return -1;
    /* the F32 export is the master weights: state.bin refers to it instead of holding them twice */
    const StateData d = {snap->model, snap->table->n_params, bf16 ? snap->master : NULL, snap->adam_m, snap->adam_v,
                         bytes, crc, snap->state, snap->train_config};
    snprintf(path, sizeof(path), "%s/state.bin", dir);
    if (state_write(path, &d, err, errlen)) return -1;
    snprintf(path, sizeof(path), "%s/%s", dir, TOKENIZER_FILE);
    if (snap->tokenizer && fs_write_durable(path, snap->tokenizer, snap->tokenizer_len, err, errlen)) return -1;
    snprintf(path, sizeof(path), "%s/train_config.json", dir);
    return fs_write_durable(path, snap->train_config, strlen(snap->train_config), err, errlen);
}

int checkpoint_write(const char *run_dir, const CheckpointSnapshot *snap, CheckpointStats *stats, char *err,
                     size_t errlen) {
    double t0 = now_seconds();
    const TrainState *s = &snap->state;
    char tmp[CHECKPOINT_PATH_MAX], final[CHECKPOINT_PATH_MAX], old[CHECKPOINT_PATH_MAX];
    hidden_path(tmp, sizeof(tmp), run_dir, s->step, "tmp");
    hidden_path(old, sizeof(old), run_dir, s->step, "deleting");
    checkpoint_path(final, sizeof(final), run_dir, s->step);
    if (fs_remove_tree(tmp, err, errlen) || fs_make_dirs(tmp, err, errlen)) return -1;
    if (write_files(tmp, snap, err, errlen) || fs_sync_dir(tmp, err, errlen)) {
        char ignored[256];
        fs_remove_tree(tmp, ignored, sizeof(ignored));
        return -1;
    }
    test_pause(snap, "rename");
    /* An existing checkpoint of this step (one written before a resume from an older one) goes only now. */
    int replacing = fs_exists(final);
    if (replacing) {
        if (fs_remove_tree(old, err, errlen)) return -1;
        if (rename(final, old) != 0) {
            snprintf(err, errlen, "cannot rename %s to %s: %s", final, old, strerror(errno));
            return -1;
        }
    }
    if (rename(tmp, final) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        return -1;
    }
    if (fs_sync_dir(run_dir, err, errlen) || (replacing && fs_remove_tree(old, err, errlen))) return -1;
    snprintf(stats->path, sizeof(stats->path), "%s", final);
    stats->bytes = 0;
    for (int i = 0; i < N_FILES + (snap->tokenizer != NULL); i++) {
        char path[CHECKPOINT_PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/%s", final, i < N_FILES ? FILES[i] : TOKENIZER_FILE);
        int64_t size = fs_file_size(path, err, errlen);
        if (size < 0) return -1;
        stats->bytes += (uint64_t)size;
    }
    stats->seconds = now_seconds() - t0;
    return 0;
}

int checkpoint_save(const char *run_dir, const Model *m, const Config *cfg, const TrainState *s,
                    CheckpointStats *stats, char *err, size_t errlen) {
    CheckpointSnapshot snap;
    if (checkpoint_snapshot_alloc(&snap, m, err, errlen)) return -1;
    int rc = checkpoint_snapshot_take(&snap, m, cfg, s, err, errlen);
    if (rc == 0) rc = checkpoint_write(run_dir, &snap, stats, err, errlen);
    checkpoint_snapshot_free(&snap);
    return rc;
}

/* ---------------------------------------------------------------- reading */

int checkpoint_check_files(const char *dir, char *err, size_t errlen) {
    char path[CHECKPOINT_PATH_MAX + 32];
    for (int i = 0; i < N_FILES; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, FILES[i]);
        struct stat st;
        if (lstat(path, &st) != 0) {
            if (errno == ENOENT) snprintf(err, errlen, "%s is missing", path);
            else snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            return -1;
        }
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    StFile *f = st_open(path, err, errlen);
    if (!f) return -1;
    st_close(f);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    cJSON *hf = fs_read_json(path, path, err, errlen);
    if (!hf) return -1;
    cJSON_Delete(hf);
    return 0;
}

int checkpoint_read_config(const char *dir, Config *cfg, char *err, size_t errlen) {
    char path[CHECKPOINT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/train_config.json", dir);
    config_defaults(cfg);
    return config_load_file(cfg, path, err, errlen);
}

int checkpoint_load_state(const char *dir, uint64_t step, Model *m, TrainState *s, char *err, size_t errlen) {
    char path[CHECKPOINT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/state.bin", dir);
    StateInfo info;
    if (state_read(path, m, s, NULL, &info, err, errlen)) return -1;
    if (s->step != step) {
        snprintf(err, errlen, "state %s is of step %llu, but its directory says step %llu", path,
                 (unsigned long long)s->step, (unsigned long long)step);
        return -1;
    }
    if (!info.master_in_weights) return 0;
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    uint32_t crc;
    uint64_t bytes;
    if (fs_file_crc32(path, &crc, &bytes, err, errlen)) return -1;
    if (bytes != info.weights_bytes || crc != info.weights_crc) {
        snprintf(err, errlen, "%s is %llu bytes with CRC32 %08x, but state.bin holds the master weights as a file of "
                 "%llu bytes with CRC32 %08x: the file is damaged", path, (unsigned long long)bytes, crc,
                 (unsigned long long)info.weights_bytes, info.weights_crc);
        return -1;
    }
    return hf_import_weights(m, dir, err, errlen);
}
