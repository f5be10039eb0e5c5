#!/usr/bin/env python3
"""ncu_source_stalls.py: where a kernel's warps wait, from Nsight Compute's source page (SASS with warp stall
sampling), as tables: the stall reasons' shares of all samples, the samples by how often their instruction ran
(per key block, per tile, once: the code's levels), by opcode, and the instructions with the most samples; and
the MUFU instructions' cycles per SM (16 lanes per cycle per SM on Hopper).

    ncu --kernel-name regex:KERNEL --launch-skip 5 --launch-count 1 --set full --import-source yes -o prof CMD
    ncu --import prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python3 scripts/ncu_source_stalls.py prof.csv [--top 20] [--sms 132]
"""
import argparse
import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_source_page(path):
    """The header and the instruction rows of the CSV (a kernel-name line may come first)."""
    try:
        with open(path, newline="", errors="replace") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        sys.exit(f"{path}: cannot read it: {e.strerror}")
    at = next((i for i, r in enumerate(rows) if "Source" in [c.strip() for c in r]), None)
    if at is None:
        sys.exit(f"{path}: no header row with a 'Source' column: not the CSV of ncu --page source --print-source sass")
    header = [c.strip() for c in rows[at]]
    return header, [r for r in rows[at + 1:] if len(r) == len(header)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=20, help="instructions listed by samples")
    ap.add_argument("--sms", type=int, default=132, help="SMs of the GPU (132 on an H100 SXM or H200)")
    a = ap.parse_args()
    header, rows = read_source_page(a.csv)
    col = {name: i for i, name in enumerate(header)}
    for need in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in col:
            sys.exit(f"{a.csv}: no column '{need}'")
    src, samples, execd = col["Source"], col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"]
    reasons = [(name[len("stall_"):], i) for i, name in enumerate(header)
               if name.startswith("stall_") and "(Not Issued)" not in name]
    total = sum(number(r[samples]) for r in rows) or 1.0
    print(f"{a.csv}: {len(rows)} instructions, {total:.0f} warp stall samples")

    print("\n| stall reason | share of samples |\n| --- | ---: |")
    shares = sorted(((sum(number(r[i]) for r in rows) / total, name) for name, i in reasons), reverse=True)
    for share, name in shares:
        if share >= 0.005:
            print(f"| {name} | {100 * share:.1f}% |")

    print("\n| times an instruction ran (by warps) | instructions | share of samples |\n| ---: | ---: | ---: |")
    by_count, n_by_count = collections.Counter(), collections.Counter()
    for r in rows:
        k = int(number(r[execd]))
        by_count[k] += number(r[samples])
        n_by_count[k] += 1
    for k, v in by_count.most_common(6):
        print(f"| {k} | {n_by_count[k]} | {100 * v / total:.1f}% |")

    print("\n| opcode | share of samples |\n| --- | ---: |")
    by_op = collections.Counter()
    for r in rows:
        by_op[re.sub(r"^@!?U?P\w+\s+", "", r[src].strip()).split(" ")[0]] += number(r[samples])
    for op, v in by_op.most_common(12):
        print(f"| {op} | {100 * v / total:.1f}% |")

    mufu = sum(number(r[execd]) for r in rows if "MUFU" in r[src])
    print(f"\nMUFU: {mufu / a.sms:.0f} warp instructions per SM, {2 * mufu / a.sms:.0f} SFU cycles per SM "
          "(compare with the details page's SM Active Cycles)")

    print(f"\nthe {a.top} instructions with the most samples (index in the listing, share, SASS):")
    ranked = sorted(range(len(rows)), key=lambda i: -number(rows[i][samples]))[:a.top]
    for i in ranked:
        print(f"  {i:5d} {100 * number(rows[i][samples]) / total:5.1f}%  {rows[i][src].strip()[:90]}")


if __name__ == "__main__":
    main()
