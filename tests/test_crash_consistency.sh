#!/usr/bin/env bash
# test_crash_consistency.sh: a run killed with SIGKILL again and again loses nothing. A small run (the tiny config's
# shapes on 2 x 32-token batches, 60 steps, a checkpoint every 2 steps, --keep-last 2, validation and samples on) is
# killed CRASH_KILLS times (default 15) at moments drawn from a seeded generator (printed; CRASH_SEED=N repeats the
# schedule): at random moments, while the training state is copied into a checkpoint's snapshot, while the background
# writer writes it, just before its rename, and inside the pruning of old checkpoints (the killed runs pause in the
# snapshot and before the rename through the trainer's test hook TRAIN_TEST_CHECKPOINT_PAUSE_MS); each time it is
# continued with --resume (or started again with --overwrite when no checkpoint exists yet). After every kill every
# step_* directory must load through the trainer's readers (build/tests/verify_checkpoints) and equal the checkpoint
# of its step of a straight run, and log.jsonl must be a prefix of the straight run's; at the end the log, the
# weights and the whole training state must be bit-identical to the straight run's. The driver: crash_consistency.py.
set -u
cd "$(dirname "$0")/.."
exec python3 tests/crash_consistency.py
