/* sampler.c: greedy, temperature and top-k sampling of a continuation of a prompt, through the KV cache. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/rng.h"

/* The k-th largest of x[0..V), 1 <= k <= V, through a min-heap (heap: k floats) of the k largest seen so far. */
static float kth_largest(const float *x, int V, int k, float *heap) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        float v = x[i];
        int c;
        if (n < k) { /* push: sift up */
            for (c = n++; c > 0 && heap[(c - 1) / 2] > v; c = (c - 1) / 2) heap[c] = heap[(c - 1) / 2];
        } else if (v > heap[0]) { /* replace the smallest: sift down */
            for (c = 0;;) {
                int l = 2 * c + 1, r = l + 1, m = c;
                float mv = v;
                if (l < k && heap[l] < mv) mv = heap[m = l];
                if (r < k && heap[r] < mv) m = r;
                if (m == c) break;
                heap[c] = heap[m];
                c = m;
            }
        } else {
            continue;
        }
        heap[c] = v;
    }
    return heap[0];
}

/* The candidates of a draw: the logits above the k-th largest, then those equal to it in index order until there are
 * k (all logits when top_k is 0 or >= V). */
typedef struct Candidates {
    float threshold;
    int ties; /* how many logits equal to the threshold are candidates */
} Candidates;

static int is_candidate(float v, const Candidates *c, int *ties_left) {
    if (v > c->threshold) return 1;
    return v == c->threshold && (*ties_left)-- > 0;
}

/* Draws an id from softmax(logits / temperature) over the candidates, or the argmax for temperature 0. */
static int draw(const float *logits, int V, const SampleSettings *s, float *heap, uint64_t *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (s->temperature <= 0) return best;
    Candidates c = {-INFINITY, V};
    if (s->top_k > 0 && s->top_k < V) {
        c.threshold = kth_largest(logits, V, s->top_k, heap);
        int above = 0;
        for (int i = 0; i < V; i++) above += logits[i] > c.threshold;
        c.ties = s->top_k - above;
    }
    double sum = 0;
    int ties = c.ties;
    for (int i = 0; i < V; i++)
        if (is_candidate(logits[i], &c, &ties)) sum += exp((logits[i] - logits[best]) / s->temperature);
    double u = rng_uniform(rng) * sum, acc = 0;
    ties = c.ties;
    for (int i = 0; i < V; i++) {
        if (!is_candidate(logits[i], &c, &ties)) continue;
        acc += exp((logits[i] - logits[best]) / s->temperature);
        if (u < acc) return i;
    }
    return best;
}

int sample_prompt_ids(const Tokenizer *tok, const char *prompt, int V, int extra, int32_t **ids) {
    int max_prompt = (int)strlen(prompt) + 1;
    int32_t *p = malloc((size_t)(max_prompt + extra) * sizeof(int32_t));
    if (!p) return -1;
    int n = 0;
    if (tokenizer_bos(tok) >= 0) p[n++] = tokenizer_bos(tok);
    int k = prompt[0] ? tokenizer_encode(tok, prompt, p + n, max_prompt - n) : 0;
    if (k < 0) {
        free(p);
        return -1;
    }
    n += k;
    if (n == 0) p[n++] = '\n';
    for (int i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= V) {
            free(p);
            return -1;
        }
    *ids = p;
    return n;
}

static void emit(const Tokenizer *tok, int32_t id, SampleSink sink, void *ctx) {
    size_t len;
    const char *piece = tokenizer_piece(tok, id, &len);
    sink(piece, len, ctx);
}

int sample_generate(Model *m, const Tokenizer *tok, int32_t *ids, int n, const SampleSettings *s, uint64_t *rng,
                    SampleSink sink, void *ctx) {
    int V = m->cfg.vocab_size, T = m->T;
    float *logits = malloc((size_t)V * sizeof(float));
    float *heap = malloc((size_t)(s->top_k > 0 ? s->top_k : 1) * sizeof(float));
    if (!logits || !heap) {
        free(logits);
        free(heap);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (i > 0 || ids[i] != tokenizer_bos(tok)) emit(tok, ids[i], sink, ctx);
    KvCache cache = kv_cache_empty(m);
    int g = 0;
    while (g < s->n_new) {
        if (n <= T) { /* the prompt at once, then each new token alone */
            model_decode(m, &cache, ids + cache.len, n - cache.len, logits);
        } else { /* the last T ids, at positions 0 .. T-1 */
            model_forward(m, ids + n - T, 1, T);
            model_last_logits(m, 1, T, logits);
        }
        ids[n] = draw(logits, V, s, heap, rng);
        emit(tok, ids[n], sink, ctx);
        g++;
        if (ids[n++] == s->stop_id) break;
    }
    free(logits);
    free(heap);
    return g;
}

/* A SampleSink into a NUL-terminated buffer, truncating at its capacity. A NUL byte (the byte vocabulary has one) is
 * written as U+FFFD, as a byte that is not UTF-8 is in the log, so that the text does not end there. */
typedef struct TextBuffer {
    char *out;
    size_t cap, len;
} TextBuffer;

static void append_piece(const char *piece, size_t n, void *ctx) {
    static const char replacement[] = "\xEF\xBF\xBD";
    TextBuffer *b = ctx;
    for (size_t i = 0; i < n; i++) {
        const char *bytes = piece[i] ? piece + i : replacement;
        size_t count = piece[i] ? 1 : sizeof(replacement) - 1;
        if (b->len + count >= b->cap) break;
        memcpy(b->out + b->len, bytes, count);
        b->len += count;
    }
    b->out[b->len] = 0;
}

int sample_text(Model *m, const Tokenizer *tok, const char *prompt, const SampleSettings *s, uint64_t *rng, char *out,
                size_t cap) {
    int32_t *ids;
    int n = sample_prompt_ids(tok, prompt, m->cfg.vocab_size, s->n_new, &ids);
    if (n < 0) return -1;
    TextBuffer b = {out, cap, 0};
    out[0] = 0;
    int g = sample_generate(m, tok, ids, n, s, rng, append_piece, &b);
    free(ids);
    return g;
}
