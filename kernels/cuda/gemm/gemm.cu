/* gemm.cu: host side of the GEMM-epilogue engine: gemm_maps.h's helpers (tensor maps by cuTensorMapEncodeTiled
 * through the runtime's driver entry point, so no -lcuda; the SM count, the failure path, the launch line) and
 * gemm.h's extern "C" launchers, which instantiate the engine with the program of gemm_programs.cuh. */
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

/* cuTensorMapEncodeTiled, looked up once. */
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
     * a row writes the padding up to the next 16 bytes (test_gemm's strided outputs check it: N = 777 in rows of
     * 784). */
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

int ge_num_sms(void) {
    static int n = 0;
    if (!n) {
        int dev = 0;
        cudaGetDevice(&dev);
        /* where the query fails: the count of an H100 SXM or an H200 */
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
    }
    return n;
}

void ge_print_launch(const char *op, int M, int N, int K, ge_config cfg, int stages, int buffers, int direct) {
    char name[64];
    fprintf(stderr, "gemm %s: M %d N %d K %d, %s, %d stages, %d staging buffers%s\n", op, M, N, K,
            ge_config_format(cfg, name, sizeof name), stages, buffers, direct ? ", direct stores" : "");
}

/* Packed row strides of the operands for a layout. */
static long lda_of(ge_layout l, int M, int K) { return l == GE_ATB ? M : K; }
static long ldb_of(ge_layout l, int N, int K) { return l == GE_ABT ? K : N; }

/* A plain program on op(A) . op(B) with the config of `how` (GE_AUTO: ge_pick's for a plain GEMM). */
template <class Program>
static void run_plain(ge_layout l, const void *A, long lda, const void *B, long ldb, int M, int N, int K,
                      const typename Program::Params &p, const ge_launch &how) {
    ge_dispatch<GE_CFG_ALL>(ge_config_of(how, GE_PLAIN, M, N, K), how.op, [&](auto cfg) {
        constexpr int BN = decltype(cfg)::kBN, SCHED = decltype(cfg)::kSched;
        switch (l) {
        case GE_ABT: ge_run<Program, GE_ABT, BN, SCHED>(A, lda, B, ldb, M, N, K, p, how); break;
        case GE_AB: ge_run<Program, GE_AB, BN, SCHED>(A, lda, B, ldb, M, N, K, p, how); break;
        case GE_ATB: ge_run<Program, GE_ATB, BN, SCHED>(A, lda, B, ldb, M, N, K, p, how); break;
        default: ge_fail(how.op, "unknown layout");
        }
    });
}

extern "C" void ge_gemm_bf16(ge_layout layout, const void *A, const void *B, void *C, int M, int N, int K,
                             ge_launch how) {
    run_plain<GeStore<bf16, false>>(layout, A, lda_of(layout, M, K), B, ldb_of(layout, N, K), M, N, K,
                                    {{ge_out((bf16 *)C, M, N, N)}}, how);
}

extern "C" void ge_gemm_f32_strided(ge_layout layout, const void *A, long lda, const void *B, long ldb, float *C,
                                    long ldc, int accumulate, int M, int N, int K, ge_launch how) {
    if (accumulate)
        run_plain<GeStore<float, true>>(layout, A, lda, B, ldb, M, N, K,
                                        {{ge_out_as<GeOut<float, 32, true>>(C, M, N, ldc)}}, how);
    else
        run_plain<GeStore<float, false>>(layout, A, lda, B, ldb, M, N, K, {{ge_out(C, M, N, ldc)}}, how);
}

extern "C" void ge_gemm_f32(ge_layout layout, const void *A, const void *B, float *C, int accumulate, int M, int N,
                            int K, ge_launch how) {
    ge_gemm_f32_strided(layout, A, lda_of(layout, M, K), B, ldb_of(layout, N, K), C, N, accumulate, M, N, K, how);
}

extern "C" int ge_row_parts(int N) { return (N + GE_PART_COLS - 1) / GE_PART_COLS; }
