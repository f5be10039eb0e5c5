#!/usr/bin/env python3
"""reference.py: the PyTorch reference of ./train: the same LLaMA-3 model, data order, schedule and optimizer, written
out in plain PyTorch, writing the same JSONL log, so that a run's loss curve can be checked step by step.

    # on the CPU, fp32, from the initial checkpoint of a run (step_00000000 holds the weights and the config)
    python3 scripts/reference.py --init runs/tiny/step_00000000 --out runs/tiny_ref --device cpu
    # on a GPU: bf16 autocast, SDPA attention, fused AdamW, torch.compile
    python3 scripts/reference.py --init runs/1b/step_00000000 --out runs/1b_ref --device cuda --compile --fused-adamw
    python3 scripts/compare_losses.py runs/tiny/log.jsonl runs/tiny_ref/log.jsonl --png tiny.png

The model is Hugging Face's LlamaForCausalLM, written here (transformers is not needed): RMSNorm with fp32 statistics,
RoPE with rotate_half and Llama-3 rope_scaling computed as transformers computes it, causal grouped-query attention,
SwiGLU, tied or untied LM head, mean cross-entropy. The weights come from --init: a checkpoint directory of ./train
(step_NNNNNNNN) or any Hugging Face directory with config.json and model.safetensors (or a sharded
model.safetensors.index.json; F32, BF16 or F16), read by the small safetensors reader below. The hyperparameters come
from --config (default: INIT/train_config.json, the effective config that ./train writes), and flags override them.

What is reproduced from ./train (data/dataloader.c, model/optimizer.c, train.c):
  * data: the same shards in the same order: splitmix64 seeded per (seed, epoch) for the shard order and per
    (seed, epoch, shard) for each shard's sample order, Fisher-Yates, and the end-of-epoch rule (an epoch is
    floor(total samples / B) batches); validation reads the shards in order from the start, min(eval_batches,
    batches per epoch) batches, every eval_every steps and after the last step;
  * gradient accumulation: total_batch_tokens / (B*T) micro-batches, each backward of (micro-batch mean loss) / accum,
    the logged loss is the mean of the micro-batch losses;
  * lr_at_step (linear warmup, then cosine / linear / constant / wsd to min_lr_frac x peak);
  * clipping: torch.nn.utils.clip_grad_norm_ over all parameters (a tied embedding counted once), the logged norm is the
    norm before clipping; torch.optim.AdamW, weight decay on every matrix (the embedding too), none on norm weights;
    foreach=False on the CPU (the single-tensor formula that the C kernel follows), --fused-adamw for the fused kernel.
Sampling is not reproduced (it does not change the weights).

--start-step N (default: the N of a step_NNNNNNNN --init directory) says that the weights are those after N steps: the
data continues at step N+1's batches and the schedule at step N+1. AdamW moments are not read from the checkpoint
(state.bin is ./train's own format), so training on from N > 0 is not a reproduction of ./train's run;
--score-step is: it computes the loss that step N+1 logs (the mean over its micro-batches, with the weights of step N)
without training, and writes it as that step's record.
"""
import argparse
import glob
import json
import math
import os
import re
import struct
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("error: reference.py needs PyTorch (pip install torch, or scripts/install_deps.sh)")


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------- configuration

# The training keys of model/config.c with their defaults (keep in step with its CONFIG_OPTIONS table).
TRAIN_DEFAULTS = {
    "train_data": "", "val_data": "", "batch_size": 4, "seq_len": 256, "total_batch_tokens": 0, "steps": 100,
    "learning_rate": 3e-4, "warmup_steps": 0, "lr_schedule": "cosine", "min_lr_frac": 0.1, "wsd_decay_frac": 0.2,
    "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8, "grad_clip": 1.0, "seed": 1337,
    "eval_every": 0, "eval_batches": 8,
}
# Keys of ./train that do not change the computation here.
TRAIN_UNUSED = {"out_dir", "tokenizer", "device", "sample_every", "sample_tokens", "sample_prompt", "temperature",
                "overwrite", "checkpoint_every", "keep_last", "export_dtype", "init_from", "resume", "resume_fallback"}
# The model keys that must agree between --init's config.json and --config.
MODEL_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "rope_scaling"]
LR_SCHEDULES = ("cosine", "linear", "constant", "wsd")


def read_json(path, what):
    try:
        with open(path) as f:
            obj = json.load(f)
    except OSError as e:
        die(f"cannot read {what} {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        die(f"{what} {path}: not valid JSON ({e.msg} at line {e.lineno})")
    if not isinstance(obj, dict):
        die(f"{what} {path}: the top level must be a JSON object")
    return obj


def model_config(raw, path):
    """The model keys of a Hugging Face config.json (or of our train_config.json), with LlamaConfig's defaults;
    None when the file holds no model (a training-only config)."""
    if "hidden_size" not in raw:
        return None
    for k in ("intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if k not in raw:
            die(f"config {path}: missing model key \"{k}\"")
    c = {k: raw[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                             "vocab_size")}
    c["num_key_value_heads"] = raw.get("num_key_value_heads") or c["num_attention_heads"]
    if raw.get("head_dim"):
        c["head_dim"] = raw["head_dim"]
    else:
        if c["hidden_size"] % c["num_attention_heads"]:
            die(f"config {path}: hidden_size is not a multiple of num_attention_heads and no head_dim is given")
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    c["rms_norm_eps"] = float(raw.get("rms_norm_eps", 1e-6))
    c["tie_word_embeddings"] = bool(raw.get("tie_word_embeddings", False))
    c["max_position_embeddings"] = raw.get("max_position_embeddings", 2048)
    # transformers 5 may keep RoPE in "rope_parameters" ({"rope_type", "rope_theta", ...}).
    rp = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else None
    c["rope_theta"] = float(raw.get("rope_theta", rp.get("rope_theta", 10000.0) if rp else 10000.0))
    rs = raw.get("rope_scaling")
    if rs is None and rp is not None and rp.get("rope_type", "default") != "default":
        rs = rp
    if rs is not None:
        rtype = rs.get("rope_type", rs.get("type"))
        if rtype == "default":
            rs = None
        elif rtype != "llama3":
            die(f"config {path}: rope_scaling type \"{rtype}\" is not supported (only llama3)")
        else:
            try:
                rs = {"factor": float(rs["factor"]), "low_freq_factor": float(rs["low_freq_factor"]),
                      "high_freq_factor": float(rs["high_freq_factor"]),
                      "original_max_position_embeddings": int(rs["original_max_position_embeddings"])}
            except KeyError as e:
                die(f"config {path}: rope_scaling lacks {e}")
    c["rope_scaling"] = rs
    if raw.get("hidden_act", "silu") != "silu" or raw.get("attention_bias") or raw.get("mlp_bias"):
        die(f"config {path}: only hidden_act silu without attention/mlp biases is supported")
    if c["num_attention_heads"] % c["num_key_value_heads"] or c["head_dim"] % 2:
        die(f"config {path}: num_attention_heads must be a multiple of num_key_value_heads, head_dim even")
    return c


def same_value(a, b):
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            return False
        return all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    return a == b


def train_config(raw, path, args):
    """The training keys: defaults, then the file, then the flags."""
    t = dict(TRAIN_DEFAULTS)
    for k, v in raw.items():
        if k in TRAIN_DEFAULTS:
            want = type(TRAIN_DEFAULTS[k])
            if want is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if want is int and isinstance(v, float) and v == int(v):
                v = int(v)
            if not isinstance(v, want) or isinstance(v, bool):
                die(f"config {path}: key \"{k}\" must be {want.__name__}, got {json.dumps(v)}")
            t[k] = v
    for k in TRAIN_DEFAULTS:
        v = getattr(args, k)
        if v is not None:
            t[k] = v
    where = f"config {path}" if path else "the flags"
    if t["lr_schedule"] not in LR_SCHEDULES:
        die(f"{where}: lr_schedule must be one of {'|'.join(LR_SCHEDULES)}, got \"{t['lr_schedule']}\"")
    bt = t["batch_size"] * t["seq_len"]
    if t["batch_size"] < 1 or t["seq_len"] < 1 or t["steps"] < 0:
        die(f"{where}: batch_size and seq_len must be positive, steps >= 0")
    if t["total_batch_tokens"] % bt:
        die(f"{where}: total_batch_tokens ({t['total_batch_tokens']}) must be a multiple of batch_size*seq_len ({bt})")
    if t["warmup_steps"] > t["steps"] and t["steps"] > 0:  # a short run: the warmup fits in it, as ./train does
        print(f"note: warmup_steps ({t['warmup_steps']}) exceeds steps ({t['steps']}): the warmup is the run's "
              f"{t['steps']} steps")
        t["warmup_steps"] = t["steps"]
    if not t["train_data"]:
        die(f"{where}: no training data (train_data, or --train-data GLOB)")
    return t


# ---------------------------------------------------------------------------------------------------- safetensors

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}


def read_safetensors_header(path):
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                die(f"{path}: not a safetensors file (shorter than 8 bytes)")
            n = struct.unpack("<Q", head)[0]
            if n > size - 8 or n > 100_000_000:
                die(f"{path}: not a safetensors file (header length {n} for a file of {size} bytes)")
            header = json.loads(f.read(n))
    except OSError as e:
        die(f"cannot read {path}: {e.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        die(f"{path}: the safetensors header is not valid JSON")
    header.pop("__metadata__", None)
    data_size = size - 8 - n
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            die(f"{path}: tensor {name}: malformed header entry")
        if dtype not in ST_DTYPES:
            die(f"{path}: tensor {name} has dtype {dtype} (supported: F32, BF16, F16, F64)")
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(ST_DTYPES[dtype]).itemsize
        if not (0 <= begin <= end <= data_size) or end - begin != nbytes:
            die(f"{path}: tensor {name}: data offsets [{begin}, {end}) do not fit its shape {shape} {dtype} in "
                f"{data_size} data bytes (truncated file?)")
        info["start"] = 8 + n + begin
    return header


def read_tensor(path, info):
    """One tensor of a safetensors file as an fp32 numpy array."""
    count = int(np.prod(info["shape"], dtype=np.int64))
    with open(path, "rb") as f:
        f.seek(info["start"])
        a = np.fromfile(f, dtype=np.dtype(ST_DTYPES[info["dtype"]]).newbyteorder("<"), count=count)
    if a.size != count:
        die(f"{path}: truncated while reading a tensor")
    if info["dtype"] == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32).reshape(info["shape"])


def load_weights(init_dir):
    """{name: (path, header entry)} of every tensor of a (possibly sharded) Hugging Face checkpoint directory."""
    single = os.path.join(init_dir, "model.safetensors")
    index = os.path.join(init_dir, "model.safetensors.index.json")
    if os.path.isfile(single):
        files = [single]
    elif os.path.isfile(index):
        wm = read_json(index, "safetensors index").get("weight_map")
        if not isinstance(wm, dict):
            die(f"{index}: no weight_map")
        files = [os.path.join(init_dir, f) for f in sorted(set(wm.values()))]
    else:
        die(f"{init_dir}: neither model.safetensors nor model.safetensors.index.json")
    tensors = {}
    for path in files:
        for name, info in read_safetensors_header(path).items():
            tensors[name] = (path, info)
    return tensors


def write_safetensors(path, tensors):
    """Writes {name: fp32 numpy array} as a safetensors file (to a temporary name, then renamed)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors.items():
        n = a.size * 4
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    os.replace(tmp, path)


def hf_config_json(c, dtype="float32"):
    """A Hugging Face LlamaConfig for the model keys c."""
    out = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0, "torch_dtype": dtype}
    for k in MODEL_KEYS + ["max_position_embeddings"]:
        out[k] = c[k]
    if c["rope_scaling"]:
        out["rope_scaling"] = dict(rope_type="llama3", **c["rope_scaling"])
    return out


def hf_param_shapes(c):
    D, F_, V, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    Hq, Hkv = c["num_attention_heads"], c["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (V, D)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes.update({p + "self_attn.q_proj.weight": (Hq * hd, D), p + "self_attn.k_proj.weight": (Hkv * hd, D),
                       p + "self_attn.v_proj.weight": (Hkv * hd, D), p + "self_attn.o_proj.weight": (D, Hq * hd),
                       p + "mlp.gate_proj.weight": (F_, D), p + "mlp.up_proj.weight": (F_, D),
                       p + "mlp.down_proj.weight": (D, F_), p + "input_layernorm.weight": (D,),
                       p + "post_attention_layernorm.weight": (D,)})
    shapes["model.norm.weight"] = (D,)
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    return shapes


# ---------------------------------------------------------------------------------------------------- the model


def rope_inv_freq(c):
    """transformers' RoPE inverse frequencies (default, or _compute_llama3_parameters), in fp32."""
    hd = c["head_dim"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float) / hd))
    rs = c["rope_scaling"]
    if rs:
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_llama = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv = torch.where(is_medium, smoothed, inv_llama)
    return inv


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class RMSNormRoundSaved(torch.autograd.Function):
    """RMSNorm of an fp32 x (weight * x * r, r = rsqrt(mean(x^2) + eps)) whose backward takes x rounded to bf16's
    values (round_bf16) and r as computed from x: what ./train's backward reads when its forward carries the residual
    stream's low part (the stored bf16 stream and the fp32 r)."""

    @staticmethod
    def forward(ctx, x, w, eps):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(round_bf16(x), r, w)
        return w * (x * r)

    @staticmethod
    def backward(ctx, g):
        x, r, w = ctx.saved_tensors
        gn = g * w
        gx = r * gn - x * r.pow(3) * (gn * x).mean(-1, keepdim=True)
        return gx, (g * (x * r)).reshape(-1, x.shape[-1]).sum(0), None


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
        self.round_saved = False  # Llama(residual_round="bf16-saved")

    def forward(self, x):
        if self.round_saved and x.dtype == torch.float32:
            return RMSNormRoundSaved.apply(x, self.weight, self.eps)
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class Attention(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        D, hd, self.Hq, self.Hkv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd, self.sdpa = hd, sdpa
        self.q_proj = nn.Linear(D, self.Hq * hd, bias=False)
        self.k_proj = nn.Linear(D, self.Hkv * hd, bias=False)
        self.v_proj = nn.Linear(D, self.Hkv * hd, bias=False)
        self.o_proj = nn.Linear(self.Hq * hd, D, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.Hq, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.Hq != self.Hkv)
        else:  # transformers' eager attention
            rep = self.Hq // self.Hkv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            w = torch.matmul(q, k.transpose(2, 3)) * self.hd ** -0.5
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            w = w.masked_fill(mask, torch.finfo(w.dtype).min)
            w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            y = torch.matmul(w, v)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.Hq * self.hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, F_ = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(D, F_, bias=False)
        self.up_proj = nn.Linear(D, F_, bias=False)
        self.down_proj = nn.Linear(F_, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def round_bf16(x):
    """An fp32 tensor rounded to bf16's values (to nearest, ties to even), still fp32. Written with integer operations:
    torch.compile removes a round trip x.to(torch.bfloat16).to(torch.float32) inside a fused kernel."""
    bits = x.view(torch.int32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000).view(torch.float32)


class RoundGradBf16(torch.autograd.Function):
    """The identity forward; the backward rounds the gradient to bf16's values (round_bf16)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return round_bf16(g)


def residual_rounding(mode):
    """The rounding of the residual stream after the embedding and every residual addition, x -> rnd(x, dtype):
    None keeps transformers' numerics (the stream in the embedding's dtype, fp32 under autocast); "bf16" keeps the
    stream, and so its gradient, in bf16 (as ./train's bf16 activations and residual gradient are); "bf16-forward"
    rounds only the values to bf16 (the gradient passes through in fp32); "bf16-backward" rounds only the gradient;
    "bf16-saved" leaves the stream as it is, and the RMSNorms' backward reads it rounded (RMSNormRoundSaved)."""
    if mode in (None, "bf16-saved"):  # bf16-saved: the stream stays; the norms round what they save
        return lambda x, dtype: x.to(dtype)
    if mode == "bf16":
        return lambda x, dtype: x.to(torch.bfloat16)
    if mode == "bf16-forward":
        return lambda x, dtype: x + (round_bf16(x) - x).detach()
    if mode == "bf16-backward":
        return lambda x, dtype: RoundGradBf16.apply(x)
    raise ValueError(f"unknown residual rounding {mode!r}")


class Block(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c, sdpa)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, rnd):
        # rnd: the residual stream's rounding after each addition (Llama.round_residual; the identity by default)
        h = rnd(x + self.self_attn(self.input_layernorm(x), cos, sin), x.dtype)
        return rnd(h + self.mlp(self.post_attention_layernorm(h)), x.dtype)


class Body(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Block(c, sdpa) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """LlamaForCausalLM: parameter names are Hugging Face's."""

    def __init__(self, c, sdpa=False, rope_table_len=0, residual_round=None, logits_fp32=False):
        """rope_table_len > 0 precomputes the cos/sin tables for sequences up to that length (the fast recipe of
        scripts/bench_vs_pytorch.py); otherwise they are computed per forward, as transformers does.
        residual_round (a diagnostic, --residual-dtype): None keeps transformers' residual stream (the embedding's
        dtype, fp32 under autocast); "bf16", "bf16-forward" or "bf16-backward" round it, its values or its gradient
        to bf16 after the embedding and after every residual addition (residual_rounding); "bf16-saved" rounds only
        what the RMSNorms save for their backward (RMSNormRoundSaved).
        logits_fp32 (a diagnostic, --logits-dtype fp32): the LM head's product of bf16-rounded inputs accumulated
        and kept in fp32, as ./train's fused LM head takes the loss from its fp32 accumulators, instead of
        autocast's bf16 logits."""
        super().__init__()
        self.round_residual = residual_rounding(residual_round)
        self.rounds_residual = residual_round not in (None, "bf16-saved")
        self.logits_fp32 = logits_fp32
        self.model = Body(c, sdpa)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight
        for norm in self.modules():
            if isinstance(norm, RMSNorm):
                norm.round_saved = residual_round == "bf16-saved"
        self.register_buffer("inv_freq", rope_inv_freq(c), persistent=False)
        self.rope_table_len = rope_table_len
        if rope_table_len:
            cos, sin = self.rope_tables(rope_table_len, None)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def rope_tables(self, T, device):
        # transformers' LlamaRotaryEmbedding: freqs = inv_freq x position in fp32, emb = cat(freqs, freqs)
        pos = torch.arange(T, device=device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def rope(self, T, device):
        if self.rope_table_len >= T:
            return self.rope_cos[:T], self.rope_sin[:T]
        return self.rope_tables(T, device)

    def forward(self, tokens):
        with torch.autocast(device_type=tokens.device.type, enabled=False):
            cos, sin = self.rope(tokens.shape[1], tokens.device)
        x = self.model.embed_tokens(tokens)
        if self.rounds_residual:
            x = self.round_residual(x, x.dtype)
        for block in self.model.layers:
            x = block(x, cos, sin, self.round_residual)
        if self.logits_fp32:  # bf16 values, fp32 products and sums (TF32 is off)
            with torch.autocast(device_type=tokens.device.type, enabled=False):
                h = self.model.norm(x).to(torch.bfloat16).float()
                return F.linear(h, self.lm_head.weight.to(torch.bfloat16).float())
        return self.lm_head(self.model.norm(x))

    def load(self, tensors, c, init_dir):
        """Copies every parameter from the checkpoint, checking names and shapes."""
        shapes = hf_param_shapes(c)
        for name, shape in shapes.items():
            if name not in tensors:
                die(f"{init_dir}: the checkpoint has no tensor {name} (expected {list(shape)})")
            path, info = tensors[name]
            if tuple(info["shape"]) != shape:
                die(f"{path}: tensor {name} has shape {info['shape']}, the config says {list(shape)}")
        extra = sorted(n for n in tensors if n not in shapes and not n.endswith("rotary_emb.inv_freq")
                       and not (n == "lm_head.weight" and c["tie_word_embeddings"]))
        if extra:
            die(f"{init_dir}: tensors that this model does not have: {', '.join(extra[:5])}"
                f"{' ...' if len(extra) > 5 else ''} (does config.json match the weights?)")
        if c["tie_word_embeddings"] and "lm_head.weight" in tensors:
            lm = read_tensor(*tensors["lm_head.weight"])
            if lm.shape != shapes["model.embed_tokens.weight"] or \
                    not np.array_equal(lm, read_tensor(*tensors["model.embed_tokens.weight"])):
                die(f"{init_dir}: config.json says tie_word_embeddings, but the checkpoint's lm_head.weight is not "
                    f"the embedding (weights of an untied model?)")
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name in shapes:
                params[name].copy_(torch.from_numpy(read_tensor(*tensors[name])))

    def hf_state(self):
        return {n: p.detach().float().cpu().numpy() for n, p in self.named_parameters()}


# ---------------------------------------------------------------------------------------------------- data

MAGIC_DTYPE = {20240520: np.dtype("<u2"), 20240801: np.dtype("<u4")}
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def rng_state(seed, epoch, stream):
    """dataloader.c: stream 0 orders the shards of an epoch, stream 1 + i the samples of shard i."""
    return mix64(mix64(mix64(seed & MASK64) ^ epoch) ^ stream)


def mix64_np(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def shuffled_identity(n, state):
    """dataloader.c's Fisher-Yates with splitmix64 and rejection sampling (rng_below). The k-th draw is
    mix64(state + k * GOLDEN), so the draws are computed at once with numpy; a rejection (probability below
    n / 2^64 per draw) shifts all later draws, and then the sequential version runs instead."""
    if n > 1:
        i = np.arange(n, 1, -1, dtype=np.uint64)
        k = np.arange(1, n, dtype=np.uint64)
        r = mix64_np(np.uint64(state) + k * np.uint64(GOLDEN))
        threshold = (np.uint64(0) - i) % i
        if not (r < threshold).any():
            js = (r % i).tolist()
            perm = list(range(n))
            for m, j in zip(range(n - 1, 0, -1), js):
                perm[m], perm[j] = perm[j], perm[m]
            return perm
    return shuffled_identity_sequential(n, state)


def shuffled_identity_sequential(n, state):
    perm = list(range(n))
    for i in range(n, 1, -1):
        threshold = ((1 << 64) - i) % i
        while True:
            state = (state + GOLDEN) & MASK64
            r = mix64(state)
            if r >= threshold:
                break
        j = r % i
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm


class DataLoader:
    """data/dataloader.c's batches: shards sorted by name; a sample is T+1 tokens at a multiple of T."""

    def __init__(self, pattern, B, T, vocab_size, shuffle, seed, what):
        self.B, self.T, self.V, self.shuffle, self.seed = B, T, vocab_size, shuffle, seed
        paths = sorted(glob.glob(pattern))
        if not paths:
            die(f"no token shard files match the pattern '{pattern}' ({what}; relative paths are relative to the "
                f"directory that ./train ran in, or pass --{'train' if 'train' in what else 'val'}-data GLOB)")
        self.shards = []
        for p in paths:
            try:
                size = os.path.getsize(p)
                with open(p, "rb") as f:
                    header = f.read(1024)
            except OSError as e:
                die(f"cannot open shard {p}: {e.strerror}")
            if len(header) < 1024:
                die(f"shard {p}: file too short for its 1024-byte header")
            magic, version, count = struct.unpack("<3i", header[:12])
            if magic not in MAGIC_DTYPE:
                die(f"shard {p}: bad magic {magic}: not an llm.c token shard")
            if version != 1 or count <= 0:
                die(f"shard {p}: version {version}, token count {count}")
            dt = MAGIC_DTYPE[magic]
            if size != 1024 + count * dt.itemsize:
                die(f"shard {p}: the header says {count} tokens of {dt.itemsize} bytes but the file is {size} bytes")
            self.shards.append((p, count, dt, (count - 1) // T))
        self.total_samples = sum(s[3] for s in self.shards)
        if self.total_samples < B:
            die(f"the shards matching '{pattern}' hold {self.total_samples} samples of T+1 = {T + 1} tokens: fewer "
                f"than one batch of B = {B}")
        self.batches_per_epoch = self.total_samples // B
        self.maps = {}
        self.epoch_cache = (None, None)
        self.seek(0)

    def seek(self, batch_index):
        """Position at the batch_index-th batch since the start (epoch 0)."""
        self.epoch, self.batch = divmod(batch_index, self.batches_per_epoch)

    def order(self, epoch):
        """(shard index, sample index) of every sample of an epoch, in order."""
        if self.epoch_cache[0] == epoch:
            return self.epoch_cache[1]
        n = len(self.shards)
        shard_order = shuffled_identity(n, rng_state(self.seed, epoch, 0)) if self.shuffle else list(range(n))
        parts = []
        for s in shard_order:
            k = self.shards[s][3]
            samples = (np.array(shuffled_identity(k, rng_state(self.seed, epoch, 1 + s)), dtype=np.int64)
                       if self.shuffle else np.arange(k, dtype=np.int64))
            parts.append(np.stack([np.full(k, s, dtype=np.int64), samples], axis=1))
        order = np.concatenate(parts)
        self.epoch_cache = (epoch, order)
        return order

    def tokens(self, s):
        if s not in self.maps:
            p, count, dt, _ = self.shards[s]
            self.maps[s] = np.memmap(p, dtype=dt, mode="r", offset=1024, shape=(count,))
        return self.maps[s]

    def next(self):
        """The next batch: inputs and targets, int64 [B, T]."""
        if self.batch >= self.batches_per_epoch:
            self.epoch, self.batch = self.epoch + 1, 0
        order = self.order(self.epoch)[self.batch * self.B:(self.batch + 1) * self.B]
        self.batch += 1
        T = self.T
        rows = np.empty((self.B, T + 1), dtype=np.int64)
        for b, (s, k) in enumerate(order):
            rows[b] = self.tokens(s)[k * T:k * T + T + 1]
        bad = rows >= self.V
        if bad.any():
            b, t = np.argwhere(bad)[0]
            s, k = order[b]
            die(f"shard {self.shards[s][0]}: token {k * T + t} has id {rows[b, t]}, outside the vocabulary of "
                f"{self.V} ids")
        x = torch.from_numpy(rows[:, :-1].copy())
        y = torch.from_numpy(rows[:, 1:].copy())
        return x, y


# ---------------------------------------------------------------------------------------------------- training


def lr_at_step(t, step):
    """model/optimizer.c's lr_at_step (step 1-based)."""
    peak = t["learning_rate"]
    floor_lr = peak * t["min_lr_frac"]
    W, S = t["warmup_steps"], t["steps"]
    if step <= W:
        return peak * step / W
    p = (step - W) / (S - W) if S > W else 1.0
    p = min(p, 1.0)
    sched = t["lr_schedule"]
    if sched == "cosine":
        return floor_lr + (peak - floor_lr) * 0.5 * (1 + math.cos(math.pi * p))
    if sched == "linear":
        return peak - (peak - floor_lr) * p
    if sched == "wsd":
        K = int(math.floor(t["wsd_decay_frac"] * S + 0.5))  # C's lround for a non-negative value
        decay_start = S - K
        if step <= decay_start or K == 0:
            return peak
        return peak - (peak - floor_lr) * (step - decay_start) / K
    return peak


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="PyTorch reference of ./train: same model, data order, schedule and optimizer; writes "
                    "OUT/log.jsonl in ./train's format.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Training keys (override --config): " + ", ".join("--" + k.replace("_", "-") for k in TRAIN_DEFAULTS))
    ap.add_argument("--init", required=True, metavar="DIR",
                    help="initial weights: a checkpoint of ./train (RUN/step_NNNNNNNN) or a Hugging Face directory "
                         "(config.json + model.safetensors or model.safetensors.index.json)")
    ap.add_argument("--config", "-c", metavar="FILE",
                    help="hyperparameters: ./train's config or RUN/train_config.json (default: INIT/train_config.json)")
    ap.add_argument("--out", "-o", metavar="DIR", help="writes DIR/log.jsonl (required unless --check-hf only)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing DIR/log.jsonl")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available, else cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16-autocast"],
                    help="fp32 (default on the CPU) or bf16 autocast with fp32 weights (default on a GPU)")
    ap.add_argument("--sdpa", action=argparse.BooleanOptionalAction, default=None,
                    help="attention through F.scaled_dot_product_attention (default: on a GPU) instead of "
                         "transformers' eager attention")
    ap.add_argument("--residual-dtype", choices=["default", "bf16", "bf16-forward", "bf16-backward", "bf16-saved"],
                    default="default",
                    help="a diagnostic: bf16 keeps the residual stream (and its gradient) in bf16, rounded after the "
                         "embedding and every residual addition, as ./train's bf16 activations do; bf16-forward "
                         "rounds only its values, bf16-backward only its gradient; bf16-saved keeps it and gives "
                         "the RMSNorms' backward its values rounded; default: transformers' (fp32 under autocast)")
    ap.add_argument("--logits-dtype", choices=["default", "fp32"], default="default",
                    help="a diagnostic: fp32 computes the LM head from bf16-rounded inputs with fp32 products and "
                         "keeps the logits in fp32, as ./train's fused LM head does; default: autocast's (bf16 "
                         "logits on a GPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model and loss")
    ap.add_argument("--fused-adamw", action="store_true", help="torch.optim.AdamW(fused=True)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    ap.add_argument("--start-step", type=int, metavar="N",
                    help="the --init weights are those after N steps (default: N of a step_NNNNNNNN directory, else 0)")
    ap.add_argument("--score-step", action="store_true",
                    help="no training: the loss of step N+1's micro-batches with the --init weights, logged as step "
                         "N+1 (what ./train logs at that step)")
    ap.add_argument("--save", metavar="DIR", help="after training, write the weights to DIR as Hugging Face "
                                                 "safetensors (F32) + config.json")
    ap.add_argument("--check-hf", action="store_true",
                    help="also load --init with transformers' LlamaForCausalLM and compare its logits with this "
                         "model's on the first batch (needs transformers)")
    ap.add_argument("--quiet", "-q", action="store_true", help="no per-step lines")
    for k, v in TRAIN_DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=type(v), default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def check_hf(model, c, init_dir, x, device):
    try:
        import transformers
    except ImportError:
        die("--check-hf needs the transformers package")
    try:
        hf = transformers.LlamaForCausalLM.from_pretrained(init_dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        hf = transformers.LlamaForCausalLM.from_pretrained(init_dir, torch_dtype=torch.float32,
                                                           attn_implementation="eager")
    hf = hf.to(device).eval()
    with torch.no_grad():
        ref = hf(x.to(device)).logits.float()
        ours = model(x.to(device)).float()
    err = ((ours - ref).norm() / ref.norm()).item()
    max_abs = (ours - ref).abs().max().item()
    ok = err < 1e-5
    print(f"{'PASS' if ok else 'FAIL'} --check-hf: transformers {transformers.__version__} LlamaForCausalLM logits vs "
          f"this model's on {tuple(x.shape)} tokens: relative error {err:.2e}, max abs diff {max_abs:.2e} "
          f"(bound 1e-5)")
    return ok


def main(argv=None):
    args = parse_args(argv)
    init_dir = args.init.rstrip("/") or "/"
    if not os.path.isdir(init_dir):
        die(f"--init {args.init}: no such directory")
    init_cfg_path = os.path.join(init_dir, "config.json")
    c = model_config(read_json(init_cfg_path, "config"), init_cfg_path)
    if c is None:
        die(f"config {init_cfg_path}: no model keys (hidden_size, ...): not a Hugging Face Llama config")
    cfg_path = args.config
    if cfg_path is None and os.path.isfile(os.path.join(init_dir, "train_config.json")):
        cfg_path = os.path.join(init_dir, "train_config.json")
    raw = read_json(cfg_path, "config") if cfg_path else {}
    other = model_config(raw, cfg_path) if raw else None
    if other is not None:
        for k in MODEL_KEYS:
            if not same_value(c[k], other[k]):
                die(f"model mismatch: {k} is {json.dumps(c[k])} in {init_cfg_path} but {json.dumps(other[k])} in "
                    f"{cfg_path}")
    t = train_config(raw, cfg_path, args)
    unused = sorted(k for k in raw if k not in TRAIN_DEFAULTS and k not in TRAIN_UNUSED and k not in c
                    and k not in ("rope_scaling", "initializer_range", "bos_token_id", "eos_token_id",
                                  "max_position_embeddings", "architectures", "model_type", "hidden_act",
                                  "torch_dtype", "dtype", "attention_bias", "mlp_bias", "attention_dropout",
                                  "transformers_version", "use_cache", "pad_token_id", "pretraining_tp"))
    if unused:
        print(f"note: keys of {cfg_path} that the reference does not use: {', '.join(unused)}", file=sys.stderr)

    m = re.fullmatch(r"step_(\d+)", os.path.basename(os.path.abspath(init_dir)))
    start = args.start_step if args.start_step is not None else (int(m.group(1)) if m else 0)
    if t["steps"] == 0 and not args.score_step and args.out:
        die(f"config {cfg_path}: steps is 0 (the train_config.json of a `./train -n 0` run?): pass --steps N, or "
            f"--config RUN/train_config.json of the run to compare with")
    if start < 0 or (start > t["steps"] and not args.score_step):
        die(f"--start-step {start} is outside [0, steps = {t['steps']}]")
    if not args.out and not args.check_hf:
        die("--out DIR is required (the reference writes DIR/log.jsonl); only --check-hf runs without it")

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        die("--device cuda: PyTorch sees no CUDA device")
    dtype = args.dtype or ("bf16-autocast" if device.type == "cuda" else "fp32")
    sdpa = args.sdpa if args.sdpa is not None else device.type == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    B, T = t["batch_size"], t["seq_len"]
    step_tokens = t["total_batch_tokens"] or B * T
    accum = step_tokens // (B * T)
    train = DataLoader(t["train_data"], B, T, c["vocab_size"], True, t["seed"], f"train_data of {cfg_path or 'flags'}")
    val = None
    if t["val_data"] and t["eval_every"] > 0:
        val = DataLoader(t["val_data"], B, T, c["vocab_size"], False, 0, f"val_data of {cfg_path or 'flags'}")
    train.seek(start * accum)

    model = Llama(c, sdpa, residual_round=None if args.residual_dtype == "default" else args.residual_dtype,
                  logits_fp32=args.logits_dtype == "fp32")
    model.load(load_weights(init_dir), c, init_dir)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"reference: {init_dir} ({n_params} parameters, D={c['hidden_size']} L={c['num_hidden_layers']} "
          f"Hq={c['num_attention_heads']} Hkv={c['num_key_value_heads']} hd={c['head_dim']} "
          f"F={c['intermediate_size']} V={c['vocab_size']}, {'tied' if c['tie_word_embeddings'] else 'untied'}); "
          f"config {cfg_path or '(flags)'}; {device.type}, {dtype}, {'sdpa' if sdpa else 'eager'} attention"
          f"{', compiled' if args.compile else ''}"
          f"{'' if args.residual_dtype == 'default' else f', residual stream rounded: {args.residual_dtype}'}"
          f"{', fp32 logits' if args.logits_dtype == 'fp32' else ''}; batch {B} x {T}, {accum} micro-steps; steps {start + 1}.."
          f"{t['steps']}", flush=True)

    autocast = dtype == "bf16-autocast"

    def loss_fn(x, y):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))

    step_loss = torch.compile(loss_fn) if args.compile else loss_fn
    ok = True
    if args.check_hf:
        x, _ = train.next()
        train.seek(start * accum)
        ok = check_hf(model, c, init_dir, x, device)
        if not args.out:
            return 0 if ok else 1

    log = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        log_path = os.path.join(args.out, "log.jsonl")
        if os.path.exists(log_path) and not args.overwrite:
            die(f"{log_path} already exists; pass --overwrite to replace it or --out to choose another directory")
        with open(os.path.join(args.out, "reference_config.json"), "w") as f:
            json.dump({"init": init_dir, "config": cfg_path, "start_step": start, "device": device.type,
                       "dtype": dtype, "residual_dtype": args.residual_dtype,
                       "logits_dtype": args.logits_dtype, "sdpa": sdpa, "compile": args.compile,
                       "fused_adamw": args.fused_adamw,
                       "torch": torch.__version__, "model": c, "train": t}, f, indent=2)
        log = open(log_path, "w")

    def record(obj):
        log.write(json.dumps(obj) + "\n")
        log.flush()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def evaluate():
        n = min(t["eval_batches"], val.batches_per_epoch)
        val.seek(0)
        total = 0.0
        model.eval()
        with torch.no_grad():
            for _ in range(n):
                x, y = val.next()
                total += step_loss(x.to(device), y.to(device)).item()
        model.train()
        return total / n

    if args.score_step:
        with torch.no_grad():
            losses = [step_loss(*(a.to(device) for a in train.next())).item() for _ in range(accum)]
        loss = sum(losses) / accum
        print(f"step {start + 1}: loss {loss:.9f} (the weights after step {start}, {accum} micro-batches)")
        if log:
            record({"step": start + 1, "loss": loss})
            log.close()
        return 0 if ok else 1

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kw = {"fused": True} if args.fused_adamw else ({"foreach": False} if device.type == "cpu" else {})
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["learning_rate"], betas=(t["beta1"], t["beta2"]), eps=t["adam_eps"], **opt_kw)
    params = list(model.parameters())
    if start > 0 and start < t["steps"]:
        print(f"note: training on from step {start} with fresh AdamW moments (./train's state.bin is not read): "
              f"not a reproduction of ./train's run", file=sys.stderr)
    model.train()
    for step in range(start + 1, t["steps"] + 1):
        t0 = time.perf_counter()
        lr = lr_at_step(t, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        losses = []
        for _ in range(accum):
            x, y = train.next()
            loss = step_loss(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            (loss / accum).backward()
            losses.append(loss.detach())
        if t["grad_clip"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, t["grad_clip"])
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        opt.step()
        loss = (torch.stack(losses).double().sum() / accum).item()
        norm = norm.item()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        tok_s = step_tokens / (ms * 1e-3)
        if not args.quiet:
            print(f"step {step:5d}/{t['steps']} | loss {loss:.4f} | lr {lr:.2e} | norm {norm:.4f} | {ms:.1f} ms | "
                  f"{tok_s:.0f} tok/s", flush=True)
        if not math.isfinite(loss):
            die(f"the loss is not finite at step {step}")
        record({"step": step, "loss": loss, "lr": lr, "grad_norm": norm, "ms": ms, "tokens_per_s": tok_s})
        if val and (step % t["eval_every"] == 0 or step == t["steps"]):
            vl = evaluate()
            print(f"step {step:5d} | val loss {vl:.4f}", flush=True)
            record({"step": step, "val_loss": vl})
    if log:
        log.close()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        write_safetensors(os.path.join(args.save, "model.safetensors"), model.hf_state())
        with open(os.path.join(args.save, "config.json"), "w") as f:
            json.dump(hf_config_json(c), f, indent=2)
        print(f"wrote the final weights to {args.save}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
