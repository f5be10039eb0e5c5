/* gemm_engine.cuh: the GEMM-epilogue engine for sm_90a (DESIGN §4): one main loop, any epilogue program.
 *
 * Design note
 * - Problem: C[M,N] = op(A) . op(B) in bf16 with fp32 accumulation, for the three storage layouts of gemm.h
 *   (GE_ABT: both operands K-major; GE_AB: B N-major; GE_ATB: both M/N-major). A "K-major" operand has K as its
 *   contiguous dimension; an MN-major one is read through wgmma's transposed descriptors (tnspA / tnspB = 1).
 * - Tiles: BM x BN x BK = 128 x 256 x 64. One CTA of 384 threads = 3 warpgroups: warpgroup 0 is the producer
 *   (one thread issues TMA loads; setmaxnreg.dec to 40 registers), warpgroups 1 and 2 are consumers (setmaxnreg.inc
 *   to 232), consumer c owning tile rows [64c, 64c + 64) and all 256 columns: per k16 step one
 *   wgmma.m64n256k16 per consumer, 4 per BK block.
 * - Shared memory: a ring of 4 stages, each A 128x64 (16 KB) + B 256x64 (32 KB), 128-byte swizzled as TMA writes
 *   it. K-major operands are rows of 64 k (128 B): one TMA box, descriptor SBO = 1024 (8 rows), k16 step = +32 B.
 *   MN-major operands are boxes of 64 (m or n) x 64 k, k rows of 128 B, one box per 64 of M/N stacked 8 KB apart:
 *   descriptor LBO = 8192 (next 64 of M/N), SBO = 1024 (next 8 k), k16 step = +2048 B. Either way consumer c's A
 *   rows start 8 KB into the stage. Out-of-bounds box elements are zero-filled by TMA, so ragged K is free.
 * - Pipeline: per stage a "full" mbarrier (producer arrive + TMA transaction bytes) and an "empty" mbarrier
 *   (8 arrivals: lane 0 of each consumer warp). A consumer keeps one k-block of wgmmas in flight: after committing
 *   block k it waits for block k-1 (wgmma.wait_group 1) and releases that block's stage.
 * - Schedule: persistent grid (one CTA per SM, or fewer if fewer tiles); CTA b handles tiles b, b + grid, ...
 *   Tile order is grouped along M (GE_GROUP_M tile-rows per group, M fastest inside a group) so that the CTAs in
 *   flight share A row-panels and B column-panels in L2. The producer runs up to 4 stages ahead, also into the
 *   next tile while the consumers run the epilogue. No cluster multicast (not yet measured to pay).
 * - Accumulator layout (the wgmma D fragment): consumer thread (warp w of its warpgroup, lane l) holds
 *   acc[4j + 2h + e] = C[m0 + 64c + 16w + l/4 + 8h][n0 + 8j + 2(l%4) + e], j = 0..31, h = 0..1, e = 0..1.
 *   So a thread holds two rows and, per n8 block j, an adjacent column pair (2i, 2i+1): a "fragment".
 * - Epilogue programs: a struct deriving from GeEpilogue (gemm_epilogue.cuh) with a Params struct (passed by value
 *   to the kernel) and the hooks begin(p, tile), frag(p, tile, col, float2 (&v)[2]) (v[h] = the pair at rows
 *   tile.row[h], columns col and col + 1), end(p, tile). The kernel calls begin, frag for j = 0..31, end, once
 *   per tile and consumer thread, after the main loop. The hooks compose the five primitives of
 *   gemm_epilogue.cuh; the main loop never changes. kColPartials = true reserves 8 KB of shared scratch for
 *   per-column partial reductions. Example (the plain GEMM): frag() { for h: ge_store(p.C, p.ldc, t, h, col, v[h]); }
 * - Host: ge_run<Program, layout>(A, lda, B, ldb, M, N, K, params, stream) builds the two CUtensorMaps
 *   (cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion: no -lcuda) and launches.
 */
#ifndef GEMM_ENGINE_CUH
#define GEMM_ENGINE_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_epilogue.cuh"
#include "kernels/cuda/gemm/gemm_ptx.cuh"

#define GE_BM 128
#define GE_BN 256
#define GE_BK 64
#define GE_STAGES 4
#define GE_GROUP_M 16
#define GE_THREADS 384

/* ---------------------------------------------------------------- host helpers (gemm.cu) */

/* A 2-D bf16 tensor map of `outer` rows of `inner` elements (row stride ld elements), box box_inner x box_outer,
 * 128-byte swizzle, zero fill. `what` names the operand in the error message if TMA cannot describe it. */
CUtensorMap ge_tensor_map(const char *what, const void *base, uint64_t inner, uint64_t outer, uint64_t ld,
                          uint32_t box_inner, uint32_t box_outer);
int ge_num_sms(void);
void ge_fail(const char *what, const char *detail);

/* ---------------------------------------------------------------- the kernel */

constexpr int GE_A_STAGE = GE_BM * GE_BK * 2;  /* 16 KB */
constexpr int GE_B_STAGE = GE_BN * GE_BK * 2;  /* 32 KB */
constexpr int GE_MN_BOX = 64 * GE_BK * 2;      /* one 64 x 64 box of an MN-major operand: 8 KB */

template <class Program>
constexpr int ge_smem_bytes() {
    return 1024 /* alignment slack */ + GE_STAGES * (GE_A_STAGE + GE_B_STAGE) + 2 * GE_STAGES * 8 +
           (Program::kColPartials ? 8 * GE_BN * 4 : 0);
}

/* Tile t of the grouped order -> (tm, tn). */
__device__ __forceinline__ void ge_tile_coords(int t, int Mt, int Nt, int &tm, int &tn) {
    const int per_group = GE_GROUP_M * Nt;
    const int g = t / per_group, first = g * GE_GROUP_M;
    const int gsize = min(Mt - first, GE_GROUP_M);
    const int r = t - g * per_group;
    tm = first + r % gsize;
    tn = r / gsize;
}

template <class Program, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(GE_THREADS, 1)
    ge_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, int M, int N, int K,
              const __grid_constant__ typename Program::Params params) {
    extern __shared__ uint8_t ge_smem_raw[];
    uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(ge_smem_raw) + 1023) & ~uintptr_t(1023));
    uint8_t *sA = smem;
    uint8_t *sB = smem + GE_STAGES * GE_A_STAGE;
    uint64_t *full = reinterpret_cast<uint64_t *>(sB + GE_STAGES * GE_B_STAGE);
    uint64_t *empty = full + GE_STAGES;
    float *scratch = reinterpret_cast<float *>(empty + GE_STAGES);

    const int Mt = (M + GE_BM - 1) / GE_BM, Nt = (N + GE_BN - 1) / GE_BN;
    const int ntiles = Mt * Nt, nk = (K + GE_BK - 1) / GE_BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GE_STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (threadIdx.x < 128) {
        /* ---------------- producer warpgroup: one thread streams A and B k-blocks into the stage ring */
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            tma_prefetch_desc(&tmA);
            tma_prefetch_desc(&tmB);
            int s = 0;
            uint32_t phase = 0;
            for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
                int tm, tn;
                ge_tile_coords(t, Mt, Nt, tm, tn);
                const int m0 = tm * GE_BM, n0 = tn * GE_BN;
                for (int kb = 0; kb < nk; kb++) {
                    const int k0 = kb * GE_BK;
                    mbar_wait(&empty[s], phase ^ 1);
                    mbar_arrive_expect_tx(&full[s], GE_A_STAGE + GE_B_STAGE);
                    uint8_t *a = sA + s * GE_A_STAGE, *b = sB + s * GE_B_STAGE;
                    if (A_MN) {
#pragma unroll
                        for (int i = 0; i < GE_BM / 64; i++) tma_load_2d(a + i * GE_MN_BOX, &tmA, &full[s], m0 + 64 * i, k0);
                    } else {
                        tma_load_2d(a, &tmA, &full[s], k0, m0);
                    }
                    if (B_MN) {
#pragma unroll
                        for (int i = 0; i < GE_BN / 64; i++) tma_load_2d(b + i * GE_MN_BOX, &tmB, &full[s], n0 + 64 * i, k0);
                    } else {
                        tma_load_2d(b, &tmB, &full[s], k0, n0);
                    }
                    if (++s == GE_STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        /* ---------------- consumer warpgroups: wgmma main loop, then the epilogue program */
        setmaxnreg_inc<232>();
        const int c = threadIdx.x / 128 - 1;
        const int wtid = threadIdx.x & 127, warp = wtid >> 5, lane = threadIdx.x & 31;
        /* Descriptor constants: LBO (next 64 of M/N; unused by K-major) and the k16 step, per operand. */
        constexpr uint32_t a_lbo = A_MN ? GE_MN_BOX : 16, b_lbo = B_MN ? GE_MN_BOX : 16;
        constexpr uint32_t a_step = A_MN ? 2048 : 32, b_step = B_MN ? 2048 : 32;

        float acc[GE_BN / 2];
#pragma unroll
        for (int i = 0; i < GE_BN / 2; i++) acc[i] = 0.0f;

        GeTile tile;
        tile.M = M;
        tile.N = N;
        tile.lane = lane;
        tile.cwarp = c * 4 + warp;
        tile.ctid = c * 128 + wtid;
        tile.smem = Program::kColPartials ? scratch : nullptr;
        Program prog;

        int s = 0, prev = 0;
        uint32_t phase = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            int tm, tn;
            ge_tile_coords(t, Mt, Nt, tm, tn);
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(&full[s], phase);
                const uint64_t da = wgmma_desc_sw128(sA + s * GE_A_STAGE + c * 8192, a_lbo, 1024);
                const uint64_t db = wgmma_desc_sw128(sB + s * GE_B_STAGE, b_lbo, 1024);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < GE_BK / 16; kk++)
                    wgmma_m64n256k16<A_MN, B_MN>(acc, da + ((kk * a_step) >> 4), db + ((kk * b_step) >> 4),
                                                 (kb | kk) != 0);
                wgmma_commit();
                wgmma_wait<1>();
                if (kb > 0 && lane == 0) mbar_arrive(&empty[prev]);
                prev = s;
                if (++s == GE_STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
            if (lane == 0) mbar_arrive(&empty[prev]);
#pragma unroll
            for (int i = 0; i < GE_BN / 2; i++) reg_fence(acc[i]);

            tile.tm = tm;
            tile.tn = tn;
            tile.m0 = tm * GE_BM;
            tile.n0 = tn * GE_BN;
            tile.row[0] = tile.m0 + 64 * c + 16 * warp + (lane >> 2);
            tile.row[1] = tile.row[0] + 8;
            tile.col0 = tile.n0 + 2 * (lane & 3);
            prog.begin(params, tile);
#pragma unroll
            for (int j = 0; j < GE_BN / 8; j++) {
                float2 v[2] = {make_float2(acc[4 * j], acc[4 * j + 1]), make_float2(acc[4 * j + 2], acc[4 * j + 3])};
                prog.frag(params, tile, tile.col0 + 8 * j, v);
            }
            prog.end(params, tile);
        }
    }
}

/* ---------------------------------------------------------------- host launch */

/* Runs C = op(A) . op(B) with epilogue `Program` on `stream`. lda / ldb are the operands' row strides in elements
 * (A is [M,K] or, for GE_ATB, [K,M]; B is [N,K] for GE_ABT, else [K,N]). */
template <class Program, int LAYOUT>
void ge_run(const void *A, long lda, const void *B, long ldb, int M, int N, int K,
            const typename Program::Params &params, cudaStream_t stream) {
    constexpr bool A_MN = LAYOUT == GE_ATB, B_MN = LAYOUT != GE_ABT;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) ge_fail("ge_run", "K must be at least 1");
    const CUtensorMap tmA = A_MN ? ge_tensor_map("A (M-major)", A, M, K, lda, 64, GE_BK)
                                 : ge_tensor_map("A (K-major)", A, K, M, lda, GE_BK, GE_BM);
    const CUtensorMap tmB = B_MN ? ge_tensor_map("B (N-major)", B, N, K, ldb, 64, GE_BK)
                                 : ge_tensor_map("B (K-major)", B, K, N, ldb, GE_BK, GE_BN);
    constexpr int smem = ge_smem_bytes<Program>();
    auto kernel = ge_kernel<Program, A_MN, B_MN>;
    static bool configured = false; /* one per instantiation */
    if (!configured) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) ge_fail("cudaFuncSetAttribute(ge_kernel)", cudaGetErrorString(e));
        configured = true;
    }
    const long ntiles = (long)((M + GE_BM - 1) / GE_BM) * ((N + GE_BN - 1) / GE_BN);
    const int grid = (int)(ntiles < ge_num_sms() ? ntiles : ge_num_sms());
    kernel<<<grid, GE_THREADS, smem, stream>>>(tmA, tmB, M, N, K, params);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ge_fail("launch of ge_kernel", cudaGetErrorString(e));
}

#endif
