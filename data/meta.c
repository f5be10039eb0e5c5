/* meta.c: the tokenizer recorded in the data's meta.json (see meta.h). */
#include "data/meta.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "util/fsutil.h"

int meta_resolve_tokenizer(const char *train_data, char *tokenizer, size_t cap, char *err, size_t errlen) {
    if (strcmp(tokenizer, "auto") != 0) return 0;
    const char *slash = strrchr(train_data, '/');
    char meta[PATH_MAX + 16], where[PATH_MAX + 64];
    snprintf(meta, sizeof(meta), "%.*s/meta.json", slash ? (int)(slash - train_data) : 1,
             slash ? train_data : ".");
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
