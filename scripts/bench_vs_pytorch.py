#!/usr/bin/env python3
"""bench_vs_pytorch.py: ./train with fusion on and with fusion off against a PyTorch reference on the same GPU, in one
invocation, on the same config and batch (default: configs/llama3_1b.json, Llama-3.2-1B, batch 4 x 2048, one
micro-batch per step). Prints ms/step, tokens/s, MFU and peak memory of each and the ratios, as a Markdown table,
and with --json FILE the same rows as a JSON list of {"program": "train_fused" | "train_unfused" |
"torch_compile" | "torch_eager", "ms_per_step", "tokens_per_s", "peak_gib", "mfu", "gpu", "date"}.

    make && make data && python3 scripts/bench_vs_pytorch.py [--warmup 60] [--steps 40] [--no-compile] [--json FILE]
    make && make data && python3 scripts/bench_vs_pytorch.py --shapes [--json results/bench_shapes.json]

--shapes runs the three programs at each of SHAPES (Llama-3.2-1B at 4 x 2048, 8 x 2048 and 1 x 8192, and the
Llama-3.2-3B shape at 2 x 2048; one micro-batch per step) and prints one table of them, with rows
{"config", "B", "T", "program", "ms_per_step", "tokens_per_s", "mfu", "peak_gib", "gpu", "date"} in its JSON.

The PyTorch side is the usual fast recipe: the same LLaMA-3 model (RMSNorm with fp32 statistics, RoPE from
precomputed cos/sin tables, causal GQA through scaled_dot_product_attention, SwiGLU, tied LM head, mean
cross-entropy), fp32 parameters under bf16 autocast, torch.compile, global-norm clipping at 1.0, fused AdamW.
./train runs its own data (the config's train_data); PyTorch runs random tokens (the time does not depend on them),
made on the host and copied to the GPU inside the step, as ./train's loader does. Both sides are timed alike
(scripts/timing.py's STEP_METHOD, printed with the table): ./train times each of its steps with the host clock from
the step's start to a device synchronize that ends it (its log.jsonl "ms"; CUDA events cannot be put around its
steps from outside), so the PyTorch step is timed the same way (timing.time_steps); each side reads its loss inside
the step; the table gives the median over the --steps steps after the same --warmup steps. The default warm-up
reaches the steady state of a long run: a 1B step draws the GPU's power cap, and ./train's step lengthens over its
first few dozen steps before it settles (RESULTS.md section 1), which a short warm-up would leave out of one side
more than the other. Then the PyTorch step's top kernels (torch.profiler, one step). MFU = model FLOPs / (time *
peak bf16 dense FLOP/s), with model FLOPs per token = 6 * parameters + 6 * layers * Hq * hd * T (the causal half of
the attention matmuls, forward and backward) and the peak 989.4 TFLOP/s (H100 SXM and H200, as model/flops.c has
it). Peak memory: ./train's tracked allocations, torch.cuda.max_memory_allocated for PyTorch (neither counts the CUDA
context).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402
from reference import Llama, model_config  # noqa: E402  (the one PyTorch model of the project)

PEAK_FLOPS = 989.4e12  # model/flops.c's H100 SXM and H200 peak, so the MFU is ./train's
SHAPES = [("configs/llama3_1b.json", 4, 2048), ("configs/llama3_1b.json", 8, 2048), ("configs/llama3_1b.json", 1, 8192),
          ("configs/llama3_3b.json", 2, 2048)]


class LlamaWithLoss(nn.Module):
    """scripts/reference.py's model (Hugging Face's LlamaForCausalLM math) with SDPA attention and precomputed RoPE
    tables, the matrices initialized N(0, initializer_range) like ./train, and the mean cross-entropy inside the
    module so that torch.compile sees the whole forward."""

    def __init__(self, c, T, init_std):
        super().__init__()
        self.llama = Llama(c, sdpa=True, rope_table_len=T)
        for p in self.llama.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=init_std)

    def forward(self, idx, targets):
        logits = self.llama(idx)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def model_flops_per_token(c, n_params, T):
    return 6 * n_params + 6 * c["num_hidden_layers"] * c["num_attention_heads"] * c["head_dim"] * T


def bench_torch(c, init_std, B, T, steps, warmup, compile_model):
    torch.manual_seed(0)
    model = LlamaWithLoss(c, T, init_std).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if compile_model else model
    V = c["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    losses = []

    def step():
        idx = torch.randint(0, V, (B, T), generator=gen).cuda()  # host tokens to the GPU, as ./train's loader
        tgt = torch.randint(0, V, (B, T), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())

    torch.cuda.reset_peak_memory_stats()
    print(f"torch: {warmup} warm-up steps (the first compiles) and {steps} timed steps", flush=True)
    ms = statistics.median(timing.time_steps(step, warmup, steps))
    peak = torch.cuda.max_memory_allocated() / 2**30
    top, total = timing.top_kernels(step)
    del model, opt, fwd
    torch.cuda.empty_cache()
    return ms, peak, n_params, losses[0], (top, total)


def bench_train(config, B, T, steps, warmup, binary, fusion):
    out_dir = tempfile.mkdtemp(prefix="bench_train_")
    cmd = [binary, "-c", config, "-b", str(B), "-t", str(T), "--total-batch-tokens", str(B * T), "-n",
           str(warmup + steps), "--warmup-steps", "1", "--eval-every", "0", "--sample-every", "0", "-d", "cuda",
           "--fusion", fusion, "-o", out_dir]
    print("running:", " ".join(cmd), flush=True)
    try:  # the run's final checkpoint (19 GB for the 1B config) goes with its directory
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"./train failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        recs = [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl"))]
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    recs = [r for r in recs if "loss" in r]
    ms = statistics.median(r["ms"] for r in recs[warmup:])
    m = re.search(r"peak cuda memory: ([0-9.]+) GiB", p.stdout)
    n = re.search(r"model: .*?, (\d+) parameters", p.stdout)
    return ms, float(m.group(1)) if m else float("nan"), int(n.group(1)), recs[0]["loss"], p.stdout


def print_kernels(top, total):
    """The PyTorch step's top kernels (timing.top_kernels) as a Markdown table."""
    launches, ms = total
    print(f"\nPyTorch ran {launches} kernels, memsets and copies in one step, {ms:.1f} ms of GPU time "
          f"(torch.profiler); the {len(top)} with the most time:")
    print("| kernel | launches | ms |")
    print("| --- | ---: | ---: |")
    for name, n, t in top:
        print(f"| `{name}` | {n} | {t:.2f} |")


def run_shape(config, B, T, a, gpu, date):
    """The three programs at one shape; their JSON rows."""
    raw = json.load(open(config))
    c = model_config(raw, config)
    rows = []
    for fusion in ("on", "off"):
        ms, peak, n, _, out = bench_train(config, B, T, a.steps, a.warmup, a.binary, fusion)
        print(out[-600:], flush=True)
        rows.append(("train_fused" if fusion == "on" else "train_unfused", ms, peak, n))
    ms, peak, n, _, kernels = bench_torch(c, raw.get("initializer_range", 0.02), B, T, a.steps, a.warmup, True)
    print_kernels(*kernels)
    rows.append(("torch_compile", ms, peak, n))
    return [{"config": config, "B": B, "T": T, "program": key, "ms_per_step": round(ms, 2),
             "tokens_per_s": round(B * T / (ms * 1e-3)),
             "mfu": round(model_flops_per_token(c, n, T) * B * T / (ms * 1e-3) / PEAK_FLOPS, 4),
             "peak_gib": round(peak, 2), "gpu": gpu, "date": date} for key, ms, peak, n in rows]


def main_shapes(a):
    gpu, date = torch.cuda.get_device_name(), time.strftime("%Y-%m-%d")
    records = json.load(open(a.json)) if a.append and os.path.exists(a.json) else []
    for i, (config, B, T) in enumerate(SHAPES):
        if a.shape and i not in a.shape:
            continue
        print(f"=== {config}, {B} x {T}", flush=True)
        records += run_shape(config, B, T, a, gpu, date)
        if a.json:  # after every shape, so that a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump(records, f, indent=1)
    print(f"\nGPU: {gpu}; {date}; one micro-batch per step; median of {a.steps} steps after {a.warmup} warm-up steps")
    print("| shape | fusion on ms | fusion off ms | torch.compile ms | on / compile | on / off | "
          "peak GiB on / off / compile |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for config, B, T in SHAPES:
        r = {x["program"]: x for x in records if x["config"] == config and x["B"] == B and x["T"] == T}
        if len(r) < 3:
            continue
        on, off, tc = r["train_fused"], r["train_unfused"], r["torch_compile"]
        name = os.path.basename(config).replace(".json", "")
        print(f"| {name}, {B} x {T} | {on['ms_per_step']:.1f} | {off['ms_per_step']:.1f} | {tc['ms_per_step']:.1f} | "
              f"{tc['ms_per_step'] / on['ms_per_step']:.3f}x | {off['ms_per_step'] / on['ms_per_step']:.3f}x | "
              f"{on['peak_gib']:.1f} / {off['peak_gib']:.1f} / {tc['peak_gib']:.1f} |")
    print(f"method (both sides): {timing.STEP_METHOD}")
    print("ratios: on / compile and on / off are tokens/s ratios (the other's ms over fusion on's)")
    if a.json:
        print(f"wrote {a.json}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="configs/llama3_1b.json")
    ap.add_argument("-b", type=int, default=4)
    ap.add_argument("-t", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=40, help="timed steps (after the warm-up steps)")
    ap.add_argument("--warmup", type=int, default=60, help="untimed steps first, on both sides (the first compiles)")
    ap.add_argument("--binary", default="./train")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager instead of torch.compile")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-unfused", action="store_true", help="./train with fusion on only")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--shapes", action="store_true", help="the table of SHAPES (ignores -c, -b, -t)")
    ap.add_argument("--shape", type=int, action="append", help="with --shapes: only SHAPES[i] (repeatable)")
    ap.add_argument("--append", action="store_true",
                    help="with --shapes: keep the rows of --json's file and add these (a table over several runs)")
    a = ap.parse_args()
    if a.shapes:
        return main_shapes(a)
    raw = json.load(open(a.config))
    c = model_config(raw, a.config)
    B, T = a.b, a.t
    tokens = B * T
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}; torch {torch.__version__}; config {a.config}; batch {B} x {T}", flush=True)

    rows = []  # (key, name, ms, peak, params, first loss)
    for fusion in ("on",) if a.skip_unfused else ("on", "off"):
        ms_c, peak_c, n_c, loss_c, out = bench_train(a.config, B, T, a.steps, a.warmup, a.binary, fusion)
        print(out[-1500:], flush=True)
        key = "train_fused" if fusion == "on" else "train_unfused"
        name = "./train, fusion on (GEMM-epilogue programs)" if fusion == "on" else "./train, fusion off (cuBLAS + passes)"
        rows.append((key, name, ms_c, peak_c, n_c, loss_c))
    if not a.skip_torch:
        ms_t, peak_t, n_t, loss_t, torch_kernels = bench_torch(c, raw.get("initializer_range", 0.02), B, T, a.steps,
                                                               a.warmup, not a.no_compile)
        rows.append(("torch_eager" if a.no_compile else "torch_compile",
                     "PyTorch " + ("eager" if a.no_compile else "torch.compile"), ms_t, peak_t, n_t, loss_t))
    print()
    print(f"GPU: {gpu}; {time.strftime('%Y-%m-%d')}; {a.config}, batch {B} x {T} = {tokens} tokens/step; median of "
          f"{a.steps} steps after {a.warmup} warm-up steps")
    print("| program | ms/step | tokens/s | MFU | peak memory (GiB) | first loss |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    records = []
    date = time.strftime("%Y-%m-%d")
    for key, name, ms, peak, n, loss in rows:
        mfu = model_flops_per_token(c, n, T) * tokens / (ms * 1e-3) / PEAK_FLOPS
        print(f"| {name} | {ms:.1f} | {tokens / (ms * 1e-3):,.0f} | {mfu * 100:.1f}% | {peak:.1f} | {loss:.3f} |")
        records.append({"program": key, "ms_per_step": round(ms, 2), "tokens_per_s": round(tokens / (ms * 1e-3)),
                        "peak_gib": round(peak, 2), "mfu": round(mfu, 4), "gpu": gpu, "date": date})
    ms_of = {r["program"]: r["ms_per_step"] for r in records}
    print()
    if "train_unfused" in ms_of:
        print(f"fusion on / fusion off step time: {ms_of['train_fused'] / ms_of['train_unfused']:.3f} "
              f"({(1 - ms_of['train_fused'] / ms_of['train_unfused']) * 100:+.1f}% faster)")
    for ref in ("torch_compile", "torch_eager"):
        if ref in ms_of:
            print(f"tokens/s ratio ./train (fusion on) / PyTorch: {ms_of[ref] / ms_of['train_fused']:.3f}x")
    print(f"method (both sides): {timing.STEP_METHOD}")
    if not a.skip_torch:
        print_kernels(*torch_kernels)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
