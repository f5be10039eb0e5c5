/* small_model.h: the small model shape that the model and checkpoint tests share, and their optimizer settings. */
#ifndef SMALL_MODEL_H
#define SMALL_MODEL_H

#include <string.h>

#include "model/config.h"

/* D=24, 2 layers, 4 query heads / 2 KV heads of hd 6, F=40, V=37. */
static inline ModelConfig small_model_config(int tied) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.hidden_size = 24;
    c.intermediate_size = 40;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 6;
    c.vocab_size = 37;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000;
    c.tie_word_embeddings = tied;
    c.initializer_range = 0.02;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

/* A config of the given shape, the rest as the small model's, with positions up to 2^20. */
static inline ModelConfig small_model_shape(int D, int F, int L, int Hq, int Hkv, int hd, int V, int tied) {
    ModelConfig c = small_model_config(tied);
    c.hidden_size = D;
    c.intermediate_size = F;
    c.num_hidden_layers = L;
    c.num_attention_heads = Hq;
    c.num_key_value_heads = Hkv;
    c.head_dim = hd;
    c.vocab_size = V;
    c.max_position_embeddings = 1 << 20;
    return c;
}

/* AdamW as the runs' configs set it (betas 0.9 / 0.95, eps 1e-8, weight decay 0.1, clipping at 1) at learning rate
 * lr; the rest zero. */
static inline TrainConfig small_train_config(double lr) {
    TrainConfig t;
    memset(&t, 0, sizeof(t));
    t.learning_rate = lr;
    t.beta1 = 0.9;
    t.beta2 = 0.95;
    t.adam_eps = 1e-8;
    t.weight_decay = 0.1;
    t.grad_clip = 1.0;
    return t;
}

#endif
