/* train_help.c: the text of ./train --help (see train_help.h), from the option table of model/config_options.h. */
#include "cli/train_help.h"

#include <stdio.h>

#include "model/config_options.h"

void train_print_help(const char *prog) {
    printf("usage: %s [-c config.json] [flags]\n\n"
           "Trains a LLaMA-3-style model. The config file holds Hugging Face config.json keys (the model) and\n"
           "training keys; every training key is also a flag (--key-name value), and flags override the file.\n"
           "Defaults in [brackets].\n\n"
           "  -c, --config FILE              JSON config (default configs/llama3_tiny.json)\n"
           "      --overwrite                replace a run directory that already holds a run (its log and\n"
           "                                 checkpoints, removed once this run's first checkpoint is complete)\n"
           "      --resume                   continue the run of -o DIR from its newest complete checkpoint\n"
           "      --resume-fallback          with --resume: if the newest checkpoint is damaged, take the newest\n"
           "                                 one that is not (the damaged ones are moved aside)\n"
           "      --generate DIR             no training: print --sample-tokens tokens after --sample-prompt from\n"
           "                                 the model of DIR (a checkpoint, a run directory's newest, or a Hugging\n"
           "                                 Face directory) with --temperature, --top-k, --seed, --device and\n"
           "                                 --tokenizer (default: DIR/tokenizer.model, or byte for 256 ids)\n"
           "  -h, --help                     this text\n", prog);
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
        char left[96];
        snprintf(left, sizeof(left), "%s %s %s", sf, flag, arg);
        if (o->def && o->def[0]) printf("  %-30s %s [%s]\n", left, o->help, o->def);
        else printf("  %-30s %s\n", left, o->help);
    }
    printf("\nModel keys (Hugging Face LlamaConfig, in the file only):\n");
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (CONFIG_OPTIONS[i].is_model)
            printf("  %-30s %s%s%s%s\n", CONFIG_OPTIONS[i].key, CONFIG_OPTIONS[i].help,
                   CONFIG_OPTIONS[i].def ? " [" : "", CONFIG_OPTIONS[i].def ? CONFIG_OPTIONS[i].def : "",
                   CONFIG_OPTIONS[i].def ? "]" : "");
    printf("  %-30s %s\n", "rope_scaling", "{\"rope_type\": \"llama3\", factor, low_freq_factor, high_freq_factor, "
           "original_max_position_embeddings} or null");
    printf("  %-30s %s\n", "rope_parameters", "transformers 5's form of both: {\"rope_type\": \"default\" or "
           "\"llama3\", rope_theta, and llama3's fields}");
}
