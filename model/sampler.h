/* sampler.h: text generation from the model (full recompute of the context per token, no KV cache) for the samples
 * printed during training. */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"
#include "model/model.h"

/* Encodes prompt (empty: BOS, or "\n" for a vocabulary without BOS), generates n_new tokens with the temperature
 * (0: greedy) drawing from *rng, and writes the decoded prompt + continuation into out (NUL-terminated, truncated to
 * cap). The context is the last m->T tokens. Returns the number of tokens generated, or -1 if the prompt is empty
 * after encoding or holds ids outside the model's vocabulary. */
int sample_text(Model *m, const Tokenizer *tok, const char *prompt, int n_new, double temperature, uint64_t *rng,
                char *out, size_t cap);

#endif
