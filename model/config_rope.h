/* config_rope.h: the RoPE keys of a Hugging Face Llama config in both of transformers' forms: top-level rope_theta
 * with rope_scaling (transformers 4) and rope_parameters {rope_type, rope_theta, factor, ...} (transformers 5). A file
 * may give either form or both; where it gives both they must describe the same RoPE. */
#ifndef CONFIG_ROPE_H
#define CONFIG_ROPE_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct RopeKeys {
    int has_theta;    /* a rope_theta was given (top level or inside either object) */
    double theta;
    int has_scaling;  /* rope_scaling or rope_parameters was given (null counts: plain RoPE) */
    int llama3;       /* rope_type "llama3" (else "default": plain RoPE) */
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position_embeddings;
} RopeKeys;

/* Reads the three keys of one file (each NULL when the file lacks it) into out. An unsupported rope_type, a missing
 * or malformed llama3 field, or two sources that disagree is an error naming the keys (where: "config PATH").
 * 0 or -1 with a message. */
int config_rope_keys(const cJSON *rope_theta, const cJSON *rope_scaling, const cJSON *rope_parameters,
                     RopeKeys *out, const char *where, char *err, size_t errlen);

#endif
