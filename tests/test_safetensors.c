/* test_safetensors.c: the safetensors reader and writer: fp32 <-> bf16/f16 conversion (known values, rounding ties,
 * every 16-bit pattern round trip), a write/read round trip of F32, BF16 and F16 tensors (bitwise), the header as HF
 * writes it, and a damaged or lying file for each check of the reader: each an error that names the file and the
 * tensor. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "persist/safetensors.h"
#include "tests/ckpt_fixtures.h"
#include "tests/test_util.h"

static char dir[256];

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_conversions(void) {
    CHECK(st_f32_to_bf16(1.0f) == 0x3F80 && st_f32_to_bf16(-2.0f) == 0xC000, "bf16 of 1 and -2");
    CHECK(st_f32_to_bf16(1.0f + 0x1p-8f) == 0x3F80 && st_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82 &&
              st_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81,
          "bf16 rounds to nearest, ties to even");
    CHECK(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))) && st_f32_to_bf16(INFINITY) == 0x7F80 &&
              st_f32_to_bf16(3.4e38f) == 0x7F80,
          "bf16 keeps NaN and infinity; rounds the largest floats up to infinity");
    CHECK(st_f32_to_f16(1.0f) == 0x3C00 && st_f32_to_f16(-2.0f) == 0xC000 && st_f32_to_f16(65504.0f) == 0x7BFF &&
              st_f32_to_f16(65519.0f) == 0x7BFF && st_f32_to_f16(65520.0f) == 0x7C00 && st_f32_to_f16(1e30f) == 0x7C00,
          "f16 normals and overflow to infinity at 65520");
    CHECK(st_f32_to_f16(0x1p-24f) == 0x0001 && st_f32_to_f16(0x1p-25f) == 0x0000 &&
              st_f32_to_f16(3 * 0x1p-25f) == 0x0002 && st_f32_to_f16(0x1p-14f) == 0x0400 &&
              st_f32_to_f16(0x1p-14f - 0x1p-25f) == 0x0400 && st_f32_to_f16(-0.0f) == 0x8000,
          "f16 subnormals round to nearest even, into the normals too; -0 stays -0");
    CHECK(st_f16_to_f32(0x0001) == 0x1p-24f && st_f16_to_f32(0x7BFF) == 65504.0f && st_f16_to_f32(0xFC00) == -INFINITY,
          "f16 to f32: subnormal, largest, -infinity");
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h), g = st_bf16_to_f32((uint16_t)h);
        if (isnan(f) ? !isnan(st_f16_to_f32(st_f32_to_f16(f))) : st_f32_to_f16(f) != h) bad16++;
        if (isnan(g) ? !isnan(st_bf16_to_f32(st_f32_to_bf16(g))) : st_f32_to_bf16(g) != h) badbf++;
    }
    CHECK(bad16 == 0 && badbf == 0, "every f16 and bf16 value survives a round trip through f32 (%d, %d bad)", bad16,
          badbf);
    /* against a direct computation: f32 -> f16 of random floats is the nearest f16 (ties to even) */
    int wrong = 0;
    uint64_t state = 7;
    for (int i = 0; i < 200000; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        float f = f32_from_bits((uint32_t)(state >> 32) & 0x47FFFFFFu); /* |f| < 2^16 */
        uint16_t h = st_f32_to_f16(f);
        double d = fabs((double)st_f16_to_f32(h) - f);
        double up = fabs((double)st_f16_to_f32((uint16_t)(h + 1)) - f), dn = h & 0x7FFF ? fabs((double)st_f16_to_f32((uint16_t)(h - 1)) - f) : d;
        if ((h & 0x7FFF) < 0x7BFF && (up < d || dn < d || (up == d && (h & 1)) || (dn == d && (h & 1)))) wrong++;
    }
    CHECK(wrong == 0, "f32 -> f16 picks the nearest f16, ties to even, for 200000 random floats (%d wrong)", wrong);
}

static StTensorInfo info(const char *name, StDtype d, int ndim, int64_t a, int64_t b, int64_t c) {
    StTensorInfo t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.dtype = d;
    t.ndim = ndim;
    t.shape[0] = a;
    t.shape[1] = b;
    t.shape[2] = c;
    return t;
}

static void test_round_trip(void) {
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/rt.safetensors", dir);
    StTensorInfo ts[] = {info("f32", ST_F32, 2, 3, 5, 0), info("empty", ST_F32, 2, 0, 4, 0),
                         info("bf16", ST_BF16, 1, 7, 0, 0), info("f16", ST_F16, 3, 2, 2, 2)};
    float v[15 + 7 + 8];
    for (int i = 0; i < 30; i++) v[i] = (float)sin(i * 1.7) * powf(10.0f, (float)(i % 9) - 4);
    v[3] = -0.0f;
    v[16] = INFINITY;
    v[25] = 1e-7f; /* an f16 subnormal */
    StWriter *w = st_writer_open(path, ts, 4, err, sizeof(err));
    /* values cross tensor boundaries inside one call */
    int ok = w && st_writer_append_f32(w, v, 10, err, sizeof(err)) == 0 &&
             st_writer_append_f32(w, v + 10, 20, err, sizeof(err)) == 0 && st_writer_close(w, err, sizeof(err)) == 0;
    CHECK(ok, "write F32, BF16 and F16 tensors (an empty one among them)%s%s", ok ? "" : ": ", ok ? "" : err);
    if (!ok) return;
    StFile *f = st_open(path, err, sizeof(err));
    CHECK(f && st_count(f) == 4, "read the header back%s%s", f ? "" : ": ", f ? "" : err);
    if (!f) return;
    const StTensorInfo *a = st_find(f, "f32"), *b = st_find(f, "bf16"), *c = st_find(f, "f16"), *e = st_find(f, "empty");
    CHECK(a && b && c && e && a->dtype == ST_F32 && b->dtype == ST_BF16 && c->dtype == ST_F16 && c->ndim == 3 &&
              c->shape[2] == 2 && e->shape[0] == 0 && st_numel(e) == 0,
          "names, dtypes and shapes survive");
    float out[15];
    int same = a && st_read_f32(f, a, 0, 15, out, err, sizeof(err)) == 0 && memcmp(out, v, sizeof(out)) == 0;
    CHECK(same, "F32 values come back bitwise");
    int bf_ok = b && st_read_f32(f, b, 0, 7, out, err, sizeof(err)) == 0;
    for (int i = 0; i < 7 && bf_ok; i++) {
        float want = st_bf16_to_f32(st_f32_to_bf16(v[15 + i]));
        bf_ok = memcmp(&out[i], &want, 4) == 0;
    }
    CHECK(bf_ok, "BF16 values come back as the rounded fp32 values (infinity included)");
    int f16_ok = c && st_read_f32(f, c, 2, 6, out, err, sizeof(err)) == 0;
    for (int i = 0; i < 6 && f16_ok; i++) {
        float want = st_f16_to_f32(st_f32_to_f16(v[22 + 2 + i]));
        f16_ok = memcmp(&out[i], &want, 4) == 0;
    }
    CHECK(f16_ok, "F16 values, read from an element offset, come back as the rounded values");
    CHECK(a && st_read_f32(f, a, 10, 6, out, err, sizeof(err)) != 0 && strstr(err, "f32") && strstr(err, "past"),
          "reading past a tensor's end is an error naming it: %s", err);
    st_close(f);
    /* the header as HF writes it: 8-byte aligned data, __metadata__ {"format": "pt"} */
    size_t n;
    unsigned char *bytes = read_bytes(path, &n);
    uint64_t hl = 0;
    if (bytes) memcpy(&hl, bytes, 8);
    cJSON *h = bytes && hl + 8 <= n ? cJSON_ParseWithLength((const char *)bytes + 8, hl) : NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, "__metadata__"), "format");
    CHECK(hl % 8 == 0 && cJSON_IsString(fmt) && strcmp(fmt->valuestring, "pt") == 0 &&
              n == 8 + hl + 15 * 4 + 7 * 2 + 8 * 2,
          "header length %llu (a multiple of 8), __metadata__.format = \"pt\", file size %zu",
          (unsigned long long)hl, n);
    cJSON_Delete(h);
    free(bytes);
    w = st_writer_open(path, ts, 4, err, sizeof(err));
    int short_write = w && st_writer_append_f32(w, v, 12, err, sizeof(err)) == 0 &&
                      st_writer_close(w, err, sizeof(err)) != 0 && strstr(err, "f32") && !fs_exists(path);
    CHECK(short_write, "closing a writer before every value is written is an error naming the tensor, and removes "
          "the partial file: %s", err);
}

/* Writes a file of an 8-byte length, the header text, and data_len zero bytes (len_override: a lying length). */
static void write_crafted(const char *path, const char *header, size_t data_len, uint64_t len_override) {
    size_t hl = strlen(header), total = 8 + hl + data_len;
    unsigned char *b = calloc(1, total);
    uint64_t len = len_override ? len_override : hl;
    memcpy(b, &len, 8);
    memcpy(b + 8, header, hl);
    if (write_bytes(path, b, total)) exit(2);
    free(b);
}

/* The reader must refuse the crafted file with a message holding the file's path and each of the words. */
static void expect_refused(const char *label, const char *header, size_t data_len, uint64_t len_override,
                           const char *word1, const char *word2) {
    char path[512], err[1024] = "";
    snprintf(path, sizeof(path), "%s/bad.safetensors", dir);
    write_crafted(path, header, data_len, len_override);
    StFile *f = st_open(path, err, sizeof(err));
    CHECK(!f && strstr(err, path) && strstr(err, word1) && (!word2 || strstr(err, word2)), "%s: %s", label, err);
    st_close(f);
}

static void test_reader_errors(void) {
    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}";
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/good.safetensors", dir);
    write_crafted(path, good, 32, 0);
    StFile *f = st_open(path, err, sizeof(err));
    CHECK(f != NULL, "a hand-made file without __metadata__ reads%s%s", f ? "" : ": ", f ? "" : err);
    st_close(f);
    expect_refused("header length beyond the file", good, 32, 1000000, "header length", "past the end");
    snprintf(path, sizeof(path), "%s/short.safetensors", dir);
    write_bytes(path, "\x10\0\0\0\0", 5);
    f = st_open(path, err, sizeof(err));
    CHECK(!f && strstr(err, path) && strstr(err, "too short"), "a file shorter than 8 bytes: %s", err);
    st_close(f);
    expect_refused("truncated data", good, 20, 0, "tensor a", "truncated");
    expect_refused("offsets that disagree with the shape",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[20,28]}}", 28, 0, "tensor a", "lies");
    expect_refused("overlapping tensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]}}", 24, 0, "tensor b",
                   "overlaps");
    expect_refused("a gap between tensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[28,36]}}", 36, 0, "tensor b", "gaps");
    expect_refused("bytes after the last tensor", good, 40, 0, "after the last tensor", "(b)");
    expect_refused("unknown dtype", "{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0,
                   "tensor a", "unknown dtype");
    expect_refused("header that is not JSON", "{\"a\":{\"dtype\":", 8, 0, "not a JSON object", NULL);
    expect_refused("a name twice", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, "tensor a", "twice");
    expect_refused("negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0,
                   "tensor a", "shape");
    /* an integer dtype: recognised, but not read as weights */
    snprintf(path, sizeof(path), "%s/int.safetensors", dir);
    write_crafted(path, "{\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0);
    f = st_open(path, err, sizeof(err));
    float out[2];
    CHECK(f && st_read_f32(f, st_find(f, "i"), 0, 2, out, err, sizeof(err)) != 0 && strstr(err, "tensor i") &&
              strstr(err, "I32"),
          "an I32 tensor opens but reading it as weights is an error: %s", err);
    st_close(f);
}

int main(void) {
    make_temp_dir(dir, sizeof(dir), "test_safetensors");
    test_conversions();
    test_round_trip();
    test_reader_errors();
    remove_temp_dir(dir);
    return test_summary();
}
