/* state_file.h: state.bin, everything needed to resume training bit-exactly, with a CRC32 (zlib) on every part.
 *
 * Layout (all integers little-endian):
 *   header, 72 bytes:
 *     0  char[8]  magic "L3STATE\0"
 *     8  u32      version (1)
 *    12  u32      number of sections (6)
 *    16  u64      step (optimizer steps completed)
 *    24  u64      n_params
 *    32  i32[8]   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 *                 head_dim, vocab_size, tie_word_embeddings
 *    64  u32      CRC32 of bytes [0, 64)
 *    68  u32      0
 *   then the sections, in this order, each:
 *     char[16] name (NUL-padded), u64 n_bytes, u32 0, u32 CRC32 of these 28 bytes,
 *     n_bytes of payload, u32 CRC32 of the payload
 *   sections: "master"        n_params fp32, the master weights in the internal layout (model.h's parameter table)
 *             "adam_m"        n_params fp32, AdamW first moments
 *             "adam_v"        n_params fp32, AdamW second moments
 *             "data_position" 5 x u64: epoch, shard, sample (the next training batch), then the number of training
 *                             shards and their total token count (to detect changed data)
 *             "sampler_rng"   u64, the state of the sampling generator
 *             "config"        the effective configuration as JSON text (config_to_json), not NUL-terminated
 *   and nothing after the last section. */
#ifndef STATE_FILE_H
#define STATE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataloader.h"
#include "model/model.h"

typedef struct TrainState {
    uint64_t step;
    DataPosition data;    /* the position of the next training batch */
    uint64_t data_shards; /* the training data it refers to */
    uint64_t data_tokens;
    uint64_t sample_rng;
} TrainState;

/* Writes path (a new file, fsync'd). */
int state_write(const char *path, const Model *m, const TrainState *s, const char *config_json, char *err,
                size_t errlen);

/* Reads path into m (master weights and working copy, Adam moments) and *s, checking every CRC, every size, and the
 * model shape against m's. If config_json is not NULL it gets the config text (the caller frees it). On an error
 * (naming the file and the section) m may be partly overwritten. */
int state_read(const char *path, Model *m, TrainState *s, char **config_json, char *err, size_t errlen);

#endif
