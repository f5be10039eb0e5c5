/* state_file.h: state.bin, everything needed to resume training bit-exactly, with a CRC32 (zlib) on every part.
 *
 * Layout (all integers little-endian):
 *   header, 72 bytes:
 *     0  char[8]  magic "L3STATE\0"
 *     8  u32      version (2; version 1 files are read too)
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
 *   sections: "master"        n_params fp32, the master weights in the internal layout (model.h's parameter table);
 *                             or, in version 2 only, in its place
 *             "master_file"   16 bytes: u64 size, u32 CRC32, u32 0 of the whole model.safetensors beside state.bin,
 *                             which then holds the master weights (an F32 export: they are stored once)
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

/* What state.bin holds, in host memory (a checkpoint's snapshot of the training state). */
typedef struct StateData {
    const ModelConfig *cfg;
    size_t n_params;
    const float *master;     /* NULL: model.safetensors holds them, as weights_bytes and weights_crc say */
    const float *adam_m, *adam_v;
    uint64_t weights_bytes;  /* with master == NULL: the size and CRC32 of model.safetensors */
    uint32_t weights_crc;
    TrainState state;
    const char *config_json;
} StateData;

/* Writes path (a new file, fsync'd), version 2. */
int state_write(const char *path, const StateData *d, char *err, size_t errlen);

/* Where a state file read by state_read says the master weights are. */
typedef struct StateInfo {
    uint32_t version;
    int master_in_weights;  /* 1: in model.safetensors (a "master_file" section), not loaded by state_read */
    uint64_t weights_bytes; /* then its size and CRC32 */
    uint32_t weights_crc;
} StateInfo;

/* Reads path into m (master weights and working copy, unless info->master_in_weights; Adam moments) and *s, checking
 * every CRC, every size, and the model shape against m's. If config_json is not NULL it gets the config text (the
 * caller frees it). On an error (naming the file and the section) m may be partly overwritten. */
int state_read(const char *path, Model *m, TrainState *s, char **config_json, StateInfo *info, char *err,
               size_t errlen);

#endif
