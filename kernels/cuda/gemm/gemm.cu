/* gemm.cu: host side of the GEMM-epilogue engine: tensor maps (cuTensorMapEncodeTiled through the runtime's
 * driver entry point, so no -lcuda), the SM count, and gemm.h's extern "C" launchers, which instantiate the
 * engine with the programs of gemm_programs.cuh; plus two tiny kernels: one turns K_res's partials into r, one
 * folds gamma into a weight. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/gemm/gemm_engine.cuh"
#include "kernels/cuda/gemm/gemm_programs.cuh"

void ge_fail(const char *what, const char *detail) {
    fprintf(stderr, "gemm engine: %s: %s\n", what, detail);
    exit(1);
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

CUtensorMap ge_tensor_map(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                          uint32_t box_inner, uint32_t box_outer) {
    char msg[256];
    if (((uintptr_t)base & 15) != 0 || (ld * 2) % 16 != 0 || ld < inner) {
        snprintf(msg, sizeof msg,
                 "TMA needs a 16-byte aligned base and a row stride that is a multiple of 8 elements and at least "
                 "the row length (base %p, row length %llu, stride %llu)",
                 base, (unsigned long long)inner, (unsigned long long)ld);
        ge_fail(what, msg);
    }
    CUtensorMap map;
    const cuuint64_t dims[2] = {inner, outer};
    const cuuint64_t strides[1] = {ld * 2};
    const cuuint32_t box[2] = {box_inner, box_outer};
    const cuuint32_t estrides[2] = {1, 1};
    CUresult r = ge_encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box,
                                   estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, sizeof msg, "cuTensorMapEncodeTiled failed (error %d) for %llu x %llu, stride %llu", (int)r,
                 (unsigned long long)outer, (unsigned long long)inner, (unsigned long long)ld);
        ge_fail(what, msg);
    }
    return map;
}

int ge_out_map(CUtensorMap *map, const void *base, int elem_bytes, int M, int N, long ld) {
    if (((uintptr_t)base & 15) != 0 || (ld * elem_bytes) % 16 != 0 || ld < N || M <= 0 || N <= 0) return 0;
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * elem_bytes};
    const cuuint32_t box[2] = {32, 64};
    const cuuint32_t estrides[2] = {1, 1};
    CUresult r = ge_encode_tiled()(map, elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                   2, (void *)base, dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   elem_bytes == 4 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

int ge_sched_override = 0;
int ge_stream_hint = 0;
int ge_pdl = 0;
int ge_cluster = 0;
int ge_last_cluster = 0;

cudaLaunchConfig_t ge_launch_config(unsigned grid, unsigned block, size_t smem, cudaStream_t stream, int pdl,
                                    int cluster, cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 0;
    if (pdl) {
        attr[cfg.numAttrs] = cudaLaunchAttribute{};
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs++;
    }
    if (cluster > 1) {
        attr[cfg.numAttrs] = cudaLaunchAttribute{};
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs].val.clusterDim.x = cluster;
        attr[cfg.numAttrs].val.clusterDim.y = 1;
        attr[cfg.numAttrs].val.clusterDim.z = 1;
        cfg.numAttrs++;
    }
    return cfg;
}

/* Share of the SMs' time a schedule spends on useful tiles: M x N over (rounds x SMs x the tile area), where a round
 * is one tile per SM (cooperative 128 x 256) or one 128 x 128 tile per SM (ping-pong: its two consumers take turns
 * on the tensor cores, so an SM works through its tiles one after the other). */
static double wave_fill(int M, int N, int bn) {
    const long sms = ge_num_sms(), tiles = (long)((M + GE_BM - 1) / GE_BM) * ((N + bn - 1) / bn);
    const long rounds = (tiles + sms - 1) / sms;
    return (double)M * N / ((double)rounds * sms * GE_BM * bn);
}

/* The plain GEMMs' configuration (GE_CFG_*): cooperative 128 x 256, unless its tiles fill the waves clearly worse
 * than ping-pong's 128 x 128 ones (the QKV weight gradient, 3072 x 2048: 192 tiles for 132 SMs, 73% against 97%).
 * The larger tile moves fewer shared-memory and L2 bytes per flop; on an H100, which runs these GEMMs at its
 * 700 W power cap, that decided it: geomean 0.977x cuBLAS cooperative against 0.884x ping-pong over the 16
 * training shapes (large ones 0.96-1.01x against 0.64-0.80x); this choice 0.981-0.988x. On the H200 (also at
 * its cap when loaded for long) ping-pong reads 1.04x in short timings and this choice 1.00x, while sustained
 * the cooperative tile is as fast (16384 x 2048 x 2048) or 5% faster (16384 x 8192 x 8192); RESULTS.md
 * section 5, seventh step. */
static int pick_cfg(int M, int N) {
    if (ge_sched_override >= GE_CFG_COOP256 && ge_sched_override <= GE_CFG_PP128) return ge_sched_override;
    return wave_fill(M, N, 256) >= wave_fill(M, N, 128) - 0.05 ? GE_CFG_COOP256 : GE_CFG_PP128;
}

/* The fused programs' schedule: ping-pong 128 x 128, which overlaps one consumer's epilogue with the other's main
 * loop, except for large products (M N K >= 2^39, e.g. 16384 x 8192 x 8192), where the cooperative 128 x 256
 * tile's lower shared-memory and L2 traffic per flop wins at an H100's power cap (at 16384 x 8192 x 8192: K_res
 * without O 1.02-1.05x one cuBLAS GEMM against 1.17-1.23x, the row-scaled GEMM 1.00x against 1.30x; RESULTS.md
 * section 5, seventh step). ge_sched_override forces either. */
static int fused_pp(int M, int N, int K) {
    if (ge_sched_override == GE_CFG_COOP256 || ge_sched_override == GE_CFG_COOP128) return 0;
    if (ge_sched_override == GE_CFG_PP128) return 1;
    return (double)M * N * K < 549755813888.0; /* 2^39 */
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
static void run_layout_cfg(ge_layout l, const void *A, const void *B, int M, int N, int K,
                           const typename Program::Params &p, cudaStream_t s) {
    const long lda = lda_of(l, M, K), ldb = ldb_of(l, N, K);
    switch (l) {
    case GE_ABT: ge_run<Program, GE_ABT, BN, SCHED>(A, lda, B, ldb, M, N, K, p, s); break;
    case GE_AB: ge_run<Program, GE_AB, BN, SCHED>(A, lda, B, ldb, M, N, K, p, s); break;
    case GE_ATB: ge_run<Program, GE_ATB, BN, SCHED>(A, lda, B, ldb, M, N, K, p, s); break;
    default: ge_fail("ge_gemm", "unknown layout");
    }
}

template <class Program>
static void run_layout(ge_layout l, const void *A, const void *B, int M, int N, int K,
                       const typename Program::Params &p, cudaStream_t s) {
    switch (pick_cfg(M, N)) {
    case GE_CFG_COOP128: run_layout_cfg<Program, 128, GE_COOP>(l, A, B, M, N, K, p, s); break;
    case GE_CFG_PP128: run_layout_cfg<Program, 128, GE_PINGPONG>(l, A, B, M, N, K, p, s); break;
    default: run_layout_cfg<Program, 256, GE_COOP>(l, A, B, M, N, K, p, s); break;
    }
}

extern "C" void ge_gemm_bf16(ge_layout layout, const void *A, const void *B, void *C, int M, int N, int K,
                             cudaStream_t stream) {
    run_layout<GeStore<bf16, false>>(layout, A, B, M, N, K, {ge_out((bf16 *)C, M, N, N)}, stream);
}

extern "C" void ge_gemm_f32(ge_layout layout, const void *A, const void *B, float *C, int accumulate, int M, int N,
                            int K, cudaStream_t stream) {
    if (accumulate)
        run_layout<GeStore<float, true>>(layout, A, B, M, N, K, {ge_out(C, M, N, N)}, stream);
    else
        run_layout<GeStore<float, false>>(layout, A, B, M, N, K, {ge_out(C, M, N, N)}, stream);
}

/* A fused program on A . W^T (A [M,K], W [N,K]), on the schedule fused_pp picks: PP on ping-pong 128 x 128, COOP
 * (the same program for 256-wide tiles, with the same Params) on cooperative 128 x 256. */
template <class PP, class COOP>
static void run_fused(const void *A, const void *W, int M, int N, int K, const typename PP::Params &p,
                      cudaStream_t stream) {
    if (fused_pp(M, N, K))
        ge_run<PP, GE_ABT, 128, GE_PINGPONG>(A, K, W, K, M, N, K, p, stream);
    else
        ge_run<COOP, GE_ABT>(A, K, W, K, M, N, K, p, stream);
}

extern "C" int ge_row_parts(int N) { return (N + GE_PART_COLS - 1) / GE_PART_COLS; }

extern "C" void ge_gemm_res_norm(const void *A, const void *W, const void *res, const float *gamma, void *D, void *O,
                                 float *part, int M, int N, int K, cudaStream_t stream) {
    const GeResNormParams p = {ge_out((bf16 *)D, M, N, N), ge_out((bf16 *)O, M, N, N), (const bf16 *)res, gamma,
                               part, N, ge_row_parts(N), ge_out((bf16 *)res, M, N, N)};
    if (p.D.tma && p.R.tma) /* on ping-pong, the residual through shared memory (TMA), D in place over it */
        run_fused<GeResNormTma<128>, GeResNorm<>>(A, W, M, N, K, p, stream);
    else
        run_fused<GeResNorm<128>, GeResNorm<>>(A, W, M, N, K, p, stream);
}

extern "C" void ge_gemm_res_rms(const void *A, const void *W, const void *res, void *D, float *part, int M, int N,
                                int K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    const GeResNormParams p = {ge_out((bf16 *)D, M, N, N), {}, (const bf16 *)res, nullptr, part, N, ge_row_parts(N),
                               ge_out((bf16 *)res, M, N, N)};
    if (!p.D.tma || !p.R.tma)
        ge_fail("ge_gemm_res_rms", "D and res must be 16-byte aligned with N a multiple of 8 (TMA describes both)");
    run_fused<GeResNormTma<128, false>, GeResNormTma<GE_BN, false, 1>>(A, W, M, N, K, p, stream);
}

/* Thread x of a block owns columns 8 x' .. 8 x' + 7 (x' = x, x + blockDim, ...: 16 bytes of a row) and keeps
 * their gamma in registers; the blocks stride over the rows. */
static __global__ void ge_fold_gamma_kernel(const uint4 *W, const float *gamma, uint4 *Wg, int N, int K8) {
    for (int k8 = threadIdx.x; k8 < K8; k8 += blockDim.x) {
        float g[8];
#pragma unroll
        for (int q = 0; q < 8; q++) g[q] = gamma[8 * k8 + q];
#pragma unroll 4
        for (int n = blockIdx.x; n < N; n += gridDim.x) {
            uint4 w = W[(long)n * K8 + k8];
            __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&w);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float2 f = __bfloat1622float2(h[q]);
                h[q] = __floats2bfloat162_rn(f.x * g[2 * q], f.y * g[2 * q + 1]);
            }
            Wg[(long)n * K8 + k8] = w;
        }
    }
}

extern "C" void ge_fold_gamma(const void *W, const float *gamma, void *Wg, int N, int K, cudaStream_t stream) {
    if (N <= 0 || K <= 0) return;
    if (K % 8 != 0 || ((uintptr_t)W & 15) != 0 || ((uintptr_t)Wg & 15) != 0)
        ge_fail("ge_fold_gamma", "W and Wg must be 16-byte aligned with K a multiple of 8 (as a GEMM operand's rows)");
    const int K8 = K / 8, threads = K8 < 256 ? (K8 + 31) / 32 * 32 : 256, rows = 8 * ge_num_sms();
    ge_fold_gamma_kernel<<<N < rows ? N : rows, threads, 0, stream>>>((const uint4 *)W, gamma, (uint4 *)Wg, N, K8);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ge_fail("launch of ge_fold_gamma_kernel", cudaGetErrorString(e));
}

static __global__ void ge_rms_finish_kernel(const float *part, int nparts, int M, int N, float eps, float *r) {
    grid_dep_wait(); /* launched with PDL: K_res's partials are complete */
    grid_dep_launch();
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    float s = 0.0f;
    for (int t = 0; t < nparts; t++) s += part[(long)m * nparts + t];
    r[m] = rsqrtf(s / (float)N + eps);
}

extern "C" void ge_rms_finish(const float *part, int M, int N, float eps, float *r, cudaStream_t stream) {
    if (M <= 0) return;
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = ge_launch_config((M + 255) / 256, 256, 0, stream, ge_pdl, 1, attr);
    cudaError_t e = cudaLaunchKernelEx(&cfg, ge_rms_finish_kernel, part, ge_row_parts(N), M, N, eps, r);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) ge_fail("launch of ge_rms_finish_kernel", cudaGetErrorString(e));
}

extern "C" void ge_gemm_rowscale(const void *O, const void *W, const float *r, void *Z, int z_f32, int M, int N,
                                 int K, cudaStream_t stream) {
    if (z_f32)
        run_fused<GeRowScale<float>, GeRowScale<float>>(O, W, M, N, K, {r, ge_out((float *)Z, M, N, N)}, stream);
    else
        run_fused<GeRowScale<bf16>, GeRowScale<bf16>>(O, W, M, N, K, {r, ge_out((bf16 *)Z, M, N, N)}, stream);
}
