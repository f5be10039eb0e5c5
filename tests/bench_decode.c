/* bench_decode.c: the time of one generated token at given positions, through the KV cache (model_decode of one token
 * after a prefill of that many) and through a full recompute of the context (model_forward of position + 1 tokens
 * and the last logits, the sampler's path before the cache and past the model's T), for a config's model with the
 * documented random init on a backend. Prints a Markdown table and the ratio of the cached times of the last and
 * first positions, and writes them as JSON.
 *
 *   build/tests/bench_decode CONFIG BACKEND OUT.json POSITION...
 *   BACKEND: cpu, cuda (fusion on) or cuda-unfused; each time is the median of at least 20 steps and 0.3 s, after 5
 *   untimed steps.
 *   e.g.  make build/tests/bench_decode && build/tests/bench_decode configs/llama3_tiny.json cpu \
 *             results/bench_decode_cpu.json 32 240 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/config.h"
#include "model/model.h"

enum { MAX_POSITIONS = 16, WARM_UP_STEPS = 5, MIN_STEPS = 20 };
static const double MIN_SECONDS = 0.3;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One token at position pos: cached (the cache holds pos tokens before the step) or a full recompute of pos + 1
 * tokens. */
static void token(Model *m, KvCache *cache, const int32_t *tok, int pos, int cached, float *logits) {
    if (cached) {
        cache->len = pos;
        model_decode(m, cache, tok + pos, 1, logits);
    } else {
        model_forward(m, tok, 1, pos + 1);
        model_last_logits(m, 1, pos + 1, logits);
    }
}

/* The median seconds of token(), after WARM_UP_STEPS untimed. */
static double time_token(Model *m, KvCache *cache, const int32_t *tok, int pos, int cached, float *logits) {
    double times[4096];
    int n = 0;
    for (int i = 0; i < WARM_UP_STEPS; i++) token(m, cache, tok, pos, cached, logits);
    const double start = now();
    while (n < (int)(sizeof(times) / sizeof(times[0])) && (n < MIN_STEPS || now() - start < MIN_SECONDS)) {
        const double t0 = now();
        token(m, cache, tok, pos, cached, logits);
        times[n++] = now() - t0;
    }
    qsort(times, n, sizeof(double), compare_doubles);
    return times[n / 2];
}

static const Kernels *backend(const char *name) {
    if (strcmp(name, "cpu") == 0) return &kernels_cpu;
#ifdef WITH_CUDA
    char why[256];
    if ((strcmp(name, "cuda") == 0 || strcmp(name, "cuda-unfused") == 0) && !kernels_cuda_available(why, sizeof why)) {
        fprintf(stderr, "error: no usable GPU: %s\n", why);
        exit(1);
    }
    if (strcmp(name, "cuda") == 0) return &kernels_cuda_fused;
    if (strcmp(name, "cuda-unfused") == 0) return &kernels_cuda;
#endif
    fprintf(stderr, "error: backend %s: expected cpu, cuda or cuda-unfused (the CUDA ones in a CUDA build)\n", name);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 5 || argc - 4 > MAX_POSITIONS) {
        fprintf(stderr, "usage: %s CONFIG cpu|cuda|cuda-unfused OUT.json POSITION... (at most %d)\n", argv[0],
                MAX_POSITIONS);
        return 2;
    }
    const Kernels *k = backend(argv[2]);
    char err[512];
    Config c;
    config_defaults(&c);
    if (config_load_file(&c, argv[1], err, sizeof err) || config_validate_model(&c.model, argv[1], err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    /* the context of the config's training (the tiny config's 256), within the model's positions */
    const int max_pos = c.model.max_position_embeddings, seq = c.train.seq_len;
    const int T = seq > 0 && seq < max_pos ? seq : max_pos;
    const int n_pos = argc - 4;
    int pos[MAX_POSITIONS];
    for (int i = 0; i < n_pos; i++) {
        char *end;
        const long p = strtol(argv[4 + i], &end, 10);
        if (*end || p < 1 || p >= T) {
            fprintf(stderr, "error: position %s: expected an integer in [1, %d) (the config's T is %d)\n", argv[4 + i],
                    T, T);
            return 2;
        }
        pos[i] = (int)p;
    }
    Model m;
    if (model_create(&m, &c.model, k, 1, T, MODEL_GRADS_APART, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", argv[1], err);
        return 1;
    }
    KvCache cache = kv_cache_empty(&m);
    model_init_weights(&m, 1);
    int32_t *tok = malloc((size_t)T * sizeof(int32_t));
    float *logits = malloc((size_t)c.model.vocab_size * sizeof(float));
    if (!tok || !logits) {
        fprintf(stderr, "error: out of host memory\n");
        return 1;
    }
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 2654435761u) % (unsigned)c.model.vocab_size);
    double cached[MAX_POSITIONS], full[MAX_POSITIONS];
    for (int i = 0; i < n_pos; i++) {
        cache.len = 0;
        model_decode(&m, &cache, tok, pos[i], logits); /* the prefill: the cache holds the positions before */
        cached[i] = time_token(&m, &cache, tok, pos[i], 1, logits);
        full[i] = time_token(&m, &cache, tok, pos[i], 0, logits);
    }
    const char *detail = k->detail ? k->detail : "";
    printf("%s, backend %s%s%s, T %d; per token, median of >= %d steps and %.1f s after %d untimed:\n", argv[1],
           k->name, detail[0] ? ", " : "", detail, T, MIN_STEPS, MIN_SECONDS, WARM_UP_STEPS);
    printf("| position | KV cache (ms/token) | full recompute (ms/token) |\n| ---: | ---: | ---: |\n");
    for (int i = 0; i < n_pos; i++) printf("| %d | %.3f | %.3f |\n", pos[i], cached[i] * 1e3, full[i] * 1e3);
    const double ratio = cached[n_pos - 1] / cached[0];
    printf("KV cache: position %d / position %d: %.2fx\n", pos[n_pos - 1], pos[0], ratio);
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        fprintf(stderr, "error: cannot write %s\n", argv[3]);
        return 1;
    }
    char date[16];
    const time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&t));
    fprintf(f, "{\"config\": \"%s\", \"backend\": \"%s%s%s\", \"positions\": [", argv[1], k->name,
            detail[0] ? ", " : "", detail);
    for (int i = 0; i < n_pos; i++) fprintf(f, "%s%d", i ? ", " : "", pos[i]);
    fprintf(f, "], \"cached_ms_per_token\": [");
    for (int i = 0; i < n_pos; i++) fprintf(f, "%s%.4f", i ? ", " : "", cached[i] * 1e3);
    fprintf(f, "], \"full_recompute_ms_per_token\": [");
    for (int i = 0; i < n_pos; i++) fprintf(f, "%s%.4f", i ? ", " : "", full[i] * 1e3);
    fprintf(f, "], \"cached_last_over_first\": %.3f, \"date\": \"%s\"}\n", ratio, date);
    if (fclose(f) != 0) {
        fprintf(stderr, "error: cannot write %s\n", argv[3]);
        return 1;
    }
    printf("wrote %s\n", argv[3]);
    model_destroy(&m);
    free(tok);
    free(logits);
    return 0;
}
