#!/usr/bin/env python3
"""bench_attention.py: our CUDA attention (build/tests/gpu/bench_attention) against PyTorch's SDPA on the same GPU,
causal, grouped-query, bf16: forward and backward ms and TFLOP/s and the ratio ours/SDPA. Prints a Markdown table.

    make gpu-tests && python3 scripts/bench_attention.py            # B=4 T=2048 Hq=32 Hkv=8, hd 64 and 128

FLOP convention (both sides): forward 4*B*Hq*T^2*hd/2 (two matmuls, half the score matrix under the causal mask),
backward 2.5x the forward. Times are medians over repeated runs after warm-up, on random data.
"""
import argparse
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
    for i in range(iters + 3):
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        e0.record()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        e1.record()
        y.backward(dy)
        e2.record()
        torch.cuda.synchronize()
        if i >= 3:
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
    ap.add_argument("-B", type=int, default=4)
    ap.add_argument("-T", type=int, default=2048)
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--hd", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | pass | ours ms | ours TFLOP/s | SDPA ms | SDPA TFLOP/s | ours / SDPA |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for hd in a.hd:
        flops = 4.0 * a.B * a.hq * a.T * a.T * hd / 2
        of, ob = ours_times(a.binary, a.B, a.T, a.hq, a.hkv, hd, a.iters)
        sf, sb = sdpa_times(a.B, a.T, a.hq, a.hkv, hd, a.iters)
        shape = f"B={a.B} T={a.T} Hq={a.hq} Hkv={a.hkv} hd={hd}"
        for name, o, s, fl in (("fwd", of, sf, flops), ("bwd", ob, sb, 2.5 * flops)):
            print(f"| {shape} | {name} | {o:.3f} | {fl / o * 1e-9:.0f} | {s:.3f} | {fl / s * 1e-9:.0f} | {s / o:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
