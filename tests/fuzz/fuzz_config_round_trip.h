/* fuzz_config_round_trip.h: the property that the config harnesses check: a valid config is written by
 * config_to_json (as train_config.json is) into text that loads again to the same config. */
#ifndef FUZZ_CONFIG_ROUND_TRIP_H
#define FUZZ_CONFIG_ROUND_TRIP_H

#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "tests/fuzz/fuzz_input.h"

static inline void fuzz_check_config_round_trip(const Config *cfg) {
    char err[1024];
    char *json = config_to_json(cfg);
    FUZZ_ASSERT(json, "config_to_json failed");
    Config again;
    config_defaults(&again);
    FUZZ_ASSERT(config_load_json(&again, json, strlen(json), "train_config.json", err, sizeof(err)) == 0,
                "a valid config, written by config_to_json, does not load again: %s\n%s", err, json);
    char *json2 = config_to_json(&again);
    FUZZ_ASSERT(json2 && strcmp(json, json2) == 0, "a config does not survive config_to_json and config_load_json:\n"
                "%s\nbecame\n%s", json, json2 ? json2 : "(null)");
    free(json);
    free(json2);
}

#endif
