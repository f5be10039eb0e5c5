/* checkpoint_writer.c: one snapshot, one thread per write, joined when the write is waited for or found finished
 * (see checkpoint_writer.h). The thread reads only the snapshot and its own fields until it sets `finished`. */
#include "persist/checkpoint_writer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct CheckpointWriter {
    char run_dir[CHECKPOINT_PATH_MAX];
    int keep_last;
    CheckpointSnapshot snap;
    pthread_t thread;
    int in_flight;          /* a thread was started and not yet joined */
    atomic_int finished;    /* set by the thread as its last act */
    CheckpointDone outcome; /* the thread's, read after the join */
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *write_thread(void *arg) {
    CheckpointWriter *w = arg;
    CheckpointDone *d = &w->outcome;
    d->step = w->snap.state.step;
    d->failed = checkpoint_write(w->run_dir, &w->snap, &d->stats, d->err, sizeof(d->err)) != 0;
    /* pruning only once the new checkpoint is complete */
    if (!d->failed && checkpoint_prune(w->run_dir, w->keep_last, d->err, sizeof(d->err))) d->failed = 1;
    atomic_store(&w->finished, 1);
    return NULL;
}

CheckpointWriter *checkpoint_writer_create(const char *run_dir, int keep_last, const Model *m, char *err,
                                           size_t errlen) {
    CheckpointWriter *w = calloc(1, sizeof(CheckpointWriter));
    if (!w) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    snprintf(w->run_dir, sizeof(w->run_dir), "%s", run_dir);
    w->keep_last = keep_last;
    if (checkpoint_snapshot_alloc(&w->snap, m, err, errlen)) {
        free(w);
        return NULL;
    }
    return w;
}

int checkpoint_writer_busy(const CheckpointWriter *w) { return w->in_flight; }

uint64_t checkpoint_writer_step(const CheckpointWriter *w) { return w->snap.state.step; }

static void join(CheckpointWriter *w, CheckpointDone *done) {
    pthread_join(w->thread, NULL);
    w->in_flight = 0;
    *done = w->outcome;
}

int checkpoint_writer_wait(CheckpointWriter *w, CheckpointDone *done) {
    if (!w->in_flight) return 0;
    join(w, done);
    return 1;
}

int checkpoint_writer_poll(CheckpointWriter *w, CheckpointDone *done) {
    if (!w->in_flight || !atomic_load(&w->finished)) return 0;
    join(w, done);
    return 1;
}

int checkpoint_writer_submit(CheckpointWriter *w, const Model *m, const Config *cfg, const TrainState *s,
                             double *snapshot_seconds, char *err, size_t errlen) {
    if (w->in_flight) {
        snprintf(err, errlen, "the checkpoint of step %llu: submitted while the write of step %llu is in flight",
                 (unsigned long long)s->step, (unsigned long long)w->snap.state.step);
        return -1;
    }
    double t0 = now_seconds();
    if (checkpoint_snapshot_take(&w->snap, m, cfg, s, err, errlen)) return -1;
    *snapshot_seconds = now_seconds() - t0;
    memset(&w->outcome, 0, sizeof(w->outcome));
    atomic_store(&w->finished, 0);
    int rc = pthread_create(&w->thread, NULL, write_thread, w);
    if (rc != 0) {
        snprintf(err, errlen, "the checkpoint of step %llu: cannot start its writer thread: %s",
                 (unsigned long long)s->step, strerror(rc));
        return -1;
    }
    w->in_flight = 1;
    return 0;
}

void checkpoint_writer_destroy(CheckpointWriter *w) {
    if (!w) return;
    CheckpointDone ignored;
    checkpoint_writer_wait(w, &ignored);
    checkpoint_snapshot_free(&w->snap);
    free(w);
}
