/* train_help.c: the text of ./train --help (see train_help.h), from the option table of model/config_options.h, with
 * the values of the config that a plain ./train (or the one with -c) would use. */
#include "cli/train_help.h"

#include <stdio.h>
#include <string.h>

#include "model/config_options.h"

/* The value of o in cfg as " [value]", or "" for an empty string. */
static const char *bracketed(const Option *o, const Config *cfg, char *buf, size_t cap) {
    char v[CONFIG_PATH_MAX];
    config_option_text(o, cfg, v, sizeof(v));
    if (v[0]) snprintf(buf, cap, " [%s]", v);
    else if (cap) buf[0] = 0;
    return buf;
}

void train_print_help(const char *prog, const Config *cfg) {
    printf("usage: %s [-c config.json] [flags]\n\n"
           "Trains a LLaMA-3-style model. The config file holds Hugging Face config.json keys (the model) and\n"
           "training keys; every training key is also a flag (--key-name value or --key-name=value), and flags\n"
           "override the file.\n", prog);
    Config builtin;
    config_defaults(&builtin);
    if (cfg->path[0])
        printf("Values in [brackets]: those of %s, which %s uses.\n\n", cfg->path,
               strcmp(cfg->path, builtin.path) == 0 ? "a plain ./train" : "./train with this -c");
    else
        printf("Values in [brackets]: the built-in defaults (the config file, %s unless -c, cannot be read\n"
               "from this directory).\n\n", builtin.path);
    printf(
           "  -c, --config FILE              JSON config (default configs/llama3_tiny.json)\n"
           "      --overwrite                replace a run directory that already holds a run (its log and\n"
           "                                 checkpoints, removed once this run's first checkpoint is complete)\n"
           "      --resume                   continue the run of -o DIR from its newest complete checkpoint\n"
           "      --resume-fallback          with --resume: if the newest checkpoint is damaged, take the newest\n"
           "                                 one that is not (the damaged ones are moved aside)\n"
           "      --generate DIR             no training: print --sample-tokens tokens after --sample-prompt from\n"
           "                                 the model of DIR (a checkpoint, a run directory's newest, or a Hugging\n"
           "                                 Face directory) with --temperature, --top-k, --seed, --device and\n"
           "                                 --tokenizer (default: the tokenizer.model that checkpoints carry, else\n"
           "                                 the one train_config.json names, else byte for 256 ids)\n"
           "  -h, --help                     this text\n");
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const Option *o = &CONFIG_OPTIONS[i];
        if (o->is_model) continue;
        char flag[64], sf[8] = "   ";
        snprintf(flag, sizeof(flag), "--%s", o->key);
        for (char *c = flag + 2; *c; c++)
            if (*c == '_') *c = '-';
        if (o->short_flag) snprintf(sf, sizeof(sf), "-%c,", o->short_flag);
        const char *arg = o->type == OPT_STRING ? (o->choices ? o->choices : "STR")
                          : o->type == OPT_DOUBLE ? "F" : o->type == OPT_BOOL ? "BOOL" : "N";
        char left[96], value[CONFIG_PATH_MAX + 4];
        snprintf(left, sizeof(left), "%s %s %s", sf, flag, arg);
        printf("  %-30s %s%s\n", left, o->help, bracketed(o, cfg, value, sizeof(value)));
    }
    printf("\nModel keys (Hugging Face LlamaConfig, in the file only):\n");
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const Option *o = &CONFIG_OPTIONS[i];
        char value[CONFIG_PATH_MAX + 4];
        /* a required key the built-in defaults leave unset (0) has no value to show */
        const int unset = !cfg->path[0] && !o->def;
        if (o->is_model) printf("  %-30s %s%s\n", o->key, o->help, unset ? "" : bracketed(o, cfg, value, sizeof(value)));
    }
    printf("  %-30s %s\n", "rope_scaling", "{\"rope_type\": \"llama3\", factor, low_freq_factor, high_freq_factor, "
           "original_max_position_embeddings} or null");
    printf("  %-30s %s\n", "rope_parameters", "transformers 5's form of both: {\"rope_type\": \"default\" or "
           "\"llama3\", rope_theta, and llama3's fields}");
}
