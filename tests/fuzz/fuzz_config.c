/* fuzz_config.c: libFuzzer harness of the JSON config reader (config_load_json, what -c FILE, --init-from's
 * config.json and a checkpoint's train_config.json go through) and of config_validate. Property: a config that loads
 * and validates is written back by config_to_json (as train_config.json is) into text that loads again to the same
 * config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "tests/fuzz/fuzz_config_round_trip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    Config cfg;
    config_defaults(&cfg);
    if (config_load_json(&cfg, (const char *)data, size, "fuzz.json", err, sizeof(err)) != 0) return 0;
    if (config_validate(&cfg, err, sizeof(err)) == 0) fuzz_check_config_round_trip(&cfg);
    return 0;
}
