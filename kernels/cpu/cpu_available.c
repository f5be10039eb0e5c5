/* cpu_available.c: how much host memory this process can still allocate (the CPU backend's available_bytes):
 * MemAvailable, lowered to the room left under the memory limits of the process's cgroup and of its parents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_internal.h"

#define PATH_LEN 4096

/* The number after `key` at the start of a line of the file (the key with its separator: "MemAvailable:",
 * "inactive_file "; "" for a file of one number). 0, or -1 when the file or such a line is missing ("max"). */
static int keyed_number(const char *path, const char *key, unsigned long long *value) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[PATH_LEN];
    const size_t n = strlen(key);
    int rc = -1;
    while (rc && fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, n) != 0) continue;
        char *end;
        *value = strtoull(line + n, &end, 10);
        if (end != line + n && (*end == '\n' || *end == ' ' || *end == 0)) rc = 0;
    }
    fclose(f);
    return rc;
}

/* The room under the limit of one cgroup directory (v2: memory.max; v1: memory.limit_in_bytes, whose "no limit" is
 * a number near 2^63), or SIZE_MAX when it sets none. Reclaimable page cache does not count as used. */
static size_t cgroup_room(const char *dir, int v2) {
    char path[PATH_LEN + 32];
    unsigned long long limit, usage, cache = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (keyed_number(path, "", &limit) || limit >= (1ull << 62)) return SIZE_MAX;
    snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    if (keyed_number(path, "", &usage)) return SIZE_MAX;
    snprintf(path, sizeof(path), "%s/memory.stat", dir);
    if (keyed_number(path, v2 ? "inactive_file " : "total_inactive_file ", &cache) || cache > usage) cache = 0;
    usage -= cache;
    return usage >= limit ? 0 : (size_t)(limit - usage);
}

/* The least room under the limits of the cgroup at `path` (relative to `root`) and of each of its parents. */
static size_t cgroup_tree_room(const char *root, const char *path, int v2) {
    size_t room = SIZE_MAX;
    char dir[PATH_LEN];
    if (snprintf(dir, sizeof(dir), "%s%s", root, path) >= (int)sizeof(dir)) return room;
    const size_t root_len = strlen(root);
    for (;;) {
        const size_t r = cgroup_room(dir, v2);
        if (r < room) room = r;
        char *slash = strrchr(dir + root_len, '/');
        if (!slash) break;
        *slash = 0; /* the parent; after "/a" comes the root itself */
    }
    return room;
}

/* Whether a comma-separated controller list names "memory". */
static int names_memory(const char *list, size_t len) {
    for (const char *p = list; p < list + len;) {
        const char *comma = memchr(p, ',', (size_t)(list + len - p));
        const size_t n = comma ? (size_t)(comma - p) : (size_t)(list + len - p);
        if (n == 6 && strncmp(p, "memory", 6) == 0) return 1;
        p += n + 1;
    }
    return 0;
}

size_t cpu_host_available_bytes(const char *proc_root, const char *cgroup_root) {
    char path[PATH_LEN];
    unsigned long long kb;
    size_t avail = SIZE_MAX;
    snprintf(path, sizeof(path), "%s/meminfo", proc_root);
    if (keyed_number(path, "MemAvailable:", &kb) == 0) {
        avail = size_mul((size_t)kb, 1024);
    } else {
        const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) avail = size_mul((size_t)pages, (size_t)page);
    }
    /* /proc/self/cgroup: "0::PATH" (v2), "ID:CONTROLLERS:PATH" (v1) */
    snprintf(path, sizeof(path), "%s/self/cgroup", proc_root);
    FILE *f = fopen(path, "r");
    char line[PATH_LEN];
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        const int v2 = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
        if (!v2 && !names_memory(c1 + 1, (size_t)(c2 - c1 - 1))) continue;
        char root[PATH_LEN];
        snprintf(root, sizeof(root), "%s%s", cgroup_root, v2 ? "" : "/memory");
        const size_t room = cgroup_tree_room(root, strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1, v2);
        if (room < avail) avail = room;
    }
    if (f) fclose(f);
    return avail;
}

size_t cpu_available_bytes(void) { return cpu_host_available_bytes("/proc", "/sys/fs/cgroup"); }
