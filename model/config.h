/* config.h: the model configuration (Hugging Face LlamaConfig keys) and the training configuration, read from one
 * JSON file and overridden by command-line flags, with validation. The --help text that lists the options is
 * cli/train_help.h; the Hugging Face config.json written into checkpoints is persist/hf_config.h; tokenizer "auto"
 * (the data's meta.json) is data/meta.h. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_PATH_MAX 512
/* The largest config file read: a config is a few hundred bytes. */
#define CONFIG_MAX_BYTES ((size_t)1 << 20)

typedef struct ModelConfig {
    int hidden_size;             /* D */
    int intermediate_size;       /* F */
    int num_hidden_layers;       /* L */
    int num_attention_heads;     /* Hq */
    int num_key_value_heads;     /* Hkv (defaults to Hq) */
    int head_dim;                /* hd (defaults to D / Hq) */
    int vocab_size;              /* V */
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;
    double initializer_range;    /* std of the normal init of every matrix */
    int bos_token_id, eos_token_id;
    /* Llama-3.1-style rope_scaling ({"rope_type": "llama3", ...}); rope_llama3 == 0 means plain RoPE. */
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position_embeddings;
} ModelConfig;

typedef struct TrainConfig {
    char train_data[CONFIG_PATH_MAX]; /* glob of training shards */
    char val_data[CONFIG_PATH_MAX];   /* glob of validation shards ("" = no validation) */
    char out_dir[CONFIG_PATH_MAX];    /* run directory ("" = runs/<config name>) */
    char tokenizer[CONFIG_PATH_MAX];  /* "byte", a tiktoken tokenizer.model path, or "auto" (for samples) */
    char device[16];                  /* auto | cpu | cuda */
    char fusion[8];                   /* on | off: the CUDA backend's fused or unfused operation table */
    char cuda_graph[8];               /* on | off: replay the training step as a captured graph */
    int batch_size;                   /* B, sequences per micro-batch */
    int seq_len;                      /* T */
    int64_t total_batch_tokens;       /* tokens per optimizer step; a multiple of B*T (0 = B*T) */
    int steps;
    double learning_rate;
    int warmup_steps;
    int warmup_clamped_from;          /* not a key: a new run's warmup_steps that exceeded steps (then warmup_steps
                                       * = steps), else 0 */
    char lr_schedule[16];             /* cosine | linear | constant | wsd */
    double min_lr_frac;               /* the final learning rate as a fraction of learning_rate */
    double wsd_decay_frac;            /* wsd: fraction of the steps spent in the final linear decay */
    double weight_decay, beta1, beta2, adam_eps;
    double grad_clip;                 /* global-norm clip threshold (0 = off) */
    int skip_nonfinite;               /* steps with a non-finite loss or gradient norm skipped before stopping */
    int64_t seed;
    int eval_every, eval_batches;     /* 0 = never */
    int sample_every, sample_tokens;  /* 0 = never */
    char sample_prompt[256];
    double temperature;               /* 0 = greedy */
    int top_k;                        /* samples draw among the k most likely tokens (0 = all) */
    int log_every;                    /* the progress line of every Nth step (0 = steps/100) */
    int checkpoint_every;             /* 0 = only at the end (and on SIGINT/SIGTERM) */
    int keep_last;                    /* checkpoints kept (0 = all) */
    char export_dtype[8];             /* f32 | bf16: the dtype of model.safetensors in checkpoints */
    char init_from[CONFIG_PATH_MAX];  /* Hugging Face weights to start from ("" = the random init) */
    /* command-line only (never in a config file or train_config.json) */
    int overwrite;                    /* allow a run directory that already holds a run */
    int resume;                       /* continue from the newest complete checkpoint of out_dir */
    int resume_fallback;              /* ... or from an older one when the newest is damaged */
    char generate[CONFIG_PATH_MAX];   /* --generate DIR: print text from the model of DIR instead of training */
} TrainConfig;

typedef struct Config {
    ModelConfig model;
    TrainConfig train;
    char path[CONFIG_PATH_MAX]; /* the config file it came from */
} Config;

/* Fills cfg from the command line: defaults, then the JSON file (-c; without -c: INIT/config.json with --init-from
 * INIT, else configs/llama3_tiny.json), then the flags. With -c and --init-from both, the model keys of the two
 * files must agree. With --resume nothing is loaded without -c and nothing is validated: the run's config comes from
 * its checkpoint (config_resume_merge). With --generate DIR only the flags are read (the model comes from DIR,
 * cli/generate.h). Returns 0 on success, 1 for -h or --help (cfg then holds the config file of -c, else the default
 * one, without the flags; or the built-in defaults with an empty path when that file does not read: the caller prints
 * the help with those values, cli/train_help.h), -1 on an error (message in err). */
int config_from_args(Config *cfg, int argc, char **argv, char *err, size_t errlen);

/* --resume: ckpt holds the checkpoint's train_config.json; applies the command line (-c and flags) on top of it.
 * Only keys that can change safely may differ (steps, eval/sample/checkpoint intervals and settings, keep_last,
 * export_dtype, device, fusion, cuda_graph, tokenizer, out_dir, init_from); any other difference (model shape,
 * data, batch, optimizer, seed, schedule) is an error naming the key. Validates the result. 0 or -1 with a message. */
int config_resume_merge(Config *ckpt, int argc, char **argv, char *err, size_t errlen);

/* The first model key on which a and b differ (HF name, "rope_scaling" for the scaling fields), or NULL. */
const char *config_model_difference(const ModelConfig *a, const ModelConfig *b);

/* Reads and validates one JSON config file into cfg (on top of what cfg holds). 0 or -1 with a message. */
int config_load_file(Config *cfg, const char *path, char *err, size_t errlen);
/* The same from len bytes of JSON text in memory; path names it in messages and becomes cfg->path. */
int config_load_json(Config *cfg, const char *text, size_t len, const char *path, char *err, size_t errlen);

/* Applies the switches and flags of argv[1..argc) onto cfg (no file is read); -c's value goes to *config_path (NULL
 * if absent). 0 or -1 with a message naming the flag. */
int config_apply_flags(Config *cfg, int argc, char **argv, const char **config_path, char *err, size_t errlen);

/* Checks consistency of everything (shapes, ranges, batch arithmetic). 0 or -1 with a message. */
int config_validate(const Config *cfg, char *err, size_t errlen);
/* The micro-batches of one optimizer step: total_batch_tokens / (batch_size*seq_len), or 1 when it is 0 (in 64 bits:
 * config_validate checks that it fits an int). */
int64_t config_micro_steps(const TrainConfig *t);
/* The model part of config_validate (path: the file it came from, for the message). */
int config_validate_model(const ModelConfig *m, const char *path, char *err, size_t errlen);

void config_defaults(Config *cfg);

/* The whole configuration as one JSON object (HF keys and training keys); the caller frees the string. */
char *config_to_json(const Config *cfg);

/* Derived sizes. */
static inline int config_qkv_dim(const ModelConfig *m) {
    return (m->num_attention_heads + 2 * m->num_key_value_heads) * m->head_dim;
}
int64_t config_num_parameters(const ModelConfig *m);

#endif
