/* bench_gemm.cu: the GEMM-epilogue engine against cuBLAS on the same GPU, in one invocation:
 * 1. the Llama-3.2-1B training GEMMs with M = 8192 tokens (forward A.B^T bf16 out, data gradient A.B bf16 out,
 *    weight gradient A^T.B fp32 accumulate) and 8192^3: TFLOP/s of each, ratio, geometric mean, on the default
 *    schedule (ge_pick's choice per shape);
 * 2. epilogue overhead: plain vs one extra output tile + a row partial reduction (staged, or stored directly), and
 *    vs the full K_res program, on either schedule; (sections "e", "E" and "k", on request:
 *    the extra-tile epilogue on ping-pong and cooperative, and K_res on ping-pong, split into their parts);
 * 3. GEMM-residual-RMSNorm-GEMM on 16384 rows (D = 2048, 4096, 8192): the two bare cuBLAS GEMMs, cuBLAS + simple
 *    separate kernels, and ours: K_res + r + row-scaled GEMM on the cooperative and the ping-pong schedule (the
 *    default, ge_pick's, named), and its parts. scripts/bench_gemm_torch.py times torch.compile.
 * Environment: GE_BENCH_SECTIONS picks sections (default "123"; also "c" and "p": section 1 on cooperative
 * 128 x 256 or ping-pong 128 x 128 throughout; "e", "E", "k": section 2's diagnostics); GE_BENCH_D=n runs section
 * 3 for D = n only; GE_BENCH_ONE=F runs only variant F of sections "e" and "E". --help prints this.
 * Each time is timed by bench_timing.h's method (the same as the PyTorch benchmarks'), on random data, rotating
 * among input sets where one set would fit in L2; what a table compares is timed in turns. Before timing, each
 * product is compared with cuBLAS (rel err column). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/fused/fused_coda.h"
#include "kernels/cuda/fused/fused_programs.cuh"
#include "kernels/cuda/gemm/gemm_engine.cuh"
#include "kernels/cuda/gemm/gemm_programs.cuh"
#include "tests/gpu/bench_timing.h"


static cublasHandle_t blas;
/* ge_run's launch for the engine kernels run directly (default stream; the config is ge_run's template arguments) */
static const ge_launch BENCH_LAUNCH = {GE_AUTO, 0, "bench_gemm", 0};
static const size_t ROTATE_BYTES = 256ull << 20; /* rotate input sets until their total passes this (L2: 50 MB) */

/* ---------------------------------------------------------------- device helpers */

static __global__ void fill_kernel(bf16 *p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = __float2bfloat16(scale * ((float)(z >> 40) * 0x1.0p-24f * 2.0f - 1.0f));
    }
}
static void *rand_bf16(size_t n, float scale) {
    static uint64_t seed = 12345;
    void *p;
    CK(cudaMalloc(&p, n * 2));
    fill_kernel<<<1024, 256>>>((bf16 *)p, n, seed += 0x51ED27, scale);
    CK(cudaGetLastError());
    return p;
}
static __global__ void fill_f32_kernel(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}
static float *const_f32(size_t n, float v) {
    float *p;
    CK(cudaMalloc(&p, n * 4));
    fill_f32_kernel<<<1024, 256>>>(p, n, v);
    CK(cudaGetLastError());
    return p;
}

/* sum (a-b)^2 and sum b^2 over n elements of two bf16 or fp32 arrays */
template <class T>
static __global__ void err_kernel(const T *a, const T *b, size_t n, double *acc) {
    double num = 0, den = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const double x = (double)(float)a[i], y = (double)(float)b[i];
        num += (x - y) * (x - y), den += y * y;
    }
    for (int o = 16; o > 0; o >>= 1) num += __shfl_xor_sync(~0u, num, o), den += __shfl_xor_sync(~0u, den, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&acc[0], num), atomicAdd(&acc[1], den);
}
template <class T>
static double rel_err(const T *a, const T *b, size_t n) {
    double *d, h[2];
    CK(cudaMalloc(&d, 16));
    CK(cudaMemset(d, 0, 16));
    err_kernel<<<1024, 256>>>(a, b, n, d);
    CK(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    return h[1] > 0 ? sqrt(h[0] / h[1]) : sqrt(h[0]);
}

/* Random bf16 operand sets A [na], B [nb] (and R [nr], a residual, where nr > 0), as many as it takes for their A
 * and B to pass ROTATE_BYTES (at most 16), so that rotating among them keeps each call's operands out of L2. */
struct InputSets {
    int n = 1;
    std::vector<void *> A, B, R;
    InputSets(size_t na, size_t nb, size_t nr = 0) {
        while (n < 16 && n * (na + nb) * 2 < ROTATE_BYTES) n++;
        for (int i = 0; i < n; i++) {
            A.push_back(rand_bf16(na, 1.0f)), B.push_back(rand_bf16(nb, 1.0f));
            if (nr) R.push_back(rand_bf16(nr, 1.0f));
        }
    }
    ~InputSets() {
        for (void *p : A) CK(cudaFree(p));
        for (void *p : B) CK(cudaFree(p));
        for (void *p : R) CK(cudaFree(p));
    }
};

/* cuBLAS C (row-major [M,N]) = op(A) . op(B) (+ beta C), as the column-major product C^T. */
static void cublas_gemm(ge_layout l, const void *A, const void *B, void *C, cudaDataType_t ct, int M, int N, int K,
                        float beta) {
    const float alpha = 1.0f;
    if (l == GE_ABT)
        CB(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &beta,
                        C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else if (l == GE_AB)
        CB(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K, &beta,
                        C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        CB(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &alpha, B, CUDA_R_16BF, N, A, CUDA_R_16BF, M, &beta,
                        C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* ---------------------------------------------------------------- 1. the training shapes */

struct Shape {
    const char *name;
    ge_layout l;
    int M, N, K;
};

static std::vector<double> ratios; /* ours / cuBLAS */

/* A launch on the default stream with config c. */
static ge_launch on(ge_config c) {
    const ge_launch how = {c, 0, "bench_gemm", 0};
    return how;
}

static void bench_shape(const Shape &s, ge_config sched) {
    const bool f32 = s.l == GE_ATB; /* weight gradients: fp32, accumulated */
    const size_t na = (size_t)s.M * s.K, nb = (size_t)s.N * s.K, nc = (size_t)s.M * s.N;
    const InputSets in(na, nb);
    const auto &A = in.A, &B = in.B;
    const int nset = in.n;
    void *C1, *C2;
    CK(cudaMalloc(&C1, nc * (f32 ? 4 : 2)));
    CK(cudaMalloc(&C2, nc * (f32 ? 4 : 2)));

    auto ours = [&](int i) {
        if (f32)
            ge_gemm_f32(s.l, A[i % nset], B[i % nset], (float *)C1, 1, s.M, s.N, s.K, on(sched));
        else
            ge_gemm_bf16(s.l, A[i % nset], B[i % nset], C1, s.M, s.N, s.K, on(sched));
    };
    auto theirs = [&](int i) {
        cublas_gemm(s.l, A[i % nset], B[i % nset], C2, f32 ? CUDA_R_32F : CUDA_R_16BF, s.M, s.N, s.K, f32 ? 1.0f : 0.0f);
    };
    /* correctness first: one product each from zeroed outputs */
    CK(cudaMemset(C1, 0, nc * (f32 ? 4 : 2)));
    CK(cudaMemset(C2, 0, nc * (f32 ? 4 : 2)));
    ours(0);
    theirs(0);
    CK(cudaDeviceSynchronize());
    const double err = f32 ? rel_err((const float *)C1, (const float *)C2, nc) : rel_err((const bf16 *)C1, (const bf16 *)C2, nc);

    const std::vector<double> t = bt_time_each({ours, theirs});
    const double flop = 2.0 * s.M * s.N * s.K;
    const double tf_ours = flop / t[0] * 1e-9, tf_blas = flop / t[1] * 1e-9;
    ratios.push_back(tf_ours / tf_blas);
    const ge_config ran = sched.bn ? sched : ge_pick(GE_PLAIN, s.M, s.N, s.K, ge_num_sms());
    printf("%-22s %-6s %6d %6d %6d %-9s %-8s %8.1f %8.1f %6.3f %8.1e\n", s.name,
           s.l == GE_ABT ? "A.B^T" : s.l == GE_AB ? "A.B" : "A^T.B", s.M, s.N, s.K, f32 ? "f32 +=" : "bf16",
           ran.sched == GE_PINGPONG ? "pp128" : ran.bn == 256 ? "coop256" : "coop128", tf_ours, tf_blas,
           tf_ours / tf_blas, err);
    fflush(stdout);
    CK(cudaFree(C1));
    CK(cudaFree(C2));
}

/* ---------------------------------------------------------------- 2. epilogue overhead */

/* The outputs of the extra-tile programs: C, a second tile C2, the row partials. */
struct ExtraTileParams {
    GeOut<bf16> C, C2;
    float *part;
    long ldpart;
};
/* The extra-tile epilogue split into its parts (F bits): 1 stage a second tile in shared memory (unit 1), 2 store
 * it from there by TMA, 4 store it straight from registers instead, 8 the row partial, 16 a second TMA store of
 * unit 0 (TMA work without the shared-memory writes), 32 the same into C itself (the same L2 lines twice: no
 * more DRAM writes). The first output C is always staged and stored by TMA. */
template <int F>
struct EpiParts : GeEpilogue {
    static constexpr int kStageUnits = (F & 1) ? 2 : 1;
    using Params = ExtraTileParams;
    static bool direct(const Params &p) { return !p.C.tma || ((F & 3) && !p.C2.tma); }
    GeRowPartial<GeSum> ss;
    __device__ __forceinline__ void begin(const Params &, const GeTile &) { ss.reset(); }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        float2 d[2] = {v[0], v[1]};
        ge_out_put(p.C, t, 0, col, d);
        /* the second tile: d again (bf16 already), put from a copy whose value as stored goes unused, as a
         * program's second output usually does (K_res's O) */
        float2 d2[2] = {d[0], d[1]};
        if (F & 1) ge_out_put(p.C2, t, 1, col, d2);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (F & 4) ge_store(p.C2.ptr, p.C2.ld, t, h, col, d[h]);
            if (F & 8) ss.add(t, h, col, ge_mul(d[h], d[h]));
        }
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) {
        ge_out_flush(p.C, t, 0);
        if (F & 2) ge_out_flush(p.C2, t, 1);
        if (F & 16) ge_out_flush(p.C2, t, 0);
        if (F & 32) ge_out_flush(p.C, t, 0);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) {
        if (F & 8) ss.store(p.part, p.ldpart, t);
    }
};

/* A program with its ring capped at S stages. */
template <class P, int S>
struct RingCap : P {
    static constexpr int kMaxStages = S;
};

/* The program of section 2's target: a second bf16 tile (a copy of D) and the row partial sum of squares, the
 * second tile staged and stored in the epilogue (either schedule). With outputs that TMA does not store (tma = 0)
 * it is the engine's first epilogue (stores straight from registers), for comparison. */
using ExtraTileRowPartial = EpiParts<11>;

static void bench_epilogue(int M, int N, int K) {
    const size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    const InputSets in(na, nb, nc);
    const auto &A = in.A, &B = in.B, &R = in.R;
    const int nset = in.n;
    void *C, *C2, *O;
    float *part, *gamma = const_f32(N, 1.0f);
    CK(cudaMalloc(&C, nc * 2));
    CK(cudaMalloc(&C2, nc * 2));
    CK(cudaMalloc(&O, nc * 2));
    CK(cudaMalloc(&part, (size_t)M * ((N + 127) / 128) * 4));
    const ExtraTileParams pc = {ge_out((bf16 *)C, M, N, N), ge_out((bf16 *)C2, M, N, N), part, (N + 127) / 128},
                          pp = pc;
    ExtraTileParams pd = pc;
    pd.C.tma = pd.C2.tma = 0; /* stored straight from registers */
    auto kres = [&](int i, ge_config sched) {
        fused_gemm_res_norm(A[i % nset], B[i % nset], R[i % nset], gamma, C, O, part, M, N, K, on(sched));
    };
    using Plain = GeStore<bf16, false>;
    const std::vector<double> t = bt_time_each({
        /* cooperative 128 x 256 (as many ring stages as fit: 4 plain, 4 with the extra tile, which leaves room for
         * 2 staging buffers per consumer) */
        [&](int i) { ge_run<Plain, GE_ABT>(A[i % nset], K, B[i % nset], K, M, N, K, {{pc.C}}, BENCH_LAUNCH); },
        [&](int i) { ge_run<ExtraTileRowPartial, GE_ABT>(A[i % nset], K, B[i % nset], K, M, N, K, pc, BENCH_LAUNCH); },
        [&](int i) { kres(i, GE_COOP_256); },
        /* the same with the ring capped at 3 stages: 4 staging buffers for the extra tile */
        [&](int i) { ge_run<RingCap<Plain, 3>, GE_ABT>(A[i % nset], K, B[i % nset], K, M, N, K, {{pc.C}}, BENCH_LAUNCH); },
        [&](int i) { ge_run<RingCap<ExtraTileRowPartial, 3>, GE_ABT>(A[i % nset], K, B[i % nset], K, M, N, K, pc, BENCH_LAUNCH); },
        /* ping-pong 128 x 128 (row partials per 128 columns) */
        [&](int i) { ge_run<Plain, GE_ABT, 128, GE_PINGPONG>(A[i % nset], K, B[i % nset], K, M, N, K, {{pp.C}}, BENCH_LAUNCH); },
        [&](int i) { ge_run<ExtraTileRowPartial, GE_ABT, 128, GE_PINGPONG>(A[i % nset], K, B[i % nset], K, M, N, K, pp, BENCH_LAUNCH); },
        [&](int i) { kres(i, GE_PINGPONG_128); },
        /* the first version's epilogue: stores straight from registers (cooperative) */
        [&](int i) { ge_run<Plain, GE_ABT>(A[i % nset], K, B[i % nset], K, M, N, K, {{pd.C}}, BENCH_LAUNCH); },
        [&](int i) { ge_run<ExtraTileRowPartial, GE_ABT>(A[i % nset], K, B[i % nset], K, M, N, K, pd, BENCH_LAUNCH); },
    });
    const struct { const char *what; int plain, extra, kres; } row[] = {
        {"cooperative 128x256 ", 0, 1, 2},
        {"cooperative, 3 stages", 3, 4, -1}, {"ping-pong 128x128    ", 5, 6, 7},
        {"direct stores (first version's), cooperative 128x256", 8, 9, -1}};
    for (auto &r : row) {
        printf("%6d %6d %6d   %s: plain %7.3f ms   +tile+row partial %7.3f ms (%+5.1f%%)", M, N, K, r.what,
               t[r.plain], t[r.extra], 100.0 * (t[r.extra] / t[r.plain] - 1));
        if (r.kres >= 0) printf("   K_res %7.3f ms (%+5.1f%%)", t[r.kres], 100.0 * (t[r.kres] / t[r.plain] - 1));
        printf("\n");
    }
    fflush(stdout);
    CK(cudaFree(C)); CK(cudaFree(C2)); CK(cudaFree(O)); CK(cudaFree(part)); CK(cudaFree(gamma));
}

/* ---------------------------------------------------------------- 2e, 2E. the extra-tile epilogue in parts */

template <int F, int BN, int SCHED>
static void epi_variant(const char *name, int M, int N, int K, const std::vector<void *> &A,
                        const std::vector<void *> &B, int nset, const ExtraTileParams &p) {
    const char *one = getenv("GE_BENCH_ONE");
    if (one && atoi(one) != F) return;
    using P = EpiParts<F>;
    using L = GeSmem<P, BN>;
    const std::vector<double> t = bt_time_each(
        {[&](int i) { ge_run<GeStore<bf16, false>, GE_ABT, BN, SCHED>(A[i % nset], K, B[i % nset], K, M, N, K, {{p.C}}, BENCH_LAUNCH); },
         [&](int i) { ge_run<P, GE_ABT, BN, SCHED>(A[i % nset], K, B[i % nset], K, M, N, K, p, BENCH_LAUNCH); }});
    const double t0 = t[0], t1 = t[1];
    const double r = t1 / t0;
    printf("  %2d %-40s stages %d, %d staging buffers of %d KB: plain %7.3f ms, this %7.3f ms (%+5.1f%%)\n", F, name,
           L::kStages, L::kBufs, 4 * L::kUnits, t0, t1, 100.0 * (r - 1));
    fflush(stdout);
}

template <int BN, int SCHED>
static void bench_epilogue_variants(int M, int N, int K) {
    const size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    const InputSets in(na, nb);
    const auto &A = in.A, &B = in.B;
    const int nset = in.n;
    void *C, *C2;
    float *part;
    CK(cudaMalloc(&C, nc * 2));
    CK(cudaMalloc(&C2, nc * 2));
    CK(cudaMalloc(&part, (size_t)M * ((N + 127) / 128) * 4));
    const ExtraTileParams p = {ge_out((bf16 *)C, M, N, N), ge_out((bf16 *)C2, M, N, N), part, (N + 127) / 128};
    printf("%6d %6d %6d   %s, each variant timed alternately with the plain GEMM\n", M, N, K,
           SCHED == GE_PINGPONG ? "ping-pong 128x128" : "cooperative 128x256");
    epi_variant<0, BN, SCHED>("plain (against itself)", M, N, K, A, B, nset, p);
    epi_variant<8, BN, SCHED>("row partial", M, N, K, A, B, nset, p);
    epi_variant<1, BN, SCHED>("tile staged, not stored", M, N, K, A, B, nset, p);
    epi_variant<16, BN, SCHED>("unit 0 stored twice (TMA only)", M, N, K, A, B, nset, p);
    epi_variant<32, BN, SCHED>("unit 0 stored twice to C (L2 only)", M, N, K, A, B, nset, p);
    epi_variant<4, BN, SCHED>("tile stored from registers", M, N, K, A, B, nset, p);
    epi_variant<3, BN, SCHED>("tile staged + TMA", M, N, K, A, B, nset, p);
    epi_variant<11, BN, SCHED>("tile staged + TMA + row partial", M, N, K, A, B, nset, p);
    epi_variant<12, BN, SCHED>("tile from registers + row partial", M, N, K, A, B, nset, p);
    CK(cudaFree(C)); CK(cudaFree(C2)); CK(cudaFree(part));
}

/* ---------------------------------------------------------------- 2k. K_res on ping-pong, parts left out */

/* FusedResNormTma with parts left out (F bits): 1 the residual added, 2 the residual loaded (TMA into the slots;
 * without it the slots are not waited for), 4 gamma (else O = D), 8 the row partial; 16 leaves O out (not staged,
 * not stored). D is always written in place of the slot and stored from there. 15 = FusedResNormTma. Its inputs
 * are driven by hand, not declared (the parts switch their loads and waits on and off), so it declares their
 * shared scratch itself. */
template <int F>
struct KResTmaParts : GeEpilogue {
    static constexpr int kStageUnits = 1;
    static constexpr int kInUnits = GeTileInTma<128>::kUnits;
    static constexpr int kVecFloats = 128;
    using Params = FusedResNormParams;
    static bool direct(const Params &p) { return !p.out.tail.head.tma; } /* O */
    GeRowPartial<GeSum> ss;
    GeTileInTma<128> res;
    GeColStage<128> gamma;
    __device__ __forceinline__ void prefetch(const Params &p, const GeTile &t) {
        if (F & 2) res.load(p.res_tma, t);
        if (F & 4) gamma.prefetch({p.gamma}, t);
    }
    __device__ __forceinline__ void begin(const Params &p, const GeTile &t) {
        ss.reset();
        if (F & 4) gamma.begin({p.gamma}, t);
    }
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        if (F & 2) res.wait(t);
        const float2 g = (F & 4) ? gamma.get(t, col) : make_float2(1.0f, 1.0f);
        float2 d[2] = {v[0], v[1]};
        if (F & 1) {
            float2 r[2];
            res.read(t, r);
            d[0] = ge_add(d[0], r[0]);
            d[1] = ge_add(d[1], r[1]);
        }
        res.put(t, d);
        float2 o[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (F & 8) ss.add(t, h, col, ge_mul(d[h], d[h]));
            o[h] = (F & 4) ? ge_mul(d[h], g) : d[h];
        }
        if (!(F & 16)) ge_out_put(p.out.tail.head, t, 0, col, o);
    }
    __device__ __forceinline__ void flush(const Params &p, const GeTile &t) {
        res.flush({p.res_tma, p.out.head}, t);
        if (!(F & 16)) ge_out_flush(p.out.tail.head, t, 0);
    }
    __device__ __forceinline__ void end(const Params &p, const GeTile &t) {
        if (F & 8) ss.store(p.part, p.ldpart, t);
    }
};

static void bench_kres_parts(int M, int N, int K) {
    const size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    const InputSets in(na, nb, nc);
    const auto &A = in.A, &B = in.B, &R = in.R;
    const int nset = in.n;
    void *C, *O;
    float *part, *gamma = const_f32(N, 1.0f);
    CK(cudaMalloc(&C, nc * 2));
    CK(cudaMalloc(&O, nc * 2));
    CK(cudaMalloc(&part, (size_t)M * ((N + 127) / 128) * 4));
    std::vector<FusedResNormParams> p(nset);
    for (int i = 0; i < nset; i++) {
        p[i] = {};
        p[i].out.head = ge_out((bf16 *)C, M, N, N);
        p[i].out.tail.head = ge_out((bf16 *)O, M, N, N);
        p[i].res = (const bf16 *)R[i];
        p[i].gamma = gamma;
        p[i].part = part;
        p[i].ldres = N;
        p[i].ldpart = (N + 127) / 128;
        p[i].res_tma = ge_out((bf16 *)R[i], M, N, N);
    }
#define KRP(P) [&](int i) { ge_run<P, GE_ABT, 128, GE_PINGPONG>(A[i % nset], K, B[i % nset], K, M, N, K, p[i % nset], BENCH_LAUNCH); }
    const GeStore<bf16, false>::Params ps = {{p[0].out.head}};
    const std::vector<double> t = bt_time_each({
        [&](int i) { ge_run<GeStore<bf16, false>, GE_ABT, 128, GE_PINGPONG>(A[i % nset], K, B[i % nset], K, M, N, K, ps, BENCH_LAUNCH); },
        [&](int i) { ge_run<RingCap<GeStore<bf16, false>, 4>, GE_ABT, 128, GE_PINGPONG>(A[i % nset], K, B[i % nset], K, M, N, K, ps, BENCH_LAUNCH); },
        KRP(KResTmaParts<0>), KRP(KResTmaParts<8>), KRP(KResTmaParts<12>), KRP(KResTmaParts<2>), KRP(KResTmaParts<3>),
        KRP(KResTmaParts<15>), KRP(FusedResNormTma<128>), KRP(KResTmaParts<31>), KRP(FusedResNorm<128>)});
#undef KRP
    const char *what[] = {"plain (6 stages)", "plain, 4 stages", "D in place + O staged (no residual)", "  + row partial",
                          "  + row partial + gamma", "D + O + residual loads (not added)", "D + O + residual added",
                          "all parts (= K_res)", "FusedResNormTma (the program)", "all parts but O",
                          "FusedResNorm (residual by direct loads)"};
    printf("%6d %6d %6d   ping-pong 128x128, timed in turns\n", M, N, K);
    for (size_t k = 0; k < t.size(); k++)
        printf("  %-40s %7.3f ms (%+5.1f%%)\n", what[k], t[k], 100.0 * (t[k] / t[0] - 1));
    fflush(stdout);
    CK(cudaFree(C)); CK(cudaFree(O)); CK(cudaFree(part)); CK(cudaFree(gamma));
}

/* ---------------------------------------------------------------- 3. GEMM-residual-RMSNorm-GEMM */

/* The unfused middle: h = t + res; y = h * rsqrt(mean(h^2) + eps) * gamma. One block per row. */
static __global__ void residual_rmsnorm_kernel(const bf16 *t, const bf16 *res, const float *gamma, float eps,
                                               bf16 *h, bf16 *y, int D) {
    const long row = blockIdx.x;
    const __nv_bfloat162 *t2 = reinterpret_cast<const __nv_bfloat162 *>(t + row * D);
    const __nv_bfloat162 *r2 = reinterpret_cast<const __nv_bfloat162 *>(res + row * D);
    __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(h + row * D);
    __nv_bfloat162 *y2 = reinterpret_cast<__nv_bfloat162 *>(y + row * D);
    float ss = 0;
    for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {
        const float2 a = __bfloat1622float2(t2[i]), b = __bfloat1622float2(r2[i]);
        const __nv_bfloat162 s = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
        h2[i] = s;
        const float2 f = __bfloat1622float2(s);
        ss += f.x * f.x + f.y * f.y;
    }
    __shared__ float red[32];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += red[w];
    const float r = rsqrtf(tot / D + eps);
    for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {
        const float2 f = __bfloat1622float2(h2[i]);
        y2[i] = __floats2bfloat162_rn(f.x * r * gamma[2 * i], f.y * r * gamma[2 * i + 1]);
    }
}

static void bench_norm_pattern(int M, int D) {
    const size_t nx = (size_t)M * D, nw = (size_t)D * D;
    void *X = rand_bf16(nx, 1.0f), *res = rand_bf16(nx, 1.0f), *W1 = rand_bf16(nw, 0.02f), *W2 = rand_bf16(nw, 0.02f);
    float *gamma = const_f32(D, 1.0f), *part, *r;
    void *T, *H, *Y, *Z, *Z2;
    CK(cudaMalloc(&T, nx * 2)); CK(cudaMalloc(&H, nx * 2)); CK(cudaMalloc(&Y, nx * 2));
    CK(cudaMalloc(&Z, nx * 2)); CK(cudaMalloc(&Z2, nx * 2));
    CK(cudaMalloc(&part, (size_t)M * ge_row_parts(D) * 4)); CK(cudaMalloc(&r, (size_t)M * 4));
    const float eps = 1e-5f;
    auto bare = [&](int) {
        cublas_gemm(GE_ABT, X, W1, T, CUDA_R_16BF, M, D, D, 0.0f);
        cublas_gemm(GE_ABT, Y, W2, Z, CUDA_R_16BF, M, D, D, 0.0f);
    };
    auto separate = [&](int) {
        cublas_gemm(GE_ABT, X, W1, T, CUDA_R_16BF, M, D, D, 0.0f);
        residual_rmsnorm_kernel<<<M, 256>>>((const bf16 *)T, (const bf16 *)res, gamma, eps, (bf16 *)H, (bf16 *)Y, D);
        cublas_gemm(GE_ABT, Y, W2, Z, CUDA_R_16BF, M, D, D, 0.0f);
    };
    /* ours: K_res, the r kernel and the row-scaled GEMM, both GEMMs on schedule sched */
    auto fused = [&](int, ge_config sched) {
        fused_gemm_res_norm(X, W1, res, gamma, H, Y, part, M, D, D, on(sched));
        fused_rms_finish(part, M, D, eps, r, 0);
        fused_gemm_rowscale(Y, W2, r, Z2, 0, M, D, D, on(sched));
    };
    separate(0);
    enum { NV = 2 };
    const ge_config var[NV] = {GE_COOP_256, GE_PINGPONG_128};
    const char *vname[NV] = {"cooperative", "ping-pong"};
    /* K_res's (the row-scaled GEMM: ge_pick(GE_FUSED, ...)) */
    const ge_config dflt = ge_pick(GE_RESIDUAL, M, D, D, ge_num_sms());
    double err[NV];
    for (int k = 0; k < NV; k++) {
        CK(cudaMemset(Z2, 0xFF, nx * 2)); /* NaN: an unwritten element shows */
        fused(0, var[k]);
        CK(cudaDeviceSynchronize());
        err[k] = rel_err((const bf16 *)Z2, (const bf16 *)Z, nx);
    }
    std::vector<std::function<void(int)>> fs = {bare, separate};
    for (int k = 0; k < NV; k++) fs.push_back([&, k](int i) { fused(i, var[k]); });
    const std::vector<double> t = bt_time_each(fs);
    printf("%6d %5d   2 bare cuBLAS GEMMs %7.3f ms   cuBLAS + separate %7.3f ms (%.3fx)   ours:", M, D, t[0], t[1],
           t[1] / t[0]);
    for (int k = 0; k < NV; k++)
        printf("%s %s%s %7.3f ms (%.3fx)", k ? "," : "", vname[k], ge_config_eq(var[k], dflt) ? " (the default)" : "", t[2 + k],
               t[2 + k] / t[0]);
    printf("   rel err");
    for (int k = 0; k < NV; k++) printf(" %.1e", err[k]);
    printf("\n");
    /* the parts of ours on either schedule, against one bare GEMM */
    const std::vector<double> u = bt_time_each({[&](int) { cublas_gemm(GE_ABT, X, W1, T, CUDA_R_16BF, M, D, D, 0.0f); },
                                            [&](int) { ge_gemm_bf16(GE_ABT, X, W1, T, M, D, D, on(GE_AUTO)); },
                                            [&](int) { fused_rms_finish(part, M, D, eps, r, 0); },
                                            [&](int) { fused_gemm_res_norm(X, W1, res, gamma, H, Y, part, M, D, D, on(GE_COOP_256)); },
                                            [&](int) { fused_gemm_res_norm(X, W1, res, gamma, H, Y, part, M, D, D, on(GE_PINGPONG_128)); },
                                            [&](int) { fused_gemm_rowscale(Y, W2, r, Z2, 0, M, D, D, on(GE_COOP_256)); },
                                            [&](int) { fused_gemm_rowscale(Y, W2, r, Z2, 0, M, D, D, on(GE_PINGPONG_128)); }});
    printf("%6d %5d   parts: one cuBLAS GEMM %7.3f ms, ours plain %7.3f ms (%.3fx), r %7.3f ms; K_res: cooperative "
           "%7.3f ms (%.3fx), ping-pong %7.3f ms (%.3fx); row-scaled GEMM: cooperative %7.3f ms (%.3fx), ping-pong "
           "%7.3f ms (%.3fx)\n",
           M, D, u[0], u[1], u[1] / u[0], u[2], u[3], u[3] / u[0], u[4], u[4] / u[0], u[5], u[5] / u[0], u[6],
           u[6] / u[0]);
    fflush(stdout);
    CK(cudaFree(X)); CK(cudaFree(res)); CK(cudaFree(W1)); CK(cudaFree(W2)); CK(cudaFree(gamma));
    CK(cudaFree(T)); CK(cudaFree(H)); CK(cudaFree(Y)); CK(cudaFree(Z)); CK(cudaFree(Z2)); CK(cudaFree(part)); CK(cudaFree(r));
}

static const char usage[] =
    "usage: bench_gemm (no arguments: the settings come from the environment)\n"
    "  GE_BENCH_SECTIONS  the sections to run (default \"123\"):\n"
    "                       1  the training GEMMs vs cuBLAS, on the default schedule (ge_pick's per shape)\n"
    "                       c  the same on cooperative 128 x 256 throughout\n"
    "                       p  the same on ping-pong 128 x 128 throughout\n"
    "                       2  epilogue overhead: an extra output tile + a row partial, and K_res, vs the plain GEMM\n"
    "                       e  the extra-tile epilogue on ping-pong 128 x 128, parts left out\n"
    "                       E  the same on cooperative 128 x 256\n"
    "                       k  K_res on ping-pong, parts left out\n"
    "                       3  GEMM-residual-RMSNorm-GEMM: K_res + r + row-scaled GEMM vs two cuBLAS GEMMs\n"
    "  GE_BENCH_D=n       section 3 for D = n only (2048, 4096 or 8192)\n"
    "  GE_BENCH_ONE=F     sections e and E: only the variant with parts F (EpiParts' flag bits)\n";

int main(int argc, char **argv) {
    if (argc > 1) {
        const bool help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    alarm(400); /* a deadlock ends the benchmark instead of the machine's lease */
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CB(cublasCreate(&blas));
    printf("# bench_gemm on %s (%d SMs, %.0f MB L2); each time: %s\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize / 1e6, BT_METHOD);

    const int T = 8192;
    const struct { const char *name; int N, K; } lin[] = {
        {"qkv 2048->3072", 3072, 2048},   {"o 2048->2048", 2048, 2048},     {"gate+up 2048->16384", 16384, 2048},
        {"down 8192->2048", 2048, 8192}, {"lm head 2048->128256", 128256, 2048}};
    std::vector<Shape> shapes;
    for (auto &x : lin) shapes.push_back({x.name, GE_ABT, T, x.N, x.K});  /* Y = X.W^T */
    for (auto &x : lin) shapes.push_back({x.name, GE_AB, T, x.K, x.N});   /* dX = dY.W */
    for (auto &x : lin) shapes.push_back({x.name, GE_ATB, x.N, x.K, T});  /* dW += dY^T.X */
    shapes.push_back({"8192^3", GE_ABT, 8192, 8192, 8192});

    /* Section 1 on the default schedule; sections "c" and "p": the same with cooperative 128 x 256 or ping-pong
     * 128 x 128 throughout. */
    const struct { char key; ge_config sched; const char *name; } s1[] = {
        {'c', GE_COOP_256, "cooperative 128 x 256"},
        {'p', GE_PINGPONG_128, "ping-pong 128 x 128"},
        {'1', GE_AUTO, "the default (ge_pick: cooperative 128 x 256; ping-pong 128 x 128 where its waves fill better)"}};
    const char *sections = getenv("GE_BENCH_SECTIONS") ? getenv("GE_BENCH_SECTIONS") : "123"; /* also: c, p, e, E, k */
    for (auto &c : s1) {
        if (!strchr(sections, c.key)) continue;
        ratios.clear();
        printf("\n## 1. GEMMs: ours vs cuBLAS (TFLOP/s), %s\n", c.name);
        printf("%-22s %-6s %6s %6s %6s %-9s %-8s %8s %8s %6s %8s\n", "shape", "layout", "M", "N", "K", "out", "sched",
               "ours", "cuBLAS", "ratio", "rel err");
        for (auto &s : shapes) bench_shape(s, c.sched);
        double lg = 0, mn = 1e9;
        for (double r : ratios) lg += log(r), mn = fmin(mn, r);
        printf("geomean ratio %.3f over %zu shapes, min %.3f (targets: >= 0.95, none < 0.85) [%s]\n",
               exp(lg / ratios.size()), ratios.size(), mn, c.name);
    }

    /* Section 2 and its diagnostic variants, each on the same three shapes (M, N, K). */
    const struct { char key; const char *title; void (*run)(int, int, int); } epi[] = {
        {'e', "2e. The extra-tile epilogue on ping-pong, parts left out", bench_epilogue_variants<128, GE_PINGPONG>},
        {'E', "2E. The extra-tile epilogue on cooperative 128x256, parts left out", bench_epilogue_variants<256, GE_COOP>},
        {'k', "2k. K_res on ping-pong, parts left out", bench_kres_parts},
        {'2', "2. Epilogue overhead (A.B^T, bf16): target <= 5% for one extra tile + a row partial", bench_epilogue}};
    const int epi_shapes[3][3] = {{8192, 2048, 2048}, {8192, 3072, 2048}, {8192, 2048, 8192}};
    for (auto &e : epi) {
        if (!strchr(sections, e.key)) continue;
        printf("\n## %s\n", e.title);
        for (auto &sh : epi_shapes) e.run(sh[0], sh[1], sh[2]);
    }

    if (strchr(sections, '3')) {
        printf("\n## 3. GEMM-residual-RMSNorm-GEMM (ratios to the two bare cuBLAS GEMMs; target <= 1.05x)\n");
        const char *only = getenv("GE_BENCH_D"); /* one D only */
        for (int D : {2048, 4096, 8192})
            if (!only || atoi(only) == D) bench_norm_pattern(16384, D);
    }
    cublasDestroy(blas);
    return 0;
}
