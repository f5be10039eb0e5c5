/* gemm_config.h: the engine's launch configuration as a value (plain C, no CUDA: the CPU tests check it). A config
 * names what the kernel's templates are instantiated for: the tile (128 x bn) and the schedule. ge_pick is the one
 * heuristic that chooses it; gemm_engine.cuh's ge_dispatch is the one place that turns it into a kernel. */
#ifndef GEMM_CONFIG_H
#define GEMM_CONFIG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rows of every engine tile (gemm_engine.cuh's GE_BM); a config chooses its columns. */
#define GE_TILE_M 128

/* GE_COOP: both consumer warpgroups work on one 128 x bn tile, then run its epilogue together. GE_PINGPONG (bn 128):
 * each consumer owns whole tiles, so one's epilogue overlaps the other's main loop (docs/DESIGN.md, "Inside the
 * engine's kernel"). */
typedef enum { GE_COOP = 0, GE_PINGPONG = 1 } ge_schedule;

/* A tile width and a schedule; bn == 0 is GE_AUTO (ge_pick's choice, made where the launch knows its shape). The
 * ring's stages and the staging buffers follow from the config and the program (GeSmem), and a launch prints them
 * with it. */
typedef struct {
    int bn;
    ge_schedule sched;
} ge_config;

static const ge_config GE_AUTO = {0, GE_COOP};
static const ge_config GE_COOP_256 = {256, GE_COOP};
static const ge_config GE_COOP_128 = {128, GE_COOP};
static const ge_config GE_PINGPONG_128 = {128, GE_PINGPONG};

static inline int ge_config_eq(ge_config a, ge_config b) { return a.bn == b.bn && a.sched == b.sched; }

/* What a program needs of its schedule: GE_PLAIN (a plain store), GE_FUSED (an epilogue on the accumulator and
 * GeOut outputs), GE_RESIDUAL (K_res: a residual tile in by TMA, which ping-pong loads before the main loop),
 * GE_COOP_ONLY (column partials or one-row-block input staging: a cooperative schedule). */
typedef enum { GE_PLAIN = 0, GE_FUSED = 1, GE_RESIDUAL = 2, GE_COOP_ONLY = 3 } ge_kind;

/* The config for a program of this kind on an M x N x K product on a GPU of `sms` SMs (never GE_AUTO). Plain and
 * fused: cooperative 128 x 256 unless its tiles fill the waves clearly worse than 128 x 128 ping-pong's; residual:
 * ping-pong below M N K = 2^39, cooperative 128 x 256 above; cooperative-only: 128 x 256 or 128 x 128 by the wave
 * rule. */
ge_config ge_pick(ge_kind kind, int M, int N, int K, int sms);

/* The config as text, "128x256 cooperative", "128x128 ping-pong" or "auto", into buf (n bytes); returns buf. */
const char *ge_config_format(ge_config c, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
