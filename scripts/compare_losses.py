#!/usr/bin/env python3
"""compare_losses.py: compares the loss curves of two or more runs (log.jsonl of ./train or scripts/reference.py).

    python3 scripts/compare_losses.py runs/tiny/log.jsonl runs/tiny_ref/log.jsonl --png tiny.png
    python3 scripts/compare_losses.py RUN_A RUN_B --tolerance 1e-3 --grad-norm-rtol 1e-3   # exit 1 if they differ more

A run may be given as its directory (then DIR/log.jsonl). The first log is the baseline: for each other log, over
the steps both logged, it prints a per-step table (step, each loss, the difference from the baseline; validation
losses too), then the max and mean absolute difference and the max relative difference of the training loss, the
validation loss and the gradient norm. Logs of different lengths are compared on their common steps; when a step
appears twice in one log (a resumed run), the later record counts. A PNG plot (loss vs step, one line per log, with
the validation losses as markers, each log's its own and the first log's larger and hollow, so that points at the
same place stay visible; and a lower panel of each log's difference from the baseline) is written to --png (default
compare_losses.png; --png '' for none; needs matplotlib).

Exit status: 0, or 1 when a bound given by --tolerance (max abs loss diff), --val-tolerance (max abs val loss diff) or
--grad-norm-rtol (max relative grad norm diff) is exceeded or there is no common step, 2 for unreadable input.
"""
import argparse
import json
import math
import os
import sys


def die(msg, status=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(status)


def read_log(path):
    """{"loss": {step: value}, "grad_norm": {...}, "val_loss": {...}} of one log."""
    if os.path.isdir(path):
        path = os.path.join(path, "log.jsonl")
    series = {"loss": {}, "grad_norm": {}, "val_loss": {}, "lr": {}}
    try:
        f = open(path)
    except OSError as e:
        die(f"cannot read {path}: {e.strerror}")
    with f:
        lines = f.readlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) and not line.endswith("\n"):
                print(f"warning: {path}:{i}: ignoring an incomplete last line", file=sys.stderr)
                continue
            die(f"{path}:{i}: not a JSON object (is this a log.jsonl of ./train or reference.py?)")
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            die(f"{path}:{i}: a record without an integer \"step\"")
        for key in series:
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                series[key][rec["step"]] = float(v)
    if not series["loss"] and not series["val_loss"]:
        die(f"{path}: no loss records")
    return path, series


def stats(base, other):
    """Common steps, max/mean abs diff, max relative diff (of |base|) of two {step: value} series."""
    steps = sorted(base.keys() & other.keys())
    if not steps:
        return steps, None
    diffs = [abs(other[s] - base[s]) for s in steps]
    rels = [d / abs(base[s]) if base[s] else (0.0 if d == 0 else math.inf) for d, s in zip(diffs, steps)]
    worst = max(range(len(steps)), key=lambda i: diffs[i])
    return steps, {"max": diffs[worst], "at": steps[worst], "mean": sum(diffs) / len(diffs), "max_rel": max(rels),
                   "n": len(steps)}


def fmt(v, width=12):
    return f"{v:{width}.6f}" if v is not None else " " * (width - 1) + "-"


def print_table(names, logs, key, every):
    """One row per step that any log has (every Nth, plus the last); differences from the first log."""
    base = logs[0][key]
    steps = sorted(set().union(*(l[key].keys() for l in logs)))
    if not steps:
        return
    if every > 1:
        keep = {s for i, s in enumerate(steps) if i % every == 0} | {steps[-1]}
        steps = [s for s in steps if s in keep]
    head = f"{'step':>7} " + " ".join(f"{n[:12]:>12}" for n in names) + \
        " " + " ".join(f"{'diff ' + str(i):>12}" for i in range(1, len(names)))
    print(f"-- {key}" + (f" (every {every}th step)" if every > 1 else "") +
          ("; diff i = log i minus the first log" if len(names) > 1 else ""))
    print(head)
    for s in steps:
        vals = [l[key].get(s) for l in logs]
        diffs = [(v - vals[0]) if v is not None and vals[0] is not None else None for v in vals[1:]]
        print(f"{s:7d} " + " ".join(fmt(v) for v in vals) + " " +
              " ".join(f"{d:12.3e}" if d is not None else " " * 11 + "-" for d in diffs))


VAL_MARKERS = "oxs^Dv"


def val_marker(i, color):
    """The validation points of log i: each log its own marker, the first ones larger and hollow, so that points
    that coincide stay visible one inside the other."""
    return {"color": color, "marker": VAL_MARKERS[i % len(VAL_MARKERS)], "ms": max(10 - 2 * i, 4),
            "mfc": "none" if i == 0 else color, "mew": 1.5}


def plot(png, names, logs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("--png needs matplotlib (pip install matplotlib), or pass --png '' for no plot")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for i, (name, s) in enumerate(zip(names, logs)):
        color = f"C{i}"
        steps = sorted(s["loss"])
        top.plot(steps, [s["loss"][k] for k in steps], color=color, lw=1.2 if i == 0 else 1.0,
                 ls="-" if i == 0 else "--", label=name)
        vsteps = sorted(s["val_loss"])
        if vsteps:
            top.plot(vsteps, [s["val_loss"][k] for k in vsteps], ls="none", label=f"{name} (val)",
                     **val_marker(i, color))
        if i > 0:
            for key in ("loss", "val_loss"):
                common = sorted(s[key].keys() & logs[0][key].keys())
                style = {"color": color, "ls": "-", "lw": 1.0} if key == "loss" else dict(val_marker(i, color), ls="none")
                if common:
                    bottom.plot(common, [s[key][k] - logs[0][key][k] for k in common], **style,
                                label=f"{name} - {names[0]}" + (" (val)" if key == "val_loss" else ""))
    top.set_ylabel("loss")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    bottom.axhline(0, color="k", lw=0.5)
    bottom.set_ylabel(f"difference from {names[0]}")
    bottom.set_xlabel("step")
    bottom.legend(fontsize=8)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", metavar="LOG", help="log.jsonl files (or run directories); the first is "
                                                           "the baseline")
    ap.add_argument("--labels", help="comma-separated names of the logs (default: their directories)")
    ap.add_argument("--png", default="compare_losses.png", help="the plot (default compare_losses.png; '' for none)")
    ap.add_argument("--tolerance", type=float, help="exit 1 if the max abs training-loss difference exceeds this")
    ap.add_argument("--val-tolerance", type=float, help="exit 1 if the max abs validation-loss difference exceeds "
                                                        "this (default: --tolerance)")
    ap.add_argument("--grad-norm-rtol", type=float, help="exit 1 if the max relative grad-norm difference exceeds "
                                                         "this")
    ap.add_argument("--steps", metavar="A:B", help="compare only steps A..B (either may be left out)")
    ap.add_argument("--every", type=int, default=0,
                    help="print every Nth step of the table (default: all up to 200 steps, else about 100 rows; "
                         "-1: no table)")
    args = ap.parse_args(argv)
    if len(args.logs) < 2:
        die("give two or more logs to compare")
    loaded = [read_log(p) for p in args.logs]
    paths = [p for p, _ in loaded]
    logs = [s for _, s in loaded]
    if args.steps:
        try:
            a, b = args.steps.split(":")
            lo, hi = int(a) if a else -math.inf, int(b) if b else math.inf
        except ValueError:
            die(f"--steps {args.steps}: expected A:B, e.g. 1:100 or 50:")
        logs = [{k: {s: v for s, v in ser.items() if lo <= s <= hi} for k, ser in log.items()} for log in logs]
    if args.labels:
        names = args.labels.split(",")
        if len(names) != len(logs):
            die(f"--labels has {len(names)} names for {len(logs)} logs")
    else:
        names = [os.path.basename(os.path.dirname(os.path.abspath(p))) if os.path.basename(p) == "log.jsonl"
                 else os.path.splitext(os.path.basename(p))[0] for p in paths]
        if len(set(names)) < len(names):
            names = paths

    n_steps = len(set().union(*(l["loss"].keys() for l in logs)))
    every = args.every if args.every else (1 if n_steps <= 200 else math.ceil(n_steps / 100))
    if every > 0:
        print_table(names, logs, "loss", every)
        if any(l["val_loss"] for l in logs):
            print_table(names, logs, "val_loss", 1)
        print()

    failed = False
    val_tol = args.val_tolerance if args.val_tolerance is not None else args.tolerance
    for i in range(1, len(logs)):
        print(f"{names[i]} vs {names[0]}:")
        for key, bound, kind in (("loss", args.tolerance, "abs"), ("val_loss", val_tol, "abs"),
                                 ("grad_norm", args.grad_norm_rtol, "rel")):
            steps, st = stats(logs[0][key], logs[i][key])
            if st is None:
                if key == "loss":
                    print(f"  {key}: no common steps")
                    failed = True
                continue
            line = (f"  {key:9s}: {st['n']} common steps, max abs diff {st['max']:.3e} (step {st['at']}), mean abs "
                    f"diff {st['mean']:.3e}, max relative diff {st['max_rel']:.3e}")
            if bound is not None:
                value = st["max"] if kind == "abs" else st["max_rel"]
                ok = value <= bound
                failed |= not ok
                line += f"  [{'ok' if ok else 'EXCEEDS'}: {kind} bound {bound:g}]"
            print(line)
        _, st = stats(logs[0]["lr"], logs[i]["lr"])
        if st is not None and st["max_rel"] > 1e-6:
            print(f"  warning: the learning rates differ (max relative difference {st['max_rel']:.2e} at step "
                  f"{st['at']}): were both runs made with the same config?")
        only = sorted(logs[0]["loss"].keys() ^ logs[i]["loss"].keys())
        if only:
            print(f"  ({len(only)} steps are in only one of the two logs)")
    if args.png:
        plot(args.png, names, logs)
        print(f"plot: {args.png}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
