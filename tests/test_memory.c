/* test_memory.c: the memory preflight on the CPU. model_memory's estimate against the bytes the CPU backend really
 * allocates (its counting allocator: buffers and every op's scratch) for shapes where different ops need the most
 * scratch, with 1, 2 and 3 threads (memory_check.h); the workspace of the schedule's dry run against the one worked
 * out by hand from the schedule; a config beyond any machine saturates instead of wrapping around;
 * and the host's available memory read from MemAvailable and the cgroup limits (v2 and v1, with parents and page
 * cache) of fake /proc and /sys/fs/cgroup trees. */
#include <omp.h>
#include <stdio.h>
#include <sys/stat.h>

#include "kernels/cpu/cpu_internal.h"
#include "tests/memory_check.h"

/* ---------------------------------------------------------------- the estimate against the backend */

typedef struct CpuCase {
    MemoryCase c;
    int threads;
} CpuCase;

static void cpu_case(const void *arg) {
    const CpuCase *cc = arg;
    omp_set_dynamic(0); /* every parallel region runs its threads, as the estimate counts them */
    omp_set_num_threads(cc->threads);
    memory_case_run(&kernels_cpu, &cc->c, 0.0, NULL);
}

static int test_estimates(void) {
    const CpuCase cases[] = {
        /* the LM head's [M, V] gradient needs the most scratch (as in every config that trains anything) */
        {{"tiny config shape, 2 threads", memory_case_config(128, 384, 4, 4, 2, 32, 256, 1), 4, 64, 1}, 2},
        {{"small untied model, ragged batch, 3 threads, 2 micro-batches", memory_case_config(24, 40, 2, 4, 2, 6, 37, 0),
          3, 5, 2},
         3},
        {{"large vocabulary, 1 thread", memory_case_config(16, 24, 1, 2, 1, 8, 5000, 1), 2, 16, 1}, 1},
        /* one row and a wide SwiGLU: the SwiGLU backward's per-thread rows need the most */
        {{"one token, F 20000, 3 threads", memory_case_config(8, 20000, 1, 2, 2, 4, 2, 1), 1, 1, 1}, 3},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) failed |= memory_in_child(cpu_case, &cases[i]);
    return failed;
}

/* The CPU's workspace as worked out by hand from the schedule (model.c), for the dry run to meet: every norm backward
 * has K = D (the block's two, and the final norm's in lm_head_train, which holds the whole [M, V] gradient and c
 * while its rows of logits and then that norm backward run); the SwiGLU backward's rows of F; a column-scaled weight
 * gradient's rows of D; the attention's scores of T keys; the sum of squares of the whole gradient. */
static size_t cpu_workspace_by_hand(const ModelConfig *c, int B, int T, size_t n_params, size_t threads) {
    const size_t M = (size_t)B * T, D = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    const size_t norm_backward = cpu_block_sums_bytes(M, D) + threads * cpu_block_rows_bytes(D);
    const size_t lm_rows = threads * cpu_block_rows_bytes(V);
    size_t most = cpu_lm_grad_bytes(M, V) + cpu_lm_c_bytes(M) + (lm_rows > norm_backward ? lm_rows : norm_backward);
    const size_t others[] = {threads * cpu_block_rows_bytes(F), threads * cpu_block_rows_bytes(D),
                             threads * cpu_attention_row_bytes((size_t)T), cpu_sum_squares_bytes(n_params)};
    for (int i = 0; i < 4; i++) most = others[i] > most ? others[i] : most;
    return most;
}

static void test_workspace_by_hand(void) {
    const struct {
        ModelConfig c;
        int B, T;
    } cases[] = {
        {memory_case_config(128, 384, 4, 4, 2, 32, 256, 1), 8, 256},       /* configs/llama3_tiny.json */
        {memory_case_config(24, 40, 2, 4, 2, 6, 37, 0), 3, 5},
        {memory_case_config(16, 24, 1, 2, 1, 8, 5000, 1), 2, 16},
        {memory_case_config(8, 20000, 1, 2, 2, 4, 2, 1), 1, 1},            /* the SwiGLU backward's rows */
        {memory_case_config(8, 8, 1, 1, 1, 2, 2, 1), 1, 3000},
        {memory_case_config(2048, 8192, 16, 32, 8, 64, 128256, 1), 1, 2048}, /* configs/llama3_1b.json's shape */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            const ModelConfig *c = &cases[i].c;
            ModelMemory mem;
            const int rc = model_memory(c, &kernels_cpu, cases[i].B, cases[i].T, MODEL_GRADS_APART, &mem);
            const size_t want = cpu_workspace_by_hand(c, cases[i].B, cases[i].T, mem.n_params, (size_t)threads);
            CHECK(rc == 0 && mem.workspace == want, "D %d F %d V %d, %d x %d, %d threads: the dry run's workspace %zu "
                  "bytes is the one worked out by hand, %zu", c->hidden_size, c->intermediate_size, c->vocab_size,
                  cases[i].B, cases[i].T, threads, mem.workspace, want);
        }
}

static void test_saturation(void) {
    /* the largest widths, layers, vocabulary and batch that the config's ranges allow */
    const ModelConfig c = memory_case_config(1 << 16, 1 << 20, 1024, 32, 8, 1024, 1 << 24, 0);
    ModelMemory mem;
    CHECK(model_memory(&c, &kernels_cpu, 1 << 20, 1 << 11, MODEL_GRADS_APART, &mem) == 0 &&
              mem.total == SIZE_MAX && mem.activations == SIZE_MAX && mem.workspace == SIZE_MAX &&
              mem.params == (size_t)config_num_parameters(&c) * 8,
          "a config beyond any machine: the estimate saturates at SIZE_MAX (params %zu bytes exact; more than INT_MAX "
          "rows: no dry run, the workspace SIZE_MAX)", mem.params);
    const ModelConfig issue = memory_case_config(4096, 384, 4, 32, 8, 128, 1 << 24, 1);
    CHECK(model_memory(&issue, &kernels_cpu, 8, 256, MODEL_GRADS_APART, &mem) == 0 &&
              mem.params == (size_t)config_num_parameters(&issue) * 8 &&
              mem.adam == mem.params && mem.grads > mem.params / 2 && mem.grads - mem.params / 2 < 4096 &&
              mem.total > ((size_t)1 << 40),
          "the issue's example: %.1f GiB (params %.1f, workspace %.1f; gradients and the step's results)",
          mem.total / 1073741824.0, mem.params / 1073741824.0, mem.workspace / 1073741824.0);
}

/* ---------------------------------------------------------------- available host memory */

static char root[256];

static void put(const char *rel, const char *text) {
    char path[512], dir[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        snprintf(dir, sizeof(dir), "%.*s", (int)(s - path), path);
        mkdir(dir, 0755);
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        printf("FAIL cannot write %s\n", path);
        exit(1);
    }
}

static size_t available(void) {
    char proc[300], cg[300];
    snprintf(proc, sizeof(proc), "%s/proc", root);
    snprintf(cg, sizeof(cg), "%s/cgroup", root);
    return cpu_host_available_bytes(proc, cg);
}

static void test_available(void) {
    const size_t GiB = (size_t)1 << 30;
    snprintf(root, sizeof(root), "/tmp/test_memory_XXXXXX");
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp");
        return;
    }
    put("proc/meminfo", "MemTotal:       16000000 kB\nMemFree:          100 kB\nMemAvailable:    8388608 kB\n");
    CHECK(available() == 8 * GiB, "MemAvailable alone: %zu bytes (8 GiB)", available());

    /* cgroup v2: no limit at /a/b, 2 GiB at /a with 1.5 GiB used of which 0.25 GiB is reclaimable page cache */
    put("proc/self/cgroup", "0::/a/b\n");
    put("cgroup/a/b/memory.max", "max\n");
    put("cgroup/a/b/memory.current", "1000\n");
    put("cgroup/a/memory.max", "2147483648\n");
    put("cgroup/a/memory.current", "1610612736\n");
    put("cgroup/a/memory.stat", "anon 1342177280\nfile 268435456\ninactive_file 268435456\n");
    CHECK(available() == 3 * GiB / 4, "cgroup v2, a parent's limit: %zu bytes (2 GiB - (1.5 - 0.25) GiB)",
          available());
    put("cgroup/a/b/memory.max", "104857600\n"); /* 100 MiB at the process's own cgroup */
    CHECK(available() == 104857600 - 1000, "cgroup v2, its own limit: %zu bytes", available());
    put("cgroup/a/b/memory.current", "209715200\n");
    CHECK(available() == 0, "cgroup v2, usage above the limit: 0 bytes available (%zu)", available());

    /* cgroup v1: the memory controller's line; the root's "no limit" is ignored */
    put("proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/x\n0::/\n");
    put("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("cgroup/memory/memory.usage_in_bytes", "5000000000\n");
    put("cgroup/memory/x/memory.limit_in_bytes", "1073741824\n");
    put("cgroup/memory/x/memory.usage_in_bytes", "536870912\n");
    put("cgroup/memory/x/memory.stat", "cache 0\ninactive_file 9\ntotal_inactive_file 134217728\n");
    CHECK(available() == GiB / 2 + GiB / 8, "cgroup v1: %zu bytes (1 GiB - (0.5 - 0.125) GiB)", available());

    const size_t real = kernels_cpu.available_bytes();
    CHECK(real > 0 && real < SIZE_MAX, "this machine: %.2f GiB of host memory available", real / (double)GiB);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0) printf("# could not remove %s\n", root);
}

/* The CUDA tables keep the decayed parameters' master weights split (kernels/master_split.h): the low halves
 * (their buffer rounded to 256 bytes) and the norms' fp32, beside the bf16 working copy; the CPU whole fp32. */
static void test_split_master(void) {
#ifdef WITH_CUDA
    const ModelConfig c = memory_case_config(2048, 8192, 16, 32, 8, 64, 128256, 1); /* Llama 3.2 1B's shapes */
    const size_t n = (size_t)config_num_parameters(&c), norms = (size_t)(2 * 16 + 1) * 2048, nd = n - norms;
    ModelMemory cpu, cuda, fused;
    const int ok = model_memory(&c, &kernels_cpu, 1, 64, MODEL_GRADS_APART, &cpu) == 0 &&
                   model_memory(&c, &kernels_cuda, 1, 64, MODEL_GRADS_APART, &cuda) == 0 &&
                   model_memory(&c, &kernels_cuda_fused, 1, 64, MODEL_GRADS_APART, &fused) == 0;
    const size_t want = (nd * 2 + 255) / 256 * 256 + norms * 4 + n * 2;
    CHECK(ok && cpu.params == n * 8 && cuda.params == want && fused.params == want,
          "master weights: the CPU's fp32 and working copy %zu bytes; the CUDA tables' low halves, the norms' fp32 and "
          "the bf16 working copy %zu and %zu bytes (want %zu: %.2f GiB less than whole)", ok ? cpu.params : 0,
          ok ? cuda.params : 0, ok ? fused.params : 0, want, (n * 6.0 - want) / 1073741824.0);
#endif
}

int main(void) {
    const int failed = test_estimates();
    test_split_master();
    test_workspace_by_hand();
    test_saturation();
    test_available();
    const int rc = test_summary();
    return rc || failed;
}
