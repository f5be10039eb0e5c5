/* crc32.h: the CRC32 (zlib's) of a buffer of any length, continuing from crc (0 to start): what state.bin's sections
 * and the reference to model.safetensors carry. crc32_parallel gives the same value, computed in blocks on all cores
 * and combined (zlib's crc32_combine), for the gigabytes of a checkpoint. */
#ifndef CRC32_H
#define CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

static inline uint32_t crc32_bytes(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) { /* zlib's length is a uInt */
        size_t take = n > (1u << 30) ? (1u << 30) : n;
        crc = (uint32_t)crc32(crc, b, (uInt)take);
        b += take;
        n -= take;
    }
    return crc;
}

uint32_t crc32_parallel(uint32_t crc, const void *p, size_t n);

#endif
