/* generate.c: ./train --generate (generate.h): the model directory, its config and tokenizer, then the model on the
 * chosen backend and the sampler's tokens streamed to the output. */
#include "cli/generate.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "model/sampler.h"
#include "persist/hf_weights.h"
#include "util/fsutil.h"

/* The tokenizer that DIR/train_config.json (a checkpoint's) names, when it is "byte" or a file that is there (a
 * checkpoint written before checkpoints carried tokenizer.model), into out; else "". */
static const char *run_tokenizer(const char *dir, char *out, size_t cap) {
    char path[CHECKPOINT_PATH_MAX + 32], err[256];
    snprintf(path, sizeof(path), "%s/train_config.json", dir);
    out[0] = 0;
    cJSON *root = fs_exists(path) ? fs_read_json(path, path, err, sizeof(err)) : NULL;
    const cJSON *spec = root ? cJSON_GetObjectItemCaseSensitive(root, "tokenizer") : NULL;
    if (cJSON_IsString(spec) && (strcmp(spec->valuestring, "byte") == 0 || fs_exists(spec->valuestring)))
        snprintf(out, cap, "%s", spec->valuestring);
    cJSON_Delete(root);
    return out;
}

/* The tokenizer of --generate: --tokenizer, else DIR/tokenizer.model (which checkpoints carry), else the one the
 * checkpoint's train_config.json names, else byte for a vocabulary of 256 ids. */
static int open_tokenizer(Generation *g, const char *flag, char *err, size_t errlen) {
    char beside[CHECKPOINT_PATH_MAX + 16], recorded[CONFIG_PATH_MAX];
    snprintf(beside, sizeof(beside), "%s/tokenizer.model", g->dir);
    const char *spec = NULL;
    if (strcmp(flag, "auto") != 0) spec = flag;
    else if (fs_exists(beside)) spec = beside;
    else if (run_tokenizer(g->dir, recorded, sizeof(recorded))[0]) spec = recorded;
    else if (g->model.vocab_size == 256) spec = "byte";
    if (!spec) {
        snprintf(err, errlen, "--generate %s: no tokenizer: no tokenizer.model beside the weights (a checkpoint of "
                 "./train carries its run's), and the model's vocabulary of %d ids is not the byte vocabulary (256); "
                 "pass --tokenizer PATH (a tiktoken tokenizer.model)", g->dir, g->model.vocab_size);
        return -1;
    }
    snprintf(g->tokenizer, sizeof(g->tokenizer), "%s", spec);
    g->tok = tokenizer_open(spec, err, errlen);
    if (!g->tok) return -1;
    if (tokenizer_vocab_size(g->tok) > g->model.vocab_size) {
        snprintf(err, errlen, "--generate %s: tokenizer %s has %d tokens but the model's vocab_size is %d",
                 g->dir, spec, tokenizer_vocab_size(g->tok), g->model.vocab_size);
        return -1;
    }
    return 0;
}

int generation_open(Generation *g, const TrainConfig *t, char *err, size_t errlen) {
    memset(g, 0, sizeof(*g));
    char msg[1024];
    if (checkpoint_model_dir(t->generate, g->dir, sizeof(g->dir), msg, sizeof(msg))) {
        snprintf(err, errlen, "--generate: %s", msg);
        return -1;
    }
    char path[CHECKPOINT_PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/config.json", g->dir);
    Config c;
    config_defaults(&c);
    if (config_load_file(&c, path, err, errlen) || config_validate_model(&c.model, path, err, errlen)) return -1;
    g->model = c.model;
    if (open_tokenizer(g, t->tokenizer, err, errlen)) return -1;
    g->n_ids = sample_prompt_ids(g->tok, t->sample_prompt, g->model.vocab_size, t->sample_tokens, &g->ids);
    if (g->n_ids < 0) {
        snprintf(err, errlen, "--sample-prompt \"%s\" encodes (with %s) to ids outside the vocabulary of %s", 
                 t->sample_prompt, g->tokenizer, path);
        return -1;
    }
    return 0;
}

/* The SampleSink of --generate: each token to the output at once. */
static void print_piece(const char *piece, size_t len, void *out) {
    fwrite(piece, 1, len, out);
    fflush(out);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int generation_run(Generation *g, const TrainConfig *t, const Kernels *k, FILE *out, char *err, size_t errlen) {
    int max_pos = g->model.max_position_embeddings, need = g->n_ids + t->sample_tokens;
    Model m;
    if (model_create(&m, &g->model, k, 1, need < max_pos ? need : max_pos, MODEL_GRADS_APART, err, errlen))
        return -1;
    if (hf_import_weights(&m, g->dir, err, errlen)) {
        model_destroy(&m);
        return -1;
    }
    fprintf(stderr, "generate: %s (%lld parameters), tokenizer %s, backend %s%s%s\n", g->dir,
            (long long)m.table.n_params, g->tokenizer, k->name, k->detail ? ", " : "", k->detail ? k->detail : "");
    const SampleSettings s = {t->sample_tokens, t->temperature, t->top_k, g->model.eos_token_id};
    uint64_t rng = (uint64_t)t->seed;
    double t0 = seconds_now();
    int n = sample_generate(&m, g->tok, g->ids, g->n_ids, &s, &rng, print_piece, out);
    double seconds = seconds_now() - t0;
    model_destroy(&m);
    if (n < 0) {
        snprintf(err, errlen, "--generate: out of host memory");
        return -1;
    }
    if (fputc('\n', out) == EOF || fflush(out) != 0 || ferror(out)) {
        snprintf(err, errlen, "--generate: cannot write the text to the output");
        return -1;
    }
    fprintf(stderr, "generate: %d tokens in %.2f s: %.1f tokens/s (the prompt of %d tokens included)\n", n, seconds,
            n / seconds, g->n_ids);
    return 0;
}

void generation_close(Generation *g) {
    if (g->tok) tokenizer_close(g->tok);
    free(g->ids);
    memset(g, 0, sizeof(*g));
}
