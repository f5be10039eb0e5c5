/* progress.h: what a training run tells its user as it goes and at its end: which steps print their progress line
 * (--log-every), the elapsed time and ETA on that line, and the summary at the end (steps, tokens, wall time, mean
 * tokens/s and MFU, validation losses, the newest checkpoint and the command that generates from it). */
#ifndef PROGRESS_H
#define PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct Progress {
    int first_step, steps, every;   /* this process's first step, the run's last, the printing interval */
    double loop_start;              /* when the first step began (seconds, the caller's clock) */
    int steps_done;                 /* steps run by this process */
    int64_t tokens;                 /* tokens trained by this process */
    double step_seconds;            /* the time of those steps alone (no evaluations, samples or checkpoints) */
    int n_val;                      /* validation losses seen by this process */
    double last_val, best_val;
    int last_val_step, best_val_step;
} Progress;

/* A run that trains steps first_step..steps from the moment loop_start; log_every 0 prints every steps/100-th. */
void progress_start(Progress *p, int first_step, int steps, int log_every, double loop_start);

/* 1 when step's progress line is printed: the first step, every Nth, and the last. */
int progress_prints(const Progress *p, int step);

/* One step done: its time in seconds and its tokens. */
void progress_step(Progress *p, double seconds, int64_t tokens);

/* " | 1m02s elapsed | ETA 3m40s" for the progress line after step (now: the caller's clock). */
void progress_times(const Progress *p, int step, double now, char *out, size_t cap);

void progress_val(Progress *p, int step, double val_loss);

/* A resumed run: the validation losses of the run's log before this process (for the summary's last and best).
 * A log that does not read adds none. */
void progress_read_validation(Progress *p, const char *log_path);

/* "4m02s", "12s", "1h02m": a duration for people. */
void progress_duration(double seconds, char *out, size_t cap);

/* The summary, to out: wall_seconds since the process started; mfu_scale (FLOPs per token / peak FLOP/s) > 0 adds the
 * MFU; the newest complete checkpoint of run_dir and the command, with prog (argv[0]), that generates from it. */
void progress_summary(const Progress *p, FILE *out, double wall_seconds, double mfu_scale, const char *run_dir,
                      const char *prog);

#endif
