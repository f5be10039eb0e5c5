#!/usr/bin/env bash
# test_gpu_train.sh: end-to-end training on the GPU. The tiny config for 50 steps on the CPU and twice on the GPU
# (same seed, so the same initial weights: both backends copy them from the same host init):
# - GPU losses agree with the CPU's: |loss_gpu - loss_cpu| / loss_cpu <= 1e-3 over the first 20 steps (the same
#   computation in bf16 against fp32: measured ~1e-4) and <= 5e-2 over all 50 (at the tiny config's learning rate of
#   3e-3 the two trajectories separate as training goes on: measured 2.5e-2 at worst on an H200); both printed;
# - the two GPU runs give bitwise identical losses and gradient norms (every GPU op is deterministic);
# - --device auto picks the GPU, and the peak GPU memory is printed.
source "$(dirname "$0")/gpu_test_lib.sh"
common=(-c configs/llama3_tiny.json -n 50 --eval-every 0 --sample-every 0)
./train "${common[@]}" -d cpu -o "$TMP/cpu" >"$TMP/cpu.out" 2>&1 || { fail "cpu run: $(tail -3 "$TMP/cpu.out")"; exit 1; }
for run in gpu1 gpu2; do
    ./train "${common[@]}" -d auto -o "$TMP/$run" >"$TMP/$run.out" 2>&1 || { fail "$run: $(tail -3 "$TMP/$run.out")"; exit 1; }
done
if grep -q "^backend: cuda" "$TMP/gpu1.out" && grep -q "^peak cuda memory" "$TMP/gpu1.out"; then
    pass "--device auto trains on the GPU and prints the peak memory ($(grep '^peak cuda memory' "$TMP/gpu1.out"))"
else
    fail "--device auto: $(grep -E '^(backend|peak)' "$TMP/gpu1.out")"
fi
python3 - "$TMP/cpu/log.jsonl" "$TMP/gpu1/log.jsonl" "$TMP/gpu2/log.jsonl" <<'PY'
import json, sys
def steps(path):
    return [r for r in map(json.loads, open(path)) if "loss" in r]
cpu, g1, g2 = (steps(p) for p in sys.argv[1:])
ok = len(cpu) == len(g1) == len(g2) == 50
print("# step   cpu loss   gpu loss   rel diff")
worst, early = 0.0, 0.0
for c, g in zip(cpu, g1):
    d = abs(g["loss"] - c["loss"]) / c["loss"]
    worst = max(worst, d)
    if c["step"] <= 20:
        early = max(early, d)
    if c["step"] in (1, 2, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50):
        print(f"# {c['step']:4d}   {c['loss']:.5f}    {g['loss']:.5f}    {d:.2e}")
print(("PASS" if ok and early <= 1e-3 else "FAIL") +
      f" tiny config, steps 1-20: GPU loss vs CPU loss max rel diff {early:.2e} (tol 1e-03)")
print(("PASS" if ok and worst <= 5e-2 else "FAIL") +
      f" tiny config, steps 1-50: GPU loss vs CPU loss max rel diff {worst:.2e} (tol 5e-02)")
same = ok and all(a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(g1, g2))
print(("PASS" if same else "FAIL") + " two identical GPU runs give bitwise identical losses and grad norms")
PY
