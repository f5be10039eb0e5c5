#!/usr/bin/env bash
# test_train_e2e.sh: end to end on the CPU. Prepares TinyShakespeare (byte vocabulary) with scripts/prepare_data.py,
# trains the tiny config, and checks that the loss falls far below ln(V) = ln 256 = 5.55, that validation loss and
# samples are logged, and that training is deterministic: the same losses with 1 and 2 OpenMP threads.
# Under SANITIZE=1 (a build some 20x slower) every run has batches of 2 sequences instead of 8, and the learning run
# is 20 steps instead of 200, with 2 validation batches instead of 8, samples of 80 tokens instead of 120, and the
# bounds for that run.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
TEXT="${SHARED_DATA:-../shared/data}/tinyshakespeare.txt"
[ -f "$TEXT" ] || { fail "no text at $TEXT (set SHARED_DATA)"; exit 1; }

if python3 scripts/prepare_data.py --tokenizer byte --text "$TEXT" --out "$TMP/data" >"$TMP/prep.log" 2>&1; then
    pass "prepare_data.py wrote the byte-level shards"
else
    fail "prepare_data.py: $(tail -3 "$TMP/prep.log")"
    exit 1
fi
DATA=(-i "$TMP/data/train_*.bin" -j "$TMP/data/val_*.bin")
TRAIN="${TRAIN:-./train}"
# The learning run: STEPS steps, then the mean of the last LAST losses must be below LOSS_BOUND, far below ln 256 =
# 5.55 (measured 2.00 after 200 steps; 3.40 after the 20 steps of batch 2), and so must the last validation loss be
# below VAL_BOUND (measured 1.99; 3.50).
STEPS=${E2E_STEPS:-200} LAST=10 LOSS_BOUND=2.4 VAL_BOUND=2.5 BATCH=() EVAL=() SAMPLE_TOKENS=120
if [ "${SANITIZE:-0}" = 1 ]; then
    STEPS=20 LAST=5 LOSS_BOUND=3.8 VAL_BOUND=4.0 BATCH=(-b 2) EVAL=(--eval-batches 2) SAMPLE_TOKENS=80
    echo "note: SANITIZE=1: shortened: batches of 2 sequences, and a learning run of $STEPS steps with 2 validation" \
        "batches, samples of $SAMPLE_TOKENS tokens and the bounds for that run"
fi

# 1. Determinism: 4 steps with 1 thread and with 2 threads give bit-identical losses and gradient norms.
OMP_NUM_THREADS=1 "$TRAIN" "${DATA[@]}" "${BATCH[@]}" -o "$TMP/det1" -n 4 --warmup-steps 2 --eval-every 0 \
    --sample-every 0 >/dev/null 2>&1
OMP_NUM_THREADS=2 "$TRAIN" "${DATA[@]}" "${BATCH[@]}" -o "$TMP/det2" -n 4 --warmup-steps 2 --eval-every 0 \
    --sample-every 0 >/dev/null 2>&1
strip() { python3 -c "import json,sys; [print(r['step'], r['loss'], r['grad_norm']) for r in map(json.loads, open(sys.argv[1])) if 'loss' in r]" "$1"; }
if [ -s "$TMP/det1/log.jsonl" ] && [ "$(strip "$TMP/det1/log.jsonl")" = "$(strip "$TMP/det2/log.jsonl")" ]; then
    pass "1 and 2 threads give identical losses and norms: $(strip "$TMP/det1/log.jsonl" | tail -1)"
else
    fail "losses differ between thread counts or the run failed"
fi

# 2. The tiny config learns (the bounds above).
start=$(date +%s)
if "$TRAIN" "${DATA[@]}" "${BATCH[@]}" "${EVAL[@]}" -o "$TMP/run" -n "$STEPS" --eval-every $((STEPS / 2)) \
    --sample-every $((STEPS / 2)) --sample-tokens "$SAMPLE_TOKENS" >"$TMP/train.log" 2>&1; then
    pass "./train ran $STEPS steps of the tiny config in $(( $(date +%s) - start )) s"
else
    fail "./train: $(tail -5 "$TMP/train.log")"
    exit 1
fi
if grep -q "MFU" "$TMP/train.log"; then fail "the CPU run prints an MFU: $(grep -m1 MFU "$TMP/train.log")"; fi
python3 - "$TMP/run/log.jsonl" "$STEPS" "$LAST" "$LOSS_BOUND" "$VAL_BOUND" "$TMP/train.log" "$TMP/run" <<'EOF'
import json, math, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
out, run = open(sys.argv[6], errors="replace").read(), sys.argv[7]
steps, n_last, loss_bound, val_bound = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
losses = [r["loss"] for r in recs if "loss" in r]
vals = [r["val_loss"] for r in recs if "val_loss" in r]
samples = [r["sample"] for r in recs if "sample" in r]
def check(ok, msg):
    print(("PASS " if ok else "FAIL ") + msg)
check(len(losses) == steps, f"{len(losses)} step records for {steps} steps")
first, last = losses[0], sum(losses[-n_last:]) / n_last
check(abs(first - math.log(256)) < 0.3, f"the first loss {first:.3f} is near ln(256) = {math.log(256):.3f}")
check(last < loss_bound, f"the mean of the last {n_last} losses {last:.3f} is far below ln(256) (< {loss_bound})")
check(len(vals) == 2 and vals[-1] < val_bound, f"validation losses {[round(v, 3) for v in vals]}, the last < {val_bound}")
check(all(math.isfinite(r["grad_norm"]) and r["ms"] > 0 and r["tokens_per_s"] > 0 and r["lr"] > 0 and "mfu" not in r
          for r in recs if "loss" in r),
      "every step record has a finite norm, a time, a throughput and an lr, and no MFU (the CPU has no peak)")
check(len(samples) == 2 and all(s.startswith("ROMEO:") and len(s) > 60 for s in samples),
      f"two samples, each starting with the prompt; the last: {samples[-1][:80]!r}" if samples else "no samples")
# "time": in every record (steps, validation, samples, checkpoints), never decreasing.
times = [r.get("time") for r in recs]
check(all(isinstance(t, float) and t >= 0 for t in times) and times == sorted(times) and
      {"loss", "val_loss", "sample", "checkpoint_stall_s"} <= {k for r in recs for k in r},
      f"every one of the {len(recs)} records of the 4 kinds has a \"time\", never decreasing (last {times[-1]:.1f} s)")
# The progress lines: by default every steps/100-th (and the first and last), each with elapsed time and ETA.
lines = [l for l in out.splitlines() if re.match(r"step +\d+/\d+ \|", l)]
every = max(steps // 100, 1)
want = sorted({1, steps} | set(range(every, steps + 1, every)))
printed = [int(re.match(r"step +(\d+)", l).group(1)) for l in lines]
check(printed == want and all(re.search(r"\| [0-9hms.]+ elapsed \| ETA [0-9hms.]+$", l) for l in lines),
      f"{len(lines)} progress lines for {steps} steps (every {every}), each with elapsed and ETA: {lines[-1]!r}")
# The summary: steps, tokens, mean tokens/s, the last and best validation loss, the newest checkpoint and the
# command that generates from it.
vals_at = [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r]
best = min(vals_at, key=lambda sv: sv[1])
per_step = int(re.search(r"= (\d+) tokens per step$", out, re.M).group(1))
ckpt = f"{run}/step_{steps:08d}"
m = re.search(r"^steps 1-(\d+) of (\d+): ([\d,]+) tokens, \S+ wall time, ([\d,]+) tokens/s over the steps$", out, re.M)
step_seconds = sum(r["ms"] for r in recs if "loss" in r) / 1e3
number = lambda text: int(text.replace(",", ""))
ok = (m is not None and number(m.group(1)) == steps and number(m.group(3)) == steps * per_step and
      abs(number(m.group(4)) - steps * per_step / step_seconds) <= 1 and
      f"validation loss: {vals_at[-1][1]:.4f} at step {vals_at[-1][0]} (the last), best {best[1]:.4f} at step {best[0]}"
      in out and f"newest checkpoint: {ckpt}\n" in out and
      re.search(rf"^generate from it: \S*train --generate {re.escape(ckpt)}$", out, re.M) is not None)
check(ok, "the summary: " + " | ".join(out[out.find("---- summary ----"):].splitlines()[1:]))
EOF
