/* fuzz_log.c: libFuzzer harness of the run log's reader on resume (run_log_truncate: log.jsonl cut back to the
 * checkpoint's step). The first 4 bytes are the step (u32, little-endian), the rest is log.jsonl. Properties: the log
 * written back is, in order, exactly the complete lines of the old one that are JSON objects with a numeric "step"
 * from 0 to the step; the count of dropped lines is that of the other non-empty lines (a torn last line included);
 * cutting the log back again changes nothing. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "persist/run_dir.h"
#include "tests/fuzz/fuzz_input.h"

/* Whether a complete line is a record to keep at `step`: a JSON object whose "step" is a number in [0, step]. */
static int kept_at(const uint8_t *line, size_t len, uint64_t step) {
    cJSON *rec = cJSON_ParseWithLength((const char *)line, len);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(rec, "step");
    int keep = cJSON_IsObject(rec) && cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble <= (double)step;
    cJSON_Delete(rec);
    return keep;
}

/* Checks the cut log against the old one. */
static void check_cut(const uint8_t *old, size_t old_len, uint64_t step, const uint8_t *cut, size_t cut_len,
                      int dropped) {
    size_t at_cut = 0;
    int other = 0;
    for (size_t at = 0; at < old_len;) {
        const uint8_t *nl = memchr(old + at, '\n', old_len - at);
        size_t end = nl ? (size_t)(nl - old) : old_len, n = end - at + 1; /* with its newline */
        if (nl && kept_at(old + at, end - at, step)) {
            FUZZ_ASSERT(at_cut + n <= cut_len && memcmp(cut + at_cut, old + at, n) == 0,
                        "the line at byte %zu (a record of a step <= %llu) is not where it belongs in the cut log",
                        at, (unsigned long long)step);
            at_cut += n;
        } else {
            other += end > at;
        }
        at = end + 1;
    }
    FUZZ_ASSERT(at_cut == cut_len, "the cut log has %zu bytes, the kept records %zu", cut_len, at_cut);
    FUZZ_ASSERT(dropped == other, "%d lines dropped, %d lines are not records to keep", dropped, other);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t step;
    memcpy(&step, data, 4);
    const char *dir = fuzz_scratch_dir();
    fuzz_write_file(dir, "log.jsonl", (FuzzPart){data + 4, size - 4});
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    int dropped;
    FUZZ_ASSERT(run_log_truncate(path, step, &dropped, err, sizeof(err)) == 0, "run_log_truncate: %s", err);
    size_t n;
    unsigned char *cut = read_bytes(path, &n);
    FUZZ_ASSERT(cut, "cannot read the cut log back");
    check_cut(data + 4, size - 4, step, cut, n, dropped);
    FUZZ_ASSERT(run_log_truncate(path, step, &dropped, err, sizeof(err)) == 0 && dropped == 0,
                "cutting the log back again: %d lines dropped (%s)", dropped, dropped ? "" : err);
    size_t n2;
    unsigned char *again = read_bytes(path, &n2);
    FUZZ_ASSERT(again && n2 == n && memcmp(again, cut, n) == 0, "cutting the log back again changed it");
    free(cut);
    free(again);
    return 0;
}
