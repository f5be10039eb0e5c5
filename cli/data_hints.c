/* data_hints.c: what to do about missing data or data of another vocabulary (see data_hints.h). */
#include "cli/data_hints.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "data/meta.h"

const char *data_hint_missing(const char *train_data, char *out, size_t cap) {
    glob_t g;
    const int rc = glob(train_data, 0, NULL, &g);
    if (rc != GLOB_NOMATCH) globfree(&g);
    if (cap) out[0] = 0;
    if (rc != GLOB_NOMATCH) return out;
    const char *make = strstr(train_data, "data/tinyshakespeare_") ? "run `make data` (it prepares TinyShakespeare)"
                       : strstr(train_data, "data/pystdlib_llama3") ? "run `make data-code` (it prepares the code "
                                                                      "dataset)"
                                                                    : NULL;
    if (make) snprintf(out, cap, ": %s", make);
    else snprintf(out, cap, ": prepare the shards with scripts/prepare_data.py (docs/data.md), or pass -i 'GLOB'");
    return out;
}

const char *data_hint_vocabulary(const char *train_data, int vocab_size, const char *cfg_path, char *out,
                                 size_t cap) {
    char meta[PATH_MAX + 16];
    const int data_vocab = meta_vocab_size(train_data, meta, sizeof(meta));
    if (cap) out[0] = 0;
    if (data_vocab > vocab_size)
        snprintf(out, cap, "; %s says the data has a vocabulary of %d ids and the model has %d: set vocab_size "
                 "(config %s) to %d, or train on data made for this model's vocabulary", meta, data_vocab, vocab_size,
                 cfg_path, data_vocab);
    return out;
}
