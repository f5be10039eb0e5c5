#!/usr/bin/env python3
"""step_kernels.py: the kernels of one training step and their GPU time, from Nsight Compute's CSV of a short run
(kernel duration only): first a summary by kind of kernel (one column per file), then each file's kernels grouped
by name and sorted by total time, as Markdown tables. The step is the last one in the log: the kernels after the
previous step's two AdamW launches, through the last step's.

    ncu --metrics gpu__time_duration.sum --csv --clock-control none --cache-control none \\
        ./train -c configs/llama3_1b.json -n 2 --eval-every 0 --sample-every 0 -d cuda --fusion on -o /tmp/x > on.csv
    python3 scripts/step_kernels.py on.csv [off.csv ...]

ncu runs the kernels one at a time, so the sum is the GPU time of the step without overlap or launch gaps; it is
for seeing where the time goes, not a step time.
"""
import csv
import gzip
import re
import sys
from collections import defaultdict

SCALE = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * SCALE[r["Metric Unit"]]))
    return rows


def last_step(rows):
    adamw = [i for i, (name, _) in enumerate(rows) if "adamw" in name]
    if len(adamw) < 4:
        sys.exit("need two steps (each ends with two AdamW launches)")
    return rows[adamw[-3] + 1: adamw[-1] + 1]


# Kinds of kernel, by name (the first that matches).
KINDS = [
    ("GEMMs (fused: with their epilogue programs)", r"ge_kernel|nvjet|gemm|cutlass|sm90_xmma"),
    ("attention (forward, backward, its L/D prep)", r"attn_"),
    ("row passes: RMSNorm, SwiGLU, RoPE, cross-entropy, column scale", r"norm_rows|norm_backward_rows|swiglu|rope_rows|"
     r"cross_entropy|scale_cols"),
    ("finishes and column sums: r, c, dgamma, the LM head's", r"row_sum|rms_finish|lm_finish|lm_zref|column_sum"),
    ("global norm: sums of squares", r"sum_partial"),
    ("embedding backward", r"embed_"),
    ("AdamW", r"adamw"),
    ("other", r""),
]


def kind(name):
    return next(label for label, pattern in KINDS if re.search(pattern, name))


def summary(paths, steps):
    print("| kind | " + " | ".join(f"{p}: launches | ms" for p in paths) + " |")
    print("| --- |" + " ---: | ---: |" * len(paths))
    rows = []
    for label, _ in KINDS:
        cells = []
        for step in steps:
            mine = [ms for name, ms in step if kind(name) == label]
            cells.append(f"{len(mine)} | {sum(mine):.1f}")
        if any(not c.startswith("0 |") for c in cells):
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
    print("\n".join(rows))
    print("| total | " + " | ".join(f"{len(s)} | {sum(ms for _, ms in s):.1f}" for s in steps) + " |")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    steps = [last_step(load(path)) for path in sys.argv[1:]]
    summary(sys.argv[1:], steps)
    for path, step in zip(sys.argv[1:], steps):
        groups = defaultdict(lambda: [0, 0.0])
        for name, ms in step:
            key = re.sub(r"\(.*", "", name).strip()
            groups[key][0] += 1
            groups[key][1] += ms
        total = sum(ms for _, ms in step)
        print(f"\n{path}: {len(step)} kernels, {total:.1f} ms of kernel time")
        print("| kernel | launches | ms | share |")
        print("| --- | ---: | ---: | ---: |")
        for key, (n, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"| `{key}` | {n} | {ms:.3f} | {ms / total * 100:.1f}% |")


if __name__ == "__main__":
    main()
