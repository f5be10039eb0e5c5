/* cuda_attention.cuh: the tensor-core building blocks shared by the attention kernels (FlashAttention-2 style,
 * mma.sync m16n8k16 bf16 with fp32 accumulation, ldmatrix from XOR-swizzled shared-memory tiles, cp.async loads).
 *
 * A tile is ROWS x HD bf16 in shared memory, row-major, with the 16-byte chunks of each row permuted (swizzled) so
 * that the 8 row addresses of one ldmatrix hit 8 different bank groups. A warp works on 16 rows of its operand A;
 * accumulator element e of n-tile nt of a thread sits at row (lane/4) + 8*(e/2), column 8*nt + 2*(lane%4) + e%2. */
#ifndef CUDA_ATTENTION_CUH
#define CUDA_ATTENTION_CUH

#include "kernels/cuda/cuda_common.cuh"

/* Warps per block of each kernel (a block owns 16 rows per warp: queries for the forward and dQ, keys for dK/dV).
 * Compile-time knobs so that benchmarks can build variants. */
#ifndef ATT_FWD_WARPS
#define ATT_FWD_WARPS 8
#endif
#ifndef ATT_DQ_WARPS
#define ATT_DQ_WARPS 4
#endif
#ifndef ATT_DKDV_WARPS
#define ATT_DKDV_WARPS 4
#endif
/* Blocks per multiprocessor that the backward kernels ask the register allocator for, at head dim <= 64 (at 128 the
 * accumulators need every register of one block). */
#ifndef ATT_BWD_MINB
#define ATT_BWD_MINB 3
#endif
#define ATT_BWD_MINB_OF(HD) ((HD) <= 64 ? ATT_BWD_MINB : 1)
#define ATT_BN 64 /* keys per K/V tile (forward, dQ) */
#define ATT_LOG2E 1.4426950408889634f

typedef struct {
    int T, Hq, Hkv;
    long ld;          /* row stride of qkv and dqkv */
    long ldy;         /* row stride of y and dy */
    float scale;      /* 1/sqrt(hd) */
    float scale_log2; /* scale * log2(e): softmax in base 2 */
} AttnDims;

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16-byte asynchronous copy; with pred false the destination is zero-filled and nothing is read. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Element offset of (row, col) in a swizzled [rows][HD] tile. */
template <int HD>
__device__ __forceinline__ int swz(int row, int col) {
    constexpr int CH = HD / 8;
    static_assert(CH == 4 || CH == 8 || CH == 16, "head dim 32, 64 or 128");
    const int x = CH >= 8 ? (row & 7) : ((row >> 1) & 3);
    return row * HD + (((col >> 3) ^ x) << 3) + (col & 7);
}

/* Asynchronously loads rows t0 .. t0+ROWS-1 of src (row stride ld elements) into a swizzled tile; rows >= T are
 * zero. All NTHREADS threads of the block take part. */
template <int HD, int ROWS, int NTHREADS>
__device__ __forceinline__ void load_tile_async(bf16 *tile, const bf16 *src, long ld, int t0, int T) {
    constexpr int CH = HD / 8;
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NTHREADS) {
        const int row = idx / CH, ch = idx % CH;
        const bool ok = t0 + row < T;
        cp_async16(tile + swz<HD>(row, ch * 8), ok ? src + (long)(t0 + row) * ld + ch * 8 : src, ok);
    }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c += a (16x16, row) . b (16x8, col) */
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* S[16 x 8*NT] = A[a_row0 .. a_row0+16, 0..HD) . B[b_row0 .. b_row0 + 8*NT, 0..HD)^T, both swizzled tiles. */
template <int HD, int NT>
__device__ __forceinline__ void mma_abt(float S[NT][4], const bf16 *A, int a_row0, const bf16 *B, int b_row0,
                                        int lane) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) S[nt][0] = S[nt][1] = S[nt][2] = S[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t a[4];
        ldmatrix_x4(a, A + swz<HD>(a_row0 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, B + swz<HD>(b_row0 + np * 16 + (lane & 7) + (lane >> 4) * 8, kk * 16 + ((lane >> 3) & 1) * 8));
            mma_16816(S[2 * np], a, b[0], b[1]);
            mma_16816(S[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* O[16 x HD] += P[16 x 16*KT] . B[b_row0 .. b_row0 + 16*KT, 0..HD), with P in the accumulator layout of mma_abt
 * (2*KT n-tiles), rounded to bf16 as the A operand. */
template <int HD, int KT>
__device__ __forceinline__ void mma_pb(float O[HD / 8][4], const float P[2 * KT][4], const bf16 *B, int b_row0,
                                       int lane) {
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t a[4];
        a[0] = pack_bf16x2(P[2 * kk][0], P[2 * kk][1]);
        a[1] = pack_bf16x2(P[2 * kk][2], P[2 * kk][3]);
        a[2] = pack_bf16x2(P[2 * kk + 1][0], P[2 * kk + 1][1]);
        a[3] = pack_bf16x2(P[2 * kk + 1][2], P[2 * kk + 1][3]);
#pragma unroll
        for (int hp = 0; hp < HD / 16; hp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, B + swz<HD>(b_row0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, hp * 16 + (lane >> 4) * 8));
            mma_16816(O[2 * hp], a, b[0], b[1]);
            mma_16816(O[2 * hp + 1], a, b[2], b[3]);
        }
    }
}

/* Writes a warp's 16 x HD accumulator tile, times `scale`, as bf16 to rows row0 (+ lane/4, + 8) of dst (row stride
 * ld), skipping rows >= T. */
template <int HD>
__device__ __forceinline__ void store_rows_bf16(bf16 *dst, long ld, int row0, int T, const float O[HD / 8][4],
                                                float scale, int lane) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = row0 + (lane >> 2) + 8 * half;
        if (row >= T) continue;
        bf16 *out = dst + (long)row * ld + (lane & 3) * 2;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++)
            *reinterpret_cast<__nv_bfloat162 *>(out + dt * 8) =
                __floats2bfloat162_rn(O[dt][2 * half] * scale, O[dt][2 * half + 1] * scale);
    }
}

/* The optional tail of the attention backward's stores (kernels.h attention_backward with r): the gradient G of
 * a stored element (fp32, times the kernel's scale, before any rounding) becomes r * rope^T(G) for Q and K columns
 * and r * G for V, and each row's <Z, G> over the warp's head slice (Z: the forward's qkv values of those rows, still
 * in the kernel's shared memory) goes to cpart[row, slot]; a finish sums a row's slots into c. r == NULL: the plain
 * gradient. A RoPE pair is the adjacent columns (2i, 2i+1) of a head, so both sit in one thread's accumulator pair. */
typedef struct {
    const float *r;         /* [B*T] */
    const float *cos, *sin; /* [T, hd/2] */
    float *cpart;           /* [B*T, Hq + 2*Hkv] */
} AttnGradTail;

/* store_rows_bf16 with the tail: rows row0 (+ lane/4, + 8) of one sequence, whose first row is global row grow0;
 * Zt/z_row0: the swizzled shared-memory tile and tile row of row0; slot: this head slice's column of cpart. */
template <int HD>
__device__ __forceinline__ void store_grad_rows_bf16(bf16 *dst, long ld, int row0, int T, const float O[HD / 8][4],
                                                     float scale, int lane, const AttnGradTail &tail, long grow0,
                                                     const bf16 *Zt, int z_row0, bool rope, int slot, int nslots) {
    if (!tail.r) {
        store_rows_bf16<HD>(dst, ld, row0, T, O, scale, lane);
        return;
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = row0 + (lane >> 2) + 8 * half, zr = z_row0 + (lane >> 2) + 8 * half;
        const bool live = row < T;
        const int at = live ? row : 0; /* a row past T reads row 0's values and stores nothing */
        const float rr = tail.r[grow0 + at];
        const long pair0 = (long)at * (HD / 2) + (lane & 3); /* the table entry of this thread's first pair */
        const float *cs = tail.cos + pair0, *sn = tail.sin + pair0;
        bf16 *out = dst + (long)row * ld + (lane & 3) * 2;
        float dot = 0.0f;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            const int col = dt * 8 + (lane & 3) * 2;
            const float g0 = O[dt][2 * half] * scale, g1 = O[dt][2 * half + 1] * scale;
            const float2 z = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(Zt + swz<HD>(zr, col)));
            dot = fmaf(z.x, g0, fmaf(z.y, g1, dot));
            float a = g0, b = g1;
            if (rope) { /* the transpose of a' = a cos - b sin, b' = b cos + a sin; pair index col / 2 */
                const float c = __ldg(cs + dt * 4), s = __ldg(sn + dt * 4);
                a = g0 * c + g1 * s;
                b = g1 * c - g0 * s;
            }
            if (live) *reinterpret_cast<__nv_bfloat162 *>(out + dt * 8) = __floats2bfloat162_rn(rr * a, rr * b);
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        if (live && (lane & 3) == 0) tail.cpart[(grow0 + row) * nslots + slot] = dot;
    }
}

/* Raises a kernel's dynamic shared-memory limit (once per kernel) and checks it. */
#define ATT_SET_SMEM(kernel, bytes)                                                                           \
    do {                                                                                                      \
        static bool done_;                                                                                    \
        if (!done_) {                                                                                         \
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
            done_ = true;                                                                                     \
        }                                                                                                     \
    } while (0)

#endif
