/* fsutil.h: small file-system helpers, below everything that touches files (persist/: the run directory and
 * checkpoints; model/: the config file; data/: the tokenizer file and meta.json): durable writes (flush + fsync),
 * atomic replacement (temporary file + rename + fsync of the directory), reading whole files and JSON files, mkdir -p
 * and recursive removal. Every function that can fail returns 0 / non-NULL on success, or -1 / NULL with a message
 * that names the path in err. */
#ifndef FSUTIL_H
#define FSUTIL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

int fs_is_dir(const char *path);
int fs_exists(const char *path);
/* The size of a regular file in bytes, or -1 (with a message) when it cannot be read. */
int64_t fs_file_size(const char *path, char *err, size_t errlen);

/* 1 when errno value e means this user may not access a file (EACCES, EPERM): a fault of permissions, not of the
 * file's contents. */
int fs_denied(int e);
/* -1 with a message ("permission denied: PATH") when this user may not open path or, in a directory, any entry below
 * it; 0 otherwise (other faults are left to the checks of what is read). */
int fs_check_access(const char *path, char *err, size_t errlen);

/* The CRC32 (zlib's) and size of a whole file. */
int fs_file_crc32(const char *path, uint32_t *crc, uint64_t *bytes, char *err, size_t errlen);

/* mkdir -p */
int fs_make_dirs(const char *path, char *err, size_t errlen);
/* rm -r (no error if path does not exist). */
int fs_remove_tree(const char *path, char *err, size_t errlen);
/* fsync a directory, so that renames and new entries inside it survive a crash. */
int fs_sync_dir(const char *path, char *err, size_t errlen);

/* A new file written front to back and made durable when it is closed, for the gigabytes of a checkpoint: its bytes
 * go to disk while more are written (the write-back of every FS_STREAM_CHUNK is started at once and waited for one
 * chunk later, after which its pages leave the cache), so the disk is busy throughout, the final fsync has little
 * left, and the page cache holds two chunks of it. A failed write is kept and reported by fs_stream_close. */
typedef struct FsStream {
    FILE *f;
    const char *path;       /* the caller's, for messages */
    uint64_t bytes;         /* written so far */
    uint64_t begun, waited; /* write-back started / completed up to this byte */
    int error;              /* errno of the first failed write, or 0 */
} FsStream;
int fs_stream_open(FsStream *s, const char *path, char *err, size_t errlen);
void fs_stream_write(FsStream *s, const void *p, size_t n);
/* Flushes, fsyncs and closes; 0, or -1 with a message naming the path and the first error. */
int fs_stream_close(FsStream *s, char *err, size_t errlen);
/* Closes and deletes the file. */
void fs_stream_abort(FsStream *s);

/* Flushes, fsyncs and closes f (which was opened for writing path); the file is closed whatever happens. */
int fs_close_durable(FILE *f, const char *path, char *err, size_t errlen);
/* Writes n bytes to a new file at path, durably; a failed write removes the file. */
int fs_write_durable(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* Replaces path atomically: writes path.tmp durably, renames it over path, fsyncs the directory. */
int fs_replace_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);

/* The whole file, NUL-terminated (the caller frees it); *len (when not NULL) gets its length. A directory, a device
 * or a socket is refused (a pipe is read), and so is a file of more than max_bytes. */
char *fs_read_all(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen);
/* The largest JSON file fs_read_json reads (meta.json, config.json, a sharded checkpoint's index). */
#define FS_JSON_MAX_BYTES ((size_t)64 << 20)
/* Parses JSON text of len bytes, one value followed by nothing but white space; a message (prefixed by `where`)
 * names the line of a syntax error or of what follows the value. */
cJSON *fs_parse_json(const char *text, size_t len, const char *where, char *err, size_t errlen);
/* Reads and parses a JSON file; messages are prefixed by `where` (e.g. "config runs/x/config.json"). */
cJSON *fs_read_json(const char *path, const char *where, char *err, size_t errlen);

#endif
