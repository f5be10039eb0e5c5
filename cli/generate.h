/* generate.h: ./train --generate DIR: text from the model of a checkpoint, of a run directory's newest checkpoint or
 * of a Hugging Face directory, printed token by token as it is produced; nothing is written to disk. Two stages, so
 * that the program picks the backend (train.c) between them from the model's config. */
#ifndef GENERATE_H
#define GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "persist/checkpoint.h"

typedef struct Generation {
    char dir[CHECKPOINT_PATH_MAX];       /* the directory of the weights and config.json */
    ModelConfig model;                   /* from dir/config.json */
    char tokenizer[CHECKPOINT_PATH_MAX + 16]; /* where the tokenizer came from ("byte" or a file) */
    Tokenizer *tok;
    int32_t *ids;                        /* the prompt's ids, with room for the tokens to generate */
    int n_ids;
} Generation;

/* Finds the model directory of t->generate, reads its config.json, opens the tokenizer (t->tokenizer unless "auto";
 * else DIR/tokenizer.model, which a checkpoint of a run with a tokenizer file carries; else what DIR/train_config.json
 * names, "byte" or a file that exists; else the byte vocabulary for a model of 256 ids) and encodes t->sample_prompt.
 * 0, or -1 with a message naming the directory or file and the problem. */
int generation_open(Generation *g, const TrainConfig *t, char *err, size_t errlen);

/* Builds the model on k, loads the weights, and writes the prompt and t->sample_tokens new tokens (fewer when the
 * model's EOS comes) to out, flushing each token, drawn with t->temperature, t->top_k and t->seed; then the
 * token rate on stderr. 0, or -1 with a message. */
int generation_run(Generation *g, const TrainConfig *t, const Kernels *k, FILE *out, char *err, size_t errlen);

void generation_close(Generation *g);

#endif
