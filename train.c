/* train.c: the training program. Reads the config and flags, builds the model on the chosen backend (random init,
 * Hugging Face weights with --init-from, or the newest checkpoint with --resume), and runs the loop: gradient
 * accumulation over micro-batches, clipped AdamW, a JSONL record per step and a progress line every --log-every steps
 * (with the MFU on a known GPU, the elapsed time and the ETA), validation loss and a text sample every N steps,
 * checkpoints every N steps, at the end and on SIGINT/SIGTERM, and a summary at the end (cli/progress.h). With
 * --generate DIR it only prints text from a model (cli/generate.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/data_hints.h"
#include "cli/generate.h"
#include "cli/progress.h"
#include "cli/train_help.h"
#include "data/dataloader.h"
#include "data/meta.h"
#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/train_step.h"
#include "model/sampler.h"
#include "persist/checkpoint.h"
#include "persist/checkpoint_writer.h"
#include "persist/hf_weights.h"
#include "persist/run_dir.h"
#include "persist/run_lock.h"
#include "persist/run_replace.h"
#include "persist/state_file.h"
#include "util/fsutil.h"
#include "util/utf8.h"

#define ERRLEN 1024

/* The run's checkpoint writer, once made: an error ends the program only after the checkpoint it is writing is
 * complete. */
static CheckpointWriter *active_writer;
/* The run directory's lock, once taken: an error settles a replacement under way (run_replace.h), then releases it. */
static RunLock *held_lock;

/* Ends the hold on the run directory: a new run without a complete checkpoint is undone, then the lock goes. */
static void release_run_dir(void) {
    if (!held_lock) return;
    RunLock *lock = held_lock;
    held_lock = NULL;
    char err[ERRLEN];
    if (run_replace_settle(lock->dir, "this run", stderr, err, sizeof(err))) fprintf(stderr, "error: %s\n", err);
    run_lock_release(lock);
}

/* The program's end on an error: the message, then (after a checkpoint write in flight has ended) exit status 1.
 * _exit after flushing, not exit: what is allocated at that moment goes back with the process, so no exit handler
 * may take it for a leak (LeakSanitizer's would, for a buffer whose pointer the compiler left in a register,
 * depending on the optimization level). */
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (active_writer && checkpoint_writer_busy(active_writer)) {
        fprintf(stderr, "waiting for the checkpoint write of step %llu to end before stopping\n",
                (unsigned long long)checkpoint_writer_step(active_writer));
        fflush(NULL);
        CheckpointDone d;
        checkpoint_writer_wait(active_writer, &d);
        if (d.failed) fprintf(stderr, "the checkpoint of step %llu failed too: %s\n", (unsigned long long)d.step, d.err);
        else fprintf(stderr, "checkpoint %s is complete\n", d.stats.path);
    }
    release_run_dir();
    fflush(NULL);
    _exit(1);
}

static volatile sig_atomic_t stop_requested = 0;
static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
    static const char msg[] = "\nsignal received: finishing this step, then writing a checkpoint (send it again to "
                              "stop at once)\n";
    ssize_t ignored = write(2, msg, sizeof(msg) - 1);
    (void)ignored;
}

/* SIGINT/SIGTERM: finish the step, checkpoint, exit 0. A second signal takes the default action (SA_RESETHAND). */
static void install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The backend for --device and --fusion: the GPU when one is usable and the model's head dim is one its attention
 * kernels take, else the CPU (auto) or a clear error (cuda). */
static const Kernels *pick_backend(const char *device, const char *fusion, int head_dim) {
#ifdef WITH_CUDA
    if (strcmp(device, "cpu") != 0) {
        char why[256];
        if (!kernels_cuda_available(why, sizeof(why))) {
            if (strcmp(device, "cuda") == 0) die("--device cuda: %s", why);
            fprintf(stderr, "note: %s; training on the CPU\n", why);
        } else if (!kernels_cuda_supports_head_dim(head_dim)) {
            if (strcmp(device, "cuda") == 0)
                die("--device cuda: the CUDA attention kernels take head_dim 64 or 128; this model's is %d", head_dim);
            fprintf(stderr, "note: the CUDA attention kernels take head_dim 64 or 128, this model's is %d; training on "
                            "the CPU\n", head_dim);
        } else {
            return strcmp(fusion, "off") == 0 ? &kernels_cuda : &kernels_cuda_fused;
        }
    }
#else
    (void)fusion;
    (void)head_dim;
    if (strcmp(device, "cuda") == 0)
        die("--device cuda: this ./train was built without the CUDA backend (build with nvcc on PATH)");
#endif
    return &kernels_cpu;
}

/* The unit that shows a size: GiB with 2 decimals from 1 GiB up, else MiB with 1. */
typedef struct SizeUnit {
    double bytes;
    int digits;
    const char *name;
} SizeUnit;

static SizeUnit size_unit(size_t bytes) {
    return bytes >= (1u << 30) ? (SizeUnit){1073741824.0, 2, "GiB"} : (SizeUnit){1048576.0, 1, "MiB"};
}

/* bytes as "27.93 GiB" or "52.3 MiB". */
static const char *size_text(char buf[32], size_t bytes) {
    const SizeUnit u = size_unit(bytes);
    snprintf(buf, 32, "%.*f %s", u.digits, bytes / u.bytes, u.name);
    return buf;
}

/* The host memory of the checkpoint snapshot beside a model on the GPU (a CPU model's is counted with the model):
 * printed, and checked against what the host has. */
static void check_snapshot_memory(size_t snapshot) {
    const size_t avail = kernels_cpu.available_bytes();
    char need[32], have[32];
    printf("host memory: %s needed for the checkpoint snapshot, ", size_text(need, snapshot));
    if (avail != SIZE_MAX) printf("%s available\n", size_text(have, avail));
    else printf("the host memory available is unknown\n");
    fflush(stdout);
    if (snapshot > avail)
        die("not enough host memory: the checkpoint snapshot (the master weights and AdamW moments, copied off the GPU "
            "so that training goes on while a checkpoint is written) needs %s and %s is available", need, have);
}

/* The memory preflight, before the model is allocated: prints what the run needs of the backend's memory (and of the
 * host's for the checkpoint snapshot) and what is available, and stops with what to lower when it is not there. */
static void check_memory(const ModelConfig *mc, const Kernels *k, const TrainConfig *t, const char *cfg_path) {
    ModelMemory mem;
    const ModelLayout layout = model_layout_for(config_micro_steps(t));
    if (model_memory(mc, k, t->batch_size, t->seq_len, layout, &mem)) die("out of host memory for the model tables");
    /* the step's micro-batches, beside the model's own (counted with the activations) */
    const size_t slots = train_step_bytes(t->batch_size, t->seq_len, (int)config_micro_steps(t));
    mem.activations = size_add(mem.activations, slots);
    mem.total = size_add(mem.total, slots);
    const size_t snapshot = checkpoint_snapshot_bytes(mem.n_params);
    const int on_host = k->device_name == NULL; /* the snapshot is in the backend's own memory */
    if (on_host) mem.total = size_add(mem.total, snapshot);
    const size_t avail = k->available_bytes();
    const SizeUnit u = size_unit(mem.total); /* the parts in the total's unit */
    char need[32], have[32], part[32], rest[32], snap[48] = "";
    if (on_host) snprintf(snap, sizeof(snap), ", checkpoint snapshot %.*f", u.digits, snapshot / u.bytes);
    printf("memory: %s needed (params %.*f, grads %.*f, adam %.*f, activations %.*f, workspace %.*f%s), ",
           size_text(need, mem.total), u.digits, mem.params / u.bytes, u.digits, mem.grads / u.bytes, u.digits,
           mem.adam / u.bytes, u.digits, mem.activations / u.bytes, u.digits, mem.workspace / u.bytes, snap);
    if (avail != SIZE_MAX) printf("%s of %s available\n", size_text(have, avail), k->memory_name);
    else printf("the %s available is unknown\n", k->memory_name);
    fflush(stdout);
    if (mem.total <= avail) {
        if (!on_host) check_snapshot_memory(snapshot);
        return;
    }
    size_t model_bytes = size_add(size_add(mem.params, mem.grads), mem.adam);
    if (on_host) model_bytes = size_add(model_bytes, snapshot);
    const size_t batch_bytes = size_add(mem.activations, mem.workspace);
    if (model_bytes >= avail)
        die("not enough %s: this run needs %s and %s is available, and the model alone (its parameters, gradients and "
            "AdamW state%s) takes %s: use a smaller model (hidden_size, intermediate_size, num_hidden_layers, "
            "vocab_size of %s)", k->memory_name, need, have, on_host ? ", and their checkpoint snapshot" : "",
            size_text(part, model_bytes), cfg_path);
    char other[160] = "";
    ModelMemory lean;
    if (k->leaner && model_memory(mc, k->leaner, t->batch_size, t->seq_len, layout, &lean) == 0 && lean.total <= avail)
        snprintf(other, sizeof(other), ", or train with %s, which needs %s", k->leaner_flag,
                 size_text(rest, lean.total));
    /* with one micro-batch a step the blocks' activations share the gradients' memory (model.h, ModelLayout): a
     * smaller micro-batch under the same total_batch_tokens makes several a step, which keeps them apart */
    char accum[200] = "";
    if (layout == MODEL_GRADS_SHARED && t->total_batch_tokens != 0)
        snprintf(accum, sizeof(accum), "; lower total_batch_tokens (--total-batch-tokens, now %lld) with them, or the "
                 "step takes several micro-batches, whose activations need memory of their own",
                 (long long)t->total_batch_tokens);
    die("not enough %s: this run needs %s and %s is available; lower batch_size (-b, now %d) or seq_len (-t, now %d)%s: "
        "the activations and workspace of micro-batches of %d x %d tokens take %s, the model's parameters, gradients "
        "and AdamW state %s%s", k->memory_name, need, have, t->batch_size, t->seq_len, other, t->batch_size, t->seq_len,
        size_text(part, batch_bytes), size_text(rest, model_bytes), accum);
}

/* When this process started (now_seconds), for the log's "time". */
static double process_start;

/* Appends one JSON object as a line to the run's log, with "time" (seconds since the process started), and flushes
 * it. */
static void log_record(FILE *log, cJSON *obj) {
    cJSON_AddNumberToObject(obj, "time", now_seconds() - process_start);
    char *s = cJSON_PrintUnformatted(obj);
    if (!s || fprintf(log, "%s\n", s) < 0 || fflush(log) != 0) die("cannot write the run log: %s", strerror(errno));
    free(s);
    cJSON_Delete(obj);
}

/* The batches of one evaluation: eval_batches, or all the validation data holds when that is fewer. */
static int eval_batch_count(DataLoader *val, int max_batches) {
    const uint64_t available = dataloader_batches_per_epoch(val);
    return (uint64_t)max_batches < available ? max_batches : (int)available;
}

/* Mean loss over up to max_batches validation batches, from the start of the validation data. */
static double evaluate(Model *m, DataLoader *val, int max_batches, int32_t *inputs, int32_t *targets) {
    char err[ERRLEN];
    const int n = eval_batch_count(val, max_batches);
    dataloader_rewind(val);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (dataloader_next(val, inputs, targets, err, sizeof(err))) die("%s", err);
        model_forward(m, inputs, m->B, m->T);
        sum += model_loss(m, targets, m->B, m->T, 0.0f);
    }
    return sum / n;
}

static void print_sample(Model *m, const Tokenizer *tok, const TrainConfig *t, uint64_t *rng, int step, FILE *log) {
    size_t cap = (size_t)t->sample_tokens * 64 + sizeof(t->sample_prompt) + 64;
    char *text = malloc(cap);
    if (!text) die("out of host memory");
    const SampleSettings s = {t->sample_tokens, t->temperature, t->top_k, -1};
    if (sample_text(m, tok, t->sample_prompt, &s, rng, text, cap) < 0)
        die("sample_prompt \"%s\" encodes to no token of this model's vocabulary", t->sample_prompt);
    printf("---- sample at step %d ----\n%s\n---------------------------\n", step, text);
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "step", step);
    char *clean = utf8_repaired(text); /* a byte-level sample can end inside a character; the log is JSON text */
    if (!clean) die("out of host memory");
    cJSON_AddStringToObject(rec, "sample", clean);
    log_record(log, rec);
    free(clean);
    free(text);
}

/* runs/<config name>, or runs/<directory name> when the config is --init-from's config.json. */
static void default_out_dir(Config *cfg) {
    char base[CONFIG_PATH_MAX - 8];
    const char *name = strrchr(cfg->path, '/') ? strrchr(cfg->path, '/') + 1 : cfg->path;
    snprintf(base, sizeof(base), "%.*s", (int)strcspn(name, "."), name);
    char init_cfg[CONFIG_PATH_MAX + 16];
    snprintf(init_cfg, sizeof(init_cfg), "%s/config.json", cfg->train.init_from);
    if (cfg->train.init_from[0] && strcmp(init_cfg, cfg->path) == 0) {
        size_t n = strlen(cfg->train.init_from);
        while (n > 1 && cfg->train.init_from[n - 1] == '/') n--;
        const char *start = cfg->train.init_from;
        for (size_t i = 0; i < n; i++)
            if (cfg->train.init_from[i] == '/') start = cfg->train.init_from + i + 1;
        snprintf(base, sizeof(base), "%.*s", (int)(cfg->train.init_from + n - start), start);
    }
    snprintf(cfg->train.out_dir, sizeof(cfg->train.out_dir), "runs/%s", base);
}

/* One candidate of --resume: its config merged with the command line, a model of that config, the state loaded.
 * Returns 0, or -1 with a message when the checkpoint is damaged (a conflict with the command line dies). */
static int load_checkpoint(const char *dir, uint64_t step, int argc, char **argv, Config *cfg, Model *model,
                           TrainState *state, char *err, size_t errlen) {
    char run_dir[CONFIG_PATH_MAX];
    snprintf(run_dir, sizeof(run_dir), "%s", cfg->train.out_dir);
    Config ckpt;
    if (checkpoint_check_files(dir, err, errlen) || checkpoint_read_config(dir, &ckpt, err, errlen)) return -1;
    char merge_err[ERRLEN];
    if (config_resume_merge(&ckpt, argc, argv, merge_err, sizeof(merge_err))) die("%s", merge_err);
    snprintf(ckpt.train.out_dir, sizeof(ckpt.train.out_dir), "%s", run_dir);
    const Kernels *k = pick_backend(ckpt.train.device, ckpt.train.fusion, ckpt.model.head_dim);
    check_memory(&ckpt.model, k, &ckpt.train, ckpt.path);
    if (model_create(model, &ckpt.model, k, ckpt.train.batch_size, ckpt.train.seq_len,
                     model_layout_for(config_micro_steps(&ckpt.train)), merge_err, sizeof(merge_err)))
        die("%s", merge_err);
    if (checkpoint_load_state(dir, step, model, state, err, errlen)) {
        model_destroy(model);
        return -1;
    }
    *cfg = ckpt;
    return 0;
}

/* --resume: the newest complete checkpoint of the run directory that loads; a damaged newest one is an error that
 * names the previous one, unless --resume-fallback. A checkpoint this user may not read is an error, never damage.
 * Changes nothing on disk. */
static uint64_t resume_run(Config *cfg, int argc, char **argv, Model *model, TrainState *state) {
    char err[ERRLEN], run_dir[CONFIG_PATH_MAX];
    snprintf(run_dir, sizeof(run_dir), "%s", cfg->train.out_dir);
    int fallback = cfg->train.resume_fallback;
    CheckpointList list;
    if (checkpoint_list(run_dir, &list, err, sizeof(err))) die("%s", err);
    if (list.n == 0)
        die("--resume: %s holds no complete checkpoint (a step_NNNNNNNN directory); start the run again without "
            "--resume and with --overwrite (which replaces what the directory holds)",
            run_dir);
    int chosen = -1;
    for (int i = list.n - 1; i >= 0 && chosen < 0; i--) {
        char dir[CHECKPOINT_PATH_MAX], prev[CHECKPOINT_PATH_MAX] = "";
        checkpoint_path(dir, sizeof(dir), run_dir, list.steps[i]);
        if (fs_check_access(dir, err, sizeof(err)))
            die("--resume: %s (a matter of access, not of the checkpoint's contents: nothing was moved); give this "
                "user read access (chmod, chown) and resume again", err);
        if (load_checkpoint(dir, list.steps[i], argc, argv, cfg, model, state, err, sizeof(err)) == 0) {
            chosen = i;
            break;
        }
        if (i > 0) checkpoint_path(prev, sizeof(prev), run_dir, list.steps[i - 1]);
        if (!fallback && prev[0])
            die("--resume: the newest checkpoint %s is damaged: %s; the previous complete checkpoint is %s: pass "
                "--resume-fallback to resume from it (the damaged one is then moved aside)", dir, err, prev);
        if (!fallback) die("--resume: the only checkpoint %s is damaged: %s", dir, err);
        fprintf(stderr, "warning: checkpoint %s is damaged: %s\n", dir, err);
    }
    if (chosen < 0) die("--resume-fallback: no checkpoint of %s loads (see the warnings above)", run_dir);
    uint64_t step = list.steps[chosen];
    checkpoint_list_free(&list);
    return step;
}

/* After --resume-fallback: the damaged checkpoints newer than the one resumed must not be taken for the newest
 * again, nor outlive good ones when old checkpoints are pruned. */
static void set_aside_newer_checkpoints(const char *run_dir, uint64_t step) {
    char err[ERRLEN];
    CheckpointList list;
    if (checkpoint_list(run_dir, &list, err, sizeof(err))) die("%s", err);
    for (int i = 0; i < list.n; i++) {
        if (list.steps[i] <= step) continue;
        char moved[CHECKPOINT_PATH_MAX];
        if (checkpoint_set_aside(run_dir, list.steps[i], moved, sizeof(moved), err, sizeof(err))) die("%s", err);
        printf("moved the damaged checkpoint aside to %s\n", moved);
    }
    checkpoint_list_free(&list);
}

/* A background write has ended: where its checkpoint is (the first one ends the replacement of an earlier run), or
 * the run stops (its temporary directory already gone). */
static void report_checkpoint(const CheckpointDone *d) {
    if (d->failed)
        die("checkpoint of step %llu: %s; the run stops", (unsigned long long)d->step, d->err);
    printf("checkpoint %s (%.1f MiB, %.2f s)\n", d->stats.path, d->stats.bytes / 1048576.0, d->stats.seconds);
    char err[ERRLEN];
    if (run_replace_settle(held_lock->dir, "this run", stdout, err, sizeof(err))) die("%s", err);
    fflush(stdout);
}

/* Waits for the write in flight, if any, saying so; `why` begins the line. */
static void finish_checkpoint(CheckpointWriter *w, const char *why) {
    if (!checkpoint_writer_busy(w)) return;
    printf("%swaiting for the checkpoint write of step %llu to finish\n", why,
           (unsigned long long)checkpoint_writer_step(w));
    fflush(stdout);
    CheckpointDone d;
    checkpoint_writer_wait(w, &d);
    report_checkpoint(&d);
}

/* Starts the checkpoint of state->step: after the write in flight (if any) has ended, the training state is copied
 * into the writer's snapshot and written in the background. Logs how long the loop was held. */
static void start_checkpoint(CheckpointWriter *w, const Model *m, const Config *cfg, const TrainState *state,
                             FILE *log) {
    char err[ERRLEN], why[64];
    const double t0 = now_seconds();
    snprintf(why, sizeof(why), "checkpoint of step %llu: ", (unsigned long long)state->step);
    finish_checkpoint(w, why);
    const double waited = now_seconds() - t0;
    double snapshot;
    if (checkpoint_writer_submit(w, m, cfg, state, &snapshot, err, sizeof(err))) die("%s", err);
    printf("checkpoint of step %llu: snapshot taken in %.2f s; writing it in the background\n",
           (unsigned long long)state->step, snapshot);
    fflush(stdout);
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "step", (double)state->step);
    cJSON_AddNumberToObject(rec, "checkpoint_stall_s", waited + snapshot);
    cJSON_AddNumberToObject(rec, "checkpoint_wait_s", waited);
    cJSON_AddNumberToObject(rec, "checkpoint_snapshot_s", snapshot);
    log_record(log, rec);
}

/* mfu < 0: not known (no GPU, or one whose peak is not in model/flops.c), and not logged. */
static void log_step(FILE *log, int step, double loss, double lr, double norm, double ms, double tok_s, double mfu) {
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "step", step);
    cJSON_AddNumberToObject(rec, "loss", loss);
    cJSON_AddNumberToObject(rec, "lr", lr);
    cJSON_AddNumberToObject(rec, "grad_norm", norm);
    cJSON_AddNumberToObject(rec, "ms", ms);
    cJSON_AddNumberToObject(rec, "tokens_per_s", tok_s);
    if (mfu >= 0) cJSON_AddNumberToObject(rec, "mfu", mfu);
    log_record(log, rec);
}

/* --generate DIR: text from the model of DIR on the backend of --device; no run directory is involved. */
static void generate(const TrainConfig *t) {
    char err[ERRLEN];
    Generation g;
    if (generation_open(&g, t, err, sizeof(err))) die("%s", err);
    const Kernels *k = pick_backend(t->device, t->fusion, g.model.head_dim);
    if (generation_run(&g, t, k, stdout, err, sizeof(err))) die("%s", err);
    generation_close(&g);
}

int main(int argc, char **argv) {
    process_start = now_seconds();
    char err[ERRLEN];
    Config cfg;
    int rc = config_from_args(&cfg, argc, argv, err, sizeof(err));
    if (rc == 1) {
        train_print_help(argv[0], &cfg);
        return 0;
    }
    if (rc) die("%s", err);
    if (cfg.train.generate[0]) {
        generate(&cfg.train);
        return 0;
    }
    TrainConfig *t = &cfg.train;
    if (!t->out_dir[0]) default_out_dir(&cfg);
    /* One process per run directory, and a replacement that a killed process left under way settled first. */
    RunLock lock;
    if (run_lock_take(&lock, t->out_dir, !t->resume, err, sizeof(err))) die("%s%s", t->resume ? "--resume: " : "", err);
    held_lock = &lock;
    if (run_replace_settle(t->out_dir, "an interrupted run", stdout, err, sizeof(err))) die("%s", err);
    if (t->warmup_clamped_from)
        printf("note: warmup_steps (%d) exceeds steps (%d): the warmup is the run's %d steps\n", t->warmup_clamped_from,
               t->steps, t->warmup_steps);

    /* The model: from the newest checkpoint (--resume; the config comes from it), or built here below. */
    Model model;
    TrainState state;
    memset(&state, 0, sizeof(state));
    int resuming = t->resume;
    uint64_t start_step = resuming ? resume_run(&cfg, argc, argv, &model, &state) : 0;
    const ModelConfig *mc = &cfg.model;
    /* A new run's backend, and whether its memory holds the run (a resumed one's was checked as it loaded). */
    const Kernels *k = resuming ? model.k : pick_backend(t->device, t->fusion, mc->head_dim);
    if (!resuming) check_memory(mc, k, t, cfg.path);
    const char *run_dir = t->out_dir;
    char log_path[CONFIG_PATH_MAX + 32], cfg_path[CONFIG_PATH_MAX + 32];
    snprintf(log_path, sizeof(log_path), "%s/log.jsonl", run_dir);
    snprintf(cfg_path, sizeof(cfg_path), "%s/train_config.json", run_dir);

    /* The tokenizer only decodes samples; without one, sampling is off. */
    if (meta_resolve_tokenizer(t->train_data, t->tokenizer, sizeof(t->tokenizer), err, sizeof(err))) die("%s", err);
    Tokenizer *tok = NULL;
    if (t->tokenizer[0]) {
        tok = tokenizer_open(t->tokenizer, err, sizeof(err));
        if (!tok) die("%s", err);
        if (tokenizer_vocab_size(tok) > mc->vocab_size)
            die("tokenizer %s has %d tokens but the model's vocab_size is %d (config %s)", t->tokenizer,
                tokenizer_vocab_size(tok), mc->vocab_size, cfg.path);
    } else if (t->sample_every > 0) {
        die("sampling needs a tokenizer: no meta.json next to %s; set \"tokenizer\" to 'byte' or a tokenizer.model "
            "path, or --sample-every 0", t->train_data);
    }

    int B = t->batch_size, T = t->seq_len;
    int64_t micro_tokens = (int64_t)B * T;
    int64_t step_tokens = t->total_batch_tokens ? t->total_batch_tokens : micro_tokens;
    int accum = (int)config_micro_steps(t);
    char hint[CONFIG_PATH_MAX * 2 + 256];
    DataLoader *train = dataloader_open(t->train_data, B, T, mc->vocab_size, 1, (uint64_t)t->seed, err, sizeof(err));
    if (!train) die("%s%s", err, data_hint_missing(t->train_data, hint, sizeof(hint)));
    DataLoader *val = NULL;
    if (t->val_data[0] && t->eval_every > 0) {
        val = dataloader_open(t->val_data, B, T, mc->vocab_size, 0, 0, err, sizeof(err));
        if (!val) die("%s", err);
    }
    uint64_t n_shards = (uint64_t)dataloader_num_shards(train), n_tokens = dataloader_num_tokens(train);

    if (resuming) {
        if (state.data_shards != n_shards || state.data_tokens != n_tokens)
            die("--resume: the training data %s is now %llu shards of %llu tokens, but the checkpoint was taken on "
                "%llu shards of %llu tokens; a run resumes only on the same data", t->train_data,
                (unsigned long long)n_shards, (unsigned long long)n_tokens, (unsigned long long)state.data_shards,
                (unsigned long long)state.data_tokens);
        if (dataloader_seek(train, state.data, err, sizeof(err))) die("--resume: %s", err);
        if ((uint64_t)t->steps < start_step)
            die("--resume: the checkpoint is at step %llu, beyond steps = %d; pass --steps N with N > %llu",
                (unsigned long long)start_step, t->steps, (unsigned long long)start_step);
        if ((uint64_t)t->steps == start_step) {
            printf("the run in %s is complete at step %llu; pass --steps N (N > %llu) to train further\n", run_dir,
                   (unsigned long long)start_step, (unsigned long long)start_step);
            release_run_dir();
            model_destroy(&model);
            dataloader_close(train);
            if (val) dataloader_close(val);
            if (tok) tokenizer_close(tok);
            return 0;
        }
    } else {
        /* Refuse to mix two runs before anything is built; the old run goes only once the new one is ready. */
        if (run_dir_check_new(run_dir, t->overwrite, err, sizeof(err))) die("%s", err);
        if (model_create(&model, mc, k, B, T, model_layout_for(config_micro_steps(t)), err, sizeof(err)))
            die("%s", err);
        if (t->init_from[0]) {
            if (hf_import_weights(&model, t->init_from, err, sizeof(err))) die("--init-from %s", err);
        } else {
            model_init_weights(&model, (uint64_t)t->seed);
        }
        state.data = dataloader_tell(train);
        state.data_shards = n_shards;
        state.data_tokens = n_tokens;
        state.sample_rng = (uint64_t)t->seed ^ 0x5A3B1E5ull;
    }

    /* The first step's batches and the evaluation's, read once before anything is written, so that data tokenized for
     * another vocabulary stops the run with the directory as it was. */
    int32_t *inputs = malloc(micro_tokens * sizeof(int32_t)), *targets = malloc(micro_tokens * sizeof(int32_t));
    if (!inputs || !targets) die("out of host memory");
    if ((uint64_t)t->steps > start_step &&
        (dataloader_check_next(train, (uint64_t)accum, inputs, targets, err, sizeof(err)) ||
         (val && dataloader_check_next(val, (uint64_t)eval_batch_count(val, t->eval_batches), inputs, targets, err,
                                       sizeof(err)))))
        die("%s%s", err, data_hint_vocabulary(t->train_data, mc->vocab_size, cfg.path, hint, sizeof(hint)));

    /* The checkpoint writer and its snapshot buffers (host memory), made before anything is written. */
    CheckpointWriter *writer = checkpoint_writer_create(run_dir, t->keep_last, &model, err, sizeof(err));
    if (!writer) die("%s", err);
    active_writer = writer;

    /* From here on the run directory is written. */
    if (resuming) {
        set_aside_newer_checkpoints(run_dir, start_step);
        int dropped;
        if (run_log_truncate(log_path, start_step, &dropped, err, sizeof(err))) die("%s", err);
        if (dropped) printf("dropped %d log records after step %llu from %s\n", dropped,
                            (unsigned long long)start_step, log_path);
    } else {
        if (run_replace_begin(run_dir, stdout, err, sizeof(err))) die("%s", err);
    }
    if (checkpoint_clean_leftovers(run_dir, err, sizeof(err))) die("%s", err);
    char *cfg_json = config_to_json(&cfg);
    if (!cfg_json || fs_replace_atomic(cfg_path, cfg_json, strlen(cfg_json), err, sizeof(err)))
        die("%s", cfg_json ? err : "out of memory");
    free(cfg_json);
    FILE *log = fopen(log_path, resuming ? "a" : "w");
    if (!log) die("cannot open %s: %s", log_path, strerror(errno));

    printf("model: %s, %lld parameters (D=%d L=%d Hq=%d Hkv=%d hd=%d F=%d V=%d, %s embeddings)\n", cfg.path,
           (long long)model.table.n_params, mc->hidden_size, mc->num_hidden_layers, mc->num_attention_heads,
           mc->num_key_value_heads, mc->head_dim, mc->intermediate_size, mc->vocab_size,
           mc->tie_word_embeddings ? "tied" : "untied");
    if (resuming) printf("resumed from %s/step_%08llu\n", run_dir, (unsigned long long)start_step);
    else if (t->init_from[0]) printf("initial weights: %s\n", t->init_from);
    printf("backend: %s%s%s%s\n", k->name, k->detail ? ", " : "", k->detail ? k->detail : "",
           k->capture_begin && strcmp(t->cuda_graph, "on") == 0 ? ", each step replayed as a CUDA graph" : "");
    /* MFU: the model FLOPs of the tokens per second against the GPU's peak, where the GPU is one of model/flops.c */
    const char *gpu = k->device_name ? k->device_name() : NULL;
    const double token_flops = flops_per_token(mc, (int64_t)model.table.n_params, T);
    const double peak_flops = gpu_peak_bf16_flops(gpu);
    if (peak_flops > 0)
        printf("MFU: %.3g GFLOP per token against the %.1f TFLOP/s bf16 peak of the %s\n", token_flops * 1e-9,
               peak_flops * 1e-12, gpu);
    else if (gpu)
        printf("MFU: not shown (the bf16 peak of the %s is not in model/flops.c)\n", gpu);
    const char *note = model_backend_note(&model);
    if (note) printf("note: %s\n", note);
    printf("data: %s (%d shards, %llu tokens); batch %d x %d, %d micro-steps = %lld tokens per step\n",
           t->train_data, dataloader_num_shards(train), (unsigned long long)dataloader_num_tokens(train), B, T,
           accum, (long long)step_tokens);
    printf("run directory: %s\n", run_dir);
    fflush(stdout);

    if (t->steps == 0) { /* the initial weights, for a reference run */
        start_checkpoint(writer, &model, &cfg, &state, log);
        finish_checkpoint(writer, "");
    }

    TrainStep ts;
    if (train_step_create(&ts, &model, B, T, accum, strcmp(t->cuda_graph, "on") == 0, err, sizeof(err)))
        die("%s", err);
    install_signal_handlers();
    Progress progress;
    progress_start(&progress, (int)start_step + 1, t->steps, t->log_every, now_seconds());
    if (resuming) progress_read_validation(&progress, log_path);
    int skipped = 0; /* steps skipped for a non-finite loss or gradient norm, since this process started */
    for (int step = (int)start_step + 1; step <= t->steps; step++) {
        double t0 = now_seconds();
        double lr = lr_at_step(t, step);
        for (int micro = 0; micro < accum; micro++) {
            if (dataloader_next(train, inputs, targets, err, sizeof(err))) die("%s", err);
            train_step_load(&ts, micro, inputs, targets);
        }
        /* the whole step queued (or replayed), then its loss and norm read once; a step whose loss or gradient
         * norm is not finite changes no weight (the clip factor is then NaN: kernels.h, clip_scale) */
        train_step_run(&ts, t, lr, step);
        double loss, norm;
        train_step_result(&ts, &loss, &norm);
        if (!isfinite(loss)) norm = NAN;
        double ms = (now_seconds() - t0) * 1e3;
        CheckpointDone written;
        if (checkpoint_writer_poll(writer, &written)) report_checkpoint(&written);
        double tok_s = step_tokens / (ms * 1e-3);
        double mfu = peak_flops > 0 ? tok_s * token_flops / peak_flops : -1;
        progress_step(&progress, ms * 1e-3, step_tokens);
        if (progress_prints(&progress, step) || !isfinite(loss) || !isfinite(norm)) {
            char times[96];
            progress_times(&progress, step, now_seconds(), times, sizeof(times));
            printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step, t->steps, loss, lr,
                   norm, ms, tok_s);
            if (mfu >= 0) printf(" | MFU %.1f%%", 100 * mfu);
            printf("%s\n", times);
            fflush(stdout);
        }
        if (isfinite(loss) && isfinite(norm)) {
            log_step(log, step, loss, lr, norm, ms, tok_s, mfu);
        } else {
            const char *what = isfinite(loss) ? "gradient norm" : "loss";
            if (++skipped > t->skip_nonfinite)
                die("step %d: the %s is not finite, so its update was not applied and the run stops without a "
                    "checkpoint of this step (lower the learning rate, or pass --skip-nonfinite N to skip up to N such "
                    "steps)", step, what);
            printf("step %d: the %s is not finite: no update (skipped step %d of at most %d)\n", step, what, skipped,
                   t->skip_nonfinite);
            cJSON *rec = cJSON_CreateObject();
            cJSON_AddNumberToObject(rec, "step", step);
            cJSON_AddStringToObject(rec, "skipped", what);
            log_record(log, rec);
        }
        int last = step == t->steps;
        if (val && (step % t->eval_every == 0 || last)) {
            double vl = evaluate(&model, val, t->eval_batches, inputs, targets);
            printf("step %5d | val loss %.4f\n", step, vl);
            progress_val(&progress, step, vl);
            cJSON *rec = cJSON_CreateObject();
            cJSON_AddNumberToObject(rec, "step", step);
            cJSON_AddNumberToObject(rec, "val_loss", vl);
            log_record(log, rec);
        }
        if (t->sample_every > 0 && (step % t->sample_every == 0 || last))
            print_sample(&model, tok, t, &state.sample_rng, step, log);
        int stop = stop_requested != 0;
        if (last || stop || (t->checkpoint_every > 0 && step % t->checkpoint_every == 0)) {
            state.step = (uint64_t)step;
            state.data = dataloader_tell(train);
            start_checkpoint(writer, &model, &cfg, &state, log);
        }
        if (stop) {
            finish_checkpoint(writer, "stopping: ");
            if (last) printf("stopped by a signal after the last step (%d): the run is complete\n", step);
            else printf("stopped by a signal after step %d; continue with: %s -o %s --resume\n", step, argv[0], run_dir);
            break;
        }
    }
    train_step_destroy(&ts);
    finish_checkpoint(writer, "");
    active_writer = NULL;
    checkpoint_writer_destroy(writer);
    char peak[32];
    printf("peak %s memory: %s\n", k->name, size_text(peak, k->peak_bytes(model.kc)));
    progress_summary(&progress, stdout, now_seconds() - process_start, peak_flops > 0 ? token_flops / peak_flops : 0,
                     run_dir, argv[0]);
    if (fclose(log) != 0) die("cannot close %s: %s", log_path, strerror(errno));
    release_run_dir();
    free(inputs);
    free(targets);
    model_destroy(&model);
    dataloader_close(train);
    if (val) dataloader_close(val);
    if (tok) tokenizer_close(tok);
    return 0;
}
