#!/usr/bin/env python3
"""ref_fixture.py: helpers of tests/test_reference.sh.

    ref_fixture.py init TRAIN_CONFIG OUT_DIR
        Writes OUT_DIR as a checkpoint in the format of ./train's step_00000000 (model.safetensors with Hugging Face
        names, F32; config.json; train_config.json): the initial weights of ./train, computed here from the documented
        init (docs/formats.md "The model", model/model.c model_init_weights, model/rng.h rng_normal_at): element i of the
        parameter buffer (matrices in table order, then norm weights = 1) is initializer_range x the i-th normal
        number of the seed, and the buffer's internal layouts (RoPE pairs of q/k rows interleaved, gate/up rows
        interleaved) are permuted to Hugging Face's.
    ref_fixture.py compare DIR_A DIR_B --atol X [--round-bf16] [--label TEXT]
        Compares the tensors of two checkpoint directories (names, shapes, values; with --round-bf16, DIR_A's values
        rounded to bf16, round-to-nearest-even, against DIR_B's); prints one PASS or FAIL line.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import reference as ref  # noqa: E402

U64 = np.uint64


def splitmix64(x):
    """model/rng.h splitmix64 on a uint64 array."""
    x = x + U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def normal_at(seed, idx):
    """model/rng.h rng_normal_at(seed, i) for a uint64 array of i."""
    s = U64(seed)
    a = splitmix64(s ^ splitmix64(U64(2) * idx))
    b = splitmix64(s ^ splitmix64(U64(2) * idx + U64(1)))
    ua = ((a >> U64(11)) + U64(1)).astype(np.float64) * (1.0 / 9007199254740992.0)
    ub = ((b >> U64(11)) + U64(1)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return np.sqrt(-2.0 * np.log(ua)) * np.cos(6.283185307179586 * ub)


def init_weights(c, seed, std):
    """{HF name: fp32 array}: ./train's initial weights."""
    D, F_, V, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    Hq, Hkv, L = c["num_attention_heads"], c["num_key_value_heads"], c["num_hidden_layers"]
    offset = 0

    def take(rows, cols):
        nonlocal offset
        idx = np.arange(offset, offset + rows * cols, dtype=U64)
        offset += rows * cols
        return (std * normal_at(seed, idx)).astype(np.float32).reshape(rows, cols)

    def unpair(w, heads):  # internal rows (2i, 2i+1) of a head -> HF rows (i, i + hd/2)
        return w.reshape(heads, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(heads * hd, -1)

    out = {"model.embed_tokens.weight": take(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        qkv = take((Hq + 2 * Hkv) * hd, D)
        out[p + "self_attn.q_proj.weight"] = unpair(qkv[:Hq * hd], Hq)
        out[p + "self_attn.k_proj.weight"] = unpair(qkv[Hq * hd:(Hq + Hkv) * hd], Hkv)
        out[p + "self_attn.v_proj.weight"] = qkv[(Hq + Hkv) * hd:].copy()
        out[p + "self_attn.o_proj.weight"] = take(D, Hq * hd)
        gu = take(2 * F_, D).reshape(F_, 2, D)
        out[p + "mlp.gate_proj.weight"] = gu[:, 0].copy()
        out[p + "mlp.up_proj.weight"] = gu[:, 1].copy()
        out[p + "mlp.down_proj.weight"] = take(D, F_)
    if not c["tie_word_embeddings"]:
        out["lm_head.weight"] = take(V, D)
    for l in range(L):
        out[f"model.layers.{l}.input_layernorm.weight"] = np.ones(D, np.float32)
        out[f"model.layers.{l}.post_attention_layernorm.weight"] = np.ones(D, np.float32)
    out["model.norm.weight"] = np.ones(D, np.float32)
    names = ref.hf_param_shapes(c)
    return {n: out[n] for n in names}  # the checkpoint's order


def cmd_init(cfg_path, out_dir):
    raw = ref.read_json(cfg_path, "config")
    c = ref.model_config(raw, cfg_path)
    if c is None:
        ref.die(f"{cfg_path}: no model keys")
    os.makedirs(out_dir, exist_ok=True)
    weights = init_weights(c, int(raw.get("seed", 1337)), float(raw.get("initializer_range", 0.02)))
    ref.write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(ref.hf_config_json(c), f, indent=2)
    shutil.copyfile(cfg_path, os.path.join(out_dir, "train_config.json"))
    try:  # the safetensors package, when present, must read what we wrote
        from safetensors.numpy import load_file
        back = load_file(os.path.join(out_dir, "model.safetensors"))
        assert back.keys() == weights.keys() and all(np.array_equal(back[k], weights[k]) for k in back)
    except ImportError:
        pass
    n = sum(w.size for w in weights.values())
    print(f"wrote {out_dir}: {len(weights)} tensors, {n} parameters (the documented init, seed {raw.get('seed')})")


def round_bf16(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def cmd_compare(a_dir, b_dir, atol, label, bf16):
    ta, tb = ref.load_weights(a_dir), ref.load_weights(b_dir)
    if ta.keys() != tb.keys():
        print(f"FAIL {label}: tensor names differ: only in {a_dir}: {sorted(ta.keys() - tb.keys())[:5]}, only in "
              f"{b_dir}: {sorted(tb.keys() - ta.keys())[:5]}")
        return 1
    worst, worst_name, rel_num, rel_den = 0.0, None, 0.0, 0.0
    for n in ta:
        if ta[n][1]["shape"] != tb[n][1]["shape"]:
            print(f"FAIL {label}: {n} has shape {ta[n][1]['shape']} in {a_dir} but {tb[n][1]['shape']} in {b_dir}")
            return 1
        x, y = ref.read_tensor(*ta[n]), ref.read_tensor(*tb[n])
        x, y = (round_bf16(x) if bf16 else x).astype(np.float64), y.astype(np.float64)
        d = np.abs(x - y).max()
        rel_num += ((x - y) ** 2).sum()
        rel_den += (y ** 2).sum()
        if d > worst or worst_name is None:
            worst, worst_name = d, n
    rel = (rel_num / rel_den) ** 0.5
    ok = worst <= atol
    print(f"{'PASS' if ok else 'FAIL'} {label}: {len(ta)} tensors, max abs diff {worst:.3g} (in {worst_name}; bound "
          f"{atol:g}), relative error of all weights {rel:.3g}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("config")
    p.add_argument("out")
    p = sub.add_parser("compare")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--atol", type=float, required=True)
    p.add_argument("--round-bf16", action="store_true")
    p.add_argument("--label")
    a = ap.parse_args()
    if a.cmd == "init":
        cmd_init(a.config, a.out)
        return 0
    return cmd_compare(a.a, a.b, a.atol, a.label or f"{a.a} vs {a.b}", a.round_bf16)


if __name__ == "__main__":
    sys.exit(main())
