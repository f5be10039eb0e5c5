/* fuzz_flags.c: libFuzzer harness of the command-line flag parser. The input is the arguments, separated by NUL
 * bytes; they apply (config_apply_flags, which reads no file) onto a config of the fuzz model, which is then
 * validated; with no -c among them they also go through config_resume_merge as a resumed run's would. Property: a
 * valid config that the flags give is written back by config_to_json into text that loads again to the same config (a
 * flag's value survives train_config.json and --resume). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "tests/fuzz/fuzz_config_round_trip.h"
#include "tests/fuzz/fuzz_model.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[MAX_ARGS + 1] = {"train"};
    int argc = 1, has_config = 0;
    for (size_t at = 0; at <= size && argc < MAX_ARGS; at += strlen(text + at) + 1) {
        argv[argc++] = text + at;
        has_config |= strcmp(text + at, "-c") == 0 || strcmp(text + at, "--config") == 0 ||
                      strncmp(text + at, "--config=", 9) == 0;
    }
    argv[argc] = NULL;

    char err[1024];
    Config cfg;
    config_defaults(&cfg);
    cfg.model = fuzz_model_config(0);
    snprintf(cfg.train.train_data, sizeof(cfg.train.train_data), "data/train_*.bin");
    Config base = cfg;
    const char *config_path;
    if (config_apply_flags(&cfg, argc, argv, &config_path, err, sizeof(err)) == 0 &&
        config_validate(&cfg, err, sizeof(err)) == 0)
        fuzz_check_config_round_trip(&cfg);
    if (!has_config && config_resume_merge(&base, argc, argv, err, sizeof(err)) == 0)
        fuzz_check_config_round_trip(&base);
    free(text);
    return 0;
}
