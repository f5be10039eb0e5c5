/* gemm.cu: host side of the GEMM-epilogue engine: tensor maps (cuTensorMapEncodeTiled through the runtime's
 * driver entry point, so no -lcuda), the SM count, the failure path, the schedule heuristic (ge_pick), and
 * gemm.h's extern "C" launchers, which instantiate the engine with the programs of gemm_programs.cuh; plus the tiny
 * kernel that turns K_res's partials into r. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/gemm/gemm_engine.cuh"
#include "kernels/cuda/gemm/gemm_programs.cuh"

void ge_fail_at(const char *what, const char *detail, const char *file, int line) {
    fprintf(stderr, "kernels_cuda: %s failed at %s:%d: %s\n", what, file, line, detail);
    fflush(stderr);
    abort();
}

typedef CUresult (*ge_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                       CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill);

static ge_encode_tiled_fn ge_encode_tiled(void) {
    static ge_encode_tiled_fn fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p)
            ge_fail("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
        fn = (ge_encode_tiled_fn)p;
    }
    return fn;
}

/* A bf16 tensor map of `batches` x `outer` rows of `inner` elements (row stride ld, batch stride batch_ld elements),
 * rank 2 (batches == 0) or 3, 128-byte swizzle, zero fill. */
static CUtensorMap tensor_map(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                              uint64_t batches, uint64_t batch_ld, uint32_t box_inner, uint32_t box_outer) {
    char msg[256];
    if (((uintptr_t)base & 15) != 0 || (ld * 2) % 16 != 0 || ld < inner || (batches && (batch_ld * 2) % 16 != 0)) {
        snprintf(msg, sizeof msg,
                 "TMA needs a 16-byte aligned base and a row stride that is a multiple of 8 elements and at least "
                 "the row length (base %p, row length %llu, stride %llu)",
                 base, (unsigned long long)inner, (unsigned long long)ld);
        ge_fail(what, msg);
    }
    CUtensorMap map;
    const cuuint32_t rank = batches ? 3 : 2;
    const cuuint64_t dims[3] = {inner, outer, batches};
    const cuuint64_t strides[2] = {ld * 2, batch_ld * 2};
    const cuuint32_t box[3] = {box_inner, box_outer, 1};
    const cuuint32_t estrides[3] = {1, 1, 1};
    CUresult r = ge_encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, (void *)base, dims, strides, box,
                                   estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, sizeof msg, "cuTensorMapEncodeTiled failed (error %d) for %llu x %llu x %llu, stride %llu", (int)r,
                 (unsigned long long)batches, (unsigned long long)outer, (unsigned long long)inner,
                 (unsigned long long)ld);
        ge_fail(what, msg);
    }
    return map;
}

CUtensorMap ge_tensor_map(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                          uint32_t box_inner, uint32_t box_outer) {
    return tensor_map(what, base, inner, outer, ld, 0, 0, box_inner, box_outer);
}

CUtensorMap ge_tensor_map_batched(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                                  uint64_t batches, uint32_t box_inner, uint32_t box_outer) {
    return tensor_map(what, base, inner, outer, ld, batches, outer * ld, box_inner, box_outer);
}

int ge_out_map(CUtensorMap *map, const void *base, int elem_bytes, int cols, int M, int N, long ld) {
    /* A row length that is not a multiple of 16 bytes is refused even where the stride is: a TMA store into such
     * a row wrote the padding up to the next 16 bytes (test_gemm's strided outputs, N = 777 in rows of 784). */
    if (((uintptr_t)base & 15) != 0 || (ld * elem_bytes) % 16 != 0 || ((long)N * elem_bytes) % 16 != 0 || ld < N ||
        M <= 0 || N <= 0)
        return 0;
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * elem_bytes};
    const cuuint32_t box[2] = {(cuuint32_t)cols, 64};
    const cuuint32_t estrides[2] = {1, 1};
    /* the staging slots' layouts: fp32 rows of 128 B, 128-byte swizzle; bf16 rows of 64 B, 64-byte swizzle;
     * half-width bf16 rows of 32 B, unswizzled */
    const CUtensorMapSwizzle swz = elem_bytes == 4 ? CU_TENSOR_MAP_SWIZZLE_128B
                                   : cols == 32    ? CU_TENSOR_MAP_SWIZZLE_64B
                                                   : CU_TENSOR_MAP_SWIZZLE_NONE;
    CUresult r = ge_encode_tiled()(map, elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                   2, (void *)base, dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
                                   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

/* Share of the SMs' time a schedule spends on useful tiles: M x N over (rounds x SMs x the tile area), where a round
 * is one tile per SM (cooperative 128 x 256) or one 128 x 128 tile per SM (ping-pong: its two consumers take turns
 * on the tensor cores, so an SM works through its tiles one after the other). */
static double wave_fill(int M, int N, int bn) {
    const long sms = ge_num_sms(), tiles = (long)((M + GE_BM - 1) / GE_BM) * ((N + bn - 1) / bn);
    const long rounds = (tiles + sms - 1) / sms;
    return (double)M * N / ((double)rounds * sms * GE_BM * bn);
}

/* The schedules (gemm.h's ge_pick). Plain GEMMs: cooperative 128 x 256, unless its tiles fill the waves clearly
 * worse than ping-pong's 128 x 128 ones (the QKV weight gradient, 3072 x 2048: 192 tiles for 132 SMs, 73%
 * against 97%). The larger tile moves fewer shared-memory and L2 bytes per flop, which decides it on a GPU that runs
 * these GEMMs at its power cap. Fused programs: the same rule; ping-pong overlaps one consumer's epilogue with the
 * other's main loop, but the row-scaled GEMM measured slower on it. K_res (residual): ping-pong below
 * M N K = 2^39 (its residual tile loads by TMA before the main loop), cooperative 128 x 256 above. The
 * measurements: docs/DESIGN.md, "Why the engine is shaped this way", and RESULTS.md section 5. Cooperative-only
 * programs: 128 x 256 or 128 x 128 by the wave rule. */
extern "C" ge_sched ge_pick(ge_kind kind, int M, int N, int K) {
    const bool wide = wave_fill(M, N, 256) >= wave_fill(M, N, 128) - 0.05;
    switch (kind) {
    case GE_RESIDUAL: return (double)M * N * K < 549755813888.0 /* 2^39 */ ? GE_SCHED_PP128 : GE_SCHED_COOP256;
    case GE_COOP_ONLY: return wide ? GE_SCHED_COOP256 : GE_SCHED_COOP128;
    default: return wide ? GE_SCHED_COOP256 : GE_SCHED_PP128;
    }
}

int ge_num_sms(void) {
    static int n = 0;
    if (!n) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
    }
    return n;
}

/* Packed row strides of the operands for a layout. */
static long lda_of(ge_layout l, int M, int K) { return l == GE_ATB ? M : K; }
static long ldb_of(ge_layout l, int N, int K) { return l == GE_ABT ? K : N; }

template <class Program, int BN, int SCHED>
static void run_layout_cfg(ge_layout l, const void *A, long lda, const void *B, long ldb, int M, int N, int K,
                           const typename Program::Params &p, cudaStream_t s) {
    switch (l) {
    case GE_ABT: ge_run<Program, GE_ABT, BN, SCHED>(A, lda, B, ldb, M, N, K, p, s); break;
    case GE_AB: ge_run<Program, GE_AB, BN, SCHED>(A, lda, B, ldb, M, N, K, p, s); break;
    case GE_ATB: ge_run<Program, GE_ATB, BN, SCHED>(A, lda, B, ldb, M, N, K, p, s); break;
    default: ge_fail("ge_gemm", "unknown layout");
    }
}

template <class Program>
static void run_layout(ge_layout l, const void *A, long lda, const void *B, long ldb, int M, int N, int K,
                       const typename Program::Params &p, ge_sched sched, cudaStream_t s) {
    switch (sched == GE_SCHED_AUTO ? ge_pick(GE_PLAIN, M, N, K) : sched) {
    case GE_SCHED_COOP128: run_layout_cfg<Program, 128, GE_COOP>(l, A, lda, B, ldb, M, N, K, p, s); break;
    case GE_SCHED_PP128: run_layout_cfg<Program, 128, GE_PINGPONG>(l, A, lda, B, ldb, M, N, K, p, s); break;
    default: run_layout_cfg<Program, 256, GE_COOP>(l, A, lda, B, ldb, M, N, K, p, s); break;
    }
}

extern "C" void ge_gemm_bf16(ge_layout layout, const void *A, const void *B, void *C, int M, int N, int K,
                             ge_sched sched, cudaStream_t stream) {
    run_layout<GeStore<bf16, false>>(layout, A, lda_of(layout, M, K), B, ldb_of(layout, N, K), M, N, K,
                                     {{ge_out((bf16 *)C, M, N, N)}}, sched, stream);
}

extern "C" void ge_gemm_f32_strided(ge_layout layout, const void *A, long lda, const void *B, long ldb, float *C,
                                    long ldc, int accumulate, int M, int N, int K, ge_sched sched,
                                    cudaStream_t stream) {
    if (accumulate)
        run_layout<GeStore<float, true>>(layout, A, lda, B, ldb, M, N, K,
                                         {{ge_out_as<GeOut<float, 32, true>>(C, M, N, ldc)}}, sched, stream);
    else
        run_layout<GeStore<float, false>>(layout, A, lda, B, ldb, M, N, K, {{ge_out(C, M, N, ldc)}}, sched, stream);
}

extern "C" void ge_gemm_f32(ge_layout layout, const void *A, const void *B, float *C, int accumulate, int M, int N,
                            int K, ge_sched sched, cudaStream_t stream) {
    ge_gemm_f32_strided(layout, A, lda_of(layout, M, K), B, ldb_of(layout, N, K), C, N, accumulate, M, N, K, sched,
                        stream);
}

extern "C" int ge_row_parts(int N) { return (N + GE_PART_COLS - 1) / GE_PART_COLS; }

extern "C" void ge_gemm_res_norm(const void *A, const void *W, const void *res, const float *gamma, void *D, void *O,
                                 float *part, int M, int N, int K, ge_sched sched, cudaStream_t stream) {
    GeResNormParams p = {};
    p.out.head = ge_out((bf16 *)D, M, N, N);
    p.out.tail.head = ge_out((bf16 *)O, M, N, N);
    p.res = (const bf16 *)res;
    p.gamma = gamma;
    p.part = part;
    p.ld = N;
    p.ldpart = ge_row_parts(N);
    p.R = ge_out((bf16 *)res, M, N, N);
    if (sched == GE_SCHED_AUTO) sched = ge_pick(GE_RESIDUAL, M, N, K);
    if (p.out.head.tma && p.R.tma) /* on ping-pong, the residual through shared memory (TMA), D in place over it */
        ge_run_fused<GeResNormTma<128>, GeResNorm<>>(A, K, W, K, M, N, K, p, sched, stream);
    else
        ge_run_fused<GeResNorm<128>, GeResNorm<>>(A, K, W, K, M, N, K, p, sched, stream);
}

static __global__ void ge_rms_finish_kernel(const float *part, int nparts, int M, int N, float eps, float *r) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    float s = 0.0f;
    for (int t = 0; t < nparts; t++) s += part[(long)m * nparts + t];
    r[m] = rsqrtf(s / (float)N + eps);
}

extern "C" void ge_rms_finish(const float *part, int M, int N, float eps, float *r, cudaStream_t stream) {
    if (M <= 0) return;
    ge_rms_finish_kernel<<<(M + 255) / 256, 256, 0, stream>>>(part, ge_row_parts(N), M, N, eps, r);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ge_fail("launch of ge_rms_finish_kernel", cudaGetErrorString(e));
}

extern "C" void ge_gemm_rowscale(const void *O, const void *W, const float *r, void *Z, int z_f32, int M, int N,
                                 int K, ge_sched sched, cudaStream_t stream) {
    if (z_f32)
        ge_run_fused<GeRowScale<float>>(O, K, W, K, M, N, K, {{ge_out((float *)Z, M, N, N)}, r}, sched, stream);
    else
        ge_run_fused<GeRowScale<bf16>>(O, K, W, K, M, N, K, {{ge_out((bf16 *)Z, M, N, N)}, r}, sched, stream);
}
