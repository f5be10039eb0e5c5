/* run_lock.h: one process per run directory. An advisory lock (flock) on RUN/.train.lock, taken before anything in
 * the directory is read or written and held until the process ends; a second trainer on the same directory is
 * refused with the holder's PID, which the holder writes into the file. Reading a run (--generate) takes no lock:
 * checkpoints appear by an atomic rename. The lock file is removed when the lock is released; a directory made only
 * to hold it is removed too, so that a run that stops before writing anything leaves nothing behind. */
#ifndef RUN_LOCK_H
#define RUN_LOCK_H

#include <stddef.h>

#define RUN_LOCK_NAME ".train.lock"
#define RUN_LOCK_PATH_MAX 1100

typedef struct RunLock {
    int fd;                        /* -1 when not held */
    int made_dirs;                 /* directories created to take the lock: dir and this many-1 above it */
    char dir[RUN_LOCK_PATH_MAX];
    char path[RUN_LOCK_PATH_MAX + 16];
} RunLock;

/* Takes the lock of run_dir, creating the directory (and its parents) when create is set. -1 with a message when
 * the directory is missing (create unset) or cannot be made, or another process holds the lock (naming its PID). */
int run_lock_take(RunLock *lock, const char *run_dir, int create, char *err, size_t errlen);

/* Removes the lock file (and the directories made for the lock when they hold nothing else), then releases the lock.
 * Nothing when it is not held. */
void run_lock_release(RunLock *lock);

#endif
