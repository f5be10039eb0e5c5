/* hf_config.h: the Hugging Face config.json of a model (the one written into every checkpoint beside
 * model.safetensors; reading one is config.h's config_load_file, whose keys it shares). */
#ifndef HF_CONFIG_H
#define HF_CONFIG_H

#include "model/config.h"

/* A Hugging Face config.json for LlamaForCausalLM (architectures, model_type, the model keys, rope_scaling,
 * torch_dtype); unset bos/eos ids are null. The caller frees the string. */
char *hf_export_config(const ModelConfig *m, const char *torch_dtype);

#endif
