/* bench_fused.cu: each fused program of the trainer (kernels_cuda_fused) against the bare GEMM of the same shape on
 * the same engine (its plain store: what the epilogue costs) and against the unfused op it replaces (kernels_cuda:
 * the cuBLAS GEMM + its separate pass), on the Llama-3.2-1B shapes of one micro-batch (default M = 4 x 2048 rows).
 * Random bf16 data; the three are timed in turns by bench_timing.h's method (the same as the PyTorch benchmarks'),
 * and the table gives their median times per call, as a Markdown table; with --json FILE also a JSON list of
 * {"program", "M", "N", "K", "fused_ms", "bare_gemm_ms", "unfused_ms", "method", "gpu", "date"} (N x K: the GEMM's
 * output and reduction sizes; the LM head rows count all three of its GEMMs as the bare time; the attention row, at
 * T = 2048, times the attention backward with the RoPE backward in its stores against the attention backward alone
 * and against it followed by the RoPE pass, its N x K the QKV and attention-output widths).
 *   build/tests/gpu/bench_fused [--rows M] [--json FILE] [--only TEXT: the rows whose name has it] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/kernels.h"
#include "tests/gpu/bench_timing.h"
#include "tests/test_util.h"

static const Kernels *fused = &kernels_cuda_fused, *unfused = &kernels_cuda;
static KernelContext *ctx; /* both tables' (main makes it) */

/* A device buffer of n bf16 values offset + scale * U[-1, 1), made on the host in chunks. */
static void *dev_bf16_rand(size_t n, double offset, double scale) {
    void *d = fused->alloc(ctx, n * 2);
    const size_t chunk = (size_t)1 << 24;
    float *h = (float *)malloc(chunk * sizeof(float));
    for (size_t at = 0; at < n; at += chunk) {
        const size_t len = n - at < chunk ? n - at : chunk;
        for (size_t i = 0; i < len; i++) h[i] = (float)(offset + scale * rnd());
        fused->act_from_f32(ctx, (char *)d + at * 2, h, len);
    }
    free(h);
    return d;
}
static float *dev_f32_rand(size_t n, double offset, double scale) {
    float *h = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(offset + scale * rnd());
    float *d = (float *)fused->alloc(ctx, n * sizeof(float));
    fused->copy_to_device(ctx, d, h, n * sizeof(float));
    free(h);
    return d;
}

struct Row {
    std::string program;
    int N, K;
    double fused_ms, bare_ms, unfused_ms;
};
static std::vector<Row> rows;
static int M = 8192;
static const char *only = NULL; /* --only: the rows whose name contains it */

/* Times the three in turns; records the medians. */
static void bench(const char *program, int N, int K, std::function<void()> f, std::function<void()> bare,
                  std::function<void()> unf) {
    if (only && !strstr(program, only)) return;
    const std::vector<double> t = bt_time_each({[&](int) { f(); }, [&](int) { bare(); }, [&](int) { unf(); }});
    rows.push_back({program, N, K, t[0], t[1], t[2]});
    const Row &r = rows.back();
    printf("| %s | %d x %d x %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", program, M, N, K, r.fused_ms, r.bare_ms,
           r.unfused_ms, r.fused_ms / r.bare_ms, r.fused_ms / r.unfused_ms);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) M = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--rows M] [--json FILE] [--only TEXT]\n", argv[0]);
            return 2;
        }
    }
    char why[256];
    if (!kernels_cuda_available(why, sizeof why)) {
        printf("no usable GPU: %s\n", why);
        return 1;
    }
    ctx = fused->context_create();
    const int D = 2048, F = 8192, Hq = 32, Hkv = 8, hd = 64, V = 128256, T = 2048;
    const int Nqkv = (Hq + 2 * Hkv) * hd;
    char date[32];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    printf("# %s, %s; Llama-3.2-1B shapes, M = %d rows; the three timed in turns, each: %s\n", why, date, M,
           BT_METHOD);
    printf("| program | M x N x K | fused ms | bare GEMM ms | unfused ms | fused / bare | fused / unfused |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");

    /* activations and weights (random; the values do not change the time) */
    void *x = dev_bf16_rand((size_t)M * D, 0.0, 1.0), *O = dev_bf16_rand((size_t)M * D, 0.0, 1.0);
    void *act = dev_bf16_rand((size_t)M * F, 0.0, 1.0), *Z = dev_bf16_rand((size_t)M * 2 * F, 0.0, 2.0);
    void *y = dev_bf16_rand((size_t)M * D, 0.0, 1.0), *dres = dev_bf16_rand((size_t)M * D, 0.0, 1.0);
    void *dZ = dev_bf16_rand((size_t)M * 2 * F, 0.0, 1e-3), *dqkv = dev_bf16_rand((size_t)M * Nqkv, 0.0, 1e-3);
    void *Wqkv = dev_bf16_rand((size_t)Nqkv * D, 0.0, 0.02), *Wo = dev_bf16_rand((size_t)D * D, 0.0, 0.02);
    void *Wgu = dev_bf16_rand((size_t)2 * F * D, 0.0, 0.02), *Wd = dev_bf16_rand((size_t)D * F, 0.0, 0.02);
    void *Wlm = dev_bf16_rand((size_t)V * D, 0.0, 0.02);
    float *r = dev_f32_rand(M, 1.0, 0.1), *c = dev_f32_rand(M, 0.0, 1e-3), *gamma = dev_f32_rand(D, 1.0, 0.1);
    float *dgamma = dev_f32_rand(D, 0.0, 1.0), *loss = dev_f32_rand(M, 0.0, 1.0);
    float *dWgu = dev_f32_rand((size_t)2 * F * D, 0.0, 1e-3), *dWlm = dev_f32_rand((size_t)V * D, 0.0, 1e-3);
    float *dWqkv = dev_f32_rand((size_t)Nqkv * D, 0.0, 1e-3);
    float *rope_cos = dev_f32_rand((size_t)T * hd / 2, 0.0, 1.0), *rope_sin = dev_f32_rand((size_t)T * hd / 2, 0.0, 1.0);
    int32_t *tgt, *tgt_groups; /* the targets and their token groups (kernels.h) */
    {
        const size_t ng = token_groups_ints((size_t)M);
        int32_t *h = (int32_t *)malloc((size_t)M * sizeof(int32_t)), *g = (int32_t *)malloc(ng * sizeof(int32_t));
        int32_t *count = (int32_t *)malloc(((size_t)V + 1) * sizeof(int32_t));
        if (!h || !g || !count) {
            fprintf(stderr, "bench_fused: out of host memory\n");
            exit(1);
        }
        for (int i = 0; i < M; i++) h[i] = (int32_t)((rnd() + 1.0) * 0.5 * V) % V;
        token_groups_build(h, M, V, g, count);
        tgt = (int32_t *)fused->alloc(ctx, (size_t)M * sizeof(int32_t));
        tgt_groups = (int32_t *)fused->alloc(ctx, ng * sizeof(int32_t));
        fused->copy_to_device(ctx, tgt, h, (size_t)M * sizeof(int32_t));
        fused->copy_to_device(ctx, tgt_groups, g, ng * sizeof(int32_t));
        free(h);
        free(g);
        free(count);
    }
    /* outputs */
    void *out_qkv = fused->alloc(ctx, (size_t)M * Nqkv * 2), *h = fused->alloc(ctx, (size_t)M * D * 2);
    void *O2 = fused->alloc(ctx, (size_t)M * D * 2), *Zo = fused->alloc(ctx, (size_t)M * 2 * F * 2);
    void *acto = fused->alloc(ctx, (size_t)M * F * 2), *dZo = fused->alloc(ctx, (size_t)M * 2 * F * 2);
    void *bare_out = fused->alloc(ctx, (size_t)M * 2 * F * 2);
    float *bare_f32 = (float *)fused->alloc(ctx, (size_t)2 * F * D * 4),
          *r_out = (float *)fused->alloc(ctx, (size_t)M * 4);
    float *c_out = (float *)fused->alloc(ctx, (size_t)M * 4);
    void *lm_bare = fused->alloc(ctx, (size_t)M * V * 2); /* the bare LM head's logits, then its gradient operand */
    float *lm_dw = (float *)fused->alloc(ctx, (size_t)V * D * 4);
    double *sq = (double *)fused->alloc(ctx, sizeof(double));
    /* attention: qkv as the forward made it (y and lse from a forward over random qkv) */
    void *qkv = dev_bf16_rand((size_t)M * Nqkv, 0.0, 1.0), *y_att = fused->alloc(ctx, (size_t)M * Hq * hd * 2);
    void *dqkv_o = fused->alloc(ctx, (size_t)M * Nqkv * 2);
    float *lse = (float *)fused->alloc(ctx, (size_t)M * Hq * 4);
    if (M % T == 0) fused->attention_forward(ctx, qkv, y_att, lse, M / T, T, Hq, Hkv, hd);
    const ge_launch A = {GE_AUTO, 0, "bench_fused", 0};

    bench(
        "QKV + RoPE", Nqkv, D,
        [&] { fused->gemm_rope(ctx, O, Wqkv, r, rope_cos, rope_sin, out_qkv, M, Nqkv, D, (Hq + Hkv) * hd, hd, T); },
        [&] { ge_gemm_bf16(GE_ABT, O, Wqkv, bare_out, M, Nqkv, D, A); },
        [&] { unfused->gemm_rope(ctx, O, Wqkv, r, rope_cos, rope_sin, out_qkv, M, Nqkv, D, (Hq + Hkv) * hd, hd, T); });
    bench(
        "Wo + residual + RMSNorm (K_res)", D, Hq * hd,
        [&] { fused->gemm_residual_norm(ctx, y, Wo, x, gamma, 1e-5f, h, O2, r_out, M, D, Hq * hd); },
        [&] { ge_gemm_bf16(GE_ABT, y, Wo, bare_out, M, D, Hq * hd, A); },
        [&] { unfused->gemm_residual_norm(ctx, y, Wo, x, gamma, 1e-5f, h, O2, r_out, M, D, Hq * hd); });
    bench(
        "gate/up + SwiGLU", 2 * F, D, [&] { fused->gemm_swiglu(ctx, O, Wgu, r, Zo, acto, M, F, D); },
        [&] { ge_gemm_bf16(GE_ABT, O, Wgu, bare_out, M, 2 * F, D, A); },
        [&] { unfused->gemm_swiglu(ctx, O, Wgu, r, Zo, acto, M, F, D); });
    bench(
        "down + residual + RMSNorm (K_res)", D, F,
        [&] { fused->gemm_residual_norm(ctx, act, Wd, x, gamma, 1e-5f, h, O2, r_out, M, D, F); },
        [&] { ge_gemm_bf16(GE_ABT, act, Wd, bare_out, M, D, F, A); },
        [&] { unfused->gemm_residual_norm(ctx, act, Wd, x, gamma, 1e-5f, h, O2, r_out, M, D, F); });
    bench(
        "LM head + cross-entropy (evaluation)", V, D, [&] { fused->lm_head_loss(ctx, O, Wlm, r, tgt, loss, M, V, D); },
        [&] { ge_gemm_bf16(GE_ABT, O, Wlm, lm_bare, M, V, D, A); },
        [&] { unfused->lm_head_loss(ctx, O, Wlm, r, tgt, loss, M, V, D); });
    bench(
        "LM head + cross-entropy + its backward + final norm backward", V, D,
        [&] {
            fused->lm_head_train(ctx, O, Wlm, r, tgt, tgt_groups, 1.0f / M, x, gamma, loss, dWlm, dres, dgamma, M, V,
                                 D);
        },
        [&] {
            ge_gemm_bf16(GE_ABT, O, Wlm, lm_bare, M, V, D, A);
            ge_gemm_bf16(GE_AB, lm_bare, Wlm, bare_out, M, D, V, A);
            ge_gemm_f32(GE_ATB, lm_bare, O, lm_dw, 1, V, D, M, A);
        },
        [&] {
            unfused->lm_head_train(ctx, O, Wlm, r, tgt, tgt_groups, 1.0f / M, x, gamma, loss, dWlm, dres, dgamma, M, V,
                                   D);
        });
    bench(
        "SwiGLU backward (dact = dY . Wdown)", F, D,
        [&] { fused->gemm_swiglu_backward(ctx, dres, Wd, Z, r, dZo, c_out, acto, M, D, F); },
        [&] { ge_gemm_bf16(GE_AB, dres, Wd, bare_out, M, F, D, A); },
        [&] { unfused->gemm_swiglu_backward(ctx, dres, Wd, Z, r, dZo, c_out, acto, M, D, F); });
    bench(
        "RMSNorm backward in dZgu . Wgateup (accumulate)", D, 2 * F,
        [&] { fused->gemm_norm_backward(ctx, dZ, Wgu, gamma, r, c, x, dres, dgamma, 1, M, 2 * F, D); },
        [&] { ge_gemm_bf16(GE_AB, dZ, Wgu, bare_out, M, D, 2 * F, A); },
        [&] { unfused->gemm_norm_backward(ctx, dZ, Wgu, gamma, r, c, x, dres, dgamma, 1, M, 2 * F, D); });
    bench(
        "RMSNorm backward in dqkv . Wqkv (accumulate)", D, Nqkv,
        [&] { fused->gemm_norm_backward(ctx, dqkv, Wqkv, gamma, r, c, x, dres, dgamma, 1, M, Nqkv, D); },
        [&] { ge_gemm_bf16(GE_AB, dqkv, Wqkv, bare_out, M, D, Nqkv, A); },
        [&] { unfused->gemm_norm_backward(ctx, dqkv, Wqkv, gamma, r, c, x, dres, dgamma, 1, M, Nqkv, D); });
    /* the weight gradients as one micro-batch's step runs them: written, with their sums of squares */
    bench(
        "dWgateup = (dZgu^T h) * gamma, + its sum of squares", 2 * F, D,
        [&] { fused->gemm_dw(ctx, dZ, x, gamma, dWgu, 0, sq, M, 2 * F, D); },
        [&] { ge_gemm_f32(GE_ATB, dZ, x, bare_f32, 0, 2 * F, D, M, A); },
        [&] { unfused->gemm_dw(ctx, dZ, x, gamma, dWgu, 0, sq, M, 2 * F, D); });
    bench(
        "dWqkv = (dqkv^T x) * gamma, + its sum of squares", Nqkv, D,
        [&] { fused->gemm_dw(ctx, dqkv, x, gamma, dWqkv, 0, sq, M, Nqkv, D); },
        [&] { ge_gemm_f32(GE_ATB, dqkv, x, bare_f32, 0, Nqkv, D, M, A); },
        [&] { unfused->gemm_dw(ctx, dqkv, x, gamma, dWqkv, 0, sq, M, Nqkv, D); });
    bench(
        "dWdown = dres^T act, + its sum of squares", D, F,
        [&] { fused->gemm_dw(ctx, dres, act, NULL, dWgu, 0, sq, M, D, F); },
        [&] { ge_gemm_f32(GE_ATB, dres, act, bare_f32, 0, D, F, M, A); },
        [&] { unfused->gemm_dw(ctx, dres, act, NULL, dWgu, 0, sq, M, D, F); });
    /* not a GEMM: the attention backward with the RoPE backward in its stores, against the plain attention backward
     * ("bare") and against it followed by the RoPE backward pass (unfused); dy = y (any values do) */
    const int Bt = M / T;
    if (M % T == 0)
        bench(
            "attention backward + RoPE backward", Nqkv, Hq * hd,
            [&] {
                fused->attention_backward(ctx, qkv, y_att, lse, y_att, r, rope_cos, rope_sin, dqkv_o, c_out, Bt, T, Hq,
                                          Hkv, hd);
            },
            [&] {
                fused->attention_backward(ctx, qkv, y_att, lse, y_att, NULL, NULL, NULL, dqkv_o, NULL, Bt, T, Hq, Hkv,
                                          hd);
            },
            [&] {
                unfused->attention_backward(ctx, qkv, y_att, lse, y_att, r, rope_cos, rope_sin, dqkv_o, c_out, Bt, T,
                                            Hq, Hkv, hd);
            });
    CK(cudaDeviceSynchronize());

    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            perror(json);
            return 1;
        }
        fprintf(f, "[\n");
        for (size_t i = 0; i < rows.size(); i++) {
            const Row &r2 = rows[i];
            fprintf(f,
                    " {\"program\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"fused_ms\": %.4f, "
                    "\"bare_gemm_ms\": %.4f, \"unfused_ms\": %.4f, \"method\": \"%s\", \"gpu\": \"%s\", "
                    "\"date\": \"%s\"}%s\n",
                    r2.program.c_str(), M, r2.N, r2.K, r2.fused_ms, r2.bare_ms, r2.unfused_ms, BT_METHOD, why, date,
                    i + 1 < rows.size() ? "," : "");
        }
        fprintf(f, "]\n");
        if (fclose(f) != 0) {
            perror(json);
            return 1;
        }
        printf("wrote %s\n", json);
    }
    return 0;
}
