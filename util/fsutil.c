/* fsutil.c: file-system helpers (see fsutil.h): durable and atomic writes, whole-file reads, mkdir -p, rm -r. */
#include "util/fsutil.h"

#include "util/crc32.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int fs_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int64_t fs_file_size(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    return (int64_t)st.st_size;
}

int fs_denied(int e) { return e == EACCES || e == EPERM; }

int fs_check_access(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISLNK(st.st_mode)) return 0;
    int dir = S_ISDIR(st.st_mode);
    int fd = open(path, O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0) | O_NONBLOCK);
    if (fd < 0) {
        if (!fs_denied(errno)) return 0;
        snprintf(err, errlen, "permission denied: this user may not read %s", path);
        return -1;
    }
    DIR *d = dir ? fdopendir(fd) : NULL;
    if (!d) {
        close(fd);
        return 0;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *child = malloc(n);
        if (!child) break;
        snprintf(child, n, "%s/%s", path, e->d_name);
        rc = fs_check_access(child, err, errlen);
        free(child);
    }
    closedir(d);
    return rc;
}

#define CRC_READ_BYTES ((size_t)8 << 20)

int fs_file_crc32(const char *path, uint32_t *crc, uint64_t *bytes, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char *buf = malloc(CRC_READ_BYTES);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    *crc = 0;
    *bytes = 0;
    size_t got;
    while ((got = fread(buf, 1, CRC_READ_BYTES, f)) > 0) {
        *crc = crc32_parallel(*crc, buf, got);
        *bytes += got;
    }
    int rc = ferror(f) ? -1 : 0;
    if (rc) snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    return rc;
}

int fs_make_dirs(const char *path, char *err, size_t errlen) {
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char saved = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create the directory %s: %s", buf, strerror(errno));
                free(buf);
                return -1;
            }
            *p = saved;
            if (!saved) break;
        }
    }
    free(buf);
    if (!fs_is_dir(path)) {
        snprintf(err, errlen, "cannot create the directory %s: a file of that name exists", path);
        return -1;
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int fs_remove_tree(const char *path, char *err, size_t errlen) {
    if (!fs_exists(path)) return 0;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
        snprintf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int fs_sync_dir(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the directory %s to sync it: %s", path, strerror(errno));
        return -1;
    }
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc != 0) {
        snprintf(err, errlen, "cannot sync the directory %s: %s", path, strerror(saved));
        return -1;
    }
    return 0;
}

int fs_close_durable(FILE *f, const char *path, char *err, size_t errlen) {
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(saved));
        return -1;
    }
    return 0;
}

#define FS_STREAM_CHUNK ((uint64_t)64 << 20)

int fs_stream_open(FsStream *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof(*s));
    s->path = path;
    s->f = fopen(path, "wb");
    if (!s->f) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Once a chunk more is written: starts the write-back of what was written since the last start, waits for the range
 * started before that and drops it from the cache. Errors of these calls show again at the final fsync. */
static void stream_writeback(FsStream *s) {
    if (s->bytes - s->begun < FS_STREAM_CHUNK || fflush(s->f) != 0) return;
    const int fd = fileno(s->f);
    sync_file_range(fd, (off_t)s->begun, (off_t)(s->bytes - s->begun), SYNC_FILE_RANGE_WRITE);
    if (s->begun > s->waited) {
        sync_file_range(fd, (off_t)s->waited, (off_t)(s->begun - s->waited),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        posix_fadvise(fd, (off_t)s->waited, (off_t)(s->begun - s->waited), POSIX_FADV_DONTNEED);
        s->waited = s->begun;
    }
    s->begun = s->bytes;
}

void fs_stream_write(FsStream *s, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0 && !s->error) {
        size_t take = n > FS_STREAM_CHUNK ? (size_t)FS_STREAM_CHUNK : n;
        if (fwrite(b, 1, take, s->f) != take) {
            s->error = errno ? errno : EIO;
            return;
        }
        s->bytes += take;
        b += take;
        n -= take;
        stream_writeback(s);
    }
}

int fs_stream_close(FsStream *s, char *err, size_t errlen) {
    if (s->error) {
        snprintf(err, errlen, "cannot write %s: %s", s->path, strerror(s->error));
        fclose(s->f);
        return -1;
    }
    return fs_close_durable(s->f, s->path, err, errlen);
}

void fs_stream_abort(FsStream *s) {
    if (!s->f) return;
    fclose(s->f);
    unlink(s->path);
    s->f = NULL;
}

int fs_write_durable(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    if (n && fwrite(data, 1, n, f) != n) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        fclose(f);
        unlink(path);
        return -1;
    }
    if (fs_close_durable(f, path, err, errlen) == 0) return 0;
    unlink(path); /* a file that could not be written whole is not left behind */
    return -1;
}

/* The directory part of path ("." when there is none), into out. */
static void parent_dir(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, cap, ".");
    else if (slash == path) snprintf(out, cap, "/");
    else snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

int fs_replace_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    size_t len = strlen(path);
    char *tmp = malloc(len + 8), *dir = malloc(len + 2);
    int rc = -1;
    if (!tmp || !dir) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }
    snprintf(tmp, len + 8, "%s.tmp", path);
    parent_dir(path, dir, len + 2);
    if (fs_write_durable(tmp, data, n, err, errlen)) goto done;
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = fs_sync_dir(dir, err, errlen);
done:
    free(tmp);
    free(dir);
    return rc;
}

char *fs_read_all(const char *path, size_t max_bytes, size_t *len_out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *kind = fstat(fileno(f), &st) != 0    ? strerror(errno)
                       : S_ISDIR(st.st_mode)          ? "is a directory, not a file"
                       : S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) ? NULL
                                                      : "is not a regular file (a device or a socket)";
    if (kind) {
        fclose(f);
        snprintf(err, errlen, "%s: %s", path, kind);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 131072;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                snprintf(err, errlen, "%s: out of memory", path);
                return NULL;
            }
            text = t;
        }
        size_t n = fread(text + len, 1, 65536, f);
        len += n;
        if (n < 65536 || len > max_bytes) break;
    }
    int read_error = ferror(f) ? errno : 0;
    fclose(f);
    if (read_error || len > max_bytes) {
        free(text);
        if (read_error) snprintf(err, errlen, "%s: read error: %s", path, strerror(read_error));
        else snprintf(err, errlen, "%s: larger than %zu bytes, more than a file of its kind holds", path, max_bytes);
        return NULL;
    }
    text[len] = 0;
    if (len_out) *len_out = len;
    return text;
}

cJSON *fs_parse_json(const char *text, size_t len, const char *where, char *err, size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    const char *at = root ? end : cJSON_GetErrorPtr();
    if (root) /* only white space may follow the value */
        while (at < text + len && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
    if (root && at >= text + len) return root;
    long off = at ? (long)(at - text) : -1;
    int line = 1;
    for (long i = 0; i < off && i < (long)len; i++) line += text[i] == '\n';
    if (root) snprintf(err, errlen, "%s: more after the JSON value's end (line %d): one value per file", where, line);
    else snprintf(err, errlen, "%s: not valid JSON (near line %d)", where, line);
    cJSON_Delete(root);
    return NULL;
}

cJSON *fs_read_json(const char *path, const char *where, char *err, size_t errlen) {
    size_t len;
    char inner[512];
    char *text = fs_read_all(path, FS_JSON_MAX_BYTES, &len, inner, sizeof(inner));
    if (!text) {
        /* inner is "path: problem"; report it after `where` (which names the path already) */
        const char *problem = strncmp(inner, path, strlen(path)) == 0 ? inner + strlen(path) + 2 : inner;
        snprintf(err, errlen, "%s: %s", where, problem);
        return NULL;
    }
    cJSON *root = fs_parse_json(text, len, where, err, errlen);
    free(text);
    return root;
}
