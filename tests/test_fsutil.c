/* test_fsutil.c: the helpers under checkpoint writing. crc32_parallel equals zlib's serial CRC32 on buffers of many
 * blocks with a ragged tail, continued from a nonzero CRC, and on small ones; an FsStream written in pieces across
 * several write-back chunks holds exactly the bytes written, and fs_file_crc32 reads back their CRC and size; a
 * stream that cannot be created is an error naming the path. A replacement that fails for a full disk leaves no
 * temporary file; whole-file reads refuse a directory, a device and a file over their limit, by name; a JSON text
 * with anything but white space after its value is refused. */
#include <string.h>

#include "tests/ckpt_fixtures.h"
#include "tests/test_util.h"
#include "util/crc32.h"
#include "util/fsutil.h"

static unsigned char *random_bytes(size_t n, uint64_t seed) {
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (unsigned char)(seed >> 56);
    }
    return b;
}

static void test_crc32_parallel(void) {
    const size_t sizes[] = {0, 1, 1000, (4u << 20) - 1, (9u << 20) + 12345};
    for (int i = 0; i < 5; i++) {
        unsigned char *b = random_bytes(sizes[i] + 1, 11 + i);
        uint32_t serial = crc32_bytes(0x1234567u, b, sizes[i]), parallel = crc32_parallel(0x1234567u, b, sizes[i]);
        CHECK(serial == parallel, "crc32_parallel of %zu bytes, continued from a nonzero CRC: %08x, serial %08x",
              sizes[i], parallel, serial);
        free(b);
    }
}

static void test_stream(const char *dir) {
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/stream.bin", dir);
    const size_t n = (150u << 20) + 77; /* more than two write-back chunks, and a ragged end */
    unsigned char *b = random_bytes(n, 5);
    FsStream s;
    int ok = fs_stream_open(&s, path, err, sizeof(err)) == 0;
    for (size_t at = 0; ok && at < n;) {
        size_t take = at == 0 ? 3 : (size_t)(37u << 20); /* pieces that straddle the chunks */
        if (take > n - at) take = n - at;
        fs_stream_write(&s, b + at, take);
        at += take;
    }
    ok = ok && s.bytes == n && fs_stream_close(&s, err, sizeof(err)) == 0;
    size_t got_n;
    unsigned char *got = ok ? read_bytes(path, &got_n) : NULL;
    CHECK(got && got_n == n && memcmp(got, b, n) == 0, "a stream written in pieces over several write-back chunks "
          "holds exactly the bytes written%s%s", ok ? "" : ": ", ok ? "" : err);
    uint32_t crc;
    uint64_t bytes;
    ok = fs_file_crc32(path, &crc, &bytes, err, sizeof(err)) == 0;
    CHECK(ok && bytes == n && crc == crc32_bytes(0, b, n), "fs_file_crc32 reads back the file's CRC32 and size");
    free(got);
    free(b);
    snprintf(path, sizeof(path), "%s/no/such/dir/file", dir);
    CHECK(fs_stream_open(&s, path, err, sizeof(err)) != 0 && strstr(err, path),
          "a stream that cannot be created names the path: %s", err);
}

/* path.tmp made a link to /dev/full: the write of the temporary file fails as on a full disk. */
static void test_replace_on_full_disk(const char *dir) {
    char path[512], tmp[520], err[512] = "";
    snprintf(path, sizeof(path), "%s/config.json", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (symlink("/dev/full", tmp) != 0) {
        CHECK(0, "cannot make the link %s to /dev/full", tmp);
        return;
    }
    const int rc = fs_replace_atomic(path, "{}", 2, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "config.json.tmp") && strstr(err, "No space left") && !fs_exists(tmp) &&
              !fs_exists(path),
          "a replacement on a full disk fails naming the file and leaves no temporary file: %s", err);
}

static void test_read_refusals(const char *dir) {
    char err[512] = "", big[512];
    size_t len;
    char *text = fs_read_all(dir, 1 << 20, &len, err, sizeof(err));
    CHECK(!text && strstr(err, dir) && strstr(err, "is a directory"), "reading a directory says so: %s", err);
    free(text);
    text = fs_read_all("/dev/zero", 1 << 20, &len, err, sizeof(err));
    CHECK(!text && strstr(err, "/dev/zero") && strstr(err, "not a regular file"), "reading a device is refused: %s",
          err);
    free(text);
    snprintf(big, sizeof(big), "%s/big.json", dir);
    FILE *f = fopen(big, "w");
    for (int i = 0; f && i < 200000; i++) fputs("      ", f);
    if (f) fclose(f);
    text = fs_read_all(big, 1 << 20, &len, err, sizeof(err));
    CHECK(!text && strstr(err, "big.json") && strstr(err, "larger than 1048576 bytes"),
          "a file over the limit is refused: %s", err);
    free(text);
}

static void test_json_trailing(void) {
    char err[512] = "";
    const char *text = "{\"a\": 1}\n}x\n";
    cJSON *root = fs_parse_json(text, strlen(text), "config c.json", err, sizeof(err));
    CHECK(!root && strstr(err, "config c.json") && strstr(err, "after the JSON value") && strstr(err, "line 2"),
          "bytes after the closing brace are refused, naming the line: %s", err);
    cJSON_Delete(root);
    text = "{\"a\": 1}\r\n\t \n";
    root = fs_parse_json(text, strlen(text), "config c.json", err, sizeof(err));
    CHECK(root != NULL, "white space after the closing brace is accepted");
    cJSON_Delete(root);
}

int main(void) {
    char dir[256];
    make_temp_dir(dir, sizeof(dir), "test_fsutil");
    test_crc32_parallel();
    test_stream(dir);
    test_replace_on_full_disk(dir);
    test_read_refusals(dir);
    test_json_trailing();
    remove_temp_dir(dir);
    return test_summary();
}
