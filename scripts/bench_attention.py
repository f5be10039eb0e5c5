#!/usr/bin/env python3
"""bench_attention.py: our CUDA attention (build/tests/gpu/bench_attention) against PyTorch's SDPA on the same GPU,
causal, grouped-query, bf16: forward and backward ms and TFLOP/s and the ratio ours/SDPA. Prints a Markdown table.

    make gpu-tests && python3 scripts/bench_attention.py            # B=4 T=2048 Hq=32 Hkv=8 hd 64 and 128,
                                                                    # and B=1 T=8192 hd 64
    python3 scripts/bench_attention.py --json results/bench_attention.json   # the table as JSON too

FLOP convention (both sides): forward 4*B*Hq*T^2*hd/2 (two matmuls, half the score matrix under the causal mask),
backward 2.5x the forward. Times are medians over repeated runs after warm-up (SDPA: 10 calls; ours: 30), on random data.
"""
import argparse
import datetime
import json
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F


def sdpa_times(B, T, Hq, Hkv, hd, iters):
    q = torch.randn(B, Hq, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(B, Hq, T, hd, device="cuda", dtype=torch.bfloat16)
    fwd, bwd = [], []
    for i in range(iters + 10):
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        e0.record()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        e1.record()
        y.backward(dy)
        e2.record()
        torch.cuda.synchronize()
        if i >= 10:
            fwd.append(e0.elapsed_time(e1))
            bwd.append(e1.elapsed_time(e2))
        q.grad = k.grad = v.grad = None
    return statistics.median(fwd), statistics.median(bwd)


def ours_times(binary, B, T, Hq, Hkv, hd, iters):
    out = subprocess.run([binary, str(B), str(T), str(Hq), str(Hkv), str(hd), str(iters)], check=True,
                         capture_output=True, text=True).stdout.split()
    vals = dict(zip(out[1::2], out[2::2]))
    return float(vals["fwd_ms"]), float(vals["bwd_ms"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default="build/tests/gpu/bench_attention")
    ap.add_argument("--shapes", nargs="+", default=["4,2048,32,8,64", "4,2048,32,8,128", "1,8192,32,8,64"],
                    help="B,T,Hq,Hkv,hd per shape")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    print(f"GPU: {gpu}, torch {torch.__version__}")
    print("| shape | pass | ours ms | ours TFLOP/s | SDPA ms | SDPA TFLOP/s | ours / SDPA |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for spec in a.shapes:
        B, T, hq, hkv, hd = (int(v) for v in spec.split(","))
        flops = 4.0 * B * hq * T * T * hd / 2
        of, ob = ours_times(a.binary, B, T, hq, hkv, hd, a.iters)
        sf, sb = sdpa_times(B, T, hq, hkv, hd, a.iters)
        shape = f"B={B} T={T} Hq={hq} Hkv={hkv} hd={hd}"
        for name, o, s, fl in (("fwd", of, sf, flops), ("bwd", ob, sb, 2.5 * flops)):
            print(f"| {shape} | {name} | {o:.3f} | {fl / o * 1e-9:.0f} | {s:.3f} | {fl / s * 1e-9:.0f} | {s / o:.2f} |")
            rows.append({"B": B, "T": T, "Hq": hq, "Hkv": hkv, "hd": hd, "pass": name, "ours_ms": o, "sdpa_ms": s,
                         "ours_tflops": fl / o * 1e-9, "sdpa_tflops": fl / s * 1e-9, "gpu": gpu, "date": date})
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
