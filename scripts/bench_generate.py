#!/usr/bin/env python3
"""bench_generate.py: the generation speed of ./train --generate (the prompt in one forward, then one token at a time
from its KV cache) against transformers' generate on the same GPU, in one invocation, on the same weights and prompt.

    make && python3 scripts/bench_generate.py [--config configs/llama3_1b.json | --model HF_DIR] [--runs 5]

The model: --model, a Hugging Face directory (config.json and safetensors); else a LlamaForCausalLM of the config's
shape (default Llama-3.2-1B) with transformers' random init, saved in bf16 to a temporary directory that both sides
read. The prompt: --prompt-tokens ids (default 16) from the byte vocabulary, so ./train runs with --tokenizer byte and
needs no tokenizer file (the text it prints for ids past 255 is "<?>"; nothing reads it). Both decode greedily
--new-tokens tokens (default 512).
  - ./train --generate DIR --tokenizer byte --temperature 0 -d cuda --fusion FUSION: its own count of the tokens
    and seconds from the prompt's forward to the last token (stderr: "generate: N tokens in S s"), after the model's
    load; a run whose text stops early at the model's EOS fails the benchmark. One warm-up run, then --runs runs,
    each a new process with CUDA_MODULE_LOADING=EAGER (its kernels load with the CUDA context, before the timing).
  - transformers: LlamaForCausalLM in bf16 with attn_implementation="sdpa", generate(do_sample=False,
    max_new_tokens=N, min_new_tokens=N) (the EOS cannot end it early), timed with the host clock around the call
    after torch.cuda.synchronize on both sides. One warm-up call, then --runs calls.
Each side's tokens/s is N / the median of its runs' seconds. --device cpu runs both sides on the CPU instead (to try
the script where there is no GPU; not the comparison the JSON is for). Prints a Markdown table and writes --json
(default results/bench_generate.json): {"model", "prompt_tokens", "new_tokens", "ours_tokens_per_s",
"hf_tokens_per_s", "gpu", "date"}.
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

HF_MODEL_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                 "rope_scaling", "tie_word_embeddings", "initializer_range", "bos_token_id", "eos_token_id",
                 "hidden_act", "attention_bias", "mlp_bias")


def random_model_dir(config_path, device):
    """A temporary Hugging Face directory with a random LlamaForCausalLM of the config's shape, in bf16."""
    from transformers import LlamaConfig, LlamaForCausalLM
    raw = json.load(open(config_path))
    cfg = LlamaConfig(**{k: raw[k] for k in HF_MODEL_KEYS if k in raw})
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    out = tempfile.mkdtemp(prefix="bench_generate_")
    model.save_pretrained(out)  # safetensors, bf16
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def ours(binary, model_dir, prompt, new_tokens, device, fusion, runs):
    """Seconds of each of ./train --generate's runs (after one warm-up run)."""
    cmd = [binary, "--generate", model_dir, "--tokenizer", "byte", "--sample-prompt", prompt, "--sample-tokens",
           str(new_tokens), "--temperature", "0", "-d", device] + (["--fusion", fusion] if device == "cuda" else [])
    print("running:", " ".join(cmd), flush=True)
    # Each run is a new process: its kernels load with the CUDA context (before the model's load), not on their first
    # launch inside the timed generation, as the warm-up call does for transformers.
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
    seconds = []
    for i in range(runs + 1):
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        m = re.search(r"^generate: (\d+) tokens in ([0-9.]+) s", p.stderr, re.M)
        if p.returncode != 0 or not m:
            sys.exit(f"./train --generate failed:\n{p.stderr[-3000:]}")
        if int(m.group(1)) != new_tokens:
            sys.exit(f"./train --generate stopped after {m.group(1)} of {new_tokens} tokens (the model's EOS): "
                     "pass another --model or --config")
        if i > 0:
            seconds.append(float(m.group(2)))
    print(p.stderr.strip().splitlines()[-1], flush=True)
    return seconds


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def hf(model_dir, prompt_ids, new_tokens, device, runs):
    """Seconds of each of transformers' generate calls (after one warm-up call)."""
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.to(device).eval()
    ids = torch.tensor([prompt_ids], device=device)
    mask = torch.ones_like(ids)
    seconds = []
    for i in range(runs + 1):
        synchronize(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, pad_token_id=model.config.eos_token_id)
        synchronize(device)
        if out.shape[1] != len(prompt_ids) + new_tokens:
            sys.exit(f"transformers generated {out.shape[1] - len(prompt_ids)} tokens, not {new_tokens}")
        if i > 0:
            seconds.append(time.perf_counter() - t0)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/llama3_1b.json", help="the shape of the random model")
    ap.add_argument("--model", help="a Hugging Face directory to run instead of a random model")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each side (after one warm-up)")
    ap.add_argument("--fusion", default="on", choices=("on", "off"))
    ap.add_argument("--binary", default="./train")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: both sides on the CPU (to try the script on a machine without a GPU)")
    ap.add_argument("--json", default="results/bench_generate.json")
    a = ap.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("bench_generate.py needs transformers: pip install transformers")
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else "none (CPU)"
    # Letters (each one id of the byte vocabulary), the same ids for both sides.
    prompt = "".join(chr(ord("a") + i % 26) for i in range(a.prompt_tokens))
    prompt_ids = [ord(ch) for ch in prompt]
    model_dir = a.model or random_model_dir(a.config, a.device)
    name = a.model or f"{a.config} (random weights)"
    print(f"GPU: {gpu}; torch {torch.__version__}; model {name}; prompt {a.prompt_tokens} tokens, "
          f"{a.new_tokens} new", flush=True)
    try:
        ours_s = ours(a.binary, model_dir, prompt, a.new_tokens, a.device, a.fusion, a.runs)
        hf_s = hf(model_dir, prompt_ids, a.new_tokens, a.device, a.runs)
    finally:
        if not a.model:
            shutil.rmtree(model_dir, ignore_errors=True)
    ours_rate = a.new_tokens / statistics.median(ours_s)
    hf_rate = a.new_tokens / statistics.median(hf_s)
    date = time.strftime("%Y-%m-%d")
    print()
    print(f"GPU: {gpu}; {date}; {name}; {a.prompt_tokens} prompt tokens, {a.new_tokens} new tokens, greedy; median "
          f"of {a.runs} runs after one warm-up")
    print("| method | tokens/s | ms/token | runs (s) |")
    print("| --- | ---: | ---: | --- |")
    ours_label = f"./train --generate, KV cache, fusion {a.fusion}" if a.device == "cuda" else "./train --generate, CPU"
    for label, rate, runs in ((ours_label, ours_rate, ours_s),
                              ("transformers generate (bf16, SDPA, greedy)", hf_rate, hf_s)):
        print(f"| {label} | {rate:.1f} | {1e3 / rate:.2f} | {', '.join(f'{s:.2f}' for s in runs)} |")
    print(f"./train / transformers: {ours_rate / hf_rate:.2f}x")
    print("method: ./train's own count from the prompt's forward to the last token (the prompt included, the model's "
          "load not; CUDA_MODULE_LOADING=EAGER); transformers: the host clock around generate() between "
          "torch.cuda.synchronize calls, after a warm-up call")
    record = {"model": name, "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens,
              "ours_tokens_per_s": round(ours_rate, 1), "hf_tokens_per_s": round(hf_rate, 1), "gpu": gpu,
              "date": date}
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
