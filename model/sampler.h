/* sampler.h: text generation from the model (the prompt in one forward, then one token at a time from a KV cache),
 * for the samples printed during training and for ./train --generate. */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"
#include "model/model.h"

typedef struct SampleSettings {
    int n_new;          /* tokens to generate */
    double temperature; /* softmax(logits / temperature); 0: the argmax */
    int top_k;          /* draw among the k most likely tokens only (0: among all) */
    int stop_id;        /* stop after generating this id (the model's EOS), or -1 */
} SampleSettings;

/* The ids of a prompt: BOS where the vocabulary has one, then the prompt's tokens (an empty prompt of a vocabulary
 * without BOS is "\n"), into a new array (*ids, the caller frees it) with room for `extra` more ids. Returns the
 * count, or -1 if an id lies outside the model's vocabulary of V ids or memory runs out. */
int sample_prompt_ids(const Tokenizer *tok, const char *prompt, int V, int extra, int32_t **ids);

/* Receives each token's bytes as it is produced (the pieces of the prompt first, without its BOS). */
typedef void (*SampleSink)(const char *piece, size_t len, void *ctx);

/* Generates up to s->n_new tokens after the n prompt ids (ids has room for n + s->n_new), drawing from *rng, and
 * passes the pieces of the prompt and of each new token to sink. The context is the last m->T ids: while the text
 * fits in m->T, the prompt runs in one forward and each new token alone against the model's KV cache (model_decode);
 * beyond that each token recomputes its context of the last m->T ids.
 * Returns the number of tokens generated (fewer than n_new after stop_id), or -1 when out of memory. */
int sample_generate(Model *m, const Tokenizer *tok, int32_t *ids, int n, const SampleSettings *s, uint64_t *rng,
                    SampleSink sink, void *ctx);

/* sample_generate on the prompt (sample_prompt_ids), writing the decoded prompt + continuation into out
 * (NUL-terminated, truncated to cap). Returns the number of tokens generated, or -1 if the prompt holds ids outside
 * the model's vocabulary (or memory runs out). */
int sample_text(Model *m, const Tokenizer *tok, const char *prompt, const SampleSettings *s, uint64_t *rng, char *out,
                size_t cap);

#endif
