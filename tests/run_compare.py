"""run_compare.py: compares runs of ./train for the shell tests, with an independent reader of the documented
state.bin layout (persist/state_file.h), CRCs included.

    python3 tests/run_compare.py A B [plain]

prints three PASS/FAIL lines: the logs of runs A and B agree record by record (all but the timings; unless plain,
they hold validation losses and samples), and their last checkpoints hold the same model.safetensors and the same
state (every section but the config, which names the run directory). tests/crash_consistency.py imports it."""
import json
import os
import struct
import sys
import zlib

TIMINGS = ("time", "ms", "tokens_per_s", "mfu")
# the master weights are in state.bin ("master") or in model.safetensors, which "master_file" names by size and CRC32
STATE_KEYS = ["step", "master", "master_file", "adam_m", "adam_v", "data_position", "sampler_rng"]


def log_records(run, torn_tail_ok=False):
    """The records of RUN/log.jsonl without their timings, and without the records of checkpoints (when a run was
    checkpointed depends on how it was stopped and resumed); with torn_tail_ok, a last line cut short (by a kill in the
    middle of a write) is left out instead of raising."""
    lines = open(f"{run}/log.jsonl", encoding="utf-8").read().split("\n")
    if lines[-1] == "":
        lines.pop()
    elif torn_tail_ok:
        lines.pop()  # no newline yet: that line may be cut anywhere
    recs = []
    for line in lines:
        r = json.loads(line)
        if "checkpoint_stall_s" in r:
            continue
        for key in TIMINGS:
            r.pop(key, None)
        recs.append(r)
    return recs


def state_sections(path):
    """The sections of a state.bin by name (plus "step"), every CRC and size checked (AssertionError if not)."""
    b = open(path, "rb").read()
    assert b[:8] == b"L3STATE\0", "magic"
    assert struct.unpack_from("<I", b, 64)[0] == zlib.crc32(b[:64]), "header crc"
    version, n_sections, step, n_params = struct.unpack_from("<IIQQ", b, 8)
    at, out = 72, {"step": step}
    for _ in range(n_sections):
        name = b[at:at + 16].rstrip(b"\0").decode()
        n, zero, hcrc = struct.unpack_from("<QII", b, at + 16)
        assert hcrc == zlib.crc32(b[at:at + 28]), name + " header crc"
        payload = b[at + 32:at + 32 + n]
        assert struct.unpack_from("<I", b, at + 32 + n)[0] == zlib.crc32(payload), name + " crc"
        out[name] = payload
        at += 32 + n + 4
    assert at == len(b), "trailing bytes"
    return out


def checkpoint_steps(run):
    """The steps of RUN's checkpoint directories (step_NNNNNNNN), ascending."""
    return sorted(int(d[5:]) for d in os.listdir(run) if d.startswith("step_") and len(d) == 13 and d[5:].isdigit())


def checkpoint_dir(run, step):
    return f"{run}/step_{step:08d}"


def same_bytes(a, b):
    return open(a, "rb").read() == open(b, "rb").read()


def checkpoint_differences(a, b):
    """What differs between checkpoint directories a and b, besides the run directory they name: [] if nothing."""
    diffs = []
    sa, sb = state_sections(f"{a}/state.bin"), state_sections(f"{b}/state.bin")
    diffs += [f"state.bin {k}" for k in STATE_KEYS if sa.get(k) != sb.get(k)]
    diffs += [name for name in ("model.safetensors", "config.json") if not same_bytes(f"{a}/{name}", f"{b}/{name}")]
    return diffs


def compare_runs(a, b, plain=False):
    """Prints the three PASS/FAIL lines of the module's description; returns whether all three passed."""
    la, lb = log_records(a), log_records(b)
    ok_log = la == lb and (plain or (any("val_loss" in r for r in la) and any("sample" in r for r in la)))
    ca, cb = checkpoint_dir(a, checkpoint_steps(a)[-1]), checkpoint_dir(b, checkpoint_steps(b)[-1])
    sa, sb = state_sections(f"{ca}/state.bin"), state_sections(f"{cb}/state.bin")
    ok_state = all(sa.get(k) == sb.get(k) for k in STATE_KEYS)
    ok_model = same_bytes(f"{ca}/model.safetensors", f"{cb}/model.safetensors")
    losses = [r["loss"] for r in la if "loss" in r]
    what = "losses, norms, lr" + ("" if plain else ", val losses, samples")
    last = losses[-1] if losses else None
    print(("PASS" if ok_log else "FAIL") + f" {len(la)} log records identical ({what}); last loss {last}")
    print(("PASS" if ok_state else "FAIL") + f" {os.path.basename(ca)}: master weights, Adam m and v, data position, "
          "sampler state identical")
    print(("PASS" if ok_model else "FAIL") + " model.safetensors identical byte for byte", flush=True)
    return ok_log and ok_state and ok_model


if __name__ == "__main__":
    compare_runs(sys.argv[1], sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "plain")
