/* kv_cache.c: the KV cache of generation (model.h): one backend buffer holding, per layer, the keys and then the
 * values of up to the model's T positions. model.c's forward appends to it and reads it (model_decode). */
#include <string.h>

#include "model/model.h"

int kv_cache_create(KvCache *cache, const Model *m) {
    const ModelConfig *c = &m->cfg;
    memset(cache, 0, sizeof(*cache));
    const size_t layer_elems = size_mul((size_t)m->T, (size_t)c->num_key_value_heads * c->head_dim);
    void *buf = m->k->alloc(size_mul(size_mul(layer_elems, 2 * (size_t)c->num_hidden_layers), m->k->act_bytes));
    if (!buf) return -1;
    *cache = (KvCache){.k = m->k, .buf = buf, .layer_elems = layer_elems, .capacity = m->T, .len = 0};
    return 0;
}

void kv_cache_destroy(KvCache *cache) {
    if (cache->buf) cache->k->free(cache->buf);
    memset(cache, 0, sizeof(*cache));
}

void *kv_cache_keys(const KvCache *cache, int l) {
    return (char *)cache->buf + (size_t)2 * l * cache->layer_elems * cache->k->act_bytes;
}

void *kv_cache_values(const KvCache *cache, int l) {
    return (char *)cache->buf + (size_t)(2 * l + 1) * cache->layer_elems * cache->k->act_bytes;
}
