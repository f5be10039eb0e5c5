/* test_gemm_config.c: the GEMM engine's launch config as a value (kernels/cuda/gemm/gemm_config.h), host arithmetic
 * that every build has: ge_pick's choice for the Llama-3.2-1B step's GEMMs at 4 x 2048 tokens on 132 SMs (an H100
 * SXM) and for the shapes where the wave rule or K_res's size rule decides otherwise, each worked out by hand; and
 * every config's text read back into the same config (what TRAIN_PRINT_GEMMS prints). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/gemm/gemm_config.h"
#include "tests/test_util.h"

#define SMS 132

static void check_pick(const char *what, ge_kind kind, int M, int N, int K, ge_config want) {
    char got_s[64], want_s[64];
    const ge_config got = ge_pick(kind, M, N, K, SMS);
    CHECK(ge_config_eq(got, want), "ge_pick for %s (M %d N %d K %d): %s (want %s)", what, M, N, K,
          ge_config_format(got, got_s, sizeof got_s), ge_config_format(want, want_s, sizeof want_s));
}

static void test_pick(void) {
    /* wave fill (useful tiles over rounds x SMs): 64 x 12 tiles of 128 x 256 in 6 rounds, 97%; 128 x 128 the same */
    check_pick("the QKV projection", GE_FUSED, 8192, 3072, 2048, GE_COOP_256);
    check_pick("gate/up", GE_FUSED, 8192, 16384, 2048, GE_COOP_256);
    check_pick("the LM head's logits", GE_FUSED, 8192, 128256, 2048, GE_COOP_256);
    check_pick("a weight gradient of [2048, 8192]", GE_PLAIN, 2048, 8192, 8192, GE_COOP_256);
    /* 24 x 8 = 192 tiles of 128 x 256 take 2 rounds (73%); 384 of 128 x 128 take 3 (97%) */
    check_pick("the QKV weight gradient", GE_PLAIN, 3072, 2048, 8192, GE_PINGPONG_128);
    /* K_res: M N K = 2^35 < 2^39, ping-pong; 2^40, cooperative */
    check_pick("Wo with K_res", GE_RESIDUAL, 8192, 2048, 2048, GE_PINGPONG_128);
    check_pick("a K_res of 2^40", GE_RESIDUAL, 65536, 4096, 4096, GE_COOP_256);
    check_pick("the SwiGLU backward", GE_COOP_ONLY, 8192, 8192, 2048, GE_COOP_256);
    /* 44 x 2 = 88 tiles of 128 x 256 in one round (50%) against 132 of 128 x 128 (99%) */
    check_pick("a cooperative-only 5600 x 384", GE_COOP_ONLY, 5600, 384, 64, GE_COOP_128);
}

/* The text "128xBN SCHEDULE" read back by sscanf gives the config it was made from, and configs differ in text. */
static void test_format(void) {
    const ge_config all[] = {GE_COOP_256, GE_COOP_128, GE_PINGPONG_128};
    char text[3][64];
    for (int i = 0; i < 3; i++) {
        int bm = 0, bn = 0;
        char sched[32] = "";
        ge_config_format(all[i], text[i], sizeof text[i]);
        const int n = sscanf(text[i], "%dx%d %31s", &bm, &bn, sched);
        const ge_config back = {bn, strcmp(sched, "ping-pong") == 0 ? GE_PINGPONG : GE_COOP};
        CHECK(n == 3 && bm == 128 && ge_config_eq(back, all[i]) &&
                  (strcmp(sched, "ping-pong") == 0 || strcmp(sched, "cooperative") == 0),
              "config %d prints as \"%s\" and reads back as itself", i, text[i]);
    }
    CHECK(strcmp(text[0], text[1]) && strcmp(text[0], text[2]) && strcmp(text[1], text[2]),
          "the three configs print differently");
    char a[16];
    CHECK(strcmp(ge_config_format(GE_AUTO, a, sizeof a), "auto") == 0, "GE_AUTO prints as \"%s\"", a);
}

int main(void) {
    test_pick();
    test_format();
    return test_summary();
}
