/* config_options.h: config.c's table of options (every key: its flag, type, range, default and help) and the helpers
 * that write an option as JSON, for the two files outside config.c that list or write the options from the same
 * table: --help (cli/train_help.c) and the Hugging Face config.json (persist/hf_config.c). Everything else uses
 * config.h. */
#ifndef CONFIG_OPTIONS_H
#define CONFIG_OPTIONS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "model/config.h"

typedef enum { OPT_INT, OPT_INT64, OPT_DOUBLE, OPT_BOOL, OPT_STRING } OptType;

typedef struct Option {
    const char *key;     /* JSON key; the long flag is the key with '-' for '_' */
    char short_flag;     /* 0 = none */
    OptType type;
    int is_model;        /* 1: a field of ModelConfig (an HF key), 0: of TrainConfig */
    size_t offset;       /* offset of the field in its struct */
    size_t size;         /* OPT_STRING: buffer size */
    double min, max;     /* numeric range, inclusive */
    const char *choices; /* OPT_STRING: "a|b|c" or NULL for any */
    const char *def;     /* default value as a flag would give it; NULL: none (required or derived) */
    const char *help;
} Option;

/* Every option: the model keys (Hugging Face LlamaConfig), then the training keys. */
extern const Option CONFIG_OPTIONS[];
extern const int CONFIG_N_OPTIONS;

/* The field of o in cfg (in cfg->model or cfg->train). */
const void *config_option_field_c(const Option *o, const Config *cfg);
/* o's value in cfg as a flag would give it (a string as it is, a double in as few digits as read back exactly). */
void config_option_text(const Option *o, const Config *cfg, char *out, size_t cap);
/* Adds o's value in cfg to root under o's key. */
void config_add_option_json(cJSON *root, const Option *o, const Config *cfg);
/* rope_scaling as HF writes it; null (when null_if_none) or nothing for plain RoPE. */
void config_add_rope_scaling(cJSON *root, const ModelConfig *m, int null_if_none);

#endif
