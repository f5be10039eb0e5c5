#!/usr/bin/env bash
# test_train_e2e.sh: end to end on the CPU. Prepares TinyShakespeare (byte vocabulary) with scripts/prepare_data.py,
# trains the tiny config, and checks that the loss falls far below ln(V) = ln 256 = 5.55, that validation loss and
# samples are logged, and that training is deterministic: the same losses with 1 and 2 OpenMP threads.
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

# 1. Determinism: 4 steps with 1 thread and with 2 threads give bit-identical losses and gradient norms.
OMP_NUM_THREADS=1 ./train "${DATA[@]}" -o "$TMP/det1" -n 4 --warmup-steps 2 --eval-every 0 --sample-every 0 >/dev/null 2>&1
OMP_NUM_THREADS=2 ./train "${DATA[@]}" -o "$TMP/det2" -n 4 --warmup-steps 2 --eval-every 0 --sample-every 0 >/dev/null 2>&1
strip() { python3 -c "import json,sys; [print(r['step'], r['loss'], r['grad_norm']) for r in map(json.loads, open(sys.argv[1])) if 'loss' in r]" "$1"; }
if [ -s "$TMP/det1/log.jsonl" ] && [ "$(strip "$TMP/det1/log.jsonl")" = "$(strip "$TMP/det2/log.jsonl")" ]; then
    pass "1 and 2 threads give identical losses and norms: $(strip "$TMP/det1/log.jsonl" | tail -1)"
else
    fail "losses differ between thread counts or the run failed"
fi

# 2. The tiny config learns: STEPS steps, then the last losses must be far below ln 256.
STEPS=${E2E_STEPS:-200}
start=$(date +%s)
if ./train "${DATA[@]}" -o "$TMP/run" -n "$STEPS" --eval-every 100 --sample-every 100 --sample-tokens 120 \
    >"$TMP/train.log" 2>&1; then
    pass "./train ran $STEPS steps of the tiny config in $(( $(date +%s) - start )) s"
else
    fail "./train: $(tail -5 "$TMP/train.log")"
    exit 1
fi
if grep -q "MFU" "$TMP/train.log"; then fail "the CPU run prints an MFU: $(grep -m1 MFU "$TMP/train.log")"; fi
python3 - "$TMP/run/log.jsonl" "$STEPS" <<'EOF'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[2])
losses = [r["loss"] for r in recs if "loss" in r]
vals = [r["val_loss"] for r in recs if "val_loss" in r]
samples = [r["sample"] for r in recs if "sample" in r]
def check(ok, msg):
    print(("PASS " if ok else "FAIL ") + msg)
check(len(losses) == steps, f"{len(losses)} step records for {steps} steps")
first, last = losses[0], sum(losses[-10:]) / 10
check(abs(first - math.log(256)) < 0.3, f"the first loss {first:.3f} is near ln(256) = {math.log(256):.3f}")
check(last < 2.4, f"the mean of the last 10 losses {last:.3f} is far below ln(256) (< 2.4)")
check(len(vals) == 2 and vals[-1] < 2.5, f"validation losses {[round(v, 3) for v in vals]}, the last < 2.5")
check(all(math.isfinite(r["grad_norm"]) and r["ms"] > 0 and r["tokens_per_s"] > 0 and r["lr"] > 0 and "mfu" not in r
          for r in recs if "loss" in r),
      "every step record has a finite norm, a time, a throughput and an lr, and no MFU (the CPU has no peak)")
check(len(samples) == 2 and all(s.startswith("ROMEO:") and len(s) > 60 for s in samples),
      f"two samples, each starting with the prompt; the last: {samples[-1][:80]!r}" if samples else "no samples")
EOF
