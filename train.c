/* train.c: the training program. Reads the config and flags, builds the model on the chosen backend, and runs the
 * loop: gradient accumulation over micro-batches, clipped AdamW, a progress line and a JSONL record per step,
 * validation loss and a text sample every N steps. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/sampler.h"

#define ERRLEN 1024

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static volatile sig_atomic_t stop_requested = 0;
static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* mkdir -p */
static int make_dirs(const char *path) {
    char buf[CONFIG_PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char saved = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = saved;
            if (!saved) break;
        }
    }
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

static const Kernels *pick_backend(const char *device) {
#ifdef WITH_CUDA
    if (strcmp(device, "cpu") != 0) {
        char why[256];
        if (kernels_cuda_available(why, sizeof(why))) return &kernels_cuda;
        if (strcmp(device, "cuda") == 0) die("--device cuda: no usable GPU (%s)", why);
        fprintf(stderr, "note: no usable GPU (%s): training on the CPU\n", why);
    }
#else
    if (strcmp(device, "cuda") == 0)
        die("--device cuda: this ./train was built without the CUDA backend (build with nvcc on PATH)");
#endif
    return &kernels_cpu;
}

/* Appends one JSON object as a line to the run's log and flushes it. */
static void log_record(FILE *log, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    if (!s || fprintf(log, "%s\n", s) < 0 || fflush(log) != 0) die("cannot write the run log: %s", strerror(errno));
    free(s);
    cJSON_Delete(obj);
}

static void write_text_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) die("cannot write %s: %s", path, strerror(errno));
}

/* Mean loss over up to max_batches validation batches, from the start of the validation data. */
static double evaluate(Model *m, DataLoader *val, int max_batches, int32_t *inputs, int32_t *targets) {
    char err[ERRLEN];
    uint64_t available = dataloader_batches_per_epoch(val);
    int n = (uint64_t)max_batches < available ? max_batches : (int)available;
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
    if (sample_text(m, tok, t->sample_prompt, t->sample_tokens, t->temperature, rng, text, cap) < 0)
        die("sample_prompt \"%s\" encodes to no token of this model's vocabulary", t->sample_prompt);
    printf("---- sample at step %d ----\n%s\n---------------------------\n", step, text);
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "step", step);
    cJSON_AddStringToObject(rec, "sample", text);
    log_record(log, rec);
    free(text);
}

int main(int argc, char **argv) {
    char err[ERRLEN];
    Config cfg;
    int rc = config_from_args(&cfg, argc, argv, err, sizeof(err));
    if (rc == 1) return 0;
    if (rc) die("%s", err);
    TrainConfig *t = &cfg.train;
    const ModelConfig *mc = &cfg.model;

    if (!t->out_dir[0]) {
        const char *base = strrchr(cfg.path, '/') ? strrchr(cfg.path, '/') + 1 : cfg.path;
        snprintf(t->out_dir, sizeof(t->out_dir), "runs/%.*s", (int)strcspn(base, "."), base);
    }
    char log_path[CONFIG_PATH_MAX + 32], cfg_path[CONFIG_PATH_MAX + 32];
    snprintf(log_path, sizeof(log_path), "%s/log.jsonl", t->out_dir);
    snprintf(cfg_path, sizeof(cfg_path), "%s/train_config.json", t->out_dir);
    /* The tokenizer only decodes samples; without one, sampling is off. */
    if (config_resolve_tokenizer(t, err, sizeof(err))) die("%s", err);
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
    int accum = (int)(step_tokens / micro_tokens);
    DataLoader *train = dataloader_open(t->train_data, B, T, mc->vocab_size, 1, (uint64_t)t->seed, err, sizeof(err));
    if (!train) die("%s", err);
    DataLoader *val = NULL;
    if (t->val_data[0] && t->eval_every > 0) {
        val = dataloader_open(t->val_data, B, T, mc->vocab_size, 0, 0, err, sizeof(err));
        if (!val) die("%s", err);
    }

    /* Run directory: refuse to mix two runs' logs. */
    struct stat st;
    if (stat(log_path, &st) == 0 && !t->overwrite)
        die("run directory %s already holds a run (%s); pass --overwrite to replace it or -o to choose another",
            t->out_dir, log_path);
    if (make_dirs(t->out_dir)) die("cannot create the run directory %s: %s", t->out_dir, strerror(errno));

    const Kernels *k = pick_backend(t->device);
    Model model;
    if (model_create(&model, mc, k, B, T, err, sizeof(err))) die("%s", err);
    model_init_weights(&model, (uint64_t)t->seed);

    char *cfg_json = config_to_json(&cfg);
    write_text_file(cfg_path, cfg_json);
    free(cfg_json);
    FILE *log = fopen(log_path, "w");
    if (!log) die("cannot open %s: %s", log_path, strerror(errno));

    printf("model: %s, %lld parameters (D=%d L=%d Hq=%d Hkv=%d hd=%d F=%d V=%d, %s embeddings)\n", cfg.path,
           (long long)model.table.n_params, mc->hidden_size, mc->num_hidden_layers, mc->num_attention_heads,
           mc->num_key_value_heads, mc->head_dim, mc->intermediate_size, mc->vocab_size,
           mc->tie_word_embeddings ? "tied" : "untied");
    printf("backend: %s; activation arena %.1f MiB; parameter buffers %.1f MiB\n", k->name,
           model.arena_bytes / 1048576.0,
           model.table.n_params * (16.0 + k->act_bytes) / 1048576.0);
    printf("data: %s (%d shards, %llu tokens); batch %d x %d, %d micro-steps = %lld tokens per step\n",
           t->train_data, dataloader_num_shards(train), (unsigned long long)dataloader_num_tokens(train), B, T,
           accum, (long long)step_tokens);
    printf("run directory: %s\n", t->out_dir);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int32_t *inputs = malloc(micro_tokens * sizeof(int32_t)), *targets = malloc(micro_tokens * sizeof(int32_t));
    if (!inputs || !targets) die("out of host memory");
    uint64_t sample_rng = (uint64_t)t->seed ^ 0x5A3B1E5ull;
    float grad_scale = (float)(1.0 / (double)step_tokens);
    int last_step = 0;
    for (int step = 1; step <= t->steps && !stop_requested; step++) {
        double t0 = now_seconds();
        double lr = lr_at_step(t, step);
        model_zero_grads(&model);
        double loss = 0;
        for (int micro = 0; micro < accum; micro++) {
            if (dataloader_next(train, inputs, targets, err, sizeof(err))) die("%s", err);
            model_forward(&model, inputs, B, T);
            loss += model_loss(&model, targets, B, T, grad_scale);
            model_backward(&model, B, T);
        }
        loss /= accum;
        double norm = optimizer_step(&model, t, lr, step);
        k->synchronize();
        double ms = (now_seconds() - t0) * 1e3;
        double tok_s = step_tokens / (ms * 1e-3);
        printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s\n", step, t->steps, loss, lr,
               norm, ms, tok_s);
        fflush(stdout);
        if (!isfinite(loss)) die("the loss is not finite at step %d (lower the learning rate?)", step);
        cJSON *rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "step", step);
        cJSON_AddNumberToObject(rec, "loss", loss);
        cJSON_AddNumberToObject(rec, "lr", lr);
        cJSON_AddNumberToObject(rec, "grad_norm", norm);
        cJSON_AddNumberToObject(rec, "ms", ms);
        cJSON_AddNumberToObject(rec, "tokens_per_s", tok_s);
        log_record(log, rec);
        int last = step == t->steps;
        if (val && (step % t->eval_every == 0 || last)) {
            double vl = evaluate(&model, val, t->eval_batches, inputs, targets);
            printf("step %5d | val loss %.4f\n", step, vl);
            rec = cJSON_CreateObject();
            cJSON_AddNumberToObject(rec, "step", step);
            cJSON_AddNumberToObject(rec, "val_loss", vl);
            log_record(log, rec);
        }
        if (t->sample_every > 0 && (step % t->sample_every == 0 || last))
            print_sample(&model, tok, t, &sample_rng, step, log);
        last_step = step;
    }
    if (stop_requested) printf("stopped by a signal after step %d\n", last_step);
    size_t peak = k->peak_bytes ? k->peak_bytes() : 0;
    if (peak) printf("peak %s memory: %.2f GiB\n", k->name, peak / 1073741824.0);
    if (fclose(log) != 0) die("cannot close %s: %s", log_path, strerror(errno));
    free(inputs);
    free(targets);
    model_destroy(&model);
    dataloader_close(train);
    if (val) dataloader_close(val);
    if (tok) tokenizer_close(tok);
    return 0;
}
