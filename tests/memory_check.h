/* memory_check.h: the memory preflight's estimate (model_memory) against what a backend really holds, shared by the
 * CPU test (test_memory.c) and the GPU one (gpu/test_gpu_memory.c). Each case runs in a child process of its own, so
 * that the device memory it measures is its own; the peak is that of the model's backend context. The child checks
 * that model_create allocates exactly the buffers model_memory lists (and the workspace it reserves), in the layout
 * that ./train gives a run of the case's micro-batches per step (model_layout_for), then does what
 * runs do (the init's weight copies, optimizer steps with or without gradient accumulation, an
 * evaluation, the logits of a sample) and checks that the estimate covers the backend's peak and exceeds it by at
 * most a tolerance. On a table that captures steps, the steps run as ./train runs them (train_step.h: captured
 * from the second on), and the evaluation and the logits follow while the captured step exists. */
#ifndef MEMORY_CHECK_H
#define MEMORY_CHECK_H

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/model.h"
#include "model/optimizer.h"
#include "model/train_step.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

typedef struct MemoryCase {
    const char *name;
    ModelConfig cfg;
    int B, T;
    int accum; /* micro-batches per optimizer step */
} MemoryCase;

/* A model config of the given shape (the rest as the small model's). */
static inline ModelConfig memory_case_config(int D, int F, int L, int Hq, int Hkv, int hd, int V, int tied) {
    return small_model_shape(D, F, L, Hq, Hkv, hd, V, tied);
}

/* M random token ids and M random targets in [0, V), interleaved from rnd(). */
static inline void random_batch(int32_t *tokens, int32_t *targets, int M, int V) {
    for (int i = 0; i < M; i++) {
        tokens[i] = (int32_t)((rnd() + 1) * 0.5 * V) % V;
        targets[i] = (int32_t)((rnd() + 1) * 0.5 * V) % V;
    }
}

/* The case on k, in this process; PASS/FAIL lines. The estimate may exceed the peak by tolerance * estimate.
 * untracked (when not NULL): the backend memory that the model takes beyond what its context counts (on the GPU, the
 * cuBLAS handle's own and the allocations' rounding): the available bytes before model_create less those at the end
 * of the run, with everything still allocated, less the context's peak. */
static void memory_case_run(const Kernels *k, const MemoryCase *mc, double tolerance, double *untracked) {
    const ModelConfig *c = &mc->cfg;
    const int B = mc->B, T = mc->T, M = B * T;
    ModelMemory mem;
    Model m;
    char err[512];
    const size_t available_before = untracked ? k->available_bytes() : 0; /* only where it is asked for */
    const ModelLayout layout = model_layout_for(mc->accum); /* as ./train lays a run of these steps out */
    if (model_memory(c, k, B, T, layout, &mem) || model_create(&m, c, k, B, T, layout, err, sizeof(err))) {
        CHECK(0, "%s: model_memory and model_create", mc->name);
        return;
    }
    size_t workspace = 0, reserved = 0;
    if (k->reserve_scratch && model_workspace(c, k, B, T, &workspace, &reserved)) {
        CHECK(0, "%s: model_workspace", mc->name);
        return;
    }
    const size_t buffers = mem.params + mem.grads + mem.adam + mem.activations;
    CHECK(k->peak_bytes(m.kc) == buffers + reserved,
          "%s: model_create allocates the %zu bytes of buffers that "
          "model_memory lists and reserves the dry run's largest scratch, %zu bytes (backend peak %zu)",
          mc->name, buffers, reserved, k->peak_bytes(m.kc));

    model_init_weights(&m, 7);
    int32_t *tokens = malloc((size_t)M * sizeof(int32_t)), *targets = malloc((size_t)M * sizeof(int32_t));
    float *logits = malloc((size_t)c->vocab_size * sizeof(float));
    if (!tokens || !targets || !logits) {
        CHECK(0, "%s: host buffers", mc->name);
        exit(1);
    }
    const TrainConfig t = small_train_config(1e-3);
    double norm = 0;
    TrainStep s = {0};
    size_t step_bytes = 0; /* the captured step's micro-batch slots, beside the model */
    if (k->capture_begin) {
        step_bytes = train_step_bytes(B, T, mc->accum);
        if (train_step_create(&s, &m, B, T, mc->accum, 1, err, sizeof(err))) {
            CHECK(0, "%s: train_step_create: %s", mc->name, err);
            exit(1);
        }
        for (int step = 1; step <= 3; step++) {
            for (int micro = 0; micro < mc->accum; micro++) {
                random_batch(tokens, targets, M, c->vocab_size);
                train_step_load(&s, micro, tokens, targets);
            }
            train_step_run(&s, &t, t.learning_rate, step);
            double step_loss;
            train_step_result(&s, &step_loss, &norm);
        }
        CHECK(train_step_captured(&s), "%s: the steps after the first are replayed from a captured graph", mc->name);
    } else {
        for (int step = 1; step <= 2; step++) {
            model_zero_grads(&m);
            for (int micro = 0; micro < mc->accum; micro++) {
                random_batch(tokens, targets, M, c->vocab_size);
                model_forward(&m, tokens, B, T);
                model_loss(&m, targets, B, T, 1.0f / (float)(M * mc->accum));
                model_backward(&m, B, T,
                               (micro == 0 ? MICRO_FIRST : 0) | (micro == mc->accum - 1 ? MICRO_LAST : 0));
            }
            norm = optimizer_step(&m, &t, t.learning_rate, step);
        }
    }
    model_forward(&m, tokens, B, T);
    const double loss = model_loss(&m, targets, B, T, 0.0f);
    model_last_logits(&m, B, T, logits);
    k->synchronize(m.kc);
    const size_t peak = k->peak_bytes(m.kc);
    if (untracked) *untracked = (double)available_before - (double)k->available_bytes() - (double)peak;
    if (k->capture_begin) train_step_destroy(&s);
    mem.total = size_add(mem.total, step_bytes);
    CHECK(isfinite(norm) && isfinite(loss) && isfinite(logits[0]), "%s: the run is finite (grad norm %.4g, loss %.4g)",
          mc->name, norm, loss);
    CHECK(peak <= mem.total && (double)(mem.total - peak) <= tolerance * (double)mem.total,
          "%s: the estimate %zu bytes (workspace %zu, a captured step's batches %zu) covers the backend's peak %zu "
          "bytes and exceeds it by %.3f%% (tolerance %.3f%%)", mc->name, mem.total, mem.workspace, step_bytes, peak,
          peak <= mem.total ? 100.0 * (double)(mem.total - peak) / (double)mem.total : -1.0, 100.0 * tolerance);
    free(tokens);
    free(targets);
    free(logits);
    model_destroy(&m);
}

/* Runs fn(arg) in a child process, whose PASS/FAIL lines go to the same stdout and whose counts of passed and
 * failed checks come back through a pipe, so that the parent's summary counts them. Returns 1 if the child failed. */
static int memory_in_child(void (*fn)(const void *), const void *arg) {
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe");
        return 1;
    }
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) {
        CHECK(0, "fork");
        close(fds[0]);
        close(fds[1]);
        return 1;
    }
    if (pid == 0) {
        close(fds[0]);
        const int passes0 = test_passes, failures0 = test_failures;
        fn(arg);
        fflush(stdout);
        const int counts[2] = {test_passes - passes0, test_failures - failures0};
        const int ok = write(fds[1], counts, sizeof counts) == (ssize_t)sizeof counts;
        _exit(counts[1] || !ok ? 1 : 0);
    }
    close(fds[1]);
    int counts[2] = {0, 0};
    size_t got = 0;
    while (got < sizeof counts) {
        const ssize_t n = read(fds[0], (char *)counts + got, sizeof counts - got);
        if (n <= 0) break; /* the child ended before writing them (it crashed): the status below says so */
        got += (size_t)n;
    }
    close(fds[0]);
    if (got == sizeof counts) {
        test_passes += counts[0];
        test_failures += counts[1];
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (!WIFEXITED(status)) CHECK(0, "the child process of a case ended abnormally (status %d)", status);
        return 1;
    }
    return 0;
}

#endif
