/* cpu_memory.c: host memory for the CPU backend (aligned zeroed allocation, copies, fp32 "act" conversions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define CPU_ALIGN 64

static void out_of_memory(size_t bytes) {
    fprintf(stderr, "kernels_cpu: out of memory allocating %zu bytes\n", bytes);
    abort();
}

void *cpu_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory(bytes);
    return p;
}

void *cpu_alloc(size_t bytes) {
    /* aligned_alloc wants a size that is a multiple of the alignment (and nonzero). */
    const size_t padded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, padded ? padded : CPU_ALIGN);
    if (!p) out_of_memory(bytes);
    memset(p, 0, padded);
    return p;
}

void cpu_free(void *p) { free(p); }

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

size_t cpu_peak_bytes(void) { return 0; /* not tracked on the CPU */ }
