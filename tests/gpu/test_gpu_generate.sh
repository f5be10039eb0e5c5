#!/usr/bin/env bash
# test_gpu_generate.sh: ./train --generate on the GPU, from a checkpoint of the GPU tiny config ($GPU_TINY, head dim
# 64) trained 300 steps on the GPU (a model whose greedy path is well conditioned at bf16; a random init of large
# std is not: see tests/gpu/generate_conditioning.sh):
# - temperature 0 with fusion on and off: every token is the argmax of the PyTorch reference's fp32 logits on the CPU
#   (tests/generate_check.py, teacher-forced along the GPU's own path), or within $TOL of it: the GPU computes the
#   logits from bf16 weights and activations;
# - the same seed gives the same text twice (every GPU op is deterministic); top-k 3 at temperature 1.5 draws only
#   among the reference's 3 largest logits (within $TOL);
# - the run says which backend ran and its tokens/s.
source "$(dirname "$0")/gpu_test_lib.sh"
# The bound on |largest reference logit - the chosen token's|: about twice the largest logit difference between the
# reference in fp32 and in bf16 autocast along this path (0.047 on an H100, 2026-11-24; generate_check.py --bf16-ref
# prints it on each line).
TOL=0.1
./train -c "$GPU_TINY" -n 300 -d cuda --eval-every 0 --sample-every 0 -o "$TMP/run" >"$TMP/init.log" 2>&1 ||
    { fail "training the fixture: $(tail -3 "$TMP/init.log")"; exit 1; }
CKPT="$TMP/run/step_00000300"
PROMPT="ROMEO:"
N=100
ASK=(--sample-prompt "$PROMPT" --sample-tokens $N -d cuda)

for fusion in on off; do
    if ./train --generate "$CKPT" "${ASK[@]}" --temperature 0 --fusion $fusion >"$TMP/greedy_$fusion.out" \
        2>"$TMP/greedy_$fusion.err" && grep -q "backend cuda, fusion $fusion" "$TMP/greedy_$fusion.err"; then
        python3 tests/generate_check.py "$CKPT" "$PROMPT" "$TMP/greedy_$fusion.out" --tokens $N --argmax --tol $TOL --bf16-ref \
            --label "GPU (fusion $fusion), temperature 0: the argmax path ($(grep tokens/s "$TMP/greedy_$fusion.err"))"
    else
        fail "--generate -d cuda --fusion $fusion: $(tail -2 "$TMP/greedy_$fusion.err")"
    fi
done
./train --generate "$CKPT" "${ASK[@]}" --temperature 0 -d cpu >"$TMP/greedy_cpu.out" 2>/dev/null
echo "# the GPU's argmax path and the CPU's agree on their first" \
    "$(cmp "$TMP/greedy_on.out" "$TMP/greedy_cpu.out" 2>/dev/null | grep -oE 'byte [0-9]+' || echo "all") bytes"

for s in a b; do
    ./train --generate "$CKPT" "${ASK[@]}" --temperature 2 -s 5 >"$TMP/seed_$s.out" 2>"$TMP/seed_$s.err"
done
if [ -s "$TMP/seed_a.out" ] && cmp -s "$TMP/seed_a.out" "$TMP/seed_b.out" &&
    ! cmp -s "$TMP/seed_a.out" "$TMP/greedy_on.out"; then
    pass "GPU: the same seed gives the same text twice"
else
    fail "GPU seeds: $(tail -2 "$TMP/seed_a.err")"
fi
if ./train --generate "$CKPT" "${ASK[@]}" --temperature 1.5 --top-k 3 -s 11 >"$TMP/topk.out" 2>"$TMP/topk.err"; then
    python3 tests/generate_check.py "$CKPT" "$PROMPT" "$TMP/topk.out" --tokens $N --top-k 3 --tol $TOL \
        --label "GPU, top-k 3 at temperature 1.5"
else
    fail "GPU --top-k 3: $(tail -2 "$TMP/topk.err")"
fi
