#!/usr/bin/env python3
"""bench_run.py: what a whole run costs beside its steps. Runs ./train for N steps with a checkpoint every K steps and
an evaluation every E steps (no text samples), then compares the run's wall time with N times its median step, and
reports how long each checkpoint held the step loop. Prints a Markdown table; --json writes one record.

    make && make data && python3 scripts/bench_run.py                       # Llama-3.2-1B, N 600, K 100, E 100
    python3 scripts/bench_run.py -c configs/llama3_tiny.json -n 60 -k 10 -e 10 --json /tmp/run.json

What is timed (from the run's log.jsonl, whose records carry "time", seconds since the process started):
- wall_s: from the start of step 1 to the end of step N's record, checkpoint and evaluation included: the step loop
  as the user waits for it. Startup (model build, data, snapshot allocation) is not in it, nor the wait for the last
  checkpoint's write after the loop (reported as final_write_s; process_s is the whole process).
- median_step_ms: the median of the steps' "ms" (each step ends with a device synchronize).
- overhead: wall_s / (N x median_step_ms) - 1.
- stalls_s: per checkpoint, how long the loop was held (waiting for the previous write, then copying the training
  state into the snapshot); max_stall_s their maximum. write_s: how long each write took in the background.
- eval_s: the time of the evaluations (each validation record's time less its step record's).
The run directory goes to a temporary directory (or --out), which is removed at the end unless --keep.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, check=True).stdout.strip()
        return out.splitlines()[0] if out else "cpu"
    except (OSError, subprocess.CalledProcessError):
        return "cpu"


def run_train(a, run_dir):
    cmd = [a.train, "-c", a.config, "-n", str(a.steps), "--checkpoint-every", str(a.checkpoint_every),
           "--eval-every", str(a.eval_every), "--sample-every", "0", "--keep-last", str(a.keep_last), "-o", run_dir,
           "--overwrite"] + a.extra
    print("#", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    process_s = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench_run.py: ./train failed with status {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout, process_s


def measure(a, run_dir):
    stdout, process_s = run_train(a, run_dir)
    recs = [json.loads(line) for line in open(os.path.join(run_dir, "log.jsonl"), encoding="utf-8")]
    steps = [r for r in recs if "loss" in r and "ms" in r]
    stalls = [r["checkpoint_stall_s"] for r in recs if "checkpoint_stall_s" in r]
    writes = [(m.group(1), float(m.group(2)), float(m.group(3))) for m in
              re.finditer(r"^checkpoint (\S+) \(([0-9.]+) MiB, ([0-9.]+) s\)$", stdout, re.M)]
    if len(steps) != a.steps:
        sys.exit(f"bench_run.py: {len(steps)} step records in the log, expected {a.steps}")
    step_time = {r["step"]: r["time"] for r in steps}
    eval_s = sum(r["time"] - step_time[r["step"]] for r in recs if "val_loss" in r)
    loop_start = steps[0]["time"] - steps[0]["ms"] / 1e3
    wall_s = recs[-1]["time"] - loop_start
    median_ms = statistics.median(r["ms"] for r in steps)
    return {
        "config": a.config, "steps": a.steps, "checkpoint_every": a.checkpoint_every, "eval_every": a.eval_every,
        "wall_s": round(wall_s, 3), "median_step_ms": round(median_ms, 3),
        "overhead": round(wall_s / (a.steps * median_ms / 1e3) - 1, 4),
        "max_stall_s": round(max(stalls), 3) if stalls else 0.0,
        "stalls_s": [round(s, 3) for s in stalls], "eval_s": round(eval_s, 3),
        "write_s": [w[2] for w in writes], "checkpoint_mib": writes[-1][1] if writes else 0.0,
        "final_write_s": writes[-1][2] if writes else 0.0, "process_s": round(process_s, 1),
        "gpu": gpu_name(), "date": datetime.date.today().isoformat(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="configs/llama3_1b.json")
    ap.add_argument("-n", "--steps", type=int, default=600)
    ap.add_argument("-k", "--checkpoint-every", type=int, default=100)
    ap.add_argument("-e", "--eval-every", type=int, default=100)
    ap.add_argument("--keep-last", type=int, default=1, help="checkpoints kept (default 1: a 1B one is 13.8 GiB)")
    ap.add_argument("--train", default="./train")
    ap.add_argument("--out", help="the run directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--json", help="also write the record to this JSON file")
    ap.add_argument("extra", nargs="*", help="more ./train flags (after --)")
    a = ap.parse_args()
    parent = None if a.out else tempfile.mkdtemp(prefix="bench_run_")
    run_dir = a.out or os.path.join(parent, "run")
    try:
        r = measure(a, run_dir)
    finally:
        if not a.keep:
            shutil.rmtree(parent or run_dir, ignore_errors=True)
    print(f"\n{r['config']}, {r['steps']} steps, a checkpoint every {r['checkpoint_every']} "
          f"({r['checkpoint_mib'] / 1024:.2f} GiB), an evaluation every {r['eval_every']}, on {r['gpu']}\n")
    print("| wall s | N x median step s | overhead | evaluations s | max stall s | stalls s | writes s (background) |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | --- |")
    print(f"| {r['wall_s']:.1f} | {r['steps'] * r['median_step_ms'] / 1e3:.1f} | {100 * r['overhead']:.1f}% | "
          f"{r['eval_s']:.1f} | {r['max_stall_s']:.2f} | {', '.join(f'{s:.2f}' for s in r['stalls_s'])} | "
          f"{', '.join(f'{s:.1f}' for s in r['write_s'])} |")
    print(f"\nmedian step {r['median_step_ms']:.1f} ms; the whole process {r['process_s']:.1f} s (startup, and "
          f"{r['final_write_s']:.1f} s for the last checkpoint's write after the loop)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
