#!/usr/bin/env python3
"""bench_attention.py: our CUDA attention (build/tests/gpu/bench_attention) against PyTorch's SDPA on the same GPU,
causal, grouped-query, bf16: forward and backward ms and TFLOP/s and their ratio ours / SDPA (of TFLOP/s: SDPA's
time over ours). Prints a Markdown table, the timing method and the kernels SDPA ran (torch.profiler).

    make gpu-tests && python3 scripts/bench_attention.py --json results/bench_attention.json

Both sides are timed by the same method (scripts/timing.py and tests/gpu/bench_timing.h: METHOD below the table),
the forward and the backward separately: SDPA's forward with inputs that require grad (the training forward, which
keeps what the backward needs, as ours keeps lse), its backward alone as torch.autograd.grad of one saved forward's
output (retain_graph), as ours runs its backward from a saved y and lse. FLOP convention (both sides): forward
4*B*Hq*T^2*hd/2 (two matmuls, half the score matrix under the causal mask), backward 2.5x the forward.
"""
import argparse
import datetime
import json
import subprocess
import sys

import torch
import torch.nn.functional as F

import timing

SHAPES = ["4,2048,32,8,64", "4,2048,32,8,128", "2,4096,32,8,64", "1,8192,32,8,64"]


def sdpa_calls(B, T, Hq, Hkv, hd):
    """SDPA's forward and backward as callables, on random inputs."""
    q = torch.randn(B, Hq, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(B, Hq, T, hd, device="cuda", dtype=torch.bfloat16)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    y = forward()

    def backward():
        return torch.autograd.grad(y, (q, k, v), dy, retain_graph=True)

    return forward, backward


def ours_times(binary, B, T, Hq, Hkv, hd):
    lines = subprocess.run([binary, str(B), str(T), str(Hq), str(Hkv), str(hd)], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    method = lines[1].removeprefix("method: ")
    if method != timing.METHOD:
        sys.exit(f"{binary} times by another method than scripts/timing.py:\n  {method}\n  {timing.METHOD}")
    out = lines[0].split()
    vals = dict(zip(out[1::2], out[2::2]))
    return float(vals["fwd_ms"]), float(vals["bwd_ms"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default="build/tests/gpu/bench_attention")
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="B,T,Hq,Hkv,hd per shape (default: %(default)s)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print(f"GPU: {gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {date}")
    print("| shape | pass | ours ms | ours TFLOP/s | SDPA ms | SDPA TFLOP/s | ours / SDPA |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    rows, kernels_ran = [], {}
    for spec in a.shapes:
        B, T, hq, hkv, hd = (int(v) for v in spec.split(","))
        flops = 4.0 * B * hq * T * T * hd / 2
        ours = ours_times(a.binary, B, T, hq, hkv, hd)
        calls = sdpa_calls(B, T, hq, hkv, hd)
        sdpa = [ms for ms, _ in timing.time_each(calls)]
        shape = f"B={B} T={T} Hq={hq} Hkv={hkv} hd={hd}"
        for name, o, s, fn, fl in zip(("fwd", "bwd"), ours, sdpa, calls, (flops, 2.5 * flops)):
            kernels = timing.kernel_names(fn)
            kernels_ran.setdefault(" ".join(kernels), []).append(f"{shape} {name}")
            print(f"| {shape} | {name} | {o:.3f} | {fl / o * 1e-9:.0f} | {s:.3f} | {fl / s * 1e-9:.0f} | {s / o:.2f} |")
            rows.append({"B": B, "T": T, "Hq": hq, "Hkv": hkv, "hd": hd, "pass": name, "ours_ms": o, "sdpa_ms": s,
                         "sdpa_kernels": kernels, "method": timing.METHOD, "gpu": gpu, "date": date})
        sys.stdout.flush()
    print(f"\nmethod (both sides): {timing.METHOD}")
    for kernels, where in kernels_ran.items():
        print(f"SDPA ran: {kernels} ({'; '.join(where)})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
