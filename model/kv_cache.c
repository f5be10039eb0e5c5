/* kv_cache.c: the KV cache of generation (model.h): a view of the model's kv_cache buffer, per layer the keys and
 * then the values of up to the model's T positions. model.c's forward appends to it and reads it (model_decode). */
#include "model/model.h"

KvCache kv_cache_empty(const Model *m) {
    const ModelConfig *c = &m->cfg;
    const size_t layer_bytes = (size_t)m->T * c->num_key_value_heads * c->head_dim * m->k->act_bytes;
    return (KvCache){.buf = m->kv_cache, .layer_bytes = layer_bytes, .capacity = m->T, .len = 0};
}

void *kv_cache_keys(const KvCache *cache, int l) { return (char *)cache->buf + (size_t)2 * l * cache->layer_bytes; }

void *kv_cache_values(const KvCache *cache, int l) {
    return (char *)cache->buf + (size_t)(2 * l + 1) * cache->layer_bytes;
}
