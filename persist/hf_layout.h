/* hf_layout.h: the Hugging Face tensors of a LlamaForCausalLM (names, shapes) and where each of their rows lives in
 * our internal parameter views, so that import and export are one loop over rows.
 *
 * HF tensor                                   internal view       HF row r -> internal row
 * model.embed_tokens.weight [V, D]             embed               r
 * model.layers.N.self_attn.q_proj [Hq*hd, D]   layers.N.wqkv       head h = r / hd, i = r % hd, half = hd/2:
 * model.layers.N.self_attn.k_proj [Hkv*hd, D]  layers.N.wqkv         base + h*hd + (i < half ? 2i : 2(i-half)+1)
 *                                                                 (base 0 for q, Hq*hd for k: RoPE pairs interleaved)
 * model.layers.N.self_attn.v_proj [Hkv*hd, D]  layers.N.wqkv       (Hq+Hkv)*hd + r
 * model.layers.N.self_attn.o_proj [D, Hq*hd]   layers.N.wo         r
 * model.layers.N.mlp.gate_proj [F, D]          layers.N.wgateup    2r
 * model.layers.N.mlp.up_proj [F, D]            layers.N.wgateup    2r + 1
 * model.layers.N.mlp.down_proj [D, F]          layers.N.wdown      r
 * model.layers.N.input_layernorm [D]           layers.N.attn_norm  (a vector)
 * model.layers.N.post_attention_layernorm [D]  layers.N.mlp_norm
 * model.norm.weight [D]                        final_norm
 * lm_head.weight [V, D] (untied models only)   lm_head             r
 * (all names end in ".weight") */
#ifndef HF_LAYOUT_H
#define HF_LAYOUT_H

#include <stddef.h>

#include "model/config.h"

typedef enum { HF_ROWS_SAME, HF_ROWS_ROPE, HF_ROWS_EVEN, HF_ROWS_ODD } HfRowMap;

typedef struct HfTensor {
    char name[96];      /* the Hugging Face name */
    char view[64];      /* the internal parameter view holding it (model_find_param) */
    int rows, cols;     /* HF shape [rows, cols]; a vector has rows == 1 and shape [cols] */
    int is_vector;
    HfRowMap map;
    int base_row;       /* first internal row (SAME, ROPE) */
    int head_dim;       /* ROPE */
} HfTensor;

/* The number of HF tensors of a model: 9 per layer, embed, final norm, and lm_head when untied. */
int hf_tensor_count(const ModelConfig *c);
/* Fills out[hf_tensor_count(c)] in the order they are written: embed, the layers, the final norm, lm_head. */
void hf_tensor_list(const ModelConfig *c, HfTensor *out);
/* The internal row (of t->view) that holds HF row r of t. */
size_t hf_internal_row(const HfTensor *t, size_t r);

#endif
