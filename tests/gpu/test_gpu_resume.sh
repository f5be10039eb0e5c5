#!/usr/bin/env bash
# test_gpu_resume.sh: bit-exact resume on the GPU, with fusion on and with fusion off. The GPU tiny config (constant
# learning rate, so the schedule does not depend on the number of steps) for 20 straight steps, and for 10 steps
# then --resume to 20 from the checkpoint written at the end of the first part: the two logs give bitwise the same
# loss, lr and grad norm at every step.
source "$(dirname "$0")/gpu_test_lib.sh"
compare() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def steps(path):
    return {r["step"]: (r["loss"], r["lr"], r["grad_norm"]) for r in map(json.loads, open(path)) if "loss" in r}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
ok = sorted(a) == sorted(b) == list(range(1, 21)) and all(a[s] == b[s] for s in a)
bad = [s for s in a if a.get(s) != b.get(s)]
print(("PASS" if ok else "FAIL") + f" GPU, fusion {sys.argv[3]}: 10 steps + --resume to 20 gives bitwise the same "
      f"losses, lr and grad norms as 20 straight steps{'' if ok else ' (first difference at step %s)' % (bad[:1] or '?')}")
PY
}
for fusion in on off; do
    common=(-c "$GPU_TINY" -d cuda --fusion "$fusion" --lr-schedule constant --warmup-steps 5
            --eval-every 0 --sample-every 0)
    out="$TMP/$fusion"
    ./train "${common[@]}" -n 20 -o "$out/straight" >"$out.s.out" 2>&1 || { fail "fusion $fusion, straight run: $(tail -3 "$out.s.out")"; continue; }
    ./train "${common[@]}" -n 10 -o "$out/split" >"$out.a.out" 2>&1 || { fail "fusion $fusion, first part: $(tail -3 "$out.a.out")"; continue; }
    ./train -o "$out/split" --resume -n 20 >"$out.b.out" 2>&1 || { fail "fusion $fusion, --resume: $(tail -3 "$out.b.out")"; continue; }
    compare "$out/straight/log.jsonl" "$out/split/log.jsonl" "$fusion"
done
