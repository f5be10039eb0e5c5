/* run_dir.h: the run directory as a whole: refusing a directory that already holds a run (unless --overwrite:
 * run_replace.h sets it aside), and cutting the log back to a checkpoint's step when a run resumes, so that it reads
 * as one run. */
#ifndef RUN_DIR_H
#define RUN_DIR_H

#include <stddef.h>
#include <stdint.h>

/* 0 if run_dir holds no run (no log.jsonl, no checkpoint) or overwrite is set; else -1 with a message. */
int run_dir_check_new(const char *run_dir, int overwrite, char *err, size_t errlen);

/* Rewrites log_path atomically without the records whose "step" is greater than step (and without lines that are
 * not JSON objects with a step: the torn last line of a crash). *dropped gets the number of lines removed. A missing
 * log is created empty. */
int run_log_truncate(const char *log_path, uint64_t step, int *dropped, char *err, size_t errlen);

#endif
