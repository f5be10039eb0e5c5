/* fuzz_safetensors.c: libFuzzer harness of the safetensors reader (st_open, st_read_f32): the input is a
 * model.safetensors. Property: every tensor of a file that opens reads back (in chunks) as exactly the values of its
 * bytes in the input (F32 bitwise, F16 and BF16 through the conversions); other dtypes are refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "persist/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

#define CHUNK 1000

/* The value of element i of raw data of dtype d, as st_read_f32 should give it. */
static float expected_value(const uint8_t *raw, StDtype d, uint64_t i) {
    if (d == ST_F32) {
        float v;
        memcpy(&v, raw + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, raw + 2 * i, 2);
    return d == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
}

static void check_tensor(StFile *f, const StTensorInfo *t, const uint8_t *data_section) {
    char err[1024];
    static float out[CHUNK];
    uint64_t numel = st_numel(t);
    int readable = t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16;
    if (!readable) {
        FUZZ_ASSERT(numel == 0 || st_read_f32(f, t, 0, 1, out, err, sizeof(err)) != 0,
                    "tensor %s of dtype %s was read", t->name, st_dtype_name(t->dtype));
        return;
    }
    const uint8_t *raw = data_section + t->begin;
    for (uint64_t first = 0; first < numel; first += CHUNK) {
        size_t n = numel - first < CHUNK ? (size_t)(numel - first) : CHUNK;
        FUZZ_ASSERT(st_read_f32(f, t, first, n, out, err, sizeof(err)) == 0, "tensor %s: %s", t->name, err);
        for (size_t i = 0; i < n; i++) {
            float want = expected_value(raw, t->dtype, first + i);
            FUZZ_ASSERT(memcmp(&out[i], &want, 4) == 0, "tensor %s element %llu: read %g, the file holds %g",
                        t->name, (unsigned long long)(first + i), out[i], want);
        }
    }
    FUZZ_ASSERT(st_read_f32(f, t, numel, 1, out, err, sizeof(err)) != 0, "tensor %s: read past its end", t->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_scratch_dir();
    fuzz_write_file(dir, "model.safetensors", (FuzzPart){data, size});
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    StFile *f = st_open(path, err, sizeof(err));
    if (!f) return 0;
    uint64_t header_len;
    memcpy(&header_len, data, 8);
    for (int i = 0; i < st_count(f); i++) {
        const StTensorInfo *t = st_tensor(f, i);
        FUZZ_ASSERT(st_find(f, t->name) == t, "tensor %s is not found by its name", t->name);
        check_tensor(f, t, data + 8 + header_len);
    }
    st_close(f);
    return 0;
}
