/* cuda_optimizer.cu: the optimizer ops. sum_squares and sum: a fixed grid of blocks (independent of the device)
 * each sums in double over a grid-stride range, then one block adds the partials in order: deterministic. The clip
 * factor: one thread adds the parts in order. AdamW: one fused elementwise pass over fp32 master/grad/m/v (16-byte
 * accesses) that also writes the bf16 working copy, with the CPU backend's fp32 operations, bit for bit (its scalars
 * formed in double on the host, as PyTorch does, and read with the clip factor from device memory); on split master
 * weights (kernels/master_split.h) the same pass reads and writes the working copy and the low halves instead. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/master_split.h"

/* Both sums: at most SUM_BLOCKS blocks of SUM_THREADS threads, then one block of SUM_BLOCKS threads, a partial
 * each. */
#define SUM_BLOCKS 1024
#define SUM_THREADS 512

/* partial[block] = sum over a grid-stride range of g^2 (SQUARE) or g, in double. */
template <bool SQUARE>
__global__ void __launch_bounds__(SUM_THREADS) sum_partial_kernel(const float *g, size_t n, bool vec, double *partial) {
    __shared__ double scratch[32];
    double acc = 0.0;
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    auto term = [](float x) { return SQUARE ? (double)x * x : (double)x; };
    if (vec) {
        const float4 *g4 = reinterpret_cast<const float4 *>(g);
        for (size_t i = first; i < n / 4; i += stride) {
            const float4 v = g4[i];
            acc += term(v.x) + term(v.y) + term(v.z) + term(v.w);
        }
        for (size_t i = n / 4 * 4 + first; i < n; i += stride) acc += term(g[i]);
    } else {
        for (size_t i = first; i < n; i += stride) acc += term(g[i]);
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* *out = (or +=) the sum of partial[0 .. n), one thread each, in block_sum's fixed order. */
__global__ void __launch_bounds__(SUM_BLOCKS) sum_partials_kernel(const double *partial, int n, double *out,
                                                                   bool accumulate) {
    __shared__ double scratch[32];
    const double s = block_sum(threadIdx.x < n ? partial[threadIdx.x] : 0.0, scratch);
    if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

size_t cuda_sum_scratch_bytes(void) { return SUM_BLOCKS * sizeof(double); }

/* blocks partials (at most SUM_BLOCKS) in the context's sum_scratch (one buffer for both sums, as
 * cuda_sum_scratch_bytes counts it), then their sum into *dst (or added to it). */
template <bool SQUARE>
static void sum_to(KernelContext *kc, const float *g, size_t n, double *dst, int blocks, bool accumulate) {
    if (!kc->sum_scratch) kc->sum_scratch = (double *)cuda_dev_alloc(kc, SUM_BLOCKS * sizeof(double));
    sum_partial_kernel<SQUARE><<<blocks, SUM_THREADS, 0, kc->stream>>>(g, n, (uintptr_t)g % 16 == 0, kc->sum_scratch);
    LAUNCH_CHECK("sum_partial_kernel");
    sum_partials_kernel<<<1, SUM_BLOCKS, 0, kc->stream>>>(kc->sum_scratch, blocks, dst, accumulate);
    LAUNCH_CHECK("sum_partials_kernel");
}

extern "C" void cuda_sum_squares(KernelContext *kc, const float *g, size_t n, double *out) {
    sum_to<true>(kc, g, n, out, SUM_BLOCKS, false);
}

/* For partials and per-row losses (up to a few hundred thousand values): fewer blocks. */
#define SUM_FEW_BLOCKS 64
extern "C" void cuda_sum(KernelContext *kc, const float *x, size_t n, double *out, int accumulate) {
    sum_to<false>(kc, x, n, out, SUM_FEW_BLOCKS, accumulate != 0);
}

__global__ void clip_scale_kernel(const double *parts, int n_loss, int n_sq, double max_norm, float *scale) {
    bool finite = true;
    for (int i = 0; i < n_loss; i++) finite &= isfinite(parts[i]);
    double sq = 0.0;
    for (int i = 0; i < n_sq; i++) sq += parts[n_loss + i];
    const double norm = sqrt(sq);
    if (!finite || !isfinite(norm)) {
        *scale = __int_as_float(0x7fc00000); /* NaN: no update */
        return;
    }
    const double s = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    *scale = (float)(s < 1.0 ? s : 1.0);
}

extern "C" void cuda_clip_scale(KernelContext *kc, const double *parts, int n_loss, int n_sq, double max_norm,
                                float *scale) {
    clip_scale_kernel<<<1, 1, 0, kc->stream>>>(parts, n_loss, n_sq, max_norm, scale);
    LAUNCH_CHECK("clip_scale_kernel");
}

/* One parameter's update. Every operation is rounded on its own, in the CPU backend's order (the _rn intrinsics are
 * never contracted into FMAs), so the two backends agree bit for bit and no compiler's choice of FMAs moves a run. */
__device__ __forceinline__ float adam_one(float &p, float &m, float &v, float grad, const AdamwScalars &s,
                                          float grad_scale) {
    const float g = __fmul_rn(grad, grad_scale);
    m = __fadd_rn(m, __fmul_rn(s.one_minus_beta1, __fsub_rn(g, m))); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
    v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), s.eps);
    p = __fsub_rn(__fmul_rn(p, s.decay), __fmul_rn(s.step_size, __fdiv_rn(m, denom)));
    return p;
}

/* How the AdamW pass holds the master weights, VEC = 4 or 1 at index i (of float4s or of floats): whole, in fp32,
 * writing the bf16 working copy from them; or split (kernels/master_split.h), as the working copy and lo. */
struct WholeMaster {
    float *master;
    bf16 *working;
    __device__ __forceinline__ float4 load4(size_t i) const { return reinterpret_cast<const float4 *>(master)[i]; }
    __device__ __forceinline__ void store4(size_t i, float4 p) const {
        reinterpret_cast<float4 *>(master)[i] = p;
        uint2 w;
        reinterpret_cast<__nv_bfloat162 *>(&w)[0] = __floats2bfloat162_rn(p.x, p.y);
        reinterpret_cast<__nv_bfloat162 *>(&w)[1] = __floats2bfloat162_rn(p.z, p.w);
        reinterpret_cast<uint2 *>(working)[i] = w;
    }
    __device__ __forceinline__ float load1(size_t i) const { return master[i]; }
    __device__ __forceinline__ void store1(size_t i, float p) const {
        master[i] = p;
        working[i] = __float2bfloat16(p);
    }
    bool aligned() const { return (uintptr_t)master % 16 == 0 && (uintptr_t)working % 8 == 0; }
};
struct SplitMaster {
    uint16_t *hi, *lo; /* hi: the working copy */
    static __device__ __forceinline__ float join(uint16_t h, uint16_t l) { return __uint_as_float(master_join(h, l)); }
    __device__ __forceinline__ float4 load4(size_t i) const {
        const ushort4 h = reinterpret_cast<const ushort4 *>(hi)[i], l = reinterpret_cast<const ushort4 *>(lo)[i];
        return make_float4(join(h.x, l.x), join(h.y, l.y), join(h.z, l.z), join(h.w, l.w));
    }
    __device__ __forceinline__ void store4(size_t i, float4 p) const {
        ushort4 h, l;
        master_split(__float_as_uint(p.x), &h.x, &l.x);
        master_split(__float_as_uint(p.y), &h.y, &l.y);
        master_split(__float_as_uint(p.z), &h.z, &l.z);
        master_split(__float_as_uint(p.w), &h.w, &l.w);
        reinterpret_cast<ushort4 *>(hi)[i] = h;
        reinterpret_cast<ushort4 *>(lo)[i] = l;
    }
    __device__ __forceinline__ float load1(size_t i) const { return join(hi[i], lo[i]); }
    __device__ __forceinline__ void store1(size_t i, float p) const {
        master_split(__float_as_uint(p), &hi[i], &lo[i]);
    }
    bool aligned() const { return (uintptr_t)hi % 8 == 0 && (uintptr_t)lo % 8 == 0; }
};

/* VEC = 4: each thread updates 4 consecutive parameters with 16-byte accesses to grad, m and v (all aligned and n a
 * multiple of 4, checked by the caller); VEC = 1: one parameter per thread. */
template <int VEC, class Master>
__global__ void adamw_kernel(Master w, const float *grad, float *m, float *v, size_t n, const AdamwScalars *scalars,
                             const float *grad_scale) {
    const float gs = *grad_scale;
    if (!isfinite(gs)) return;
    const AdamwScalars s = *scalars;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n / VEC; i += stride) {
        if (VEC == 4) {
            float4 p = w.load4(i), mm = reinterpret_cast<float4 *>(m)[i], vv = reinterpret_cast<float4 *>(v)[i];
            const float4 g = reinterpret_cast<const float4 *>(grad)[i];
            adam_one(p.x, mm.x, vv.x, g.x, s, gs);
            adam_one(p.y, mm.y, vv.y, g.y, s, gs);
            adam_one(p.z, mm.z, vv.z, g.z, s, gs);
            adam_one(p.w, mm.w, vv.w, g.w, s, gs);
            w.store4(i, p);
            reinterpret_cast<float4 *>(m)[i] = mm;
            reinterpret_cast<float4 *>(v)[i] = vv;
        } else {
            float p = w.load1(i);
            w.store1(i, adam_one(p, m[i], v[i], grad[i], s, gs));
        }
    }
}

template <class Master>
static void launch_adamw(KernelContext *kc, Master w, const float *grad, float *m, float *v, size_t n,
                         const AdamwScalars *s, const float *grad_scale) {
    if (n == 0) return;
    const bool vec = n % 4 == 0 && w.aligned() && (uintptr_t)grad % 16 == 0 && (uintptr_t)m % 16 == 0 &&
                     (uintptr_t)v % 16 == 0;
    const size_t items = vec ? n / 4 : n;
    const int threads = 256, blocks = capped_blocks((long)items, threads, 65536);
    if (vec) adamw_kernel<4><<<blocks, threads, 0, kc->stream>>>(w, grad, m, v, n, s, grad_scale);
    else adamw_kernel<1><<<blocks, threads, 0, kc->stream>>>(w, grad, m, v, n, s, grad_scale);
    LAUNCH_CHECK("adamw_kernel");
}

extern "C" void cuda_adamw(KernelContext *kc, float *master, void *working, const float *grad, float *m, float *v,
                           size_t n, const AdamwScalars *s, const float *grad_scale) {
    launch_adamw(kc, WholeMaster{master, (bf16 *)working}, grad, m, v, n, s, grad_scale);
}

extern "C" void cuda_adamw_split(KernelContext *kc, uint16_t *lo, void *working, const float *grad, float *m, float *v,
                                 size_t n, const AdamwScalars *s, const float *grad_scale) {
    launch_adamw(kc, SplitMaster{(uint16_t *)working, lo}, grad, m, v, n, s, grad_scale);
}
