/* cpu_memory.c: host memory for the CPU backend: counted allocation (buffers and the ops' scratch, with the live and
 * peak bytes), copies, fp32 "act" conversions. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define CPU_ALIGN 64

/* Every allocation carries its size in a header of CPU_ALIGN bytes before the pointer it returns, so that cpu_free
 * counts it out again; the ops allocate scratch from several threads at once. */
static atomic_size_t bytes_live, bytes_peak;

static void *counted_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - 2 * CPU_ALIGN) return NULL;
    /* aligned_alloc wants a size that is a multiple of the alignment */
    const size_t padded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    char *base = aligned_alloc(CPU_ALIGN, CPU_ALIGN + padded);
    if (!base) return NULL;
    memcpy(base, &bytes, sizeof(bytes));
    const size_t live = atomic_fetch_add(&bytes_live, bytes) + bytes;
    size_t peak = atomic_load(&bytes_peak);
    while (live > peak && !atomic_compare_exchange_weak(&bytes_peak, &peak, live)) {
    }
    return base + CPU_ALIGN;
}

void *cpu_alloc(size_t bytes) {
    void *p = counted_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void *cpu_scratch(size_t bytes) {
    void *p = counted_alloc(bytes);
    if (!p) {
        fprintf(stderr, "error: out of host memory: the CPU backend's scratch of %.1f MiB could not be allocated "
                        "(%.1f MiB held); lower batch_size or seq_len\n",
                bytes / 1048576.0, atomic_load(&bytes_live) / 1048576.0);
        exit(1);
    }
    return p;
}

void cpu_free(void *p) {
    if (!p) return;
    char *base = (char *)p - CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, base, sizeof(bytes));
    atomic_fetch_sub(&bytes_live, bytes);
    free(base);
}

size_t cpu_peak_bytes(void) { return atomic_load(&bytes_peak); }

void cpu_memset_zero(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

/* Host and "device" are the same memory: both copy directions and both act conversions are memcpy. */
void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

void cpu_act_from_f32(void *dst_act, const float *host_src, size_t n) {
    cpu_copy(dst_act, host_src, n * sizeof(float));
}

void cpu_act_to_f32(float *host_dst, const void *src_act, size_t n) { cpu_copy(host_dst, src_act, n * sizeof(float)); }

void cpu_synchronize(void) {}
