/* fuzz_state.c: libFuzzer harness of the state.bin reader (state_read, what --resume loads) for the fuzz model; the
 * input is the file. Built twice: fuzz_state reads the input as it is, and fuzz_state_crc (FUZZ_FIX_CRCS) first
 * stores the right CRC32 in every CRC field that it can find by following the layout, so that mutations get past the
 * checksums into the sections. Property: a file that reads back is written again by state_write, from what was read,
 * byte for byte (when its config section holds no NUL byte, which the text it is read into cannot keep; a version-1
 * file is written as version 2, so its version field and header CRC are set to those of version 2 first). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "persist/state_file.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_model.h"

#define HEADER_BYTES 72
#define SECTION_HEADER_BYTES 32

static Model model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    ModelConfig c = fuzz_model_config(0);
    create_model(&model, &c, 1, 0);
    return 0;
}

#ifdef FUZZ_FIX_CRCS
static void store_crc(uint8_t *at, const uint8_t *from, size_t n) {
    uint32_t crc = (uint32_t)crc32(0, from, (uInt)n);
    memcpy(at, &crc, 4);
}

/* The header's CRC, then each section's header CRC and payload CRC, for as far as the file holds them. */
static void fix_crcs(uint8_t *b, size_t size) {
    if (size < HEADER_BYTES) return;
    store_crc(b + 64, b, 64);
    for (size_t at = HEADER_BYTES; size - at >= SECTION_HEADER_BYTES;) {
        uint8_t *h = b + at;
        store_crc(h + 28, h, 28);
        uint64_t n;
        memcpy(&n, h + 16, 8);
        at += SECTION_HEADER_BYTES;
        if (n > size - at || size - at - n < 4) return;
        store_crc(b + at + n, b + at, (size_t)n);
        at += n + 4;
    }
}
#endif

/* The state read from the file is written again; the two files must be the same (file is changed to version 2). */
static void check_write_back(const char *dir, uint8_t *file, size_t size, const TrainState *s,
                             const char *config_json, const StateInfo *info) {
    size_t params_bytes = model.table.n_params * 4, master_bytes = info->master_in_weights ? 16 : params_bytes;
    size_t fixed = HEADER_BYTES + 6 * (SECTION_HEADER_BYTES + 4) + master_bytes + 2 * params_bytes + 40 + 8;
    if (strlen(config_json) != size - fixed) return; /* a NUL in the config section */
    if (info->version == 1) {
        file[8] = 2;
        const uint32_t crc = (uint32_t)crc32(0, file, 64);
        memcpy(file + 64, &crc, 4);
    }
    StateData d = host_state_data(&model, *s, config_json);
    if (info->master_in_weights) {
        d.master = NULL;
        d.weights_bytes = info->weights_bytes;
        d.weights_crc = info->weights_crc;
    }
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/state_again.bin", dir);
    FUZZ_ASSERT(state_write(path, &d, err, sizeof(err)) == 0, "state_write: %s", err);
    size_t n;
    unsigned char *again = read_bytes(path, &n);
    FUZZ_ASSERT(again && n == size && memcmp(again, file, size) == 0,
                "a state.bin that was read is not written back the same (%zu bytes, then %zu)", size, n);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *file = malloc(size ? size : 1);
    if (!file) return 0;
    memcpy(file, data, size);
#ifdef FUZZ_FIX_CRCS
    fix_crcs(file, size);
#endif
    const char *dir = fuzz_scratch_dir();
    fuzz_write_file(dir, "state.bin", (FuzzPart){file, size});
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/state.bin", dir);
    TrainState s;
    char *config_json = NULL;
    StateInfo info;
    if (state_read(path, &model, &s, &config_json, &info, err, sizeof(err)) == 0) {
        FUZZ_ASSERT(config_json, "state_read succeeded without the config text");
        check_write_back(dir, file, size, &s, config_json, &info);
    } else {
        FUZZ_ASSERT(!config_json, "state_read failed but left the config text: %s", err);
    }
    free(config_json);
    free(file);
    return 0;
}
