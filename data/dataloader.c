/* dataloader.c: the llm.c-format shard loader declared in dataloader.h: header validation, a deterministic per-epoch
 * shuffle (splitmix64 + Fisher-Yates; shard order per epoch, sample order per (epoch, shard)), batch assembly with one
 * shard file open at a time, and the resumable position. */
#include "data/dataloader.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define MAGIC_UINT16 20240520
#define MAGIC_UINT32 20240801
#define SHARD_VERSION 1

typedef struct Shard {
    char *path;
    uint64_t num_tokens;
    uint64_t num_samples; /* floor((num_tokens - 1) / T): samples of T+1 tokens starting at multiples of T */
    int token_bytes;      /* 2 or 4 */
} Shard;

struct DataLoader {
    int B, T, vocab_size, shuffle;
    uint64_t seed;
    Shard *shards; /* sorted by path */
    int num_shards;
    uint64_t total_tokens, total_samples;
    DataPosition pos; /* always normalized: at least B samples remain in the epoch from here */

    /* This epoch's shard order and, for each position in it, the samples before it (num_shards + 1 entries). */
    uint32_t *shard_order;
    uint64_t *samples_before;
    uint64_t order_epoch;
    int order_valid;

    /* The sample order of one shard in one epoch (shuffle only); sized for the largest shard. */
    uint32_t *sample_order;
    int sample_order_shard; /* index into shards, -1 when none */
    uint64_t sample_order_epoch;

    FILE *file;      /* the open shard */
    int file_shard;  /* its index into shards, -1 when none */
    uint8_t *buffer; /* one sample: (T+1) tokens of up to 4 bytes */
};

/* splitmix64: a small PRNG with a good output function, also used to mix seeds. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t splitmix64_next(uint64_t *state) {
    *state += 0x9e3779b97f4a7c15ULL;
    return mix64(*state);
}

/* A generator state for one stream: stream 0 orders the shards of an epoch, stream 1 + i the samples of shard i. */
static uint64_t rng_state(uint64_t seed, uint64_t epoch, uint64_t stream) {
    return mix64(mix64(mix64(seed) ^ epoch) ^ stream);
}

/* Uniform in [0, n), n > 0, by rejection (no modulo bias). */
static uint64_t rng_below(uint64_t *state, uint64_t n) {
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    for (;;) {
        uint64_t r = splitmix64_next(state);
        if (r >= threshold) return r % n;
    }
}

/* Fisher-Yates shuffle of the identity permutation of n elements. */
static void shuffled_identity(uint32_t *perm, uint64_t n, uint64_t state) {
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = rng_below(&state, i);
        uint32_t tmp = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = tmp;
    }
}

static uint32_t read_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads and validates one shard header against the file size; fills *shard except path and num_samples. */
static int validate_shard(const char *path, Shard *shard, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open shard %s: %s", path, strerror(errno));
        return -1;
    }
    uint8_t header[SHARD_HEADER_BYTES];
    size_t got = fread(header, 1, sizeof header, f);
    if (got != sizeof header) {
        snprintf(err, errlen, "shard %s: %s reading its %d-byte header (got %zu bytes)", path,
                 ferror(f) ? strerror(errno) : "file too short", SHARD_HEADER_BYTES, got);
        fclose(f);
        return -1;
    }
    if (fseeko(f, 0, SEEK_END) != 0) {
        snprintf(err, errlen, "shard %s: cannot seek to its end: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    off_t file_size = ftello(f);
    fclose(f);
    if (file_size < 0) {
        snprintf(err, errlen, "shard %s: cannot read its size: %s", path, strerror(errno));
        return -1;
    }
    int32_t magic = (int32_t)read_le32(header), version = (int32_t)read_le32(header + 4);
    int32_t count = (int32_t)read_le32(header + 8);
    if (magic != MAGIC_UINT16 && magic != MAGIC_UINT32) {
        snprintf(err, errlen,
                 "shard %s: bad magic %d (expected %d for uint16 tokens or %d for uint32 tokens): not an llm.c "
                 "token shard",
                 path, magic, MAGIC_UINT16, MAGIC_UINT32);
        return -1;
    }
    if (version != SHARD_VERSION) {
        snprintf(err, errlen, "shard %s: unsupported version %d (expected %d)", path, version, SHARD_VERSION);
        return -1;
    }
    if (count <= 0) {
        snprintf(err, errlen, "shard %s: token count %d in the header (must be > 0)", path, count);
        return -1;
    }
    shard->token_bytes = magic == MAGIC_UINT16 ? 2 : 4;
    shard->num_tokens = (uint64_t)count;
    uint64_t expected = SHARD_HEADER_BYTES + shard->num_tokens * (uint64_t)shard->token_bytes;
    if ((uint64_t)file_size != expected) {
        snprintf(err, errlen,
                 "shard %s: the header says %d tokens of %d bytes, so the file should be %llu bytes, but it is %llu "
                 "bytes (%s)",
                 path, count, shard->token_bytes, (unsigned long long)expected, (unsigned long long)file_size,
                 (uint64_t)file_size < expected ? "truncated" : "extra bytes at the end");
        return -1;
    }
    return 0;
}

/* The shard order of pos.epoch and the sample counts before each position in it. */
static void ensure_shard_order(DataLoader *dl) {
    if (dl->order_valid && dl->order_epoch == dl->pos.epoch) return;
    if (dl->shuffle)
        shuffled_identity(dl->shard_order, (uint64_t)dl->num_shards, rng_state(dl->seed, dl->pos.epoch, 0));
    else
        for (int i = 0; i < dl->num_shards; i++) dl->shard_order[i] = (uint32_t)i;
    dl->samples_before[0] = 0;
    for (int i = 0; i < dl->num_shards; i++)
        dl->samples_before[i + 1] = dl->samples_before[i] + dl->shards[dl->shard_order[i]].num_samples;
    dl->order_epoch = dl->pos.epoch;
    dl->order_valid = 1;
}

static uint64_t current_shard_samples(const DataLoader *dl) {
    return dl->pos.shard < (uint64_t)dl->num_shards ? dl->shards[dl->shard_order[dl->pos.shard]].num_samples : 0;
}

/* Moves past exhausted (or empty) shards of this epoch's order; may end at pos.shard == num_shards. */
static void skip_exhausted_shards(DataLoader *dl) {
    while (dl->pos.shard < (uint64_t)dl->num_shards && dl->pos.sample >= current_shard_samples(dl)) {
        dl->pos.shard++;
        dl->pos.sample = 0;
    }
}

/* Moves past exhausted (or empty) shards, and to the next epoch when fewer than B samples remain in this one. */
static void normalize_position(DataLoader *dl) {
    for (;;) {
        ensure_shard_order(dl);
        skip_exhausted_shards(dl);
        uint64_t consumed = dl->samples_before[dl->pos.shard] + dl->pos.sample;
        if (dl->total_samples - consumed >= (uint64_t)dl->B) return;
        dl->pos = (DataPosition){.epoch = dl->pos.epoch + 1, .shard = 0, .sample = 0};
    }
}

/* The index (in shard file) of the sample at the current position. */
static uint64_t current_sample_index(DataLoader *dl) {
    if (!dl->shuffle) return dl->pos.sample;
    int shard = (int)dl->shard_order[dl->pos.shard];
    if (dl->sample_order_shard != shard || dl->sample_order_epoch != dl->pos.epoch) {
        shuffled_identity(dl->sample_order, dl->shards[shard].num_samples,
                          rng_state(dl->seed, dl->pos.epoch, 1 + (uint64_t)shard));
        dl->sample_order_shard = shard;
        dl->sample_order_epoch = dl->pos.epoch;
    }
    return dl->sample_order[dl->pos.sample];
}

/* Reads sample s of shard into inputs[0..T) and targets[0..T), checking the token ids. */
static int read_sample(DataLoader *dl, int shard, uint64_t s, int32_t *inputs, int32_t *targets, char *err,
                       size_t errlen) {
    const Shard *sh = &dl->shards[shard];
    if (dl->file_shard != shard) {
        if (dl->file) fclose(dl->file);
        dl->file_shard = -1;
        dl->file = fopen(sh->path, "rb");
        if (!dl->file) {
            snprintf(err, errlen, "cannot open shard %s: %s", sh->path, strerror(errno));
            return -1;
        }
        dl->file_shard = shard;
    }
    int T = dl->T, nbytes = sh->token_bytes;
    uint64_t first_token = s * (uint64_t)T;
    if (fseeko(dl->file, (off_t)(SHARD_HEADER_BYTES + first_token * (uint64_t)nbytes), SEEK_SET) != 0) {
        snprintf(err, errlen, "shard %s: cannot seek to token %llu: %s", sh->path, (unsigned long long)first_token,
                 strerror(errno));
        return -1;
    }
    size_t want = (size_t)(T + 1) * (size_t)nbytes;
    size_t got = fread(dl->buffer, 1, want, dl->file);
    if (got != want) {
        snprintf(err, errlen, "shard %s: reading tokens %llu..%llu: %s", sh->path, (unsigned long long)first_token,
                 (unsigned long long)(first_token + (uint64_t)T),
                 ferror(dl->file) ? strerror(errno) : "unexpected end of file (did the file change?)");
        return -1;
    }
    for (int t = 0; t <= T; t++) {
        const uint8_t *p = dl->buffer + (size_t)t * (size_t)nbytes;
        uint32_t id = nbytes == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : read_le32(p);
        if (id >= (uint32_t)dl->vocab_size) {
            snprintf(err, errlen,
                     "shard %s: token %llu has id %u, outside the vocabulary of %d ids: the data was probably "
                     "tokenized for another vocabulary",
                     sh->path, (unsigned long long)(first_token + (uint64_t)t), id, dl->vocab_size);
            return -1;
        }
        if (t < T) inputs[t] = (int32_t)id;
        if (t > 0) targets[t - 1] = (int32_t)id;
    }
    return 0;
}

DataLoader *dataloader_open(const char *pattern, int B, int T, int vocab_size, int shuffle, uint64_t seed,
                            char *err, size_t errlen) {
    if (B <= 0 || T <= 0 || vocab_size <= 0) {
        snprintf(err, errlen, "data loader: B (%d), T (%d) and vocab_size (%d) must be positive", B, T, vocab_size);
        return NULL;
    }
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0) {
        snprintf(err, errlen, "%s '%s'", rc == GLOB_NOMATCH ? "no token shard files match the pattern"
                                         : rc == GLOB_NOSPACE ? "out of memory expanding the pattern"
                                                              : "read error expanding the pattern",
                 pattern);
        if (rc != GLOB_NOMATCH) globfree(&g);
        return NULL;
    }
    if (g.gl_pathc > (size_t)INT32_MAX) {
        snprintf(err, errlen, "too many files match '%s' (%zu)", pattern, g.gl_pathc);
        globfree(&g);
        return NULL;
    }
    DataLoader *dl = calloc(1, sizeof *dl);
    if (!dl) {
        snprintf(err, errlen, "data loader: out of memory");
        globfree(&g);
        return NULL;
    }
    dl->B = B;
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->shuffle = shuffle != 0;
    dl->seed = seed;
    dl->sample_order_shard = -1;
    dl->file_shard = -1;
    dl->num_shards = (int)g.gl_pathc;
    dl->shards = calloc((size_t)dl->num_shards, sizeof *dl->shards);
    dl->shard_order = malloc((size_t)dl->num_shards * sizeof *dl->shard_order);
    dl->samples_before = malloc(((size_t)dl->num_shards + 1) * sizeof *dl->samples_before);
    dl->buffer = malloc((size_t)(T + 1) * 4);
    if (!dl->shards || !dl->shard_order || !dl->samples_before || !dl->buffer) {
        snprintf(err, errlen, "data loader: out of memory for %d shards", dl->num_shards);
        goto fail;
    }
    uint64_t max_samples = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        Shard *sh = &dl->shards[i];
        sh->path = strdup(g.gl_pathv[i]);
        if (!sh->path) {
            snprintf(err, errlen, "data loader: out of memory");
            goto fail;
        }
        if (validate_shard(sh->path, sh, err, errlen) != 0) goto fail;
        sh->num_samples = (sh->num_tokens - 1) / (uint64_t)T;
        dl->total_tokens += sh->num_tokens;
        dl->total_samples += sh->num_samples;
        if (sh->num_samples > max_samples) max_samples = sh->num_samples;
    }
    if (dl->total_samples < (uint64_t)B) {
        snprintf(err, errlen,
                 "the %d shard(s) matching '%s' (%s%s) hold %llu tokens, %llu samples of T+1 = %d tokens: fewer than "
                 "one batch of B = %d",
                 dl->num_shards, pattern, dl->shards[0].path, dl->num_shards > 1 ? ", ..." : "",
                 (unsigned long long)dl->total_tokens, (unsigned long long)dl->total_samples, T + 1, B);
        goto fail;
    }
    if (dl->shuffle) {
        dl->sample_order = malloc((size_t)max_samples * sizeof *dl->sample_order);
        if (!dl->sample_order) {
            snprintf(err, errlen, "data loader: out of memory for a permutation of %llu samples",
                     (unsigned long long)max_samples);
            goto fail;
        }
    }
    globfree(&g);
    normalize_position(dl);
    return dl;
fail:
    globfree(&g);
    dataloader_close(dl);
    return NULL;
}

void dataloader_close(DataLoader *dl) {
    if (!dl) return;
    if (dl->file) fclose(dl->file);
    if (dl->shards)
        for (int i = 0; i < dl->num_shards; i++) free(dl->shards[i].path);
    free(dl->shards);
    free(dl->shard_order);
    free(dl->samples_before);
    free(dl->sample_order);
    free(dl->buffer);
    free(dl);
}

int dataloader_next(DataLoader *dl, int32_t *inputs, int32_t *targets, char *err, size_t errlen) {
    DataPosition start = dl->pos;
    for (int b = 0; b < dl->B; b++) {
        /* normalize_position left at least B samples in this epoch, so pos stays inside the shard order */
        int shard = (int)dl->shard_order[dl->pos.shard];
        uint64_t s = current_sample_index(dl);
        size_t offset = (size_t)b * (size_t)dl->T;
        if (read_sample(dl, shard, s, inputs + offset, targets + offset, err, errlen) != 0) {
            dl->pos = start;
            return -1;
        }
        dl->pos.sample++;
        skip_exhausted_shards(dl);
    }
    normalize_position(dl);
    return 0;
}

DataPosition dataloader_tell(const DataLoader *dl) { return dl->pos; }

int dataloader_check_next(DataLoader *dl, uint64_t n, int32_t *inputs, int32_t *targets, char *err, size_t errlen) {
    const DataPosition at = dl->pos;
    int rc = 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) rc = dataloader_next(dl, inputs, targets, err, errlen);
    dl->pos = at;
    ensure_shard_order(dl);
    return rc;
}

int dataloader_seek(DataLoader *dl, DataPosition pos, char *err, size_t errlen) {
    if (pos.shard >= (uint64_t)dl->num_shards) {
        snprintf(err, errlen, "data position (epoch %llu, shard %llu, sample %llu) is outside the data: there are %d "
                 "shards", (unsigned long long)pos.epoch, (unsigned long long)pos.shard,
                 (unsigned long long)pos.sample, dl->num_shards);
        return -1;
    }
    DataPosition old = dl->pos;
    dl->pos = pos;
    ensure_shard_order(dl);
    uint64_t samples = current_shard_samples(dl);
    if (pos.sample >= samples) {
        snprintf(err, errlen,
                 "data position (epoch %llu, shard %llu, sample %llu) is outside the data: that shard (%s) holds %llu "
                 "samples",
                 (unsigned long long)pos.epoch, (unsigned long long)pos.shard, (unsigned long long)pos.sample,
                 dl->shards[dl->shard_order[pos.shard]].path, (unsigned long long)samples);
        dl->pos = old;
        ensure_shard_order(dl);
        return -1;
    }
    normalize_position(dl);
    return 0;
}

void dataloader_rewind(DataLoader *dl) {
    dl->pos = (DataPosition){0, 0, 0};
    normalize_position(dl);
}

int dataloader_num_shards(const DataLoader *dl) { return dl->num_shards; }
uint64_t dataloader_num_tokens(const DataLoader *dl) { return dl->total_tokens; }
uint64_t dataloader_batches_per_epoch(const DataLoader *dl) { return dl->total_samples / (uint64_t)dl->B; }
