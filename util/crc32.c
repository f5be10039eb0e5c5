/* crc32.c: the CRC32 of a large buffer on all cores (see crc32.h): blocks of CRC_BLOCK bytes each get their CRC on
 * some thread, then the block CRCs are combined in order, so the value is crc32_bytes' whatever the thread count. */
#include "util/crc32.h"

#include <stdlib.h>

#define CRC_BLOCK ((size_t)1 << 20)

uint32_t crc32_parallel(uint32_t crc, const void *p, size_t n) {
    const size_t blocks = n / CRC_BLOCK;
    uint32_t *block_crc = blocks >= 4 ? malloc(blocks * sizeof(uint32_t)) : NULL;
    if (!block_crc) return crc32_bytes(crc, p, n); /* small, or no memory for the block CRCs */
    const unsigned char *b = p;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)blocks; i++) block_crc[i] = crc32_bytes(0, b + (size_t)i * CRC_BLOCK, CRC_BLOCK);
    for (size_t i = 0; i < blocks; i++) crc = (uint32_t)crc32_combine(crc, block_crc[i], (z_off_t)CRC_BLOCK);
    free(block_crc);
    return crc32_bytes(crc, b + blocks * CRC_BLOCK, n - blocks * CRC_BLOCK);
}
