/* cuda_memory.cu: device memory for the CUDA backend: checked-call failure reports, a tracked allocator (current
 * and peak bytes, so the program can print its peak), one growing workspace for the ops that need scratch, copies,
 * page-locked host memory, fp32 <-> bf16 conversions, the free device memory, the is-there-a-GPU probe and the
 * device name. Work runs on the backend's stream (cuda_stream.cu); copies to the host wait for it. */
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm/gemm_maps.h"
#include "kernels/kernels.h"

static size_t bytes_live, bytes_peak;

void cuda_fail(const char *what, const char *detail, const char *file, int line) {
    ge_fail_at(what, detail, file, line);
}

void cuda_out_of_memory(const char *what, size_t bytes, const char *file, int line) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    fprintf(stderr, "error: out of GPU memory: %s", what);
    if (bytes) fprintf(stderr, " of %.2f GiB", bytes / 1073741824.0);
    fprintf(stderr, " failed (%s:%d) with %.2f GiB held by the trainer and %.2f of %.2f GiB free on the device; lower "
                    "batch_size or seq_len, or free the GPU of other processes\n",
            file, line, bytes_live / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
    exit(1);
}

/* ---------------------------------------------------------------- tracked allocations */

/* Sizes of live allocations, in a small open-addressing table keyed by pointer (the program holds few buffers). */
#define ALLOC_SLOTS 4096
static struct {
    void *p;
    size_t bytes;
} alloc_table[ALLOC_SLOTS];

static size_t slot_of(const void *p) { return (size_t)(((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull % ALLOC_SLOTS); }

/* cudaMalloc, tracked; NULL when the device has not the memory (any other failure is an internal error). */
static void *try_dev_alloc(size_t bytes) {
    void *p = NULL;
    const cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    CUDA_CHECK(err);
    size_t s = slot_of(p);
    for (int i = 0; i < ALLOC_SLOTS && alloc_table[s].p; i++) s = (s + 1) % ALLOC_SLOTS;
    if (alloc_table[s].p) cuda_fail("cuda_dev_alloc", "more than 4096 live allocations", __FILE__, __LINE__);
    alloc_table[s].p = p;
    alloc_table[s].bytes = bytes;
    bytes_live += bytes;
    if (bytes_live > bytes_peak) bytes_peak = bytes_live;
    return p;
}

void *cuda_dev_alloc(size_t bytes) {
    void *p = try_dev_alloc(bytes);
    if (!p) cuda_out_of_memory("cudaMalloc", bytes, __FILE__, __LINE__);
    return p;
}

void cuda_dev_free(void *p) {
    if (!p) return;
    size_t s = slot_of(p);
    for (int i = 0; i < ALLOC_SLOTS && alloc_table[s].p != p; i++) s = (s + 1) % ALLOC_SLOTS;
    if (alloc_table[s].p != p) cuda_fail("cuda_dev_free", "pointer not allocated by kernels_cuda", __FILE__, __LINE__);
    bytes_live -= alloc_table[s].bytes;
    /* Remove with backward-shift so that later probes still find their keys. */
    size_t hole = s;
    alloc_table[hole].p = NULL;
    for (size_t j = (hole + 1) % ALLOC_SLOTS; alloc_table[j].p; j = (j + 1) % ALLOC_SLOTS) {
        size_t home = slot_of(alloc_table[j].p);
        int between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!between) {
            alloc_table[hole] = alloc_table[j];
            alloc_table[j].p = NULL;
            hole = j;
        }
    }
    CUDA_CHECK(cudaFree(p));
}

size_t cuda_peak_bytes(void) { return bytes_peak; }

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

size_t cuda_workspace_rounded(size_t bytes) {
    return size_add(bytes, WORKSPACE_GRAIN - 1) / WORKSPACE_GRAIN * WORKSPACE_GRAIN;
}

/* The workspace; while a captured step exists (it holds the workspace's address), one that is outgrown is kept,
 * not freed, until the last graph goes: an evaluation between captured steps may need more than a step. */
static struct {
    void *ws;
    size_t bytes;
    void *retired[16];
    int n_retired, graphs;
} wsp;

void *cuda_workspace(size_t bytes) {
    if (bytes > wsp.bytes) {
        if (wsp.ws && wsp.graphs > 0 && wsp.n_retired < 16) {
            wsp.retired[wsp.n_retired++] = wsp.ws;
        } else if (wsp.ws) {
            if (wsp.graphs > 0)
                cuda_fail("cuda_workspace", "grew 16 times while a step was captured", __FILE__, __LINE__);
            CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); /* earlier kernels may still read the old one */
            cuda_dev_free(wsp.ws);
        }
        wsp.bytes = cuda_workspace_rounded(bytes);
        wsp.ws = cuda_dev_alloc(wsp.bytes);
    }
    return wsp.ws;
}

extern "C" void cuda_reserve_scratch(size_t bytes) {
    if (bytes) cuda_workspace(bytes);
}

void cuda_workspace_graphs(int delta) {
    wsp.graphs += delta;
    if (wsp.graphs > 0) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
    while (wsp.n_retired) cuda_dev_free(wsp.retired[--wsp.n_retired]);
}

/* ---------------------------------------------------------------- the memory ops of kernels.h */

void *cuda_alloc(size_t bytes) {
    void *p = try_dev_alloc(bytes);
    if (p) {
        CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, cuda_stream()));
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
    }
    return p;
}

void cuda_free(void *p) { cuda_dev_free(p); }

void cuda_memset_zero(void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream()));
}

/* Both wait for the copy (the host buffer may be reused on return): in the stream's order, so they also wait for
 * the work queued before them. */
void cuda_copy_to_device(void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
}

void cuda_copy_to_host(void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
}

__global__ void f32_to_bf16_kernel(const float *src, bf16 *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void bf16_to_f32_kernel(const bf16 *src, float *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* Host fp32 -> device bf16 through an fp32 staging buffer in chunks (round to nearest even on the device). The
 * staging buffer is one whole chunk whatever n is, so that the workspace it takes is the one the estimate counts. */
#define CONVERT_CHUNK ((size_t)1 << 20)

size_t cuda_convert_workspace_bytes(void) { return CONVERT_CHUNK * sizeof(float); }

void cuda_act_from_f32(void *dst_act, const float *host_src, size_t n) {
    for (size_t at = 0; at < n; at += CONVERT_CHUNK) {
        const size_t len = n - at < CONVERT_CHUNK ? n - at : CONVERT_CHUNK;
        float *stage = (float *)cuda_workspace(cuda_convert_workspace_bytes());
        cuda_copy_to_device(stage, host_src + at, len * sizeof(float));
        f32_to_bf16_kernel<<<cdiv((long)len, 256) < 4096 ? cdiv((long)len, 256) : 4096, 256, 0, cuda_stream()>>>(
            stage, (bf16 *)dst_act + at, len);
        LAUNCH_CHECK("f32_to_bf16_kernel");
    }
}

void cuda_act_to_f32(float *host_dst, const void *src_act, size_t n) {
    for (size_t at = 0; at < n; at += CONVERT_CHUNK) {
        const size_t len = n - at < CONVERT_CHUNK ? n - at : CONVERT_CHUNK;
        float *stage = (float *)cuda_workspace(cuda_convert_workspace_bytes());
        bf16_to_f32_kernel<<<cdiv((long)len, 256) < 4096 ? cdiv((long)len, 256) : 4096, 256, 0, cuda_stream()>>>(
            (const bf16 *)src_act + at, stage, len);
        LAUNCH_CHECK("bf16_to_f32_kernel");
        cuda_copy_to_host(host_dst + at, stage, len * sizeof(float));
    }
}

void cuda_synchronize(void) { CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); }

void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    const cudaError_t err = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    CUDA_CHECK(err);
    return p;
}

void cuda_host_free(void *p) {
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
        cudaRuntimeGetVersion(&runtime);
        if (err == cudaErrorNoDevice)
            snprintf(why, len, "no GPU found (the CUDA driver sees none)");
        else if (err == cudaErrorInsufficientDriver && (driver_err != cudaSuccess || driver == 0))
            snprintf(why, len, "no GPU found (CUDA driver not loaded)");
        else if (err == cudaErrorInsufficientDriver)
            snprintf(why, len, "the CUDA driver (%d.%d) is older than this build's CUDA runtime (%d.%d): update the "
                     "driver to use the GPU", driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        else
            snprintf(why, len, "no usable GPU (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
        cudaGetLastError(); /* clear the sticky-free error so a later call does not see it */
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
