#!/usr/bin/env bash
# test_gpu_resume.sh: bit-exact resume on the GPU. The tiny config (constant learning rate, so the schedule does not
# depend on the number of steps) for 20 straight steps, and for 10 steps then --resume to 20 from the checkpoint
# written at the end of the first part: the two logs give bitwise the same loss, lr and grad norm at every step.
source "$(dirname "$0")/gpu_test_lib.sh"
common=(-c configs/llama3_tiny.json -d cuda --lr-schedule constant --warmup-steps 5 --eval-every 0 --sample-every 0)
./train "${common[@]}" -n 20 -o "$TMP/straight" >"$TMP/s.out" 2>&1 || { fail "straight run: $(tail -3 "$TMP/s.out")"; exit 1; }
./train "${common[@]}" -n 10 -o "$TMP/split" >"$TMP/a.out" 2>&1 || { fail "first part: $(tail -3 "$TMP/a.out")"; exit 1; }
./train -o "$TMP/split" --resume -n 20 >"$TMP/b.out" 2>&1 || { fail "--resume: $(tail -3 "$TMP/b.out")"; exit 1; }
python3 - "$TMP/straight/log.jsonl" "$TMP/split/log.jsonl" <<'PY'
import json, sys
def steps(path):
    return {r["step"]: (r["loss"], r["lr"], r["grad_norm"]) for r in map(json.loads, open(path)) if "loss" in r}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
ok = sorted(a) == sorted(b) == list(range(1, 21)) and all(a[s] == b[s] for s in a)
bad = [s for s in a if a.get(s) != b.get(s)]
print(("PASS" if ok else "FAIL") + " GPU: 10 steps + --resume to 20 gives bitwise the same losses, lr and grad norms "
      f"as 20 straight steps{'' if ok else ' (first difference at step %s)' % (bad[:1] or '?')}")
PY
