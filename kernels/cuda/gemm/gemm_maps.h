/* gemm_maps.h: host helpers of the GEMM-epilogue engine that other Hopper kernels share (gemm.cu): TMA tensor
 * maps, the SM count, the engine's failure path and its launch line. */
#ifndef GEMM_MAPS_H
#define GEMM_MAPS_H

#include <cuda.h>
#include <stdint.h>

#include "kernels/cuda/gemm/gemm_config.h"

/* A failed call (an internal error: a bug, or a fault of the device, never the user's input): names the call, the
 * file and the line on stderr and aborts, so that the core dump helps. The CUDA backend's checked calls use it too
 * (cuda_fail). */
void ge_fail_at(const char *what, const char *detail, const char *file, int line);
#define ge_fail(what, detail) ge_fail_at((what), (detail), __FILE__, __LINE__)

/* A 2-D bf16 tensor map of `outer` rows of `inner` elements (row stride ld elements), box box_inner x box_outer,
 * 128-byte swizzle, zero fill. `what` names the operand in the error message if TMA cannot describe it. */
CUtensorMap ge_tensor_map(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                          uint32_t box_inner, uint32_t box_outer);
/* The same over `batches` such matrices stored one after the other (batch stride outer * ld): a rank-3 map whose
 * boxes (box_inner x box_outer x 1) never cross from one matrix into the next (tma_load_3d). */
CUtensorMap ge_tensor_map_batched(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                                  uint64_t batches, uint32_t box_inner, uint32_t box_outer);
/* The store map of a GeOut: [M, N] of bf16 (elem_bytes 2) or fp32 (4), row stride ld, box `cols` columns x 64 rows,
 * laid out as gemm_epilogue.cuh's staging slots (ge_stage_off, ge_stage_off_half). Returns 0 (map unusable) where
 * TMA cannot describe the matrix. */
int ge_out_map(CUtensorMap *map, const void *base, int elem_bytes, int cols, int M, int N, long ld);
int ge_num_sms(void);
/* The line a launch prints when asked (ge_launch's print): the operation, the product's M N K, the config, the
 * ring's stages and the staging buffers of its program, and whether its outputs are stored directly. */
void ge_print_launch(const char *op, int M, int N, int K, ge_config cfg, int stages, int buffers, int direct);

#endif
