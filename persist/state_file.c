/* state_file.c: writing state.bin from host memory and validating it as it is read (layout in state_file.h). Large
 * sections are read through one host buffer into the device, with a running CRC32. */
#include "persist/state_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/crc32.h"
#include "util/fsutil.h"

#define MAGIC "L3STATE"
#define VERSION 2
#define MASTER_FILE_BYTES 16
#define HEADER_BYTES 72
#define SECTION_HEADER_BYTES 32
#define N_SECTIONS 6
#define DATA_POSITION_BYTES 40
#define MAX_CONFIG_BYTES (16u << 20)
#define STREAM_BYTES (16u << 20)

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The model shape recorded in the header, in order. */
#define N_SHAPE 8
static const char *SHAPE_KEYS[N_SHAPE] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                          "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                                          "tie_word_embeddings"};
static void shape_of(const ModelConfig *c, int32_t *s) {
    int32_t v[N_SHAPE] = {c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
                          c->num_key_value_heads, c->head_dim, c->vocab_size, c->tie_word_embeddings};
    memcpy(s, v, sizeof(v));
}

/* ---------------------------------------------------------------- writing */

typedef struct Out {
    FsStream file;
    uint32_t crc; /* of the section's payload so far */
} Out;

static void out_bytes(Out *o, const void *p, size_t n) { fs_stream_write(&o->file, p, n); }

static void section_begin(Out *o, const char *name, uint64_t n_bytes) {
    unsigned char h[SECTION_HEADER_BYTES] = {0};
    memcpy(h, name, strlen(name));
    put_u64(h + 16, n_bytes);
    put_u32(h + 28, crc32_bytes(0, h, 28));
    out_bytes(o, h, sizeof(h));
    o->crc = 0;
}

static void section_data(Out *o, const void *p, size_t n) {
    o->crc = crc32_parallel(o->crc, p, n);
    out_bytes(o, p, n);
}

static void section_end(Out *o) {
    unsigned char c[4];
    put_u32(c, o->crc);
    out_bytes(o, c, 4);
}

static void section_bytes(Out *o, const char *name, const void *p, size_t n) {
    section_begin(o, name, n);
    section_data(o, p, n);
    section_end(o);
}

int state_write(const char *path, const StateData *d, char *err, size_t errlen) {
    Out o = {{0}, 0};
    if (fs_stream_open(&o.file, path, err, errlen)) return -1;
    const TrainState *s = &d->state;
    unsigned char h[HEADER_BYTES] = {0};
    memcpy(h, MAGIC, sizeof(MAGIC));
    put_u32(h + 8, VERSION);
    put_u32(h + 12, N_SECTIONS);
    put_u64(h + 16, s->step);
    put_u64(h + 24, d->n_params);
    int32_t shape[N_SHAPE];
    shape_of(d->cfg, shape);
    memcpy(h + 32, shape, sizeof(shape));
    put_u32(h + 64, crc32_bytes(0, h, 64));
    out_bytes(&o, h, sizeof(h));
    size_t bytes = d->n_params * sizeof(float);
    if (d->master) {
        section_bytes(&o, "master", d->master, bytes);
    } else {
        unsigned char ref[MASTER_FILE_BYTES] = {0};
        put_u64(ref, d->weights_bytes);
        put_u32(ref + 8, d->weights_crc);
        section_bytes(&o, "master_file", ref, sizeof(ref));
    }
    section_bytes(&o, "adam_m", d->adam_m, bytes);
    section_bytes(&o, "adam_v", d->adam_v, bytes);
    unsigned char pos[DATA_POSITION_BYTES];
    uint64_t fields[5] = {s->data.epoch, s->data.shard, s->data.sample, s->data_shards, s->data_tokens};
    for (int i = 0; i < 5; i++) put_u64(pos + 8 * i, fields[i]);
    section_bytes(&o, "data_position", pos, sizeof(pos));
    unsigned char rng[8];
    put_u64(rng, s->sample_rng);
    section_bytes(&o, "sampler_rng", rng, sizeof(rng));
    section_bytes(&o, "config", d->config_json, strlen(d->config_json));
    return fs_stream_close(&o.file, err, errlen);
}

/* ---------------------------------------------------------------- reading */

typedef struct In {
    FILE *f;
    const char *path;
    uint64_t size, at;  /* file size, read offset */
    unsigned char *buf; /* payloads stream through it */
    size_t buf_bytes;   /* STREAM_BYTES, or a multiple of 4 above the file size when that is smaller */
    uint32_t version;   /* from the header */
} In;

/* Called with consecutive pieces of a section's payload. */
typedef void (*Consume)(void *ctx, const void *p, size_t offset, size_t n);

typedef struct DeviceTarget {
    Model *m;
    float *dst;    /* an Adam buffer, or NULL: the master weights (through model_set_master) */
} DeviceTarget;

static void consume_device(void *ctx, const void *p, size_t offset, size_t n) {
    DeviceTarget *t = ctx;
    if (!t->dst) model_set_master(t->m, p, offset / 4, n / 4);
    else
        t->m->k->copy_to_device(t->m->kc, t->dst + offset / 4, p, n);
}

static void consume_memory(void *ctx, const void *p, size_t offset, size_t n) { memcpy((char *)ctx + offset, p, n); }

static int read_exact(In *in, void *p, size_t n, char *err, size_t errlen) {
    if (fread(p, 1, n, in->f) != n) {
        snprintf(err, errlen, "state %s: read error at byte %llu: %s", in->path, (unsigned long long)in->at,
                 ferror(in->f) ? strerror(errno) : "unexpected end of file");
        return -1;
    }
    in->at += n;
    return 0;
}

/* Reads the section `name`, which must hold `want` bytes (or at most `max` when want == 0), feeding its payload to
 * consume, and checks its CRCs. *n_bytes gets the payload size. */
static int read_section(In *in, const char *name, uint64_t want, uint64_t max, Consume consume, void *ctx,
                        uint64_t *n_bytes, char *err, size_t errlen) {
    unsigned char h[SECTION_HEADER_BYTES];
    if (in->size - in->at < SECTION_HEADER_BYTES) {
        snprintf(err, errlen, "state %s: truncated: the file ends at byte %llu, before section \"%s\"", in->path,
                 (unsigned long long)in->size, name);
        return -1;
    }
    uint64_t start = in->at;
    if (read_exact(in, h, sizeof(h), err, errlen)) return -1;
    if (get_u32(h + 28) != crc32_bytes(0, h, 28)) {
        snprintf(err, errlen, "state %s: section \"%s\": its header at byte %llu fails its CRC check: the file is "
                 "damaged", in->path, name, (unsigned long long)start);
        return -1;
    }
    char padded[16] = {0};
    memcpy(padded, name, strlen(name));
    if (strncmp((const char *)h, name, 16) != 0) {
        snprintf(err, errlen, "state %s: expected section \"%s\" at byte %llu, found \"%.16s\"", in->path, name,
                 (unsigned long long)start, (const char *)h);
        return -1;
    }
    if (memcmp(h, padded, 16) != 0 || get_u32(h + 24) != 0) {
        snprintf(err, errlen, "state %s: section \"%s\": its header at byte %llu has other bytes than zeros after "
                 "the name or in the reserved field: not a file this trainer wrote", in->path, name,
                 (unsigned long long)start);
        return -1;
    }
    uint64_t n = get_u64(h + 16);
    if ((want && n != want) || (!want && n > max)) {
        snprintf(err, errlen, "state %s: section \"%s\" holds %llu bytes, expected %llu%s", in->path, name,
                 (unsigned long long)n, (unsigned long long)(want ? want : max),
                 want ? " (a state of another model?)" : " at most");
        return -1;
    }
    if (in->size - in->at < n + 4) {
        snprintf(err, errlen, "state %s: truncated: section \"%s\" needs %llu bytes from byte %llu, but the file "
                 "ends at byte %llu", in->path, name, (unsigned long long)(n + 4), (unsigned long long)in->at,
                 (unsigned long long)in->size);
        return -1;
    }
    uint32_t crc = 0;
    for (uint64_t off = 0; off < n; off += in->buf_bytes) {
        size_t len = (size_t)(n - off < in->buf_bytes ? n - off : in->buf_bytes);
        if (read_exact(in, in->buf, len, err, errlen)) return -1;
        crc = crc32_parallel(crc, in->buf, len);
        consume(ctx, in->buf, (size_t)off, len);
    }
    unsigned char c[4];
    if (read_exact(in, c, 4, err, errlen)) return -1;
    if (get_u32(c) != crc) {
        snprintf(err, errlen, "state %s: section \"%s\": CRC mismatch (stored %08x, computed %08x): the file is "
                 "damaged", in->path, name, get_u32(c), crc);
        return -1;
    }
    *n_bytes = n;
    return 0;
}

static int read_header(In *in, const Model *m, TrainState *s, char *err, size_t errlen) {
    unsigned char h[HEADER_BYTES];
    if (in->size < HEADER_BYTES) {
        snprintf(err, errlen, "state %s: truncated: %llu bytes, shorter than the %d-byte header", in->path,
                 (unsigned long long)in->size, HEADER_BYTES);
        return -1;
    }
    if (read_exact(in, h, sizeof(h), err, errlen)) return -1;
    if (memcmp(h, MAGIC, sizeof(MAGIC)) != 0) {
        snprintf(err, errlen, "state %s: bad magic: not a trainer state file", in->path);
        return -1;
    }
    if (get_u32(h + 64) != crc32_bytes(0, h, 64)) {
        snprintf(err, errlen, "state %s: the header fails its CRC check: the file is damaged", in->path);
        return -1;
    }
    if (get_u32(h + 68) != 0) {
        snprintf(err, errlen, "state %s: the header's reserved field (byte 68) is not zero: the file is damaged",
                 in->path);
        return -1;
    }
    if (get_u32(h + 8) < 1 || get_u32(h + 8) > VERSION || get_u32(h + 12) != N_SECTIONS) {
        snprintf(err, errlen, "state %s: version %u with %u sections; this trainer reads versions 1 to %d with %d",
                 in->path, get_u32(h + 8), get_u32(h + 12), VERSION, N_SECTIONS);
        return -1;
    }
    in->version = get_u32(h + 8);
    int32_t saved[N_SHAPE], ours[N_SHAPE];
    memcpy(saved, h + 32, sizeof(saved));
    shape_of(&m->cfg, ours);
    for (int i = 0; i < N_SHAPE; i++)
        if (saved[i] != ours[i]) {
            snprintf(err, errlen, "state %s was saved for another model: its %s is %d, this model's is %d", in->path,
                     SHAPE_KEYS[i], saved[i], ours[i]);
            return -1;
        }
    if (get_u64(h + 24) != m->table.n_params) {
        snprintf(err, errlen, "state %s holds %llu parameters, this model has %zu", in->path,
                 (unsigned long long)get_u64(h + 24), m->table.n_params);
        return -1;
    }
    s->step = get_u64(h + 16);
    return 0;
}

/* 1 when the next section is named name (the file position stays), 0 when not or when it cannot be told (then
 * read_section names the problem). */
static int next_section_is(In *in, const char *name) {
    char found[16] = {0}, want[16] = {0};
    memcpy(want, name, strlen(name));
    size_t got = fread(found, 1, sizeof(found), in->f);
    if (fseeko(in->f, (off_t)in->at, SEEK_SET) != 0) return 0;
    return got == sizeof(found) && memcmp(found, want, sizeof(want)) == 0;
}

/* The master weights: a "master" section into m, or in version 2 a "master_file" reference into info. */
static int read_master(In *in, Model *m, StateInfo *info, char *err, size_t errlen) {
    uint64_t got;
    memset(info, 0, sizeof(*info));
    info->version = in->version;
    if (in->version >= 2 && next_section_is(in, "master_file")) {
        unsigned char ref[MASTER_FILE_BYTES];
        if (read_section(in, "master_file", sizeof(ref), 0, consume_memory, ref, &got, err, errlen)) return -1;
        if (get_u32(ref + 12) != 0) {
            snprintf(err, errlen, "state %s: section \"master_file\": its reserved field is not zero: the file is "
                     "damaged", in->path);
            return -1;
        }
        info->master_in_weights = 1;
        info->weights_bytes = get_u64(ref);
        info->weights_crc = get_u32(ref + 8);
        return 0;
    }
    DeviceTarget master = {m, NULL};
    return read_section(in, "master", (uint64_t)m->table.n_params * 4, 0, consume_device, &master, &got, err, errlen);
}

static int read_all(In *in, Model *m, TrainState *s, char **config_json, StateInfo *info, char *err, size_t errlen) {
    if (read_header(in, m, s, err, errlen)) return -1;
    uint64_t n = (uint64_t)m->table.n_params * 4, got;
    DeviceTarget am = {m, m->adam_m}, av = {m, m->adam_v};
    if (read_master(in, m, info, err, errlen) ||
        read_section(in, "adam_m", n, 0, consume_device, &am, &got, err, errlen) ||
        read_section(in, "adam_v", n, 0, consume_device, &av, &got, err, errlen))
        return -1;
    unsigned char pos[DATA_POSITION_BYTES], rng[8];
    if (read_section(in, "data_position", sizeof(pos), 0, consume_memory, pos, &got, err, errlen) ||
        read_section(in, "sampler_rng", sizeof(rng), 0, consume_memory, rng, &got, err, errlen))
        return -1;
    s->data = (DataPosition){get_u64(pos), get_u64(pos + 8), get_u64(pos + 16)};
    s->data_shards = get_u64(pos + 24);
    s->data_tokens = get_u64(pos + 32);
    s->sample_rng = get_u64(rng);
    /* the config section is at most MAX_CONFIG_BYTES, and no larger than the file */
    uint64_t max_config = in->size < MAX_CONFIG_BYTES ? in->size : MAX_CONFIG_BYTES;
    char *text = malloc((size_t)max_config + 1);
    if (!text) {
        snprintf(err, errlen, "state %s: out of host memory", in->path);
        return -1;
    }
    if (read_section(in, "config", 0, max_config, consume_memory, text, &got, err, errlen)) {
        free(text);
        return -1;
    }
    text[got] = 0;
    if (config_json) *config_json = text;
    else free(text);
    if (in->at != in->size) {
        snprintf(err, errlen, "state %s: %llu unexpected bytes after the last section", in->path,
                 (unsigned long long)(in->size - in->at));
        if (config_json) {
            free(*config_json);
            *config_json = NULL;
        }
        return -1;
    }
    return 0;
}

int state_read(const char *path, Model *m, TrainState *s, char **config_json, StateInfo *info, char *err,
               size_t errlen) {
    if (config_json) *config_json = NULL;
    In in = {fopen(path, "rb"), path, 0, 0, NULL, 0, 0};
    if (!in.f) {
        snprintf(err, errlen, "state %s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat(fileno(in.f), &st) != 0) {
        snprintf(err, errlen, "state %s: cannot read its size: %s", path, strerror(errno));
    } else {
        in.size = (uint64_t)st.st_size;
        in.buf_bytes = in.size < STREAM_BYTES ? (size_t)in.size / 4 * 4 + 4 : STREAM_BYTES; /* whole floats */
        in.buf = malloc(in.buf_bytes);
        if (!in.buf) snprintf(err, errlen, "state %s: out of host memory", path);
        else rc = read_all(&in, m, s, config_json, info, err, errlen);
    }
    free(in.buf);
    fclose(in.f);
    return rc;
}
