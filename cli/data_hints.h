/* data_hints.h: the what-to-do half of the trainer's messages about its training data: how to make data that is
 * missing, and which config key to change for data of another vocabulary. Each returns text to append to the
 * message of the error (beginning with ": "), or "" when it has nothing to add. */
#ifndef DATA_HINTS_H
#define DATA_HINTS_H

#include <stddef.h>

/* When no file matches the glob train_data: the make target or the script that makes it. */
const char *data_hint_missing(const char *train_data, char *out, size_t cap);

/* When the data's meta.json says its vocabulary is larger than the model's vocab_size: so, and the key to set. */
const char *data_hint_vocabulary(const char *train_data, int vocab_size, const char *cfg_path, char *out,
                                 size_t cap);

#endif
