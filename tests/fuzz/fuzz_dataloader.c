/* fuzz_dataloader.c: libFuzzer harness of the token-shard reader and the data loader's position (dataloader_open,
 * _seek, _next, _tell). The input is split at FUZZ_SEPARATOR: the first part holds the loader's settings (below), each
 * further part is a shard file (shard_1.bin, shard_2.bin, ...). Settings, bytes of the first part (missing ones 0):
 *   0: B = 1 + b % 8    1: T = 1 + b % 64    2-4: vocab_size = 1 + u24    5: bit 0 shuffle, bit 1 seek first
 *   6-9: seed (u32)     10: batches to read = b % 8    11-34: the position to seek to, 3 x u64 (epoch, shard, sample)
 * Properties: every id of a batch is inside the vocabulary; a batch read again after seeking back to the position
 * before it (what --resume does) is the same batch; a position the loader gives (tell) is one it accepts (seek). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataloader.h"
#include "tests/fuzz/fuzz_input.h"

#define SETTINGS_BYTES 35

typedef struct Settings {
    int B, T, vocab_size, shuffle, seek_first, batches;
    uint64_t seed;
    DataPosition seek_to;
} Settings;

static Settings read_settings(FuzzPart p) {
    uint8_t b[SETTINGS_BYTES] = {0};
    memcpy(b, p.data, p.size < SETTINGS_BYTES ? p.size : SETTINGS_BYTES);
    Settings s = {.B = 1 + b[0] % 8, .T = 1 + b[1] % 64, .vocab_size = 1 + (b[2] | b[3] << 8 | b[4] << 16),
                  .shuffle = b[5] & 1, .seek_first = (b[5] >> 1) & 1, .batches = b[10] % 8};
    uint32_t seed;
    memcpy(&seed, b + 6, 4);
    s.seed = seed;
    memcpy(&s.seek_to.epoch, b + 11, 8);
    memcpy(&s.seek_to.shard, b + 19, 8);
    memcpy(&s.seek_to.sample, b + 27, 8);
    return s;
}

static int same_position(DataPosition a, DataPosition b) {
    return a.epoch == b.epoch && a.shard == b.shard && a.sample == b.sample;
}

/* Reads one batch, checks its ids, then seeks back and reads it again. 0, or -1 when the loader reported an error. */
static int check_batch(DataLoader *dl, const Settings *s, int32_t *in, int32_t *tg, int32_t *in2, int32_t *tg2) {
    char err[1024];
    size_t n = (size_t)s->B * (size_t)s->T;
    DataPosition before = dataloader_tell(dl);
    if (dataloader_next(dl, in, tg, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(same_position(dataloader_tell(dl), before), "a failed batch moved the position");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT(in[i] >= 0 && in[i] < s->vocab_size && tg[i] >= 0 && tg[i] < s->vocab_size,
                    "batch id %d/%d outside the vocabulary of %d", in[i], tg[i], s->vocab_size);
    DataPosition after = dataloader_tell(dl);
    FUZZ_ASSERT(dataloader_seek(dl, before, err, sizeof(err)) == 0, "seek to a position tell gave: %s", err);
    FUZZ_ASSERT(dataloader_next(dl, in2, tg2, err, sizeof(err)) == 0, "the same batch read again: %s", err);
    FUZZ_ASSERT(memcmp(in, in2, n * sizeof(int32_t)) == 0 && memcmp(tg, tg2, n * sizeof(int32_t)) == 0,
                "a batch read again after seeking back differs");
    FUZZ_ASSERT(same_position(dataloader_tell(dl), after), "reading a batch again ends at another position");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzPart parts[FUZZ_MAX_PARTS];
    int n_parts = fuzz_split(data, size, parts, FUZZ_MAX_PARTS);
    Settings s = read_settings(parts[0]);
    const char *dir = fuzz_scratch_dir();
    for (int i = 1; i < n_parts; i++) {
        char name[64];
        snprintf(name, sizeof(name), "shard_%d.bin", i);
        fuzz_write_file(dir, name, parts[i]);
    }
    char pattern[512], err[1024];
    snprintf(pattern, sizeof(pattern), "%s/shard_*.bin", dir);
    DataLoader *dl = dataloader_open(pattern, s.B, s.T, s.vocab_size, s.shuffle, s.seed, err, sizeof(err));
    if (!dl) return 0;
    size_t n = (size_t)s.B * (size_t)s.T;
    int32_t *buf = malloc(4 * n * sizeof(int32_t));
    if (!buf) {
        dataloader_close(dl);
        return 0;
    }
    if (s.seek_first) {
        DataPosition before = dataloader_tell(dl);
        if (dataloader_seek(dl, s.seek_to, err, sizeof(err)) != 0)
            FUZZ_ASSERT(same_position(dataloader_tell(dl), before), "a refused seek moved the position");
    }
    for (int b = 0; b < s.batches; b++)
        if (check_batch(dl, &s, buf, buf + n, buf + 2 * n, buf + 3 * n) != 0) break;
    free(buf);
    dataloader_close(dl);
    return 0;
}
