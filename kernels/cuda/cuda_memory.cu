/* cuda_memory.cu: device memory for the CUDA backend: checked-call failure reports, a context's tracked allocator
 * (current and peak bytes, so the program can print its peak), its one growing workspace for the ops that need
 * scratch, copies, page-locked host memory, fp32 <-> bf16 conversions, split master weights to and from fp32,
 * the free device memory, the is-there-a-GPU probe and the device name. Work runs on the context's stream; copies to
 * the host wait for it. */
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm_maps.h"
#include "kernels/kernels.h"
#include "kernels/master_split.h"

void cuda_fail(const char *what, const char *detail, const char *file, int line) {
    ge_fail_at(what, detail, file, line);
}

/* Its own calls go unchecked: it is already reporting a failure, and exits. */
void cuda_out_of_memory(const KernelContext *kc, const char *what, size_t bytes, const char *file, int line) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    fprintf(stderr, "error: out of GPU memory: %s", what);
    if (bytes) fprintf(stderr, " of %.2f GiB", bytes / 1073741824.0);
    fprintf(stderr, " failed (%s:%d) with ", file, line);
    if (kc) fprintf(stderr, "%.2f GiB held by the trainer and ", kc->bytes_live / 1073741824.0);
    fprintf(stderr,
            "%.2f of %.2f GiB free on the device; lower batch_size or seq_len, or free the GPU of other "
            "processes\n",
            free_b / 1073741824.0, total_b / 1073741824.0);
    exit(1);
}

/* ---------------------------------------------------------------- tracked allocations */

/* The live allocations and their sizes are in the context's open-addressing table, keyed by pointer (a model holds
 * few buffers): slot_of is a pointer's home slot (cudaMalloc's pointers are 256-byte aligned: the low 8 bits carry
 * nothing). */
static size_t slot_of(const void *p) {
    return (size_t)(((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull % CUDA_ALLOC_SLOTS);
}

/* cudaMalloc, tracked; NULL when the device has not the memory (any other failure is an internal error). */
static void *try_dev_alloc(KernelContext *kc, size_t bytes) {
    void *p = NULL;
    const cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    CUDA_CHECK(err);
    size_t s = slot_of(p);
    for (int i = 0; i < CUDA_ALLOC_SLOTS && kc->allocs[s].p; i++) s = (s + 1) % CUDA_ALLOC_SLOTS;
    if (kc->allocs[s].p) cuda_fail("cuda_dev_alloc", "more than 4096 live allocations", __FILE__, __LINE__);
    kc->allocs[s].p = p;
    kc->allocs[s].bytes = bytes;
    kc->bytes_live += bytes;
    if (kc->bytes_live > kc->bytes_peak) kc->bytes_peak = kc->bytes_live;
    return p;
}

void *cuda_dev_alloc(KernelContext *kc, size_t bytes) {
    void *p = try_dev_alloc(kc, bytes);
    if (!p) cuda_out_of_memory(kc, "cudaMalloc", bytes, __FILE__, __LINE__);
    return p;
}

void cuda_dev_free(KernelContext *kc, void *p) {
    if (!p) return;
    size_t s = slot_of(p);
    for (int i = 0; i < CUDA_ALLOC_SLOTS && kc->allocs[s].p != p; i++) s = (s + 1) % CUDA_ALLOC_SLOTS;
    if (kc->allocs[s].p != p) cuda_fail("cuda_dev_free", "pointer not allocated in this context", __FILE__, __LINE__);
    kc->bytes_live -= kc->allocs[s].bytes;
    /* Remove with backward-shift so that later probes still find their keys. */
    size_t hole = s;
    kc->allocs[hole].p = NULL;
    for (size_t j = (hole + 1) % CUDA_ALLOC_SLOTS; kc->allocs[j].p; j = (j + 1) % CUDA_ALLOC_SLOTS) {
        size_t home = slot_of(kc->allocs[j].p);
        int between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!between) {
            kc->allocs[hole] = kc->allocs[j];
            kc->allocs[j].p = NULL;
            hole = j;
        }
    }
    CUDA_CHECK(cudaFree(p));
}

size_t cuda_peak_bytes(KernelContext *kc) { return kc->bytes_peak; }

/* What the CUDA context and cuBLAS's handle take beyond the tracked buffers (test_gpu_memory measures it and checks
 * it against this), kept out of what the preflight may plan for. */
size_t cuda_untracked_reserve_bytes(void) { return (size_t)256 << 20; }

size_t cuda_available_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b > cuda_untracked_reserve_bytes() ? free_b - cuda_untracked_reserve_bytes() : 0;
}

/* ---------------------------------------------------------------- the workspace */

#define WORKSPACE_GRAIN ((size_t)1 << 20)

size_t cuda_workspace_rounded(size_t bytes) { return size_round_up(bytes, WORKSPACE_GRAIN); }

/* While a captured step exists (it holds the workspace's address), an outgrown workspace is kept, not freed, until
 * the last graph goes: an evaluation between captured steps may need more than a step. */
void *cuda_workspace(KernelContext *kc, size_t bytes) {
    if (bytes > kc->ws_bytes) {
        if (kc->ws && kc->graphs > 0 && kc->ws_n_retired < CUDA_WORKSPACE_RETIRED) {
            kc->ws_retired[kc->ws_n_retired++] = kc->ws;
        } else if (kc->ws) {
            if (kc->graphs > 0)
                cuda_fail("cuda_workspace", "grew 16 times while a step was captured", __FILE__, __LINE__);
            CUDA_CHECK(cudaStreamSynchronize(kc->stream)); /* earlier kernels may still read the old one */
            cuda_dev_free(kc, kc->ws);
        }
        kc->ws_bytes = cuda_workspace_rounded(bytes);
        kc->ws = cuda_dev_alloc(kc, kc->ws_bytes);
    }
    return kc->ws;
}

extern "C" void cuda_reserve_scratch(KernelContext *kc, size_t bytes) {
    if (bytes) cuda_workspace(kc, bytes);
}

void cuda_workspace_graphs(KernelContext *kc, int delta) {
    kc->graphs += delta;
    if (kc->graphs > 0) return;
    CUDA_CHECK(cudaStreamSynchronize(kc->stream));
    while (kc->ws_n_retired) cuda_dev_free(kc, kc->ws_retired[--kc->ws_n_retired]);
}

/* ---------------------------------------------------------------- the memory ops of kernels.h */

void *cuda_alloc(KernelContext *kc, size_t bytes) {
    void *p = try_dev_alloc(kc, bytes);
    if (p) {
        CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, kc->stream));
        CUDA_CHECK(cudaStreamSynchronize(kc->stream));
    }
    return p;
}

void cuda_free(KernelContext *kc, void *p) { cuda_dev_free(kc, p); }

void cuda_memset_zero(KernelContext *kc, void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, kc->stream));
}

/* Both wait for the copy (the host buffer may be reused on return): in the stream's order, so they also wait for
 * the work queued before them. */
void cuda_copy_to_device(KernelContext *kc, void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, kc->stream));
    CUDA_CHECK(cudaStreamSynchronize(kc->stream));
}

void cuda_copy_to_host(KernelContext *kc, void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, kc->stream));
    CUDA_CHECK(cudaStreamSynchronize(kc->stream));
}

__global__ void f32_to_bf16_kernel(const float *src, bf16 *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void bf16_to_f32_kernel(const bf16 *src, float *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* Host fp32 <-> device bf16 through an fp32 staging buffer in the workspace, in chunks (rounded to nearest even on
 * the device). The staging buffer is one whole chunk whatever n is, so that the workspace it takes is the one the
 * estimate counts. Each chunk's conversion is one grid-stride launch. */
#define CONVERT_CHUNK ((size_t)1 << 20)
#define CONVERT_THREADS 256
#define CONVERT_MAX_BLOCKS 4096

size_t cuda_convert_workspace_bytes(void) { return CONVERT_CHUNK * sizeof(float); }

static int convert_blocks(size_t len) { return capped_blocks((long)len, CONVERT_THREADS, CONVERT_MAX_BLOCKS); }

void cuda_act_from_f32(KernelContext *kc, void *dst_act, const float *host_src, size_t n) {
    for (size_t at = 0; at < n; at += CONVERT_CHUNK) {
        const size_t len = n - at < CONVERT_CHUNK ? n - at : CONVERT_CHUNK;
        float *stage = (float *)cuda_workspace(kc, cuda_convert_workspace_bytes());
        cuda_copy_to_device(kc, stage, host_src + at, len * sizeof(float));
        f32_to_bf16_kernel<<<convert_blocks(len), CONVERT_THREADS, 0, kc->stream>>>(stage, (bf16 *)dst_act + at, len);
        LAUNCH_CHECK("f32_to_bf16_kernel");
    }
}

void cuda_act_to_f32(KernelContext *kc, float *host_dst, const void *src_act, size_t n) {
    for (size_t at = 0; at < n; at += CONVERT_CHUNK) {
        const size_t len = n - at < CONVERT_CHUNK ? n - at : CONVERT_CHUNK;
        float *stage = (float *)cuda_workspace(kc, cuda_convert_workspace_bytes());
        bf16_to_f32_kernel<<<convert_blocks(len), CONVERT_THREADS, 0, kc->stream>>>(
            (const bf16 *)src_act + at, stage, len);
        LAUNCH_CHECK("bf16_to_f32_kernel");
        cuda_copy_to_host(kc, host_dst + at, stage, len * sizeof(float));
    }
}

/* Split master weights (kernels/master_split.h) from and to host fp32, through the same staging. */
__global__ void master_split_kernel(const float *src, uint16_t *hi, uint16_t *lo, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        master_split(__float_as_uint(src[i]), &hi[i], &lo[i]);
}

__global__ void master_join_kernel(const uint16_t *hi, const uint16_t *lo, float *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __uint_as_float(master_join(hi[i], lo[i]));
}

void cuda_master_from_f32(KernelContext *kc, uint16_t *lo, void *working, const float *host_src, size_t n) {
    for (size_t at = 0; at < n; at += CONVERT_CHUNK) {
        const size_t len = n - at < CONVERT_CHUNK ? n - at : CONVERT_CHUNK;
        float *stage = (float *)cuda_workspace(kc, cuda_convert_workspace_bytes());
        cuda_copy_to_device(kc, stage, host_src + at, len * sizeof(float));
        master_split_kernel<<<convert_blocks(len), CONVERT_THREADS, 0, kc->stream>>>(
            stage, (uint16_t *)working + at, lo + at, len);
        LAUNCH_CHECK("master_split_kernel");
    }
}

void cuda_master_to_f32(KernelContext *kc, float *host_dst, const void *working, const uint16_t *lo, size_t n) {
    for (size_t at = 0; at < n; at += CONVERT_CHUNK) {
        const size_t len = n - at < CONVERT_CHUNK ? n - at : CONVERT_CHUNK;
        float *stage = (float *)cuda_workspace(kc, cuda_convert_workspace_bytes());
        master_join_kernel<<<convert_blocks(len), CONVERT_THREADS, 0, kc->stream>>>(
            (const uint16_t *)working + at, lo + at, stage, len);
        LAUNCH_CHECK("master_join_kernel");
        cuda_copy_to_host(kc, host_dst + at, stage, len * sizeof(float));
    }
}

void cuda_synchronize(KernelContext *kc) { CUDA_CHECK(cudaStreamSynchronize(kc->stream)); }

void *cuda_host_alloc(KernelContext *kc, size_t bytes) {
    void *p = NULL;
    const cudaError_t err = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    CUDA_CHECK(err);
    return p;
}

void cuda_host_free(KernelContext *kc, void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

const char *cuda_device_name(void) {
    static char name[sizeof(((cudaDeviceProp *)0)->name)];
    if (!name[0]) {
        int device;
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
        snprintf(name, sizeof(name), "%s", prop.name);
    }
    return name;
}

/* ---------------------------------------------------------------- is there a GPU */

extern "C" int kernels_cuda_available(char *why, size_t len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        int driver = 0, runtime = 0;
        const cudaError_t driver_err = cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime); /* unchecked: only for the message */
        if (err == cudaErrorNoDevice)
            snprintf(why, len, "no GPU found (the CUDA driver sees none)");
        else if (err == cudaErrorInsufficientDriver && (driver_err != cudaSuccess || driver == 0))
            snprintf(why, len, "no GPU found (CUDA driver not loaded)");
        else if (err == cudaErrorInsufficientDriver)
            snprintf(why, len, "the CUDA driver (%d.%d) is older than this build's CUDA runtime (%d.%d): update the "
                     "driver to use the GPU", driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        else
            snprintf(why, len, "no usable GPU (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
        cudaGetLastError(); /* the error is not sticky: clear it so that a later call does not see it */
        return 0;
    }
    if (n == 0) {
        snprintf(why, len, "no GPU found (the CUDA driver sees none)");
        return 0;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) {
        snprintf(why, len, "the %s has compute capability %d.%d; this build's kernels need 9.0 (Hopper)", prop.name,
                 prop.major, prop.minor);
        return 0;
    }
    snprintf(why, len, "%s", prop.name);
    return 1;
}
