/* gemm_config.c: the engine's schedule heuristic (ge_pick) and the config's text (gemm_config.h). Host arithmetic
 * only, built into every build so that the CPU tests check it. */
#include "kernels/cuda/gemm/gemm_config.h"

#include <stdio.h>

/* Share of the SMs' time a schedule spends on useful tiles: M x N over (rounds x SMs x the tile area), where a round
 * is one tile per SM (cooperative 128 x 256) or one 128 x 128 tile per SM (ping-pong: its two consumers take turns
 * on the tensor cores, so an SM works through its tiles one after the other). */
static double wave_fill(int M, int N, int bn, int sms) {
    const long tiles = (((long)M + GE_TILE_M - 1) / GE_TILE_M) * (((long)N + bn - 1) / bn);
    const long rounds = (tiles + sms - 1) / sms;
    return (double)M * N / ((double)rounds * sms * GE_TILE_M * bn);
}

/* Plain GEMMs: cooperative 128 x 256, unless its tiles fill the waves clearly worse than ping-pong's 128 x 128 ones
 * (the QKV weight gradient, 3072 x 2048: 192 tiles for 132 SMs, 73% against 97%). The larger tile moves fewer
 * shared-memory and L2 bytes per flop, which decides it on a GPU that runs these GEMMs at its power cap. Fused
 * programs: the same rule. K_res (residual): ping-pong below M N K = 2^39 (its residual tile loads by TMA before
 * the main loop), cooperative 128 x 256 above. Cooperative-only programs: 128 x 256 or 128 x 128 by the wave rule.
 * The reasons: docs/DESIGN.md, "Why the engine is shaped this way". */
ge_config ge_pick(ge_kind kind, int M, int N, int K, int sms) {
    const int wide = wave_fill(M, N, 256, sms) >= wave_fill(M, N, 128, sms) - 0.05;
    switch (kind) {
    case GE_RESIDUAL: return (double)M * N * K < 549755813888.0 /* 2^39 */ ? GE_PINGPONG_128 : GE_COOP_256;
    case GE_COOP_ONLY: return wide ? GE_COOP_256 : GE_COOP_128;
    default: return wide ? GE_COOP_256 : GE_PINGPONG_128;
    }
}

const char *ge_config_format(ge_config c, char *buf, size_t n) {
    if (c.bn == 0)
        snprintf(buf, n, "auto");
    else
        snprintf(buf, n, "%dx%d %s", GE_TILE_M, c.bn, c.sched == GE_PINGPONG ? "ping-pong" : "cooperative");
    return buf;
}
