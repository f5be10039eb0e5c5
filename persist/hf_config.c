/* hf_config.c: writing a model's Hugging Face config.json (see hf_config.h), from config.c's option table
 * (model/config_options.h), so that it names the same keys that config_load_file reads. */
#include "persist/hf_config.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "model/config_options.h"

char *hf_export_config(const ModelConfig *m, const char *torch_dtype) {
    Config c;
    config_defaults(&c);
    c.model = *m;
    cJSON *root = cJSON_CreateObject();
    const char *arch[] = {"LlamaForCausalLM"};
    cJSON_AddItemToObject(root, "architectures", cJSON_CreateStringArray(arch, 1));
    cJSON_AddStringToObject(root, "model_type", "llama");
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddFalseToObject(root, "attention_bias");
    cJSON_AddFalseToObject(root, "mlp_bias");
    cJSON_AddNumberToObject(root, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(root, "pretraining_tp", 1);
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const Option *o = &CONFIG_OPTIONS[i];
        if (!o->is_model) continue;
        int unset_id = (strcmp(o->key, "bos_token_id") == 0 || strcmp(o->key, "eos_token_id") == 0) &&
                       *(const int *)config_option_field_c(o, &c) < 0;
        if (unset_id) cJSON_AddNullToObject(root, o->key);
        else config_add_option_json(root, o, &c);
    }
    config_add_rope_scaling(root, m, 1);
    cJSON_AddStringToObject(root, "torch_dtype", torch_dtype);
    cJSON_AddTrueToObject(root, "use_cache");
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
