/* test_dry_run_vs_planners.c (temporary, goes with the planners): the workspace of the schedule's dry run
 * (model_workspace) against the hand-written planners (Kernels.workspace_bytes) of every table of this build, for
 * the configs in configs/, the shapes the memory tests use and many random shapes; the CPU with 1, 2 and 3 threads.
 * Nothing touches a device: the CUDA tables' size functions are host arithmetic. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

static long compared, differed;

static void compare(const char *what, const ModelConfig *c, const Kernels *k, int B, int T) {
    ModelMemory mem;
    if (model_memory(c, k, B, T, &mem)) {
        CHECK(0, "%s: model_memory", what);
        return;
    }
    const KernelShapes s = {B, T, c->hidden_size, c->intermediate_size, c->num_attention_heads,
                            c->num_key_value_heads, c->head_dim, c->vocab_size, mem.n_params};
    const size_t old = k->workspace_bytes(&s);
    compared++;
    if (getenv("DUMP"))
        printf("# %s %s %s D %d F %d L %d Hq %d Hkv %d hd %d V %d tied %d B %d T %d: %zu\n", what, k->name,
               k->detail ? k->detail : "", c->hidden_size, c->intermediate_size, c->num_hidden_layers,
               c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->vocab_size, c->tie_word_embeddings, B,
               T, mem.workspace);
    if (old != mem.workspace) {
        if (differed++ < 20)
            printf("# DIFF %s on %s (%s): D %d F %d L %d Hq %d Hkv %d hd %d V %d tied %d B %d T %d: planner %zu, dry "
                   "run %zu\n", what, k->name, k->detail ? k->detail : "", c->hidden_size, c->intermediate_size,
                   c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->vocab_size,
                   c->tie_word_embeddings, B, T, old, mem.workspace);
    }
}

static void compare_all(const char *what, const ModelConfig *c, int B, int T) {
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        compare(what, c, &kernels_cpu, B, T);
    }
#ifdef WITH_CUDA
    compare(what, c, &kernels_cuda, B, T);
    compare(what, c, &kernels_cuda_fused, B, T);
#endif
}

static unsigned long long lcg = 12345;
static int pick(int lo, int hi) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (int)((lcg >> 33) % (unsigned long long)(hi - lo + 1));
}

int main(void) {
    omp_set_dynamic(0);
    const char *files[] = {"configs/llama3_tiny.json", "configs/llama3_1b.json", "configs/llama3_3b.json"};
    for (int i = 0; i < 3; i++) {
        Config cfg;
        char err[512];
        config_defaults(&cfg);
        if (config_load_file(&cfg, files[i], err, sizeof(err))) {
            CHECK(0, "%s: %s", files[i], err);
            continue;
        }
        const int bs[][2] = {{cfg.train.batch_size, cfg.train.seq_len}, {1, 1}, {1, 2048}, {2, 1024}, {8, 512},
                             {4, 2048}, {3, 77}};
        for (int j = 0; j < 7; j++) compare_all(files[i], &cfg.model, bs[j][0], bs[j][1]);
    }
    /* the memory tests' shapes (tests/test_memory.c, tests/gpu/test_gpu_memory.c) */
    const struct { ModelConfig c; int B, T; } tests[] = {
        {small_model_shape(128, 384, 4, 4, 2, 32, 256, 1), 4, 64},
        {small_model_shape(24, 40, 2, 4, 2, 6, 37, 0), 3, 5},
        {small_model_shape(16, 24, 1, 2, 1, 8, 5000, 1), 2, 16},
        {small_model_shape(8, 20000, 1, 2, 2, 4, 2, 1), 1, 1},
        {small_model_shape(4096, 384, 4, 32, 8, 128, 1 << 24, 1), 8, 256},
        {small_model_shape(256, 384, 4, 4, 2, 64, 256, 1), 4, 128},
        {small_model_shape(256, 384, 4, 4, 2, 64, 256, 0), 4, 128},
        {small_model_shape(256, 384, 2, 2, 1, 128, 256, 1), 4, 128},
        {small_model_shape(256, 100, 2, 4, 2, 64, 300, 0), 2, 100},
        {small_model_shape(260, 384, 2, 4, 2, 64, 300, 1), 2, 64},
        {small_model_shape(256, 512, 1, 4, 2, 64, 128256, 1), 4, 2048},
        {small_model_shape(2048, 8192, 16, 32, 8, 64, 128256, 1), 4, 2048},
        {small_model_shape(2048, 8192, 16, 32, 8, 64, 128256, 1), 1, 2048},
        {small_model_shape(128, 384, 4, 4, 2, 32, 256, 1), 1048576, 2047}, /* test_cli.sh: just below INT_MAX rows */
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) compare_all("test shape", &tests[i].c, tests[i].B, tests[i].T);
    /* random shapes: dimensions on and off multiples of 8, head dims on and off powers of two */
    static const int hds[] = {2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
    for (int i = 0; i < 400; i++) {
        const int hkv = pick(1, 4), hq = hkv * pick(1, 4), hd = hds[pick(0, 11)];
        const int D = pick(0, 1) ? 8 * pick(1, 64) : pick(1, 520), F = pick(0, 1) ? 8 * pick(1, 200) : pick(1, 1600);
        const int V = pick(0, 3) ? pick(2, 3000) : pick(2, 200000);
        const ModelConfig c = small_model_shape(D, F, pick(1, 3), hq, hkv, hd, V, pick(0, 1));
        compare_all("random", &c, pick(1, 6), pick(0, 1) ? pick(1, 300) : pick(1, 4096));
    }
    CHECK(differed == 0, "the dry run's workspace equals the planners' in %ld comparisons (%ld differ)", compared,
          differed);
    return test_summary();
}
