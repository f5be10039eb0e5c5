/* meta.c: the tokenizer and the vocabulary size recorded in the data's meta.json (see meta.h). */
#include "data/meta.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "util/fsutil.h"

/* The meta.json beside the shards of the glob train_data. */
static void meta_path(const char *train_data, char *out, size_t cap) {
    const char *slash = strrchr(train_data, '/');
    snprintf(out, cap, "%.*s/meta.json", slash ? (int)(slash - train_data) : 1, slash ? train_data : ".");
}

int meta_vocab_size(const char *train_data, char *path, size_t cap) {
    meta_path(train_data, path, cap);
    char err[256];
    cJSON *root = fs_exists(path) ? fs_read_json(path, path, err, sizeof(err)) : NULL;
    const cJSON *v = root ? cJSON_GetObjectItemCaseSensitive(root, "vocab_size") : NULL;
    const int n = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= INT_MAX ? (int)v->valuedouble : 0;
    cJSON_Delete(root);
    return n;
}

int meta_resolve_tokenizer(const char *train_data, char *tokenizer, size_t cap, char *err, size_t errlen) {
    if (strcmp(tokenizer, "auto") != 0) return 0;
    char meta[PATH_MAX + 16], where[PATH_MAX + 64];
    meta_path(train_data, meta, sizeof(meta));
    snprintf(where, sizeof(where), "tokenizer \"auto\": %s", meta);
    FILE *probe = fopen(meta, "rb");
    if (!probe) {
        tokenizer[0] = 0;
        return 0;
    }
    fclose(probe);
    cJSON *root = fs_read_json(meta, where, err, errlen);
    if (!root) return -1;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    int rc = 0;
    if (!cJSON_IsString(spec) || strlen(spec->valuestring) >= cap) {
        snprintf(err, errlen, "%s: no usable \"tokenizer\" entry", where);
        rc = -1;
    } else {
        snprintf(tokenizer, cap, "%s", spec->valuestring);
    }
    cJSON_Delete(root);
    return rc;
}
