/* run_replace.c: setting a run aside while a new one starts, and removing or restoring it (see run_replace.h). */
#include "persist/run_replace.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "persist/checkpoint.h"
#include "util/fsutil.h"

#define MOVING_NAME RUN_REPLACED_NAME ".tmp"

/* 1 for a name that belongs to a run: its log, its configuration, its checkpoints and their temporary files. */
static int run_file(const char *name) {
    static const char *const files[] = {"log.jsonl", "log.jsonl.tmp", "train_config.json", "train_config.json.tmp"};
    static const char *const prefixes[] = {"step_", ".step_", "damaged_step_"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if (strcmp(name, files[i]) == 0) return 1;
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

/* Moves (move_to set) or removes the run files of dir: every entry when all is set, else those of run_file. *count
 * gets how many; a directory that does not exist has none. */
static int for_run_files(const char *dir, int all, const char *move_to, int *count, char *err, size_t errlen) {
    *count = 0;
    for (int found = 1; found;) { /* until a pass finds none: the directory changes while it is read */
        found = 0;
        DIR *d = opendir(dir);
        if (!d) {
            if (errno == ENOENT) return 0;
            snprintf(err, errlen, "cannot read %s: %s", dir, strerror(errno));
            return -1;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || !(all || run_file(e->d_name))) continue;
            char from[CHECKPOINT_PATH_MAX + 256], to[CHECKPOINT_PATH_MAX + 256];
            snprintf(from, sizeof(from), "%s/%s", dir, e->d_name);
            int rc = 0;
            if (move_to) {
                snprintf(to, sizeof(to), "%s/%s", move_to, e->d_name);
                if (rename(from, to) != 0) {
                    snprintf(err, errlen, "cannot move %s to %s: %s", from, to, strerror(errno));
                    rc = -1;
                }
            } else {
                rc = fs_remove_tree(from, err, errlen);
            }
            if (rc) {
                closedir(d);
                return -1;
            }
            found = 1;
            (*count)++;
        }
        closedir(d);
    }
    return 0;
}

int run_replace_begin(const char *run_dir, FILE *out, char *err, size_t errlen) {
    char moving[CHECKPOINT_PATH_MAX], replaced[CHECKPOINT_PATH_MAX];
    snprintf(moving, sizeof(moving), "%s/%s", run_dir, MOVING_NAME);
    snprintf(replaced, sizeof(replaced), "%s/%s", run_dir, RUN_REPLACED_NAME);
    int moved;
    if (fs_make_dirs(moving, err, errlen) || for_run_files(run_dir, 0, moving, &moved, err, errlen) ||
        fs_sync_dir(moving, err, errlen))
        return -1;
    if (rename(moving, replaced) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", moving, replaced, strerror(errno));
        return -1;
    }
    if (fs_sync_dir(run_dir, err, errlen)) return -1;
    if (moved)
        fprintf(out, "the run in %s is set aside in %s: it is removed once this run's first checkpoint is complete, "
                "and put back if this run stops before\n", run_dir, replaced);
    return 0;
}

/* Puts back what RUN/.replaced_run.tmp holds (the new run's files are gone by then) and removes it. */
static int put_back(const char *run_dir, const char *moving, int *count, char *err, size_t errlen) {
    if (for_run_files(moving, 1, run_dir, count, err, errlen) || fs_sync_dir(run_dir, err, errlen)) return -1;
    if (rmdir(moving) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove %s: %s", moving, strerror(errno));
        return -1;
    }
    return fs_sync_dir(run_dir, err, errlen);
}

/* 1 when the directory dir holds any entry. */
static int holds_anything(const char *dir) {
    DIR *d = opendir(dir);
    int held = 0;
    for (struct dirent *e; d && !held && (e = readdir(d));) held = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return held;
}

int run_replace_settle(const char *run_dir, const char *who, FILE *out, char *err, size_t errlen) {
    char moving[CHECKPOINT_PATH_MAX], replaced[CHECKPOINT_PATH_MAX];
    snprintf(moving, sizeof(moving), "%s/%s", run_dir, MOVING_NAME);
    snprintf(replaced, sizeof(replaced), "%s/%s", run_dir, RUN_REPLACED_NAME);
    int count = 0;
    if (fs_exists(replaced)) {
        CheckpointList list;
        if (checkpoint_list(run_dir, &list, err, errlen)) return -1;
        const int ready = list.n > 0, held = holds_anything(replaced);
        checkpoint_list_free(&list);
        if (ready || !held) { /* the new run stays: it has a checkpoint, or it replaced nothing */
            if (fs_remove_tree(replaced, err, errlen) || fs_sync_dir(run_dir, err, errlen)) return -1;
            if (held) fprintf(out, "removed the run that %s replaced (%s): its first checkpoint is complete\n", who,
                              replaced);
            return 0;
        }
        /* The new run has no checkpoint: its files go, then the old ones come back. */
        if (for_run_files(run_dir, 0, NULL, &count, err, errlen) || fs_sync_dir(run_dir, err, errlen)) return -1;
        if (count) fprintf(out, "%s ended before its first checkpoint: removed what it wrote in %s\n", who, run_dir);
        if (rename(replaced, moving) != 0) {
            snprintf(err, errlen, "cannot rename %s to %s: %s", replaced, moving, strerror(errno));
            return -1;
        }
    }
    if (!fs_exists(moving)) return 0;
    if (put_back(run_dir, moving, &count, err, errlen)) return -1;
    if (count) fprintf(out, "put back the run that %s was to replace in %s\n", who, run_dir);
    return 0;
}
