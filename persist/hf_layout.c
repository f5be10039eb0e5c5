/* hf_layout.c: the table of Hugging Face tensors and the row permutations between HF's layout and ours (see
 * hf_layout.h). */
#include "persist/hf_layout.h"

#include <stdio.h>

int hf_tensor_count(const ModelConfig *c) { return 9 * c->num_hidden_layers + 2 + !c->tie_word_embeddings; }

static HfTensor *add(HfTensor *t, const char *name, const char *view, int rows, int cols, HfRowMap map, int base) {
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->view, sizeof(t->view), "%s", view);
    t->rows = rows;
    t->cols = cols;
    t->is_vector = 0;
    t->map = map;
    t->base_row = base;
    t->head_dim = 0;
    return t + 1;
}

static HfTensor *add_vector(HfTensor *t, const char *name, const char *view, int D) {
    add(t, name, view, 1, D, HF_ROWS_SAME, 0);
    t->is_vector = 1;
    return t + 1;
}

void hf_tensor_list(const ModelConfig *c, HfTensor *t) {
    int D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    int Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    char name[96], view[64];
    t = add(t, "model.embed_tokens.weight", "embed", V, D, HF_ROWS_SAME, 0);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        static const char *proj[] = {"q", "k", "v"};
        int rows[] = {Hq * hd, Hkv * hd, Hkv * hd}, base[] = {0, Hq * hd, (Hq + Hkv) * hd};
        snprintf(view, sizeof(view), "layers.%d.wqkv", l);
        for (int p = 0; p < 3; p++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s_proj.weight", l, proj[p]);
            HfTensor *cur = t;
            t = add(t, name, view, rows[p], D, p < 2 ? HF_ROWS_ROPE : HF_ROWS_SAME, base[p]);
            cur->head_dim = hd;
        }
        snprintf(name, sizeof(name), "model.layers.%d.self_attn.o_proj.weight", l);
        snprintf(view, sizeof(view), "layers.%d.wo", l);
        t = add(t, name, view, D, Hq * hd, HF_ROWS_SAME, 0);
        snprintf(view, sizeof(view), "layers.%d.wgateup", l);
        snprintf(name, sizeof(name), "model.layers.%d.mlp.gate_proj.weight", l);
        t = add(t, name, view, F, D, HF_ROWS_EVEN, 0);
        snprintf(name, sizeof(name), "model.layers.%d.mlp.up_proj.weight", l);
        t = add(t, name, view, F, D, HF_ROWS_ODD, 0);
        snprintf(name, sizeof(name), "model.layers.%d.mlp.down_proj.weight", l);
        snprintf(view, sizeof(view), "layers.%d.wdown", l);
        t = add(t, name, view, D, F, HF_ROWS_SAME, 0);
        snprintf(name, sizeof(name), "model.layers.%d.input_layernorm.weight", l);
        snprintf(view, sizeof(view), "layers.%d.attn_norm", l);
        t = add_vector(t, name, view, D);
        snprintf(name, sizeof(name), "model.layers.%d.post_attention_layernorm.weight", l);
        snprintf(view, sizeof(view), "layers.%d.mlp_norm", l);
        t = add_vector(t, name, view, D);
    }
    t = add_vector(t, "model.norm.weight", "final_norm", D);
    if (!c->tie_word_embeddings) add(t, "lm_head.weight", "lm_head", V, D, HF_ROWS_SAME, 0);
}

size_t hf_internal_row(const HfTensor *t, size_t r) {
    switch (t->map) {
    case HF_ROWS_ROPE: {
        size_t hd = (size_t)t->head_dim, half = hd / 2, head = r / hd, i = r % hd;
        return (size_t)t->base_row + head * hd + (i < half ? 2 * i : 2 * (i - half) + 1);
    }
    case HF_ROWS_EVEN: return 2 * r;
    case HF_ROWS_ODD: return 2 * r + 1;
    case HF_ROWS_SAME: break;
    }
    return (size_t)t->base_row + r;
}
