/* hf_weights.h: the model's weights as Hugging Face safetensors (names and layout of hf_layout.h). Export writes one
 * model.safetensors from the fp32 master weights; import reads DIR/model.safetensors or the shards named by
 * DIR/model.safetensors.index.json (F32, F16 or BF16) into the master weights, after checking that every tensor the
 * config needs is there with its shape and that nothing else is (a tied model's lm_head.weight and old checkpoints'
 * rotary_emb.inv_freq buffers are ignored). Both stream row chunks: no full host copy of the model is made. */
#ifndef HF_WEIGHTS_H
#define HF_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "persist/safetensors.h"

/* Master weights to export: a model's config and parameter table, and a buffer of its master weights, read through
 * copy in context kc (the backend's copy_to_host for the model's own buffer), or in place when copy is NULL (host
 * memory, such as a checkpoint's snapshot). */
typedef struct HfMaster {
    const ModelConfig *cfg;
    const ParamTable *table;
    const float *master; /* host fp32 master weights, or NULL: then model's, read in pieces */
    const Model *model;
} HfMaster;

/* Writes path (a new file; fsync'd) with the weights in dtype (ST_F32, ST_BF16 or ST_F16); crc and bytes (when not
 * NULL) get the CRC32 and size of the whole file. */
int hf_export_master(const HfMaster *src, const char *path, StDtype dtype, uint32_t *crc, uint64_t *bytes, char *err,
                     size_t errlen);
/* The same from a model's master weights. */
int hf_export_weights(const Model *m, const char *path, StDtype dtype, char *err, size_t errlen);

/* Loads the weights of dir into m (master and working copy). On an error (naming the file and the tensor) nothing
 * of m has been changed when the problem is in a header; a read error in the middle leaves m partly loaded. */
int hf_import_weights(Model *m, const char *dir, char *err, size_t errlen);

#endif
