#!/usr/bin/env python3
"""bench_vs_pytorch.py: ./train against a PyTorch reference on the same GPU, in one invocation, on the same config
and batch (default: configs/llama3_1b.json, Llama-3.2-1B, batch 4 x 2048, one micro-batch per step). Prints ms/step,
tokens/s, MFU and peak memory of each and the ratio, as a Markdown table.

    make && make data && python3 scripts/bench_vs_pytorch.py [--steps 20] [--no-compile]

The PyTorch side is the usual fast recipe: the same LLaMA-3 model (RMSNorm with fp32 statistics, RoPE from
precomputed cos/sin tables, causal GQA through scaled_dot_product_attention, SwiGLU, tied LM head, mean
cross-entropy), fp32 parameters under bf16 autocast, torch.compile, global-norm clipping at 1.0, fused AdamW.
./train runs its own data (the config's train_data); PyTorch runs random tokens (the time does not depend on them).
Times are medians over the steps after the warm-up ones. MFU = model FLOPs / (time * peak bf16 dense FLOP/s), with
model FLOPs per token = 6 * parameters + 6 * layers * Hq * hd * T (the causal half of the attention matmuls, forward
and backward) and the peak 989 TFLOP/s (H100 SXM and H200 datasheets). Peak memory: ./train's tracked allocations,
torch.cuda.max_memory_allocated for PyTorch (neither counts the CUDA context).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK_FLOPS = 989e12


def rope_inv_freq(c):
    hd = c["head_dim"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":
        old, lo, hi, factor = (rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"],
                               rs["factor"])
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, hd, Hq, Hkv, F_ = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"], \
            c["intermediate_size"]
        self.Hq, self.Hkv, self.hd = Hq, Hkv, hd
        self.q_proj = nn.Linear(D, Hq * hd, bias=False)
        self.k_proj = nn.Linear(D, Hkv * hd, bias=False)
        self.v_proj = nn.Linear(D, Hkv * hd, bias=False)
        self.o_proj = nn.Linear(Hq * hd, D, bias=False)
        self.gate_proj = nn.Linear(D, F_, bias=False)
        self.up_proj = nn.Linear(D, F_, bias=False)
        self.down_proj = nn.Linear(F_, D, bias=False)
        self.n1 = RMSNorm(D, c["rms_norm_eps"])
        self.n2 = RMSNorm(D, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.n1(x)
        q = self.q_proj(h).view(B, T, self.Hq, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, -1))
        h = self.n2(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, c, T):
        super().__init__()
        self.embed = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.embed.weight  # tied
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=c["initializer_range"])
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), rope_inv_freq(c))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def model_flops_per_token(c, n_params, T):
    return 6 * n_params + 6 * c["num_hidden_layers"] * c["num_attention_heads"] * c["head_dim"] * T


def bench_torch(c, B, T, steps, warmup, compile_model):
    torch.manual_seed(0)
    model = Llama(c, T).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if compile_model else model
    V = c["vocab_size"]
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    t_start = time.time()
    for step in range(warmup + steps):
        idx = torch.randint(0, V, (B, T), device="cuda")
        tgt = torch.randint(0, V, (B, T), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        if step >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
        elif step == 0:
            print(f"torch: first step (compile) {time.time() - t_start:.1f} s", flush=True)
    ms = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30
    del model, opt, fwd
    torch.cuda.empty_cache()
    return ms, peak, n_params, losses[0]


def bench_train(config, B, T, steps, warmup, binary):
    out_dir = tempfile.mkdtemp(prefix="bench_train_")
    cmd = [binary, "-c", config, "-b", str(B), "-t", str(T), "--total-batch-tokens", str(B * T), "-n",
           str(warmup + steps), "--warmup-steps", "1", "--eval-every", "0", "--sample-every", "0", "-d", "cuda", "-o", out_dir]
    print("running:", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"./train failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    recs = [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl"))]
    recs = [r for r in recs if "loss" in r]
    ms = statistics.median(r["ms"] for r in recs[warmup:])
    m = re.search(r"peak cuda memory: ([0-9.]+) GiB", p.stdout)
    n = re.search(r"model: .*?, (\d+) parameters", p.stdout)
    return ms, float(m.group(1)) if m else float("nan"), int(n.group(1)), recs[0]["loss"], p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="configs/llama3_1b.json")
    ap.add_argument("-b", type=int, default=4)
    ap.add_argument("-t", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (after the warm-up steps)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--binary", default="./train")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager instead of torch.compile")
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    c = json.load(open(a.config))
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    B, T = a.b, a.t
    tokens = B * T
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}; torch {torch.__version__}; config {a.config}; batch {B} x {T}", flush=True)

    ms_c, peak_c, n_c, loss_c, out = bench_train(a.config, B, T, a.steps, a.warmup, a.binary)
    print(out[-1500:], flush=True)
    rows = [("./train (CUDA, unfused)", ms_c, peak_c, n_c, loss_c)]
    if not a.skip_torch:
        ms_t, peak_t, n_t, loss_t = bench_torch(c, B, T, a.steps, a.warmup, not a.no_compile)
        rows.append(("PyTorch " + ("eager" if a.no_compile else "torch.compile"), ms_t, peak_t, n_t, loss_t))
    print()
    print(f"GPU: {gpu}; {time.strftime('%Y-%m-%d')}; {a.config}, batch {B} x {T} = {tokens} tokens/step; median of "
          f"{a.steps} steps after {a.warmup} warm-up steps")
    print("| program | ms/step | tokens/s | MFU | peak memory (GiB) | first loss |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, ms, peak, n, loss in rows:
        mfu = model_flops_per_token(c, n, T) * tokens / (ms * 1e-3) / PEAK_FLOPS
        print(f"| {name} | {ms:.1f} | {tokens / (ms * 1e-3):,.0f} | {mfu * 100:.1f}% | {peak:.1f} | {loss:.3f} |")
    if len(rows) == 2:
        print(f"\ntokens/s ratio ./train / PyTorch: {rows[1][1] / rows[0][1]:.2f}x")


if __name__ == "__main__":
    main()
