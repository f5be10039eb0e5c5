/* run_dir.c: refusing an existing run, and truncating the log on resume (see run_dir.h). */
#include "persist/run_dir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "persist/checkpoint.h"
#include "util/fsutil.h"

int run_dir_check_new(const char *run_dir, int overwrite, char *err, size_t errlen) {
    if (overwrite) return 0;
    char log[CHECKPOINT_PATH_MAX];
    snprintf(log, sizeof(log), "%s/log.jsonl", run_dir);
    CheckpointList list;
    if (checkpoint_list(run_dir, &list, err, errlen)) return -1;
    int n = list.n;
    checkpoint_list_free(&list);
    if (fs_exists(log) || n > 0) {
        snprintf(err, errlen, "run directory %s already holds a run (%s%s); pass --resume to continue it, --overwrite "
                 "to replace it, or -o to choose another", run_dir, fs_exists(log) ? log : "",
                 n > 0 ? (fs_exists(log) ? " and checkpoints" : "checkpoints") : "");
        return -1;
    }
    return 0;
}

/* The "step" of one log line, or -1 when the line is not a JSON object with a numeric step. */
static double line_step(const char *line, size_t len) {
    cJSON *rec = cJSON_ParseWithLength(line, len);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(rec, "step");
    double s = cJSON_IsObject(rec) && cJSON_IsNumber(step) ? step->valuedouble : -1;
    cJSON_Delete(rec);
    return s;
}

int run_log_truncate(const char *log_path, uint64_t step, int *dropped, char *err, size_t errlen) {
    *dropped = 0;
    if (!fs_exists(log_path)) return fs_write_durable(log_path, "", 0, err, errlen);
    size_t len;
    char *text = fs_read_all(log_path, SIZE_MAX, &len, err, errlen);
    if (!text) return -1;
    char *kept = malloc(len + 1);
    if (!kept) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", log_path);
        return -1;
    }
    size_t out = 0;
    for (size_t at = 0; at < len;) {
        char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        double s = nl ? line_step(text + at, end - at) : -1; /* a line without its newline is torn */
        if (s >= 0 && s <= (double)step) {
            memcpy(kept + out, text + at, end - at + 1);
            out += end - at + 1;
        } else if (end > at) {
            (*dropped)++;
        }
        at = end + 1;
    }
    int rc = fs_replace_atomic(log_path, kept, out, err, errlen);
    free(kept);
    free(text);
    return rc;
}
