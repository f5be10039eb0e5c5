/* checkpoint_writer.h: checkpoints written beside training. At a checkpoint step the training state is copied into a
 * host snapshot (checkpoint.h; page-locked memory on the GPU, allocated once when the writer is made) and a thread
 * writes it with checkpoint_write's guarantees (temporary directory, CRCs, fsync, atomic rename), then prunes the
 * checkpoints beyond keep_last, while the caller trains on. At most one write is in flight: a checkpoint that falls
 * due during one waits for it first. The caller learns of a finished write by polling at step boundaries or by
 * waiting; a failed write has removed its temporary directory by the time it is reported. */
#ifndef CHECKPOINT_WRITER_H
#define CHECKPOINT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/model.h"
#include "persist/checkpoint.h"

typedef struct CheckpointWriter CheckpointWriter;

/* The outcome of one background write. */
typedef struct CheckpointDone {
    uint64_t step;
    int failed;             /* then err says why; the checkpoint's temporary directory is gone */
    CheckpointStats stats;  /* when it did not fail */
    char err[1024];
} CheckpointDone;

/* A writer for the checkpoints of model m (which outlives it) into run_dir, keeping the newest keep_last (0: all);
 * allocates the snapshot. NULL with a message when the host has not the memory. */
CheckpointWriter *checkpoint_writer_create(const char *run_dir, int keep_last, const Model *m, char *err,
                                           size_t errlen);

/* 1 while a write is in flight. */
int checkpoint_writer_busy(const CheckpointWriter *w);
/* The step of the write in flight (when busy). */
uint64_t checkpoint_writer_step(const CheckpointWriter *w);

/* Takes the snapshot of step s->step and starts its write; *snapshot_seconds gets the time the snapshot took. Only
 * when no write is in flight (wait for it first). -1 with a message when the snapshot or the thread cannot be made
 * (nothing is then in flight). */
int checkpoint_writer_submit(CheckpointWriter *w, const Model *m, const Config *cfg, const TrainState *s,
                             double *snapshot_seconds, char *err, size_t errlen);

/* 1 with *done filled when the write in flight has ended (it is then no longer in flight), 0 when none has. */
int checkpoint_writer_poll(CheckpointWriter *w, CheckpointDone *done);

/* Waits for the write in flight: 1 with *done filled, or 0 when none was in flight. */
int checkpoint_writer_wait(CheckpointWriter *w, CheckpointDone *done);

/* Waits for a write in flight (its outcome is dropped: call checkpoint_writer_wait first to learn it) and frees
 * the writer and its snapshot. */
void checkpoint_writer_destroy(CheckpointWriter *w);

#endif
