"""crash_consistency.py: kill -9 at random moments, then --resume, until the run finishes (run by
tests/test_crash_consistency.sh, which says what is checked). The environment: TRAIN (the trainer, default ./train),
BUILD_DIR (where tests/verify_checkpoints is, default build), CRASH_SEED (the seed of the kill schedule; default a
fresh one, printed), CRASH_KILLS (default 15). The killed runs pause each checkpoint in its snapshot and before its
rename (the trainer's test hook TRAIN_TEST_CHECKPOINT_PAUSE_MS, which says so on stderr) so that kills land there."""
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
import run_compare  # noqa: E402
from checks import check  # noqa: E402

TRAIN = os.path.abspath(os.environ.get("TRAIN", "./train"))
VERIFY = os.path.abspath(os.path.join(os.environ.get("BUILD_DIR", "build"), "tests", "verify_checkpoints"))
KILLS = int(os.environ.get("CRASH_KILLS", "15"))
PAUSE_MS = 150  # the test hook's pause in the snapshot and before the rename of every checkpoint of a killed run
KINDS = ["moment", "snapshot", "write", "rename", "prune"]
SEED = int(os.environ.get("CRASH_SEED") or random.SystemRandom().randrange(1 << 31))
STEPS = 60
# The tiny config's shapes (820k parameters: a 9.4 MiB checkpoint, written every 2 steps) on micro-batches of 2 x 32
# tokens, so that writing checkpoints takes much of the run and kills land inside writes.
CONFIG = {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 2,
          "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 256, "tie_word_embeddings": True,
          "tokenizer": "byte", "batch_size": 2, "seq_len": 32, "steps": STEPS, "learning_rate": 3e-3,
          "warmup_steps": 4, "lr_schedule": "cosine", "eval_every": 10, "eval_batches": 2, "sample_every": 20,
          "sample_tokens": 16, "checkpoint_every": 2, "keep_last": 2}


def leftovers(run):
    """The names of the leftovers of interrupted checkpoint writes (.tmp) and deletions (.deleting) in run."""
    try:
        return {d for d in os.listdir(run) if d.startswith(".step_")}
    except FileNotFoundError:
        return set()


def read_text(path):
    """A file's text (a byte-level sample in it need not be UTF-8)."""
    return open(path, encoding="utf-8", errors="replace").read()


def write_shard(path, n, rng):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{n}H", *[rng.randrange(256) for _ in range(n)]))


def kill_schedule(rng):
    """The kind of moment of each kill, each of KINDS in equal shares, shuffled."""
    kinds = (KINDS * KILLS)[:KILLS]
    rng.shuffle(kinds)
    return kinds


class RunWatch:
    """The leftovers that one run of the trainer makes in its run directory: those there when it starts are old until
    they are gone (it removes them before its first step; it may make one of the same name later)."""

    def __init__(self, run):
        self.run = run
        self.old = leftovers(run)

    def made(self):
        now = leftovers(self.run)
        self.old &= now
        return now - self.old


def wait_for(proc, seconds, watch, suffix=None, nth=1):
    """Waits, watching the leftovers, until the nth of those ending in suffix is made (True), proc exits or the time is
    up."""
    deadline, seen = time.monotonic() + seconds, set()
    while proc.poll() is None and time.monotonic() < deadline:
        if suffix:
            seen |= {d for d in watch.made() if d.endswith(suffix)}
            if len(seen) >= nth:
                return True
        time.sleep(0.0005)
    return False


def wait_for_pause(proc, out_path, phase, seconds, nth):
    """Waits until the trainer says (on its output, in out_path) that a checkpoint paused in phase for the nth time
    (True), proc exits or the time is up."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        if read_text(out_path).count(f"checkpoint test pause: {phase} of step") >= nth:
            return True
        time.sleep(0.001)
    return False


def kill_at(proc, watch, out_path, kind, rng, timing):
    """Sends SIGKILL to proc (unless it exits first) at a moment of the given kind, in one of the run's first 2
    checkpoint periods, drawn at random: moment: after a random delay; snapshot / rename: inside the pause of the nth
    checkpoint's snapshot (the training state half copied) or before its rename (its files complete); write: at a
    random point of the nth checkpoint write (once its .tmp directory is there); prune: as soon as the next pruning has
    begun (a .deleting directory), or, if none is seen within 3 checkpoint periods, then. Returns whether a snapshot or
    rename kill came after its pause began."""
    paused, nth, period = False, rng.randint(1, 2), timing["period"] + 2 * PAUSE_MS / 1000
    if kind == "moment":
        wait_for(proc, rng.uniform(0, 2 * period), watch)
    elif kind in ("snapshot", "rename"):
        paused = wait_for_pause(proc, out_path, kind, 5 * period, nth)
        if paused:
            time.sleep(rng.uniform(0, 0.7 * PAUSE_MS / 1000))
    elif kind == "write":
        if wait_for(proc, 5 * period, watch, ".tmp", nth):
            time.sleep(rng.uniform(0, timing["write"]))
    else:
        wait_for(proc, 3 * period, watch, ".deleting")
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    return paused


def log_difference(run, straight_log):
    """None when run's log (a last line torn by the kill left out) is the straight run's log cut at some record, else
    the first record that differs and the straight run's record in its place."""
    if not os.path.exists(f"{run}/log.jsonl"):
        return None
    recs = run_compare.log_records(run, torn_tail_ok=True)
    for i, r in enumerate(recs):
        if i >= len(straight_log) or r != straight_log[i]:
            return f"record {i + 1}: {r}, the straight run's: {straight_log[i] if i < len(straight_log) else 'none'}"
    return None


def verify_after_kill(run, straight):
    """Every complete checkpoint of run loads (verify_checkpoints) and equals the straight run's of its step; the
    log is a prefix of the straight run's. Returns a list of problems."""
    if not os.path.isdir(run):  # killed before it made the directory
        return []
    problems = []
    v = subprocess.run([VERIFY, run], capture_output=True, text=True)
    if v.returncode != 0:
        problems.append(f"verify_checkpoints: {v.stdout.strip()} {v.stderr.strip()}")
    for step in run_compare.checkpoint_steps(run):
        diffs = run_compare.checkpoint_differences(run_compare.checkpoint_dir(run, step),
                                                   run_compare.checkpoint_dir(straight, step))
        if diffs:
            problems.append(f"step_{step:08d} differs from the straight run's: {', '.join(diffs)}")
    diff = log_difference(run, run_compare.log_records(straight))
    if diff:
        problems.append(f"log.jsonl is not a prefix of the straight run's ({diff[:300]})")
    return problems


def main():
    tmp = tempfile.mkdtemp(prefix="crash_consistency_")
    try:
        return crash_test(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def crash_test(tmp):
    for program in (TRAIN, VERIFY):
        if not os.access(program, os.X_OK):
            check(False, f"no {program} (make test builds it)")
            return 1
    print(f"# kill schedule seed {SEED} (CRASH_SEED={SEED} repeats it), {KILLS} kills", flush=True)
    data_rng = random.Random(7)
    write_shard(f"{tmp}/train_000.bin", 20000, data_rng)
    write_shard(f"{tmp}/val_000.bin", 2000, data_rng)
    cfg = dict(CONFIG, train_data=f"{tmp}/train_*.bin", val_data=f"{tmp}/val_*.bin")
    with open(f"{tmp}/crash.json", "w") as f:
        json.dump(cfg, f)
    base = [TRAIN, "-c", f"{tmp}/crash.json"]
    env = dict(os.environ, OMP_NUM_THREADS="1")

    # The straight run keeps every checkpoint, to compare each one the killed run leaves with the one of its step.
    straight = f"{tmp}/straight"
    t0 = time.monotonic()
    p = subprocess.run(base + ["--keep-last", "0", "-o", straight], capture_output=True, text=True, errors="replace",
                       env=env)
    run_seconds = time.monotonic() - t0
    writes = [float(s) for s in re.findall(r"^checkpoint .* \([0-9.]+ MiB, ([0-9.]+) s\)$", p.stdout, re.M)]
    if p.returncode != 0 or len(writes) != STEPS // CONFIG["checkpoint_every"]:
        check(False, f"the straight run: exit {p.returncode}, {len(writes)} checkpoints: {p.stdout[-500:]} "
              f"{p.stderr[-500:]}")
        return 1
    write_seconds = sum(writes) / len(writes)
    print(f"# straight run: {STEPS} steps, {len(writes)} checkpoints of {write_seconds * 1e3:.0f} ms each on average, "
          f"{run_seconds:.1f} s", flush=True)

    rng = random.Random(SEED)
    schedule = kill_schedule(rng)
    timing = {"run": run_seconds, "write": write_seconds, "period": run_seconds / len(writes)}
    run = f"{tmp}/crashed"
    kills, in_write, in_prune, restarts, runs, bad = 0, 0, 0, 0, 0, []
    in_pause = {"snapshot": 0, "rename": 0}
    killed_env = dict(env, TRAIN_TEST_CHECKPOINT_PAUSE_MS=str(PAUSE_MS))
    while True:
        if os.path.isdir(run) and run_compare.checkpoint_steps(run):
            cmd = [TRAIN, "-o", run, "--resume"]
        else:  # killed before its first checkpoint: the run starts again
            cmd = base + ["-o", run, "--overwrite"]
            restarts += runs > 0
        runs += 1
        watch = RunWatch(run)
        with open(f"{tmp}/run.out", "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=killed_env)
            t0 = time.monotonic()
            paused = kills < KILLS and kill_at(proc, watch, f"{tmp}/run.out", schedule[kills], rng, timing)
            if paused:
                in_pause[schedule[kills]] += 1
            rc = proc.wait()
            seconds = time.monotonic() - t0
        if rc != -signal.SIGKILL:
            if rc != 0:
                bad.append(f"{' '.join(cmd)} exited with status {rc}: {read_text(f'{tmp}/run.out')[-800:]}")
            break
        kills += 1
        made = watch.made()  # what the kill interrupted
        landed = [what for suffix, what in ((".tmp", "a checkpoint write"), (".deleting", "a pruning"))
                  if any(d.endswith(suffix) for d in made)]
        if paused:
            landed.append(f"the {schedule[kills - 1]} pause")
        in_write += "a checkpoint write" in landed
        in_prune += "a pruning" in landed
        problems = verify_after_kill(run, straight)
        if problems:
            bad.append(f"kill {kills}: " + "; ".join(problems))
        print(f"# kill {kills} ({schedule[kills - 1]}) after {seconds:.2f} s, inside "
              f"{' and '.join(landed) or 'neither a checkpoint write nor a pruning'}; checkpoints then: "
              f"{run_compare.checkpoint_steps(run) if os.path.isdir(run) else []}", flush=True)

    check(kills == KILLS, f"{kills} kill -9's of {runs} runs (planned {KILLS}): {in_write} inside a checkpoint write, "
          f"{in_prune} inside a pruning, {in_pause['snapshot']} inside a snapshot, {in_pause['rename']} before a "
          f"rename, {restarts} before the first checkpoint (started again with --overwrite)")
    check(in_write > 0, f"{in_write} kills landed inside a checkpoint write (a .step_*.tmp directory left behind)")
    if KILLS >= len(KINDS):
        check(in_pause["snapshot"] > 0 and in_pause["rename"] > 0,
              f"kills landed inside a snapshot ({in_pause['snapshot']}) and before a rename ({in_pause['rename']})")
    check(not bad, "after every kill, every step_* directory loads (verify_checkpoints) and equals the straight run's "
          "checkpoint of its step, and log.jsonl is a prefix of the straight run's; the last run finished with "
          "status 0" + (": " + " | ".join(bad) if bad else ""))
    check(not leftovers(run), f"no leftovers at the end: {sorted(leftovers(run))}")
    every, keep = CONFIG["checkpoint_every"], CONFIG["keep_last"]
    check(run_compare.checkpoint_steps(run) == list(range(STEPS - every * (keep - 1), STEPS + 1, every)),
          f"the newest {keep} checkpoints kept: {run_compare.checkpoint_steps(run)}")
    same = run_compare.compare_runs(straight, run)
    return 1 if checks.failures or not same else 0


if __name__ == "__main__":
    sys.exit(main())
