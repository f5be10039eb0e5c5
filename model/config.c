/* config.c: reading the JSON config (Hugging Face LlamaConfig keys plus training keys), command-line flags that
 * override it, validation, and writing the effective config back as JSON.
 *
 * One table describes every option (its JSON key, flag, type, range and help), so the file parser, the flag parser,
 * --help (cli/train_help.c), the JSON writer and the Hugging Face config.json (persist/hf_config.c) cannot disagree;
 * those two read it through model/config_options.h. */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config_options.h"
#include "model/config_rope.h"
#include "util/fsutil.h"
#include "util/suggest.h"
#include "util/utf8.h"

#define M_(field) 1, offsetof(ModelConfig, field), 0
#define T_(field) 0, offsetof(TrainConfig, field), 0
#define TS_(field) 0, offsetof(TrainConfig, field), sizeof(((TrainConfig *)0)->field)
#define BIG 1e18

const Option CONFIG_OPTIONS[] = {
    /* model: Hugging Face LlamaConfig keys */
    {"hidden_size", 0, OPT_INT, M_(hidden_size), 1, 1 << 16, NULL, NULL, "model width D"},
    {"intermediate_size", 0, OPT_INT, M_(intermediate_size), 1, 1 << 20, NULL, NULL, "SwiGLU width F"},
    {"num_hidden_layers", 0, OPT_INT, M_(num_hidden_layers), 1, 1024, NULL, NULL, "number of blocks L"},
    {"num_attention_heads", 0, OPT_INT, M_(num_attention_heads), 1, 1024, NULL, NULL, "query heads Hq"},
    {"num_key_value_heads", 0, OPT_INT, M_(num_key_value_heads), 1, 1024, NULL, NULL, "key/value heads Hkv (default Hq)"},
    {"head_dim", 0, OPT_INT, M_(head_dim), 2, 1024, NULL, NULL, "head dimension hd (default D/Hq)"},
    {"vocab_size", 0, OPT_INT, M_(vocab_size), 2, 1 << 24, NULL, NULL, "vocabulary size V"},
    {"max_position_embeddings", 0, OPT_INT, M_(max_position_embeddings), 1, 1 << 24, NULL, "2048", "longest sequence"},
    {"rms_norm_eps", 0, OPT_DOUBLE, M_(rms_norm_eps), 0, 1, NULL, "1e-6", "RMSNorm epsilon"},
    {"rope_theta", 0, OPT_DOUBLE, M_(rope_theta), 1, BIG, NULL, "10000", "RoPE base"},
    {"tie_word_embeddings", 0, OPT_BOOL, M_(tie_word_embeddings), 0, 1, NULL, "false", "LM head shares the embedding"},
    {"initializer_range", 0, OPT_DOUBLE, M_(initializer_range), 0, 10, NULL, "0.02", "std of the normal init of matrices"},
    {"bos_token_id", 0, OPT_INT, M_(bos_token_id), -1, 1 << 24, NULL, "-1", "BOS id"},
    {"eos_token_id", 0, OPT_INT, M_(eos_token_id), -1, 1 << 24, NULL, "-1", "EOS id"},
    /* training */
    {"train_data", 'i', OPT_STRING, TS_(train_data), 0, 0, NULL, "", "glob of training shards"},
    {"val_data", 'j', OPT_STRING, TS_(val_data), 0, 0, NULL, "", "glob of validation shards (empty: none)"},
    {"out_dir", 'o', OPT_STRING, TS_(out_dir), 0, 0, NULL, "", "run directory (default runs/<config name>)"},
    {"tokenizer", 0, OPT_STRING, TS_(tokenizer), 0, 0, NULL, "auto", "'byte', a tokenizer.model, or 'auto' (the data's meta.json)"},
    {"device", 'd', OPT_STRING, TS_(device), 0, 0, "auto|cpu|cuda", "auto", "where to train"},
    {"fusion", 0, OPT_STRING, TS_(fusion), 0, 0, "on|off", "on",
     "CUDA backend: the GEMM-epilogue programs (on) or cuBLAS GEMMs + separate passes (off); the CPU ignores it"},
    {"cuda_graph", 0, OPT_STRING, TS_(cuda_graph), 0, 0, "on|off", "on",
     "CUDA backend: capture the training step as a CUDA graph and replay it (on) or launch its kernels each step "
     "(off); the same bits either way; the CPU ignores it"},
    {"batch_size", 'b', OPT_INT, T_(batch_size), 1, 1 << 20, NULL, "4", "sequences per micro-batch B"},
    {"seq_len", 't', OPT_INT, T_(seq_len), 1, 1 << 24, NULL, "256", "sequence length T"},
    {"total_batch_tokens", 0, OPT_INT64, T_(total_batch_tokens), 0, 9e15, NULL, "0",
     "tokens per optimizer step, a multiple of B*T (0: B*T); the rest is gradient accumulation"},
    {"steps", 'n', OPT_INT, T_(steps), 0, 99999999, NULL, "100",
     "optimizer steps (0: write the initial weights as checkpoint step_00000000 and exit)"},
    {"learning_rate", 'l', OPT_DOUBLE, T_(learning_rate), 0, 10, NULL, "3e-4", "peak learning rate"},
    {"warmup_steps", 0, OPT_INT, T_(warmup_steps), 0, 1e9, NULL, "0", "linear warmup steps"},
    {"lr_schedule", 0, OPT_STRING, TS_(lr_schedule), 0, 0, "cosine|linear|constant|wsd", "cosine", "decay after warmup"},
    {"min_lr_frac", 0, OPT_DOUBLE, T_(min_lr_frac), 0, 1, NULL, "0.1", "final learning rate / peak"},
    {"wsd_decay_frac", 0, OPT_DOUBLE, T_(wsd_decay_frac), 0, 1, NULL, "0.2", "wsd: fraction of steps in the final decay"},
    {"weight_decay", 0, OPT_DOUBLE, T_(weight_decay), 0, 10, NULL, "0.1", "AdamW decoupled weight decay (not on norms)"},
    {"beta1", 0, OPT_DOUBLE, T_(beta1), 0, 0.999999, NULL, "0.9", "AdamW beta1"},
    {"beta2", 0, OPT_DOUBLE, T_(beta2), 0, 0.999999999, NULL, "0.95", "AdamW beta2"},
    {"adam_eps", 0, OPT_DOUBLE, T_(adam_eps), 0, 1, NULL, "1e-8", "AdamW epsilon"},
    {"grad_clip", 0, OPT_DOUBLE, T_(grad_clip), 0, BIG, NULL, "1", "clip the global gradient norm to this (0: off)"},
    {"skip_nonfinite", 0, OPT_INT, T_(skip_nonfinite), 0, 1e9, NULL, "0",
     "steps with a non-finite loss or gradient norm to skip (no update) before stopping (0: stop at the first)"},
    {"seed", 's', OPT_INT64, T_(seed), 0, 9e15, NULL, "1337", "seed of the init, the data order and sampling"},
    {"eval_every", 0, OPT_INT, T_(eval_every), 0, 1e9, NULL, "0", "validation loss every N steps (0: never)"},
    {"eval_batches", 0, OPT_INT, T_(eval_batches), 1, 1e9, NULL, "8", "validation batches per evaluation"},
    {"sample_every", 0, OPT_INT, T_(sample_every), 0, 1e9, NULL, "0", "print a sample every N steps (0: never)"},
    {"sample_tokens", 0, OPT_INT, T_(sample_tokens), 1, 1e6, NULL, "128", "tokens per sample"},
    {"sample_prompt", 0, OPT_STRING, TS_(sample_prompt), 0, 0, NULL, "",
     "prompt of the samples, after BOS where the vocabulary has one (empty, byte vocabulary: a newline)"},
    {"temperature", 0, OPT_DOUBLE, T_(temperature), 0, 100, NULL, "1", "sampling temperature (0: greedy)"},
    {"top_k", 0, OPT_INT, T_(top_k), 0, 1 << 24, NULL, "0", "samples draw among the K most likely tokens (0: all)"},
    {"log_every", 0, OPT_INT, T_(log_every), 0, 1e9, NULL, "0",
     "print the progress line of every Nth step (0: steps/100, about 100 lines a run); log.jsonl has every step"},
    {"checkpoint_every", 0, OPT_INT, T_(checkpoint_every), 0, 1e9, NULL, "0",
     "write a checkpoint every N steps (0: only at the end; also on SIGINT/SIGTERM)"},
    {"keep_last", 0, OPT_INT, T_(keep_last), 0, 1e9, NULL, "3", "keep the newest K checkpoints (0: keep all)"},
    {"export_dtype", 0, OPT_STRING, TS_(export_dtype), 0, 0, "f32|bf16", "f32", "dtype of model.safetensors in checkpoints"},
    {"init_from", 0, OPT_STRING, TS_(init_from), 0, 0, NULL, "",
     "start from Hugging Face weights: DIR with config.json and model.safetensors (or a sharded index)"},
};
const int CONFIG_N_OPTIONS = (int)(sizeof(CONFIG_OPTIONS) / sizeof(CONFIG_OPTIONS[0]));

/* Hugging Face keys that do not change the computation here: accepted and ignored. */
static const char *IGNORED_KEYS[] = {"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
                                     "use_cache", "pad_token_id", "_name_or_path", "pretraining_tp",
                                     "attention_dropout", "hidden_act", "attention_bias", "mlp_bias"};

static void *option_field(const Option *o, Config *cfg) {
    return o->is_model ? (char *)&cfg->model + o->offset : (char *)&cfg->train + o->offset;
}
const void *config_option_field_c(const Option *o, const Config *cfg) {
    return o->is_model ? (const char *)&cfg->model + o->offset : (const char *)&cfg->train + o->offset;
}

static const Option *find_option(const char *key) {
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (strcmp(CONFIG_OPTIONS[i].key, key) == 0) return &CONFIG_OPTIONS[i];
    return NULL;
}

/* Other programs' names for some options (and the --max-steps of habit), for the suggestions of unknown names. */
static const SuggestAlias ALIASES[] = {
    {"lr", "learning_rate"},          {"max_lr", "learning_rate"},     {"max_steps", "steps"},
    {"num_steps", "steps"},           {"iters", "steps"},              {"max_iters", "steps"},
    {"train_steps", "steps"},         {"batch", "batch_size"},         {"micro_batch_size", "batch_size"},
    {"block_size", "seq_len"},        {"context_length", "seq_len"},   {"sequence_length", "seq_len"},
    {"seq_length", "seq_len"},        {"max_seq_len", "seq_len"},      {"warmup", "warmup_steps"},
    {"warmup_iters", "warmup_steps"}, {"wd", "weight_decay"},          {"output_dir", "out_dir"},
    {"out", "out_dir"},               {"data", "train_data"},          {"input", "train_data"},
    {"eval_interval", "eval_every"},  {"eval_iters", "eval_batches"},  {"log_interval", "log_every"},
    {"save_every", "checkpoint_every"}, {"grad_accum", "total_batch_tokens"},
    {"gradient_accumulation_steps", "total_batch_tokens"}, {"max_grad_norm", "grad_clip"},
    {"clip_grad", "grad_clip"},       {"dtype", "export_dtype"},
};

/* " (did you mean X?)" for an unknown key or flag name (in key form: '_' for '-'), or "" when nothing is near.
 * As a flag (as_flag): the training keys and the switches, written as --flags; else every key of the file. */
static void suggestion(const char *name, int as_flag, char *out, size_t cap) {
    static const char *SWITCHES[] = {"config", "overwrite", "resume", "resume_fallback", "generate", "help"};
    const char *names[sizeof(SWITCHES) / sizeof(SWITCHES[0]) + 64];
    int n = 0;
    for (int i = 0; i < CONFIG_N_OPTIONS && n < 64; i++)
        if (!as_flag || !CONFIG_OPTIONS[i].is_model) names[n++] = CONFIG_OPTIONS[i].key;
    if (as_flag)
        for (size_t i = 0; i < sizeof(SWITCHES) / sizeof(SWITCHES[0]); i++) names[n++] = SWITCHES[i];
    char list[256];
    int found = suggest_names(name, names, n, ALIASES, (int)(sizeof(ALIASES) / sizeof(ALIASES[0])),
                              as_flag ? "--" : "", list, sizeof(list));
    if (as_flag) /* the flags are written with '-' for '_' */
        for (char *c = list; *c; c++)
            if (*c == '_') *c = '-';
    if (found) snprintf(out, cap, " (did you mean %s?)", list);
    else if (cap) out[0] = 0;
}

static int in_choices(const char *choices, const char *s) {
    size_t n = strlen(s);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, s, n) == 0) return 1;
        c += len + (bar ? 1 : 0);
    }
    return 0;
}

/* Stores a number into an option's field after checking type and range. where: "config X" or "flag --y". */
static int set_number(const Option *o, Config *cfg, double v, const char *where, char *err, size_t errlen) {
    if (!isfinite(v) || v < o->min || v > o->max) {
        snprintf(err, errlen, "%s: %s = %g is out of range [%g, %g]", where, o->key, v, o->min, o->max);
        return -1;
    }
    if ((o->type == OPT_INT || o->type == OPT_INT64) && v != floor(v)) {
        snprintf(err, errlen, "%s: %s must be an integer, got %g", where, o->key, v);
        return -1;
    }
    void *f = option_field(o, cfg);
    switch (o->type) {
    case OPT_INT: *(int *)f = (int)v; break;
    case OPT_INT64: *(int64_t *)f = (int64_t)v; break;
    case OPT_DOUBLE: *(double *)f = v; break;
    case OPT_BOOL: *(int *)f = v != 0; break;
    case OPT_STRING: break;
    }
    return 0;
}

static int set_string(const Option *o, Config *cfg, const char *s, const char *where, char *err, size_t errlen) {
    if (o->choices && !in_choices(o->choices, s)) {
        snprintf(err, errlen, "%s: %s must be one of %s, got \"%s\"", where, o->key, o->choices, s);
        return -1;
    }
    if (strlen(s) >= o->size) {
        snprintf(err, errlen, "%s: %s is longer than %zu characters", where, o->key, o->size - 1);
        return -1;
    }
    const long bad = utf8_invalid_at(s);
    if (bad >= 0) { /* the run's train_config.json, JSON text, could not hold it */
        snprintf(err, errlen, "%s: %s is not UTF-8 text (byte %ld, 0x%02x, is not part of a UTF-8 character)", where,
                 o->key, bad + 1, (unsigned char)s[bad]);
        return -1;
    }
    memcpy(option_field(o, cfg), s, strlen(s) + 1);
    return 0;
}

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

static int set_from_json(const Option *o, Config *cfg, const cJSON *v, const char *where, char *err, size_t errlen) {
    const char *want = o->type == OPT_STRING ? "a string" : o->type == OPT_BOOL ? "a boolean" : "a number";
    if (o->type == OPT_STRING && cJSON_IsString(v)) return set_string(o, cfg, v->valuestring, where, err, errlen);
    if (o->type == OPT_BOOL && cJSON_IsBool(v)) return set_number(o, cfg, cJSON_IsTrue(v), where, err, errlen);
    if (o->type != OPT_STRING && o->type != OPT_BOOL && cJSON_IsNumber(v))
        return set_number(o, cfg, v->valuedouble, where, err, errlen);
    snprintf(err, errlen, "%s: key \"%s\" must be %s, got %s", where, o->key, want, json_type_name(v));
    return -1;
}

/* A key of an ignored HF field must still not ask for something this model does not do. */
static int check_ignored_key(const cJSON *v, const char *where, char *err, size_t errlen) {
    const char *k = v->string;
    int bad = 0;
    if (strcmp(k, "hidden_act") == 0) bad = !cJSON_IsString(v) || strcmp(v->valuestring, "silu") != 0;
    if (strcmp(k, "attention_bias") == 0 || strcmp(k, "mlp_bias") == 0) bad = !cJSON_IsFalse(v);
    if (strcmp(k, "attention_dropout") == 0) bad = !cJSON_IsNumber(v) || v->valuedouble != 0;
    if (strcmp(k, "pretraining_tp") == 0) bad = !cJSON_IsNumber(v) || v->valuedouble != 1;
    if (strcmp(k, "model_type") == 0) bad = !cJSON_IsString(v) || strcmp(v->valuestring, "llama") != 0;
    if (bad) {
        char *s = cJSON_PrintUnformatted(v);
        snprintf(err, errlen, "%s: %s = %s is not supported (this trainer implements LLaMA: silu, no biases, "
                 "no attention dropout, pretraining_tp 1)", where, k, s ? s : "?");
        free(s);
        return -1;
    }
    return 0;
}

/* Applies the RoPE keys of one file (config_rope.h; NULL: absent) to cfg; rope_theta through its option's range. */
static int apply_rope_keys(Config *cfg, const cJSON *theta, const cJSON *scaling, const cJSON *params,
                           const char *where, char *err, size_t errlen) {
    RopeKeys r;
    if (config_rope_keys(theta, scaling, params, &r, where, err, errlen)) return -1;
    if (r.has_theta && set_number(find_option("rope_theta"), cfg, r.theta, where, err, errlen)) return -1;
    if (r.has_scaling) {
        ModelConfig *m = &cfg->model;
        m->rope_llama3 = r.llama3;
        m->rope_factor = r.factor;
        m->rope_low_freq_factor = r.low_freq_factor;
        m->rope_high_freq_factor = r.high_freq_factor;
        m->rope_original_max_position_embeddings = r.original_max_position_embeddings;
    }
    return 0;
}

int config_load_file(Config *cfg, const char *path, char *err, size_t errlen) {
    size_t len;
    char inner[512];
    char *text = fs_read_all(path, CONFIG_MAX_BYTES, &len, inner, sizeof(inner));
    if (!text) {
        snprintf(err, errlen, "config %s", inner); /* inner is "PATH: problem" */
        return -1;
    }
    int rc = config_load_json(cfg, text, len, path, err, errlen);
    free(text);
    return rc;
}

int config_load_json(Config *cfg, const char *text, size_t len, const char *path, char *err, size_t errlen) {
    char where[CONFIG_PATH_MAX + 16];
    snprintf(where, sizeof(where), "config %s", path);
    cJSON *root = fs_parse_json(text, len, where, err, errlen);
    if (!root) return -1;
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: the top level must be a JSON object", where);
        rc = -1;
    }
    const cJSON *rope_theta = NULL, *rope_scaling = NULL, *rope_parameters = NULL; /* read together, below */
    for (const cJSON *v = cJSON_IsObject(root) ? root->child : NULL; v && rc == 0; v = v->next) {
        const char *k = v->string;
        const cJSON **rope = strcmp(k, "rope_theta") == 0     ? &rope_theta
                             : strcmp(k, "rope_scaling") == 0 ? &rope_scaling
                             : strcmp(k, "rope_parameters") == 0 ? &rope_parameters
                                                                 : NULL;
        if (rope) {
            *rope = v;
            continue;
        }
        const Option *o = find_option(k);
        if (o) {
            const cJSON *val = v;
            /* HF writes eos_token_id as a list for some models; the first id is the one used for samples. */
            if ((strcmp(k, "eos_token_id") == 0 || strcmp(k, "bos_token_id") == 0) && cJSON_IsArray(v) &&
                cJSON_GetArraySize(v) > 0)
                val = cJSON_GetArrayItem(v, 0);
            if (cJSON_IsNull(val) && o->is_model) continue; /* HF writes null for unset ids */
            rc = set_from_json(o, cfg, val, where, err, errlen);
            continue;
        }
        int ignored = 0;
        for (size_t i = 0; i < sizeof(IGNORED_KEYS) / sizeof(IGNORED_KEYS[0]); i++)
            if (strcmp(k, IGNORED_KEYS[i]) == 0) ignored = 1;
        if (ignored) {
            rc = check_ignored_key(v, where, err, errlen);
            continue;
        }
        char near[300];
        suggestion(k, 0, near, sizeof(near));
        snprintf(err, errlen, "%s: unknown key \"%s\"%s (neither a Hugging Face Llama key nor a training key; "
                 "see ./train --help)", where, k, near);
        rc = -1;
    }
    if (rc == 0) rc = apply_rope_keys(cfg, rope_theta, rope_scaling, rope_parameters, where, err, errlen);
    cJSON_Delete(root);
    if (rc) return rc;
    snprintf(cfg->path, sizeof(cfg->path), "%s", path);
    /* LlamaConfig's derived defaults. */
    ModelConfig *m = &cfg->model;
    if (m->num_key_value_heads == 0) m->num_key_value_heads = m->num_attention_heads;
    if (m->head_dim == 0 && m->num_attention_heads > 0) {
        if (m->hidden_size % m->num_attention_heads) {
            snprintf(err, errlen, "%s: hidden_size (%d) is not a multiple of num_attention_heads (%d) and no head_dim "
                     "is given", where, m->hidden_size, m->num_attention_heads);
            return -1;
        }
        m->head_dim = m->hidden_size / m->num_attention_heads;
    }
    return 0;
}

static int parse_flag_value(const Option *o, Config *cfg, const char *flag, const char *s, char *err,
                            size_t errlen) {
    char where[128];
    snprintf(where, sizeof(where), "flag %s", flag);
    if (o->type == OPT_STRING) return set_string(o, cfg, s, where, err, errlen);
    if (o->type == OPT_BOOL) {
        if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) return set_number(o, cfg, 1, where, err, errlen);
        if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0) return set_number(o, cfg, 0, where, err, errlen);
        snprintf(err, errlen, "%s: expected true or false, got \"%s\"", where, s);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != 0 || errno == ERANGE) {
        snprintf(err, errlen, "%s: expected a number, got \"%s\"", where, s);
        return -1;
    }
    return set_number(o, cfg, v, where, err, errlen);
}

void config_defaults(Config *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    char err[256];
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (CONFIG_OPTIONS[i].def &&
            parse_flag_value(&CONFIG_OPTIONS[i], cfg, "default", CONFIG_OPTIONS[i].def, err, sizeof(err))) {
            /* the option table's own defaults do not parse: a programming error, never the user's input */
            fprintf(stderr, "internal error: %s\n", err);
            abort();
        }
    snprintf(cfg->path, sizeof(cfg->path), "configs/llama3_tiny.json");
}

/* The option a flag names: "-x" by short flag, "--some-key" by key with '-' for '_'. */
static const Option *option_for_flag(const char *arg) {
    if (arg[0] != '-') return NULL;
    if (arg[1] != '-') {
        if (!arg[1] || arg[2]) return NULL;
        for (int i = 0; i < CONFIG_N_OPTIONS; i++)
            if (CONFIG_OPTIONS[i].short_flag == arg[1]) return &CONFIG_OPTIONS[i];
        return NULL;
    }
    char key[64];
    size_t n = strlen(arg + 2);
    if (n == 0 || n >= sizeof(key)) return NULL;
    for (size_t i = 0; i <= n; i++) key[i] = arg[2 + i] == '-' ? '_' : arg[2 + i];
    return find_option(key);
}

/* The command-line switches: flags without a value that are not config keys. */
static int *switch_field(Config *cfg, const char *arg) {
    if (strcmp(arg, "--overwrite") == 0) return &cfg->train.overwrite;
    if (strcmp(arg, "--resume") == 0) return &cfg->train.resume;
    if (strcmp(arg, "--resume-fallback") == 0) return &cfg->train.resume_fallback;
    return NULL;
}

/* "unknown flag" with the nearest known flags. */
static void unknown_flag(const char *flag, char *err, size_t errlen) {
    char key[64] = "", near[300] = "";
    if (strncmp(flag, "--", 2) == 0 && strlen(flag + 2) < sizeof(key)) {
        for (size_t i = 0; flag[2 + i]; i++) key[i] = flag[2 + i] == '-' ? '_' : flag[2 + i];
        suggestion(key, 1, near, sizeof(near));
    }
    snprintf(err, errlen, "unknown flag \"%s\"%s (see ./train --help)", flag, near);
}

int config_apply_flags(Config *cfg, int argc, char **argv, const char **config_path, char *err, size_t errlen) {
    *config_path = NULL;
    for (int i = 1; i < argc; i++) {
        /* --flag=value is --flag value */
        char a[120];
        const char *inline_value = NULL, *eq = strncmp(argv[i], "--", 2) == 0 ? strchr(argv[i], '=') : NULL;
        if (eq && (size_t)(eq - argv[i]) < sizeof(a)) {
            snprintf(a, sizeof(a), "%.*s", (int)(eq - argv[i]), argv[i]);
            inline_value = eq + 1;
        } else {
            snprintf(a, sizeof(a), "%.*s", (int)sizeof(a) - 1, argv[i]);
        }
        /* the flag's value: the text after '=', else the next argument (NULL: none) */
        const char *value = inline_value ? inline_value : i + 1 < argc ? argv[i + 1] : NULL;
        const int next = inline_value ? 0 : 1; /* arguments the value takes */
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            if (!value) {
                snprintf(err, errlen, "flag %s needs a value (a JSON config file)", a);
                return -1;
            }
            *config_path = value;
            i += next;
            continue;
        }
        if (strcmp(a, "--generate") == 0) {
            if (!value || strlen(value) >= sizeof(cfg->train.generate)) {
                snprintf(err, errlen, "flag --generate needs a directory (of at most %zu characters)",
                         sizeof(cfg->train.generate) - 1);
                return -1;
            }
            snprintf(cfg->train.generate, sizeof(cfg->train.generate), "%s", value);
            i += next;
            continue;
        }
        int *sw = switch_field(cfg, a);
        if (sw) {
            if (inline_value) {
                snprintf(err, errlen, "flag %s takes no value (got \"%s\")", a, argv[i]);
                return -1;
            }
            *sw = 1;
            continue;
        }
        const Option *o = option_for_flag(a);
        if (!o || o->is_model) {
            unknown_flag(a, err, errlen);
            return -1;
        }
        if (!value) {
            snprintf(err, errlen, "flag %s needs a value", a);
            return -1;
        }
        if (parse_flag_value(o, cfg, a, value, err, errlen)) return -1;
        i += next;
    }
    return 0;
}

static int option_equal(const Option *o, const Config *a, const Config *b) {
    const void *x = config_option_field_c(o, a), *y = config_option_field_c(o, b);
    switch (o->type) {
    case OPT_INT:
    case OPT_BOOL: return *(const int *)x == *(const int *)y;
    case OPT_INT64: return *(const int64_t *)x == *(const int64_t *)y;
    case OPT_DOUBLE: return *(const double *)x == *(const double *)y;
    case OPT_STRING: return strcmp((const char *)x, (const char *)y) == 0;
    }
    return 0;
}

static void option_format(const Option *o, const Config *c, char *out, size_t cap) {
    const void *f = config_option_field_c(o, c);
    switch (o->type) {
    case OPT_INT: snprintf(out, cap, "%d", *(const int *)f); break;
    case OPT_BOOL: snprintf(out, cap, "%s", *(const int *)f ? "true" : "false"); break;
    case OPT_INT64: snprintf(out, cap, "%lld", (long long)*(const int64_t *)f); break;
    case OPT_DOUBLE: { /* the shortest of 15 or 17 digits that reads back exactly */
        double v = *(const double *)f;
        snprintf(out, cap, "%.15g", v);
        if (strtod(out, NULL) != v) snprintf(out, cap, "%.17g", v);
        break;
    }
    case OPT_STRING: snprintf(out, cap, "\"%s\"", (const char *)f); break;
    }
}

void config_option_text(const Option *o, const Config *c, char *out, size_t cap) {
    if (o->type == OPT_STRING) snprintf(out, cap, "%s", (const char *)config_option_field_c(o, c));
    else option_format(o, c, out, cap);
}

const char *config_model_difference(const ModelConfig *a, const ModelConfig *b) {
    Config ca, cb;
    memset(&ca, 0, sizeof(ca));
    memset(&cb, 0, sizeof(cb));
    ca.model = *a;
    cb.model = *b;
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (CONFIG_OPTIONS[i].is_model && !option_equal(&CONFIG_OPTIONS[i], &ca, &cb)) return CONFIG_OPTIONS[i].key;
    if (a->rope_llama3 != b->rope_llama3 || a->rope_factor != b->rope_factor ||
        a->rope_low_freq_factor != b->rope_low_freq_factor || a->rope_high_freq_factor != b->rope_high_freq_factor ||
        a->rope_original_max_position_embeddings != b->rope_original_max_position_embeddings)
        return "rope_scaling";
    return NULL;
}

/* "KEY (A vs B)" for a model key on which a and b differ. */
static void describe_model_difference(const char *key, const Config *a, const Config *b, char *out, size_t cap) {
    const Option *o = find_option(key);
    if (!o) {
        snprintf(out, cap, "%s", key);
        return;
    }
    char va[64], vb[64];
    option_format(o, a, va, sizeof(va));
    option_format(o, b, vb, sizeof(vb));
    snprintf(out, cap, "%s (%s vs %s)", key, va, vb);
}

/* With -c and --init-from both, the model of the file must be the model of INIT/config.json. */
static int check_init_from_config(const Config *cfg, char *err, size_t errlen) {
    const char *dir = cfg->train.init_from;
    char hf_path[CONFIG_PATH_MAX + 16];
    snprintf(hf_path, sizeof(hf_path), "%s/config.json", dir);
    if (!dir[0] || strcmp(hf_path, cfg->path) == 0) return 0;
    Config hf;
    config_defaults(&hf);
    if (config_load_file(&hf, hf_path, err, errlen)) return -1;
    const char *key = config_model_difference(&cfg->model, &hf.model);
    if (key) {
        char what[256];
        describe_model_difference(key, cfg, &hf, what, sizeof(what));
        snprintf(err, errlen, "config %s and --init-from %s disagree on the model: %s; give -c a config with the same "
                 "model keys, or leave -c out to take the model from %s", cfg->path, hf_path, what, hf_path);
        return -1;
    }
    return 0;
}

/* --help's values: the config file of -c, else the default one; the built-in defaults (path "") when it does not
 * read. */
static void help_config(Config *cfg, int argc, char **argv) {
    char file[CONFIG_PATH_MAX];
    snprintf(file, sizeof(file), "%s", cfg->path);
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) && i + 1 < argc)
            snprintf(file, sizeof(file), "%s", argv[i + 1]);
        if (strncmp(argv[i], "--config=", 9) == 0) snprintf(file, sizeof(file), "%s", argv[i] + 9);
    }
    char ignored[1024];
    if (config_load_file(cfg, file, ignored, sizeof(ignored))) {
        config_defaults(cfg);
        cfg->path[0] = 0;
    }
}

int config_from_args(Config *cfg, int argc, char **argv, char *err, size_t errlen) {
    config_defaults(cfg);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help_config(cfg, argc, argv);
            return 1;
        }
    /* A first pass over the flags finds -c, --init-from and --resume, which decide the config file; the flags then
     * apply on top of the file whatever their order. */
    Config scout;
    config_defaults(&scout);
    const char *config_path;
    if (config_apply_flags(&scout, argc, argv, &config_path, err, errlen)) return -1;
    if (scout.train.generate[0]) {
        const char *other = config_path ? "-c" : scout.train.resume ? "--resume" : scout.train.init_from[0] ?
                            "--init-from" : NULL;
        if (other) {
            snprintf(err, errlen, "--generate DIR takes the model from DIR: it does not go with %s", other);
            return -1;
        }
        return config_apply_flags(cfg, argc, argv, &config_path, err, errlen);
    }
    char file[CONFIG_PATH_MAX + 16];
    if (config_path) snprintf(file, sizeof(file), "%s", config_path);
    else if (scout.train.resume) file[0] = 0;
    else if (scout.train.init_from[0]) snprintf(file, sizeof(file), "%s/config.json", scout.train.init_from);
    else snprintf(file, sizeof(file), "%s", cfg->path);
    if (file[0] && config_load_file(cfg, file, err, errlen)) return -1;
    if (config_apply_flags(cfg, argc, argv, &config_path, err, errlen)) return -1;
    if (cfg->train.resume) return 0;
    if (cfg->train.resume_fallback) {
        snprintf(err, errlen, "flag --resume-fallback only goes with --resume");
        return -1;
    }
    if (check_init_from_config(cfg, err, errlen)) return -1;
    if (cfg->train.steps > 0 && cfg->train.warmup_steps > cfg->train.steps) { /* a short run: the warmup fits in it */
        cfg->train.warmup_clamped_from = cfg->train.warmup_steps;
        cfg->train.warmup_steps = cfg->train.steps;
    }
    return config_validate(cfg, err, errlen);
}

/* Training keys that may change when a run is resumed: they do not change what the next step computes. */
static const char *RESUME_SAFE_KEYS[] = {"steps", "eval_every", "eval_batches", "sample_every", "sample_tokens",
                                         "sample_prompt", "temperature", "top_k", "checkpoint_every", "keep_last",
                                         "log_every",
                                         "skip_nonfinite",
                                         "export_dtype", "device", "fusion", "cuda_graph", "tokenizer", "out_dir",
                                         "init_from"};

static int resume_safe(const char *key) {
    for (size_t i = 0; i < sizeof(RESUME_SAFE_KEYS) / sizeof(RESUME_SAFE_KEYS[0]); i++)
        if (strcmp(key, RESUME_SAFE_KEYS[i]) == 0) return 1;
    return 0;
}

int config_resume_merge(Config *ckpt, int argc, char **argv, char *err, size_t errlen) {
    Config merged = *ckpt;
    const char *config_path;
    Config scout;
    config_defaults(&scout);
    if (config_apply_flags(&scout, argc, argv, &config_path, err, errlen)) return -1;
    if (config_path && config_load_file(&merged, config_path, err, errlen)) return -1;
    if (config_apply_flags(&merged, argc, argv, &config_path, err, errlen)) return -1;
    snprintf(merged.path, sizeof(merged.path), "%s", ckpt->path);
    const char *key = config_model_difference(&ckpt->model, &merged.model);
    if (key) {
        char what[256];
        describe_model_difference(key, ckpt, &merged, what, sizeof(what));
        snprintf(err, errlen, "--resume: the checkpoint's model (%s) and the command line's differ on %s; a run's "
                 "model cannot change when it resumes (leave -c out: the config comes from the checkpoint)",
                 ckpt->path, what);
        return -1;
    }
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const Option *o = &CONFIG_OPTIONS[i];
        if (o->is_model || resume_safe(o->key) || option_equal(o, ckpt, &merged)) continue;
        char was[CONFIG_PATH_MAX + 4], now[CONFIG_PATH_MAX + 4];
        option_format(o, ckpt, was, sizeof(was));
        option_format(o, &merged, now, sizeof(now));
        snprintf(err, errlen, "--resume: %s would change from %s (checkpoint %s) to %s; the data, batch, optimizer, "
                 "schedule and seed of a run cannot change when it resumes (only steps, the eval/sample/checkpoint "
                 "settings, keep_last, export_dtype, device, fusion, cuda_graph, tokenizer and out_dir can)", o->key,
                 was, ckpt->path, now);
        return -1;
    }
    *ckpt = merged;
    return config_validate(ckpt, err, errlen);
}

int64_t config_num_parameters(const ModelConfig *m) {
    int64_t D = m->hidden_size, F = m->intermediate_size, V = m->vocab_size;
    int64_t per_layer = (int64_t)config_qkv_dim(m) * D + (int64_t)m->num_attention_heads * m->head_dim * D +
                        3 * F * D + 2 * D;
    return V * D * (m->tie_word_embeddings ? 1 : 2) + m->num_hidden_layers * per_layer + D;
}

int config_validate_model(const ModelConfig *m, const char *p, char *err, size_t errlen) {
    Config c;
    memset(&c, 0, sizeof(c));
    c.model = *m;
    static const char *required[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                     "vocab_size"};
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        const Option *o = find_option(required[i]);
        if (*(const int *)config_option_field_c(o, &c) == 0) {
            snprintf(err, errlen, "config %s: missing required key \"%s\"", p, required[i]);
            return -1;
        }
    }
    if (m->num_key_value_heads == 0 || m->head_dim == 0) {
        snprintf(err, errlen, "config %s: num_key_value_heads and head_dim must be positive", p);
        return -1;
    }
    if (m->num_attention_heads % m->num_key_value_heads) {
        snprintf(err, errlen, "config %s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)",
                 p, m->num_attention_heads, m->num_key_value_heads);
        return -1;
    }
    if (m->head_dim % 2) {
        snprintf(err, errlen, "config %s: head_dim (%d) must be even for RoPE", p, m->head_dim);
        return -1;
    }
    if (m->rms_norm_eps <= 0) {
        snprintf(err, errlen, "config %s: rms_norm_eps must be positive", p);
        return -1;
    }
    if (m->bos_token_id >= m->vocab_size || m->eos_token_id >= m->vocab_size) {
        snprintf(err, errlen, "config %s: bos/eos token id outside the vocabulary (%d)", p, m->vocab_size);
        return -1;
    }
    return 0;
}

int64_t config_micro_steps(const TrainConfig *t) {
    const int64_t micro_tokens = (int64_t)t->batch_size * t->seq_len;
    return t->total_batch_tokens ? t->total_batch_tokens / micro_tokens : 1;
}

int config_validate(const Config *cfg, char *err, size_t errlen) {
    const ModelConfig *m = &cfg->model;
    const TrainConfig *t = &cfg->train;
    const char *p = cfg->path;
    if (config_validate_model(m, p, err, errlen)) return -1;
    if (t->seq_len > m->max_position_embeddings) {
        snprintf(err, errlen, "config %s: seq_len (%d) exceeds max_position_embeddings (%d)", p, t->seq_len,
                 m->max_position_embeddings);
        return -1;
    }
    int64_t bt = (int64_t)t->batch_size * t->seq_len;
    if (bt > INT_MAX) {
        snprintf(err, errlen, "config %s: batch_size*seq_len (%lld) exceeds %d tokens per micro-batch (the operations "
                 "count rows in int)", p, (long long)bt, INT_MAX);
        return -1;
    }
    if (t->total_batch_tokens != 0 && t->total_batch_tokens % bt != 0) {
        snprintf(err, errlen, "config %s: total_batch_tokens (%lld) must be a multiple of batch_size*seq_len (%lld)",
                 p, (long long)t->total_batch_tokens, (long long)bt);
        return -1;
    }
    if (config_micro_steps(t) > INT_MAX) {
        snprintf(err, errlen, "config %s: total_batch_tokens (%lld) is %lld micro-batches of batch_size*seq_len (%d x "
                 "%d) per step, more than the %d a step can count: lower total_batch_tokens or raise batch_size or "
                 "seq_len", p, (long long)t->total_batch_tokens, (long long)config_micro_steps(t), t->batch_size,
                 t->seq_len, INT_MAX);
        return -1;
    }
    if (!t->train_data[0]) {
        snprintf(err, errlen, "config %s: no training data (set train_data or pass -i 'glob')", p);
        return -1;
    }
    return 0;
}

void config_add_option_json(cJSON *root, const Option *o, const Config *cfg) {
    const void *f = config_option_field_c(o, cfg);
    switch (o->type) {
    case OPT_INT: cJSON_AddNumberToObject(root, o->key, *(const int *)f); break;
    case OPT_INT64: cJSON_AddNumberToObject(root, o->key, (double)*(const int64_t *)f); break;
    case OPT_DOUBLE: cJSON_AddNumberToObject(root, o->key, *(const double *)f); break;
    case OPT_BOOL: cJSON_AddBoolToObject(root, o->key, *(const int *)f); break;
    case OPT_STRING: cJSON_AddStringToObject(root, o->key, (const char *)f); break;
    }
}

void config_add_rope_scaling(cJSON *root, const ModelConfig *m, int null_if_none) {
    if (!m->rope_llama3) {
        if (null_if_none) cJSON_AddNullToObject(root, "rope_scaling");
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    cJSON_AddNumberToObject(rs, "factor", m->rope_factor);
    cJSON_AddNumberToObject(rs, "low_freq_factor", m->rope_low_freq_factor);
    cJSON_AddNumberToObject(rs, "high_freq_factor", m->rope_high_freq_factor);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", m->rope_original_max_position_embeddings);
}

char *config_to_json(const Config *cfg) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) config_add_option_json(root, &CONFIG_OPTIONS[i], cfg);
    config_add_rope_scaling(root, &cfg->model, 0);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
