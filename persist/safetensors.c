/* safetensors.c: the safetensors reader (header validation, fp32 conversion) and streaming writer (see
 * safetensors.h). Little-endian hosts only, like the rest of the trainer. */
#include "persist/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/crc32.h"
#include "util/fsutil.h"

#define MAX_HEADER_BYTES (100u << 20) /* the limit of the reference implementation */

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    [ST_F32] = {"F32", 4},  [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2},     [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8},  [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2},       [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},    [ST_BOOL] = {"BOOL", 1}, [ST_U16] = {"U16", 2},       [ST_U32] = {"U32", 4},
    [ST_U64] = {"U64", 8},  [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};
#define N_DTYPES ((int)(sizeof(DTYPES) / sizeof(DTYPES[0])))

const char *st_dtype_name(StDtype d) { return DTYPES[d].name; }
size_t st_dtype_size(StDtype d) { return DTYPES[d].size; }

uint64_t st_numel(const StTensorInfo *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n;
}

/* ---------------------------------------------------------------- conversions */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t st_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return sign | 0x7E00u;  /* NaN */
    if (abs >= 0x477FF000u) return sign | 0x7C00u; /* rounds to infinity (>= 65520) or is infinite */
    if (abs >= 0x38800000u) {                      /* normal in f16: exponent >= -14 */
        uint32_t mant = abs & 0x7FFFFFu, exp = (abs >> 23) - 127 + 15;
        uint32_t h = (exp << 10) | (mant >> 13), rest = mant & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carries into the exponent correctly */
        return sign | (uint16_t)h;
    }
    if (abs < 0x33000000u) return sign; /* below half of the smallest subnormal: zero */
    /* subnormal: value = mant_full * 2^(e-150); the f16 unit is 2^-24 */
    uint32_t e = abs >> 23, mant_full = (abs & 0x7FFFFFu) | 0x800000u;
    int shift = (int)(126 - e); /* 2^(e-150) / 2^-24 = 2^(e-126): shift right by 126-e (>= 1, <= 24) */
    uint32_t h = mant_full >> shift, rest = mant_full & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1u))) h++;
    return sign | (uint16_t)h;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        float v = ldexpf((float)mant, -24);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/* ---------------------------------------------------------------- reader */

struct StFile {
    char *path;
    FILE *f;
    uint64_t data_start, data_len;
    StTensorInfo *tensors;
    int n;
};

const char *st_path(const StFile *f) { return f->path; }
int st_count(const StFile *f) { return f->n; }
const StTensorInfo *st_tensor(const StFile *f, int i) { return &f->tensors[i]; }

const StTensorInfo *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

void st_close(StFile *f) {
    if (!f) return;
    if (f->f) fclose(f->f);
    free(f->tensors);
    free(f->path);
    free(f);
}

/* A non-negative integer JSON number below 2^53, into *out. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= 9007199254740992.0 ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

static void shape_string(const StTensorInfo *t, char *out, size_t cap) {
    size_t len = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < t->ndim && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (len < cap) snprintf(out + len, cap - len, "]");
}

/* Parses one tensor entry of the header into t. */
static int parse_entry(const StFile *sf, const cJSON *e, StTensorInfo *t, char *err, size_t errlen) {
    const char *p = sf->path, *name = e->string;
    if (strlen(name) >= ST_NAME_MAX) {
        snprintf(err, errlen, "safetensors %s: a tensor name longer than %d characters", p, ST_NAME_MAX - 1);
        return -1;
    }
    snprintf(t->name, sizeof(t->name), "%s", name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2 || cJSON_GetArraySize(shape) > ST_MAX_DIMS) {
        snprintf(err, errlen, "safetensors %s: tensor %s: the header entry needs \"dtype\", \"shape\" (at most %d "
                 "dimensions) and two \"data_offsets\"", p, name, ST_MAX_DIMS);
        return -1;
    }
    int found = 0;
    for (int d = 0; d < N_DTYPES; d++)
        if (strcmp(dtype->valuestring, DTYPES[d].name) == 0) {
            t->dtype = (StDtype)d;
            found = 1;
        }
    if (!found) {
        snprintf(err, errlen, "safetensors %s: tensor %s: unknown dtype \"%s\"", p, name, dtype->valuestring);
        return -1;
    }
    t->ndim = cJSON_GetArraySize(shape);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        if (json_u64(cJSON_GetArrayItem(shape, i), &d) || d > (1ull << 40)) {
            snprintf(err, errlen, "safetensors %s: tensor %s: shape must be non-negative integers", p, name);
            return -1;
        }
        t->shape[i] = (int64_t)d;
        numel = d == 0 || numel <= (1ull << 62) / d ? numel * d : (1ull << 63);
    }
    if (json_u64(cJSON_GetArrayItem(offs, 0), &t->begin) || json_u64(cJSON_GetArrayItem(offs, 1), &t->end) ||
        t->begin > t->end) {
        snprintf(err, errlen, "safetensors %s: tensor %s: data_offsets must be two integers [begin, end], begin <= end",
                 p, name);
        return -1;
    }
    char shp[128];
    shape_string(t, shp, sizeof(shp));
    if (numel > (1ull << 61) || t->end - t->begin != numel * DTYPES[t->dtype].size) {
        snprintf(err, errlen, "safetensors %s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but shape %s of "
                 "%s needs %llu: the header lies about its offsets", p, name, (unsigned long long)t->begin,
                 (unsigned long long)t->end, (unsigned long long)(t->end - t->begin), shp, DTYPES[t->dtype].name,
                 (unsigned long long)(numel * DTYPES[t->dtype].size));
        return -1;
    }
    if (t->end > sf->data_len) {
        snprintf(err, errlen, "safetensors %s: tensor %s: data_offsets end at byte %llu, but the file holds only %llu "
                 "data bytes: the file is truncated or its header lies about offsets", p, name,
                 (unsigned long long)t->end, (unsigned long long)sf->data_len);
        return -1;
    }
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const StTensorInfo *x = *(const StTensorInfo *const *)a, *y = *(const StTensorInfo *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The byte ranges must tile [0, data_len) exactly (the format has no holes). */
static int check_tiling(const StFile *sf, char *err, size_t errlen) {
    if (sf->n == 0) {
        if (sf->data_len == 0) return 0;
        snprintf(err, errlen, "safetensors %s: %llu data bytes but no tensor in the header", sf->path,
                 (unsigned long long)sf->data_len);
        return -1;
    }
    const StTensorInfo **order = malloc((size_t)sf->n * sizeof(*order));
    if (!order) {
        snprintf(err, errlen, "safetensors %s: out of memory", sf->path);
        return -1;
    }
    for (int i = 0; i < sf->n; i++) order[i] = &sf->tensors[i];
    qsort(order, (size_t)sf->n, sizeof(*order), by_begin);
    int rc = 0;
    uint64_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < sf->n && rc == 0; i++) {
        if (order[i]->begin != at) {
            snprintf(err, errlen, "safetensors %s: tensor %s: data_offsets begin at %llu but %s ends at %llu (the "
                     "ranges must follow each other without gaps or overlaps): the header lies about offsets",
                     sf->path, order[i]->name, (unsigned long long)order[i]->begin, prev ? prev : "the header",
                     (unsigned long long)at);
            rc = -1;
        }
        at = order[i]->end;
        prev = order[i]->name;
    }
    if (rc == 0 && at != sf->data_len) {
        snprintf(err, errlen, "safetensors %s: the file has %llu bytes after the last tensor (%s) that the header does "
                 "not describe", sf->path, (unsigned long long)(sf->data_len - at), prev);
        rc = -1;
    }
    free(order);
    return rc;
}

static int parse_header(StFile *sf, const char *text, size_t len, char *err, size_t errlen) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "safetensors %s: the header is not a JSON object", sf->path);
        cJSON_Delete(root);
        return -1;
    }
    int count = 0;
    for (const cJSON *e = root->child; e; e = e->next) count += strcmp(e->string, "__metadata__") != 0;
    sf->tensors = calloc(count ? (size_t)count : 1, sizeof(StTensorInfo));
    int rc = sf->tensors ? 0 : -1;
    if (rc) snprintf(err, errlen, "safetensors %s: out of memory", sf->path);
    for (const cJSON *e = root->child; e && rc == 0; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) {
                snprintf(err, errlen, "safetensors %s: __metadata__ must be an object", sf->path);
                rc = -1;
            }
            continue;
        }
        if (st_find(sf, e->string)) {
            snprintf(err, errlen, "safetensors %s: tensor %s appears twice in the header", sf->path, e->string);
            rc = -1;
            continue;
        }
        rc = parse_entry(sf, e, &sf->tensors[sf->n], err, errlen);
        if (rc == 0) sf->n++;
    }
    cJSON_Delete(root);
    return rc ? rc : check_tiling(sf, err, errlen);
}

StFile *st_open(const char *path, char *err, size_t errlen) {
    StFile *sf = calloc(1, sizeof(StFile));
    char *header = NULL;
    if (!sf || !(sf->path = strdup(path))) {
        snprintf(err, errlen, "safetensors %s: out of memory", path);
        goto fail;
    }
    sf->f = fopen(path, "rb");
    if (!sf->f) {
        snprintf(err, errlen, "safetensors %s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(sf->f), &st) != 0) {
        snprintf(err, errlen, "safetensors %s: cannot read its size: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "safetensors %s: %s", path,
                 S_ISDIR(st.st_mode) ? "is a directory, not a file" : "is not a regular file");
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size, n;
    unsigned char len8[8];
    if (size < 8 || fread(len8, 1, 8, sf->f) != 8) {
        snprintf(err, errlen, "safetensors %s: only %llu bytes, too short for the 8-byte header length", path,
                 (unsigned long long)size);
        goto fail;
    }
    memcpy(&n, len8, 8);
    if (n > size - 8 || n > MAX_HEADER_BYTES) {
        snprintf(err, errlen, "safetensors %s: the header length %llu runs past the end of the file (%llu bytes): "
                 "truncated or not a safetensors file", path, (unsigned long long)n, (unsigned long long)size);
        goto fail;
    }
    header = malloc(n + 1);
    if (!header || fread(header, 1, n, sf->f) != n) {
        snprintf(err, errlen, "safetensors %s: cannot read the %llu-byte header", path, (unsigned long long)n);
        goto fail;
    }
    sf->data_start = 8 + n;
    sf->data_len = size - 8 - n;
    if (parse_header(sf, header, n, err, errlen)) goto fail;
    free(header);
    return sf;
fail:
    free(header);
    st_close(sf);
    return NULL;
}

int st_read_f32(StFile *sf, const StTensorInfo *t, uint64_t first, size_t n, float *out, char *err, size_t errlen) {
    size_t es = DTYPES[t->dtype].size;
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        snprintf(err, errlen, "safetensors %s: tensor %s has dtype %s; only F32, F16 and BF16 can be read", sf->path,
                 t->name, DTYPES[t->dtype].name);
        return -1;
    }
    if (first + n > st_numel(t)) {
        snprintf(err, errlen, "safetensors %s: tensor %s: elements [%llu, %llu) are past its end", sf->path, t->name,
                 (unsigned long long)first, (unsigned long long)(first + n));
        return -1;
    }
    /* Raw bytes go to the end of out, and are widened front to back (a 16-bit element i sits at or after the
     * float i being written, so nothing unread is overwritten). */
    unsigned char *raw = (unsigned char *)out + n * (4 - es);
    if (fseeko(sf->f, (off_t)(sf->data_start + t->begin + first * es), SEEK_SET) != 0 ||
        fread(raw, es, n, sf->f) != n) {
        snprintf(err, errlen, "safetensors %s: tensor %s: cannot read elements [%llu, %llu): %s", sf->path, t->name,
                 (unsigned long long)first, (unsigned long long)(first + n),
                 ferror(sf->f) ? strerror(errno) : "unexpected end of file (did the file change?)");
        return -1;
    }
    if (es == 4) return 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, raw + 2 * i, 2);
        out[i] = t->dtype == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
    }
    return 0;
}

/* ---------------------------------------------------------------- writer */

struct StWriter {
    char *path;
    FsStream file;
    int opened;
    StTensorInfo *tensors;
    int n;
    int current;        /* the tensor being written */
    uint64_t written;   /* elements of it written so far */
    unsigned char *staging;
    uint32_t crc;       /* CRC32 of the bytes of the file so far */
};

/* Writes n bytes to the file and adds them to its running CRC32. */
static int put_bytes(StWriter *w, const void *p, size_t n) {
    w->crc = crc32_parallel(w->crc, p, n);
    fs_stream_write(&w->file, p, n);
    return w->file.error ? -1 : 0;
}

#define STAGING_ELEMS 65536

StWriter *st_writer_open(const char *path, const StTensorInfo *tensors, int n, char *err, size_t errlen) {
    StWriter *w = calloc(1, sizeof(StWriter));
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    if (!w || !root || !(w->path = strdup(path)) || !(w->tensors = malloc((size_t)(n ? n : 1) * sizeof(StTensorInfo))) ||
        !(w->staging = malloc(STAGING_ELEMS * 4))) {
        snprintf(err, errlen, "safetensors %s: out of memory", path);
        goto fail;
    }
    memcpy(w->tensors, tensors, (size_t)n * sizeof(StTensorInfo));
    w->n = n;
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        StTensorInfo *t = &w->tensors[i];
        t->begin = at;
        t->end = at += st_numel(t) * DTYPES[t->dtype].size;
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", DTYPES[t->dtype].name);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)t->begin));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)t->end));
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        snprintf(err, errlen, "safetensors %s: out of memory", path);
        goto fail;
    }
    uint64_t len = strlen(json), padded = (len + 7) / 8 * 8; /* data starts 8-byte aligned, as HF writes it */
    if (fs_stream_open(&w->file, w->path, err, errlen)) goto fail;
    w->opened = 1;
    static const char spaces[8] = "        ";
    int ok = put_bytes(w, &padded, 8) == 0 && put_bytes(w, json, len) == 0 && put_bytes(w, spaces, padded - len) == 0;
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(w->file.error));
        goto fail;
    }
    free(json);
    cJSON_Delete(root);
    return w;
fail:
    free(json);
    cJSON_Delete(root);
    st_writer_abort(w);
    return NULL;
}

static void free_writer(StWriter *w) {
    free(w->staging);
    free(w->tensors);
    free(w->path);
    free(w);
}

int st_writer_append_f32(StWriter *w, const float *values, size_t n, char *err, size_t errlen) {
    while (n > 0) {
        while (w->current < w->n && w->written == st_numel(&w->tensors[w->current])) {
            w->current++;
            w->written = 0;
        }
        if (w->current == w->n) {
            snprintf(err, errlen, "safetensors %s: more values than the header describes", w->path);
            return -1;
        }
        const StTensorInfo *t = &w->tensors[w->current];
        size_t take = n, left = (size_t)(st_numel(t) - w->written);
        if (take > left) take = left;
        if (t->dtype != ST_F32 && take > STAGING_ELEMS) take = STAGING_ELEMS; /* F32 goes out as it is */
        size_t es = DTYPES[t->dtype].size;
        const void *bytes = w->staging;
        if (t->dtype == ST_F32) {
            bytes = values;
        } else if (t->dtype == ST_BF16 || t->dtype == ST_F16) {
            for (size_t i = 0; i < take; i++) {
                uint16_t h = t->dtype == ST_BF16 ? st_f32_to_bf16(values[i]) : st_f32_to_f16(values[i]);
                memcpy(w->staging + 2 * i, &h, 2);
            }
        } else {
            snprintf(err, errlen, "safetensors %s: tensor %s: cannot write dtype %s", w->path, t->name,
                     DTYPES[t->dtype].name);
            return -1;
        }
        if (put_bytes(w, bytes, es * take)) {
            snprintf(err, errlen, "cannot write %s: %s", w->path, strerror(w->file.error));
            return -1;
        }
        w->written += take;
        values += take;
        n -= take;
    }
    return 0;
}

int st_writer_close(StWriter *w, char *err, size_t errlen) {
    while (w->current < w->n && w->written == st_numel(&w->tensors[w->current])) {
        w->current++;
        w->written = 0;
    }
    if (w->current < w->n) {
        snprintf(err, errlen, "safetensors %s: tensor %s was not completely written", w->path,
                 w->tensors[w->current].name);
        st_writer_abort(w);
        return -1;
    }
    int rc = fs_stream_close(&w->file, err, errlen);
    free_writer(w);
    return rc;
}

uint32_t st_writer_crc32(const StWriter *w) { return w->crc; }
uint64_t st_writer_bytes(const StWriter *w) { return w->file.bytes; }

void st_writer_abort(StWriter *w) {
    if (!w) return;
    if (w->opened) fs_stream_abort(&w->file);
    free_writer(w);
}
