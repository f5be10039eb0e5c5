/* cpu_memory.c: host memory for the CPU backend: counted allocation (buffers and the ops' scratch, with the live and
 * peak bytes), copies, fp32 "act" conversions. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define CPU_ALIGN 64

/* The CPU backend's context: what its allocations hold now and at most. */
struct KernelContext {
    atomic_size_t bytes_live, bytes_peak;
};

KernelContext *cpu_context_create(void) {
    KernelContext *kc = calloc(1, sizeof(*kc));
    if (!kc) {
        fprintf(stderr, "error: out of host memory: the CPU backend's context could not be allocated\n");
        exit(1);
    }
    return kc;
}

void cpu_context_free(KernelContext *kc) { free(kc); }

/* Every allocation carries its size in a header of CPU_ALIGN bytes before the pointer it returns, so that cpu_free
 * counts it out again; the ops allocate scratch from several threads at once. */
static void *counted_alloc(KernelContext *kc, size_t bytes) {
    if (bytes > SIZE_MAX - 2 * CPU_ALIGN) return NULL;
    /* aligned_alloc wants a size that is a multiple of the alignment */
    const size_t padded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    char *base = aligned_alloc(CPU_ALIGN, CPU_ALIGN + padded);
    if (!base) return NULL;
    memcpy(base, &bytes, sizeof(bytes));
    const size_t live = atomic_fetch_add(&kc->bytes_live, bytes) + bytes;
    size_t peak = atomic_load(&kc->bytes_peak);
    while (live > peak && !atomic_compare_exchange_weak(&kc->bytes_peak, &peak, live)) {
    }
    return base + CPU_ALIGN;
}

void *cpu_alloc(KernelContext *kc, size_t bytes) {
    void *p = counted_alloc(kc, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void *cpu_scratch(KernelContext *kc, size_t bytes) {
    void *p = counted_alloc(kc, bytes);
    if (!p) {
        fprintf(stderr,
                "error: out of host memory: the CPU backend's scratch of %.1f MiB could not be allocated "
                "(%.1f MiB held); lower batch_size or seq_len\n",
                bytes / 1048576.0, atomic_load(&kc->bytes_live) / 1048576.0);
        exit(1);
    }
    return p;
}

void cpu_free(KernelContext *kc, void *p) {
    if (!p) return;
    char *base = (char *)p - CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, base, sizeof(bytes));
    atomic_fetch_sub(&kc->bytes_live, bytes);
    free(base);
}

size_t cpu_peak_bytes(KernelContext *kc) { return atomic_load(&kc->bytes_peak); }

void cpu_memset_zero(KernelContext *kc, void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

/* Host and "device" are the same memory: both copy directions and both act conversions are memcpy. */
void cpu_copy(KernelContext *kc, void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

void cpu_act_from_f32(KernelContext *kc, void *dst_act, const float *host_src, size_t n) {
    cpu_copy(kc, dst_act, host_src, n * sizeof(float));
}

void cpu_act_to_f32(KernelContext *kc, float *host_dst, const void *src_act, size_t n) {
    cpu_copy(kc, host_dst, src_act, n * sizeof(float));
}

void cpu_synchronize(KernelContext *kc) {}
