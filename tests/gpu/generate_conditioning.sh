#!/usr/bin/env bash
# generate_conditioning.sh: a diagnostic (not a test): how far bf16 moves the greedy path of the GPU tiny config
# ($GPU_TINY) at random inits of std 0.1, 0.2 and 0.3 and after 300 steps of training. For each model, ./train
# --generate at temperature 0 on the GPU (fusion on and off) and on the CPU, each checked by tests/generate_check.py
# --bf16-ref against the PyTorch reference in fp32 and in bf16 autocast along the same path. Where the bf16
# reference's own argmax falls far below the fp32 maximum, the model's greedy path is decided by rounding, and no
# bound on the GPU's gap there says anything about its kernels.
source "$(dirname "$0")/gpu_test_lib.sh"
for init in 0.1 0.2 0.3 trained; do
    if [ $init = trained ]; then
        ./train -c "$GPU_TINY" -n 300 -d cuda --eval-every 0 --sample-every 0 -o "$TMP/run_$init" >"$TMP/log" 2>&1
        ckpt="$TMP/run_$init/step_00000300"
    else
        python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["initializer_range"] = float(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))' "$GPU_TINY" "$TMP/init.json" $init
        ./train -c "$TMP/init.json" -n 0 -o "$TMP/run_$init" >"$TMP/log" 2>&1
        ckpt="$TMP/run_$init/step_00000000"
    fi
    [ -d "$ckpt" ] || { echo "no checkpoint for init $init: $(tail -2 "$TMP/log")"; exit 1; }
    for run in "-d cuda --fusion on" "-d cuda --fusion off" "-d cpu"; do
        # shellcheck disable=SC2086
        ./train --generate "$ckpt" --sample-prompt "ROMEO:" --sample-tokens 100 --temperature 0 $run \
            >"$TMP/out" 2>"$TMP/err" || { echo "init $init, $run: $(tail -2 "$TMP/err")"; continue; }
        python3 tests/generate_check.py "$ckpt" "ROMEO:" "$TMP/out" --tokens 100 --argmax --tol 1e9 --bf16-ref \
            --label "init $init, $run" | sed 's/^PASS //'
    done
done
