/* sampler.c: temperature / greedy sampling of a continuation of a prompt. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/rng.h"

/* Draws an id from softmax(logits / temperature), or the argmax for temperature 0. */
static int draw(const float *logits, int V, double temperature, uint64_t *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((logits[i] - logits[best]) / temperature);
    double u = rng_uniform(rng) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += exp((logits[i] - logits[best]) / temperature);
        if (u < acc) return i;
    }
    return best;
}

/* Appends the bytes of token id to out (NUL-terminated, truncated to cap). A NUL byte (the byte vocabulary has one)
 * is written as U+FFFD, as a byte that is not UTF-8 is in the log, so that the text does not end there. */
static void append_piece(const Tokenizer *tok, int32_t id, char *out, size_t cap, size_t *len) {
    static const char replacement[] = "\xEF\xBF\xBD";
    size_t n;
    const char *p = tokenizer_piece(tok, id, &n);
    for (size_t i = 0; i < n; i++) {
        const char *bytes = p[i] ? p + i : replacement;
        size_t count = p[i] ? 1 : sizeof(replacement) - 1;
        if (*len + count >= cap) break;
        memcpy(out + *len, bytes, count);
        *len += count;
    }
    out[*len] = 0;
}

int sample_text(Model *m, const Tokenizer *tok, const char *prompt, int n_new, double temperature, uint64_t *rng,
                char *out, size_t cap) {
    int V = m->cfg.vocab_size, T = m->T;
    int max_ids = (int)strlen(prompt) + n_new + 1;
    int32_t *ids = malloc((size_t)max_ids * sizeof(int32_t));
    float *logits = malloc((size_t)V * sizeof(float));
    if (!ids || !logits) {
        free(ids);
        free(logits);
        return -1;
    }
    int n = 0;
    if (prompt[0]) n = tokenizer_encode(tok, prompt, ids, max_ids);
    else ids[n++] = tokenizer_bos(tok) >= 0 ? tokenizer_bos(tok) : '\n';
    int ok = n > 0;
    for (int i = 0; i < n; i++) ok = ok && ids[i] >= 0 && ids[i] < V;
    if (!ok) {
        free(ids);
        free(logits);
        return -1;
    }
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) append_piece(tok, ids[i], out, cap, &len);
    for (int g = 0; g < n_new; g++) {
        int ctx = n < T ? n : T;
        model_forward(m, ids + n - ctx, 1, ctx);
        model_last_logits(m, 1, ctx, logits);
        ids[n] = draw(logits, V, temperature, rng);
        append_piece(tok, ids[n], out, cap, &len);
        n++;
    }
    free(ids);
    free(logits);
    return n_new;
}
