/* fuzz_model.h: the model of the harnesses that read weights and training state (and of their seed files): the
 * shape of tests/small_model.h made smaller still, so that a whole state.bin is a few kilobytes of fuzz input. */
#ifndef FUZZ_MODEL_H
#define FUZZ_MODEL_H

#include "tests/small_model.h"

/* D=8, 1 layer, 2 query heads / 1 KV head of hd 4, F=8, V=16. */
static inline ModelConfig fuzz_model_config(int tied) {
    ModelConfig c = small_model_config(tied);
    c.hidden_size = 8;
    c.intermediate_size = 8;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 4;
    c.vocab_size = 16;
    c.max_position_embeddings = 16;
    return c;
}

#endif
