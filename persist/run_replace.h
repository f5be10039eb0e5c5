/* run_replace.h: a new run replaces what its directory held only once it has a checkpoint. Before a new run writes
 * anything, the files of the run directory that belong to a run (log.jsonl, train_config.json, the checkpoints
 * complete, partial and set aside, and their temporary files) move into RUN/.replaced_run (through
 * RUN/.replaced_run.tmp while they move); they are removed once the new run's first checkpoint is complete, and put
 * back, with what the new run wrote removed, when it stops before that (a new run that replaced nothing keeps what it
 * wrote: its log tells how it ended). A process killed in between leaves the hidden directory for run_replace_settle,
 * which every run calls under the run directory's lock before it reads the directory: it removes the old run when the
 * new one has a complete checkpoint, else puts the old one back. */
#ifndef RUN_REPLACE_H
#define RUN_REPLACE_H

#include <stddef.h>
#include <stdio.h>

#define RUN_REPLACED_NAME ".replaced_run"

/* Sets the run files of run_dir aside (the directory exists and is locked; nothing is set aside already). Prints
 * what it moved to out. */
int run_replace_begin(const char *run_dir, FILE *out, char *err, size_t errlen);

/* Settles a replacement in run_dir (nothing when none is under way): with a complete checkpoint in run_dir (or nothing
 * set aside) the files set aside are removed, else the files of the new run are removed and those set aside put back. `who` names the new
 * run in what is printed to out ("this run", "the run interrupted in ..."). */
int run_replace_settle(const char *run_dir, const char *who, FILE *out, char *err, size_t errlen);

#endif
