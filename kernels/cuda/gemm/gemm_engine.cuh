/* gemm_engine.cuh: the GEMM-epilogue engine for sm_90a: one main loop (TMA into a ring of stages, wgmma, a producer
 * and two consumer warpgroups, persistent CTAs), any epilogue program. ge_run<Program, layout, BN, SCHED> computes
 * C = op(A) . op(B) with the program's epilogue on the accumulator tile; a program is a GeEpilogue
 * (gemm_program_decl.cuh; its primitives: gemm_epilogue.cuh) whose hooks, and those of the inputs it declares, the
 * kernel calls. How the kernel is laid out (schedules, shared memory, pipeline, the accumulator's fragments, the
 * hooks): docs/DESIGN.md, "Inside the engine's kernel". */
#ifndef GEMM_ENGINE_CUH
#define GEMM_ENGINE_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <type_traits>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_maps.h"
#include "kernels/cuda/gemm/gemm_program_decl.cuh"
#include "kernels/cuda/hopper/hopper_ptx.cuh"

#define GE_BM 128 /* tile rows: two m64 row blocks */
static_assert(GE_BM == GE_TILE_M, "ge_pick (gemm_config.c) counts tiles of GE_TILE_M rows");
#define GE_BN 256 /* the widest tile, and the one epilogue programs run with unless their launcher picks another */
#define GE_BK 64 /* k per ring stage: one 128-byte swizzle row of bf16 */
#define GE_GROUP_M 16 /* tile-rows per group of the grouped tile order (ge_tile_coords) */
#define GE_THREADS 384 /* three warpgroups: the producer and two consumers */
#define GE_SMEM_LIMIT 232448 /* dynamic shared memory a block can opt into on sm_90 (227 KB) */
/* Bytes of 64 rows (of M or N) of an operand's stage in either layout (K-major: 64 rows of GE_BK k; MN-major: one
 * TMA box of 64 x GE_BK): an MN-major operand's box i starts i * GE_PANEL_BYTES into the stage, and row block r of
 * A starts r * GE_PANEL_BYTES into it. */
#define GE_PANEL_BYTES (64 * GE_BK * 2)

/* ---------------------------------------------------------------- host helpers (gemm.cu; tensor maps in gemm_maps.h) */

/* An output for an epilogue program's Params: through TMA where the matrix allows it, else direct stores. */
template <class O>
O ge_out_as(typename O::Elem *p, int M, int N, long ld) {
    O o;
    memset(&o, 0, sizeof o);
    o.ptr = p;
    o.ld = ld;
    o.tma = ge_out_map(&o.map, p, (int)sizeof(typename O::Elem), O::kCols, M, N, ld);
    return o;
}
template <class T>
GeOut<T> ge_out(T *p, int M, int N, long ld) {
    return ge_out_as<GeOut<T>>(p, M, N, ld);
}

/* ---------------------------------------------------------------- the kernel */

/* Shared memory of one CTA for a program and tile width (the same on either schedule), in this order from a
 * 1024-byte aligned base (the o* offsets): the stage ring (as many stages as fit, at most 4 of 48 KB at BN = 256 or
 * 6 of 32 KB at BN = 128; A's stages, then B's), each consumer's GeOut staging (kBufs buffers of the program's
 * kStageUnits 4 KB units, 2 to 4 buffers), each consumer's column-vector scratch (GeColStage), the column-partial
 * scratch, each consumer's input-tile staging (GeTileInTma), the mbarriers. */
template <class Program, int BN>
struct GeSmem {
    static constexpr int kA = GE_BM * GE_BK * 2, kB = BN * GE_BK * 2, kStage = kA + kB;
    using In = GeInputsOf<Program>;
    static constexpr int kUnit = GE_UNIT_BYTES, kUnits = Program::kStageUnits;
    static constexpr int kVecPerConsumer = ((Program::kVecFloats + In::kVecFloats) * 4 + 127) / 128 * 128;
    static constexpr int kCol = Program::kColPartials ? 8 * BN * 4 : 0;
    static constexpr int kAvail = GE_SMEM_LIMIT - 1024 /* alignment slack */ - 256 /* barriers */;
    static constexpr int kInUnits = Program::kInUnits + In::kInUnits;
    static constexpr int kInPerConsumer = kInUnits * kUnit; /* GeTileInTma staging */
    /* what does not depend on the stages and buffers (the input staging aligned to 1024 bytes) */
    static constexpr int kFixed = kCol + 2 * kVecPerConsumer + (kInPerConsumer ? 2 * kInPerConsumer + 1024 : 0);
    static constexpr int kCap = BN == 256 ? 4 : 6;
    static constexpr int kMaxStages = Program::kMaxStages > 0 && Program::kMaxStages < kCap ? Program::kMaxStages : kCap;
    /* stages that fit beside two staging buffers per consumer; the buffers then take what the stages leave */
    static constexpr int kStagesFit = (kAvail - kFixed - 2 * 2 * kUnits * kUnit) / kStage;
    static constexpr int kStages = kStagesFit < kMaxStages ? kStagesFit : kMaxStages;
    static constexpr int kBufsFit = kUnits ? (kAvail - kFixed - kStages * kStage) / (2 * kUnits * kUnit) : 0;
    static constexpr int kBufs = kBufsFit > 4 ? 4 : kBufsFit;
    static constexpr int kEpiPerConsumer = kBufs * kUnits * kUnit;
    static constexpr int oB = kStages * kA, oEpi = kStages * kStage, oVec = oEpi + 2 * kEpiPerConsumer,
                         oCol = oVec + 2 * kVecPerConsumer, oIn = (oCol + kCol + 1023) / 1024 * 1024,
                         oBar = oIn + 2 * kInPerConsumer;
    static constexpr int kInBars = kInUnits > 0 ? kInUnits : 1; /* per consumer: one per unit */
    static constexpr int kBytes = 1024 + oBar + (2 * kStages + 2 + 2 * kInBars) * 8;
    static_assert(BN == 128 || BN == 256, "tile width 128 or 256");
    static_assert(kStages >= 2, "too little shared memory for two pipeline stages");
    static_assert(kUnits == 0 || kBufs >= 2, "too little shared memory for double-buffered GeOut staging");
    static_assert(kBytes <= GE_SMEM_LIMIT, "shared memory over the limit");
};

/* Tile u of the grouped order over Mt x Nt tiles -> (tm, tn): groups of `group` tile-rows, M fastest inside a group,
 * so that the tiles in flight share A's row panels and B's column panels in L2. */
__device__ __forceinline__ void ge_tile_coords(int u, int Mt, int Nt, int group, int &tm, int &tn) {
    const int per_group = group * Nt;
    const int g = u / per_group, first = g * group;
    const int gsize = min(Mt - first, group);
    const int r = u - g * per_group;
    tm = first + r % gsize;
    tn = r / gsize;
}

/* A consumer warp is done reading a stage: lane 0 tells the producer. */
__device__ __forceinline__ void ge_release_stage(uint64_t *empty, int lane) {
    if (lane == 0) mbar_arrive(empty);
}

/* The kernel: C = op(A) . op(B) in 128 x BN tiles with the epilogue Program run on each (A_MN / B_MN: that operand
 * is MN-major; DIRECT: GeOut outputs are stored from registers, not staged for TMA). Schedules (gemm_config.h):
 * GE_COOP: both consumers work on one 128 x BN tile (consumer c: rows 64c..64c+63), then both run its epilogue while
 * the tensor cores idle. GE_PINGPONG (BN = 128): consumer c owns whole tiles (the CTA's tiles c, c + 2, ...: two m64
 * row blocks each), so one consumer's epilogue runs while the other's main loop keeps the tensor cores busy; an
 * mbarrier per consumer makes the two main loops alternate (see the wait below). */
template <class Program, bool A_MN, bool B_MN, int BN, int SCHED, bool DIRECT>
__global__ void __launch_bounds__(GE_THREADS, 1)
    ge_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, int M, int N, int K,
              const __grid_constant__ typename Program::Params params) {
    if (Program::skip(params)) return;
    using L = GeSmem<Program, BN>;
    constexpr int S = L::kStages;
    constexpr bool PP = SCHED == GE_PINGPONG;
    constexpr int MB = PP ? 2 : 1; /* m64 row blocks per consumer */
    /* each chunk of the epilogue ends with issue_chunk: the program stages GeOut tiles or has GeTileInTma inputs */
    constexpr bool kFlush = L::kUnits > 0 || L::kInUnits > 0;
    static_assert(!PP || (BN == 128 && !Program::kColPartials), "ping-pong: 128 x 128 tiles, no column partials");
    extern __shared__ uint8_t ge_smem_raw[];
    uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(ge_smem_raw) + 1023) & ~uintptr_t(1023));
    uint8_t *sA = smem;
    uint8_t *sB = smem + L::oB;
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + L::oBar);
    uint64_t *empty = full + S;
    uint64_t *order = empty + S; /* ping-pong: order[c] completes a phase when consumer c ends a main loop */
    uint64_t *in_full = order + 2; /* consumer c's GeTileInTma slots: in_full[c * kInBars + q] */
    float *scratch = reinterpret_cast<float *>(smem + L::oCol);

    const int Mt = (M + GE_BM - 1) / GE_BM, Nt = (N + BN - 1) / BN;
    const int nk = (K + GE_BK - 1) / GE_BK;
    const int ntiles = Mt * Nt; /* CTA b takes tiles b, b + gridDim.x, ... */

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], PP ? 4 : 8); /* lane 0 of each warp of the consumer(s) reading the stage */
        }
        mbar_init(&order[0], 1);
        mbar_init(&order[1], 1);
        for (int q = 0; q < 2 * L::kInBars; q++) mbar_init(&in_full[q], 1);
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
            for (int u = blockIdx.x; u < ntiles; u += gridDim.x) {
                int tm, tn;
                ge_tile_coords(u, Mt, Nt, GE_GROUP_M, tm, tn);
                const int m0 = tm * GE_BM, n0 = tn * BN;
                for (int kb = 0; kb < nk; kb++) {
                    const int k0 = kb * GE_BK;
                    mbar_wait(&empty[s], phase ^ 1);
                    mbar_arrive_expect_tx(&full[s], L::kStage);
                    uint8_t *a = sA + s * L::kA, *b = sB + s * L::kB;
                    if (A_MN) {
#pragma unroll
                        for (int i = 0; i < GE_BM / 64; i++)
                            tma_load_2d(a + i * GE_PANEL_BYTES, &tmA, &full[s], m0 + 64 * i, k0);
                    } else {
                        tma_load_2d(a, &tmA, &full[s], k0, m0);
                    }
                    if (B_MN) {
#pragma unroll
                        for (int i = 0; i < BN / 64; i++)
                            tma_load_2d(b + i * GE_PANEL_BYTES, &tmB, &full[s], n0 + 64 * i, k0);
                    } else {
                        tma_load_2d(b, &tmB, &full[s], k0, n0);
                    }
                    if (++s == S) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        /* ---------------- consumer warpgroups: wgmma main loop, then the epilogue program */
        setmaxnreg_inc<232>();
        const int c = consumer_warpgroup(), wtid = threadIdx.x & 127, warp = wtid >> 5, lane = threadIdx.x & 31;
        const bool leader = wtid == 0;
        /* Descriptor constants: LBO (next 64 of M/N; unused by K-major) and the k16 step, per operand. */
        constexpr uint32_t a_lbo = A_MN ? GE_PANEL_BYTES : 16, b_lbo = B_MN ? GE_PANEL_BYTES : 16;
        constexpr uint32_t a_step = A_MN ? 2048 : 32, b_step = B_MN ? 2048 : 32;

        float acc[MB][BN / 2];
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
#pragma unroll
            for (int i = 0; i < BN / 2; i++) acc[mb][i] = 0.0f;

        /* The tile's fields that do not depend on the tile; the tile loop sets the others (j, out_slots: per chunk). */
        GeTile tile;
        tile.M = M;
        tile.N = N;
        tile.eng.lane = lane;
        tile.eng.cwarp = c * 4 + warp;
        tile.eng.ctid = c * 128 + wtid;
        tile.eng.ttid = PP ? wtid : c * 128 + wtid;
        tile.eng.tthreads = PP ? 128 : 256;
        tile.eng.col_scratch = Program::kColPartials ? scratch : nullptr;
        tile.eng.srow = 16 * warp + (lane >> 2);
        tile.eng.frag_off_bf16 = ge_stage_off((const bf16 *)nullptr, 16 * warp + (lane & 15), 0);
#pragma unroll
        for (int h = 0; h < 2; h++)
            tile.eng.frag_off_f32[h] = ge_stage_off((const float *)nullptr, tile.eng.srow + 8 * h, 2 * (lane & 3));
        tile.eng.out_slots = 0;
        tile.j = 0;
        tile.eng.bn = BN;
        tile.eng.nblk = MB;
        tile.eng.bar = PP ? 2 + c : 1;
        tile.eng.wtid = wtid;
        tile.eng.cbar = 2 + c;
        tile.eng.vec_scratch = smem_u32(smem + L::oVec + c * L::kVecPerConsumer);
        tile.eng.in_slots = smem_u32(smem + L::oIn + c * L::kInPerConsumer);
        tile.eng.in_bar = &in_full[c * L::kInBars];
        tile.eng.direct = DIRECT;
        const uint32_t stage_base = smem_u32(smem + L::oEpi + c * L::kEpiPerConsumer);
        int buf = 0; /* GeOut staging buffer of the next chunk */
        Program prog;
        /* A staged chunk's stores: the leader lets at most kBufs - 2 earlier chunks' stores still read their
         * buffers, so that the next chunk's buffer is free; the consumer syncs (its staging writes are done); the
         * leader issues the chunk's stores without waiting for them, as one bulk group. */
        auto issue_chunk = [&]() {
            fence_proxy_async_shared();
            if constexpr (L::kUnits > 0) {
                if (leader) bulk_wait_read<L::kBufs - 2>();
            }
            named_bar_sync(2 + c, 128); /* this consumer's own barrier, tile.eng.cbar */
            if (leader) {
                prog.inputs(params).flush(tile);
                prog.flush(params, tile);
                bulk_commit();
            }
            if constexpr (L::kUnits > 0) buf = buf + 1 == L::kBufs ? 0 : buf + 1;
        };

        /* the CTA's i-th tile (u = blockIdx.x + i * gridDim.x) is k-blocks i*nk .. i*nk + nk - 1 of the ring */
        for (int i = PP ? c : 0, u = blockIdx.x + i * gridDim.x; u < ntiles; i += PP ? 2 : 1, u = blockIdx.x + i * gridDim.x) {
            int tm, tn;
            ge_tile_coords(u, Mt, Nt, GE_GROUP_M, tm, tn);
            tile.tm = tm;
            tile.tn = tn;
            tile.m0 = tm * GE_BM;
            tile.n0 = tn * BN;
            tile.col0 = tile.n0 + 2 * (lane & 3);
            prog.inputs(params).prefetch(tile);
            prog.prefetch(params, tile);

            const long g0 = (long)i * nk;
            int s = (int)(g0 % S), prev = s;
            uint32_t phase = (uint32_t)((g0 / S) & 1);
            /* Ping-pong: start this main loop only once the other consumer has ended the main loop of tile i-1.
             * Then the producer has filled every k-block before this tile's, so a stage's full barrier is at most
             * one phase behind the one waited for (a parity wait cannot tell phase p from p-2), and the two main
             * loops alternate on the tensor cores while each epilogue overlaps the other consumer's main loop. */
            if (PP && i > 0) mbar_wait(&order[c ^ 1], (uint32_t)(((i - 1) >> 1) & 1));
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(&full[s], phase);
                const uint64_t da = wgmma_desc_sw128(sA + s * L::kA, a_lbo, 1024);
                const uint64_t db = wgmma_desc_sw128(sB + s * L::kB, b_lbo, 1024);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < GE_BK / 16; kk++) {
#pragma unroll
                    for (int mb = 0; mb < MB; mb++) {
                        /* this row block's 64 rows of A (GE_PANEL_BYTES apart in the stage, either layout) */
                        const uint64_t dam = da + ((((PP ? mb : c) * GE_PANEL_BYTES) + kk * a_step) >> 4);
                        const uint64_t dbk = db + ((kk * b_step) >> 4);
                        if constexpr (BN == 256)
                            wgmma_m64n256k16<A_MN, B_MN>(acc[mb], dam, dbk, (kb | kk) != 0);
                        else
                            wgmma_m64n128k16<A_MN, B_MN>(acc[mb], dam, dbk, (kb | kk) != 0);
                    }
                }
                wgmma_commit();
                wgmma_wait<1>();
                if (kb > 0) ge_release_stage(&empty[prev], lane);
                prog.inputs(params).during(tile, kb, nk);
                prog.during(params, tile, kb, nk);
                prev = s;
                if (++s == S) {
                    s = 0;
                    phase ^= 1;
                }
            }
            if (PP && leader) mbar_arrive(&order[c]);
            wgmma_wait<0>();
            ge_release_stage(&empty[prev], lane);
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int e = 0; e < BN / 2; e++) reg_fence(acc[mb][e]);

            /* The epilogue, per m64 row block, in chunks of 32 columns (4 fragments). After a chunk whose
             * program stages GeOut tiles or writes outputs in place of GeTileInTma inputs, one thread per
             * consumer issues the chunk's bulk stores (flush) without waiting for them; a staging buffer is
             * written again only after its last stores have read it (kBufs - 2 may pend; input slots are
             * reloaded only after all have, GeTileInTma::load). The row-block loop is not unrolled: ping-pong's
             * second row block is moved into acc[0] (64 register moves) and runs the same code, which halves
             * the epilogue's code; an epilogue runs once per tile, so its instructions are fetched afresh each
             * time, and a large one is fetch-bound and outlasts the other consumer's main loop (docs/DESIGN.md,
             * "Why the engine is shaped this way"). */
#pragma unroll 1
            for (int mb = 0; mb < MB; mb++) {
                tile.eng.crow0 = tile.m0 + 64 * (PP ? mb : c);
                tile.row[0] = tile.eng.crow0 + tile.eng.srow;
                tile.row[1] = tile.row[0] + 8;
                prog.begin(params, tile);
                prog.inputs(params).begin(tile);
#pragma unroll
                for (int q = 0; q < BN / 32; q++) {
                    tile.eng.chunk_col = tile.n0 + 32 * q;
                    if constexpr (L::kUnits > 0) tile.eng.out_slots = stage_base + buf * (L::kUnits * L::kUnit);
#pragma unroll
                    for (int jj = 0; jj < 4; jj++) {
                        const int j = 4 * q + jj;
                        tile.j = j;
                        float2 v[2] = {make_float2(acc[0][4 * j], acc[0][4 * j + 1]),
                                       make_float2(acc[0][4 * j + 2], acc[0][4 * j + 3])};
                        prog.frag(params, tile, tile.col0 + 8 * j, v);
                    }
                    if constexpr (kFlush) issue_chunk();
                }
                prog.end(params, tile);
                if constexpr (MB == 2) {
#pragma unroll
                    for (int e = 0; e < BN / 2; e++) acc[0][e] = acc[MB - 1][e];
                }
            }
        }
        if constexpr (kFlush) {
            if (leader) bulk_wait<0>();
        }
    }
}

/* ---------------------------------------------------------------- host launch */

/* "what: the CUDA error" in msg (a failure message of a launch). */
inline const char *ge_launch_error(const char *what, cudaError_t e, char *msg, size_t n) {
    snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return msg;
}

/* Launches one instantiation of the kernel for operation `op` (named by its failure messages): one CTA per tile, at
 * most one per SM (each CTA then takes every grid-th tile). */
template <class Program, bool A_MN, bool B_MN, int BN, int SCHED, bool DIRECT>
void ge_launch_kernel(const CUtensorMap &tmA, const CUtensorMap &tmB, int M, int N, int K,
                      const typename Program::Params &params, cudaStream_t stream, const char *op) {
    char msg[2048];
    constexpr int smem = GeSmem<Program, BN>::kBytes;
    auto kernel = ge_kernel<Program, A_MN, B_MN, BN, SCHED, DIRECT>;
    static bool configured = false; /* one per instantiation */
    if (!configured) {
        const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) ge_fail(op, ge_launch_error("cudaFuncSetAttribute(ge_kernel)", e, msg, sizeof msg));
        configured = true;
    }
    const long ntiles = (long)((M + GE_BM - 1) / GE_BM) * ((N + BN - 1) / BN);
    const int grid = (int)(ntiles < ge_num_sms() ? ntiles : ge_num_sms());
    cudaError_t e = cudaGetLastError(); /* an earlier call's error would otherwise be blamed on this launch */
    if (e != cudaSuccess)
        ge_fail(op, ge_launch_error("an earlier CUDA call failed (found before launching ge_kernel)", e, msg,
                                    sizeof msg));
    kernel<<<grid, GE_THREADS, smem, stream>>>(tmA, tmB, M, N, K, params);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(msg, sizeof msg, "launch of ge_kernel: %s (%d CTAs, %d bytes of shared memory; %s)",
                 cudaGetErrorString(e), grid, smem, __PRETTY_FUNCTION__);
        ge_fail(op, msg);
    }
}

/* Runs C = op(A) . op(B) with epilogue `Program`, tiles 128 x BN, schedule SCHED. lda / ldb are the operands' row
 * strides in elements (A is [M,K] or, for GE_ATB, [K,M]; B is [N,K] for GE_ABT, else [K,N]). Where an output
 * cannot be a TMA target (Program::direct), the direct-store instantiation runs, on the cooperative schedule
 * (one such instantiation per tile width: it is the rare case, e.g. a row of 2047 bf16). `how` gives the stream,
 * the operation's name for failure messages and whether the launch prints its line on stderr (its config is the
 * caller's: BN and SCHED). */
template <class Program, int LAYOUT, int BN = GE_BN, int SCHED = GE_COOP>
void ge_run(const void *A, long lda, const void *B, long ldb, int M, int N, int K,
            const typename Program::Params &params, const ge_launch &how) {
    constexpr bool A_MN = LAYOUT == GE_ATB, B_MN = LAYOUT != GE_ABT;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) ge_fail(how.op, "K must be at least 1");
    const CUtensorMap tmA = A_MN ? ge_tensor_map("A (M-major)", A, M, K, lda, 64, GE_BK)
                                 : ge_tensor_map("A (K-major)", A, K, M, lda, GE_BK, GE_BM);
    const CUtensorMap tmB = B_MN ? ge_tensor_map("B (N-major)", B, N, K, ldb, 64, GE_BK)
                                 : ge_tensor_map("B (K-major)", B, K, N, ldb, GE_BK, BN);
    const bool direct = Program::direct(params);
    if (how.print) {
        using L = GeSmem<Program, BN>;
        ge_print_launch(how.op, M, N, K, ge_config{BN, direct ? GE_COOP : (ge_schedule)SCHED}, L::kStages, L::kBufs,
                        direct);
    }
    if (direct)
        ge_launch_kernel<Program, A_MN, B_MN, BN, GE_COOP, true>(tmA, tmB, M, N, K, params, how.stream, how.op);
    else
        ge_launch_kernel<Program, A_MN, B_MN, BN, SCHED, false>(tmA, tmB, M, N, K, params, how.stream, how.op);
}

/* ---------------------------------------------------------------- the one dispatch */

/* Which configs a launch may take (a set of them): a program is instantiated for these only. */
enum { GE_CFG_COOP_256 = 1, GE_CFG_COOP_128 = 2, GE_CFG_PINGPONG_128 = 4, GE_CFG_ALL = 7 };

/* A config as types: what ge_dispatch hands to the launch it chooses (kBN, kSched as template arguments). */
template <int BN, int SCHED>
struct GeConfig {
    static constexpr int kBN = BN, kSched = SCHED;
};

/* The config of a launch: how.cfg, or ge_pick's for this kind and shape where it is GE_AUTO. */
inline ge_config ge_config_of(const ge_launch &how, ge_kind kind, int M, int N, int K) {
    return how.cfg.bn ? how.cfg : ge_pick(kind, M, N, K, ge_num_sms());
}

/* The one place a config value becomes a kernel: calls run(GeConfig<BN, SCHED>{}) for cfg, which must be one of
 * the set CFGS (the configs the caller's program is instantiated for; another one stops with a message naming the
 * operation op). */
template <int CFGS, class Run>
void ge_dispatch(ge_config cfg, const char *op, Run &&run) {
    if (cfg.bn == 256 && cfg.sched == GE_COOP) {
        if constexpr ((CFGS & GE_CFG_COOP_256) != 0) return run(GeConfig<256, GE_COOP>{});
    } else if (cfg.bn == 128 && cfg.sched == GE_COOP) {
        if constexpr ((CFGS & GE_CFG_COOP_128) != 0) return run(GeConfig<128, GE_COOP>{});
    } else if (cfg.bn == 128 && cfg.sched == GE_PINGPONG) {
        if constexpr ((CFGS & GE_CFG_PINGPONG_128) != 0) return run(GeConfig<128, GE_PINGPONG>{});
    }
    char name[64], msg[128];
    snprintf(msg, sizeof msg, "no kernel of its program for the config %s", ge_config_format(cfg, name, sizeof name));
    ge_fail(op, msg);
}

/* A fused program on A . W^T (A [M,K] row stride lda, W [N,K] row stride ldw) with the config of `how` (GE_AUTO:
 * ge_pick's for `kind`): PP on ping-pong 128 x 128, or COOP (the same program for 256-wide tiles, with the same
 * Params) on cooperative 128 x 256. (Cooperative 128 x 128 is not instantiated for the fused programs: ge_pick
 * never chooses it for them.) */
template <class PP, class COOP = PP>
void ge_run_fused(ge_kind kind, const void *A, long lda, const void *W, long ldw, int M, int N, int K,
                  const typename PP::Params &params, const ge_launch &how) {
    ge_dispatch<GE_CFG_PINGPONG_128 | GE_CFG_COOP_256>(ge_config_of(how, kind, M, N, K), how.op, [&](auto cfg) {
        using C = decltype(cfg);
        using Program = std::conditional_t<C::kSched == GE_PINGPONG, PP, COOP>;
        ge_run<Program, GE_ABT, C::kBN, C::kSched>(A, lda, W, ldw, M, N, K, params, how);
    });
}

#endif
