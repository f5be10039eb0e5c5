/* run_lock.c: the run directory's lock file (see run_lock.h). */
#include "persist/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fsutil.h"

/* "process N" from the lock file of a holder, or words for a holder that has not yet written its PID. */
static void holder_text(const char *path, char *out, size_t cap) {
    char buf[32] = "";
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof(buf), f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    int digits = buf[0] != 0;
    for (const char *p = buf; *p; p++) digits &= *p >= '0' && *p <= '9';
    if (digits) snprintf(out, cap, "process %s", buf);
    else snprintf(out, cap, "a process that has not yet written its PID");
}

/* How many directories of path, from the end, do not exist. */
static int missing_levels(const char *path) {
    char p[RUN_LOCK_PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    int n = 0;
    for (;;) {
        size_t len = strlen(p);
        while (len > 1 && p[len - 1] == '/') p[--len] = 0;
        if (fs_exists(p)) return n;
        n++;
        char *slash = strrchr(p, '/');
        if (!slash) return n;
        slash[slash == p] = 0; /* "/x" -> "/" */
    }
}

/* 1 when fd is the file now at path (a releasing holder may have removed it after this process opened it). */
static int still_at_path(int fd, const char *path) {
    struct stat at_path, held;
    return stat(path, &at_path) == 0 && fstat(fd, &held) == 0 && at_path.st_ino == held.st_ino &&
           at_path.st_dev == held.st_dev;
}

int run_lock_take(RunLock *lock, const char *run_dir, int create, char *err, size_t errlen) {
    lock->fd = -1;
    lock->made_dirs = 0;
    snprintf(lock->dir, sizeof(lock->dir), "%s", run_dir);
    snprintf(lock->path, sizeof(lock->path), "%s/%s", run_dir, RUN_LOCK_NAME);
    for (;;) {
        if (!fs_is_dir(run_dir)) {
            if (fs_exists(run_dir)) {
                snprintf(err, errlen, "the run directory %s exists and is not a directory", run_dir);
                return -1;
            }
            if (!create) {
                snprintf(err, errlen, "the run directory %s does not exist", run_dir);
                return -1;
            }
            lock->made_dirs = missing_levels(run_dir);
            if (fs_make_dirs(run_dir, err, errlen)) return -1;
        }
        int fd = open(lock->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno == ENOENT) continue; /* a releasing holder removed the directory it had made: make it again */
            snprintf(err, errlen, "cannot create the lock file %s: %s", lock->path, strerror(errno));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e != EWOULDBLOCK) {
                snprintf(err, errlen, "cannot lock %s: %s", lock->path, strerror(e));
                return -1;
            }
            char holder[64];
            holder_text(lock->path, holder, sizeof(holder));
            snprintf(err, errlen, "the run directory %s is in use by another ./train (%s, which holds %s): wait for "
                     "it to end, or choose another -o", run_dir, holder, lock->path);
            return -1;
        }
        if (still_at_path(fd, lock->path)) {
            lock->fd = fd;
            break;
        }
        close(fd); /* the file of a holder that has released it since: take the one at the path now */
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(lock->fd, 0) != 0 || pwrite(lock->fd, pid, (size_t)n, 0) != n) {
        snprintf(err, errlen, "cannot write the lock file %s: %s", lock->path, strerror(errno));
        run_lock_release(lock);
        return -1;
    }
    return 0;
}

void run_lock_release(RunLock *lock) {
    if (lock->fd < 0) return;
    unlink(lock->path);
    char dir[RUN_LOCK_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", lock->dir);
    for (int i = 0; i < lock->made_dirs && rmdir(dir) == 0; i++) { /* stops at one that holds anything */
        char *slash = strrchr(dir, '/');
        while (slash && slash > dir && slash[1] == 0) { /* a trailing slash: the one before it */
            *slash = 0;
            slash = strrchr(dir, '/');
        }
        if (!slash || slash == dir) break;
        *slash = 0;
    }
    close(lock->fd);
    lock->fd = -1;
}
