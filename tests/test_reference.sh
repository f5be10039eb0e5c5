#!/usr/bin/env bash
# test_reference.sh: ./train (CPU, fp32) against the PyTorch reference scripts/reference.py, on a small config and the
# first 26 kB of TinyShakespeare (byte vocabulary, 4 training shards so that the shard shuffle, batches spanning two
# shards and the end-of-epoch rule all occur). One PASS or FAIL line per check:
#   1. ./train -n 0 writes step_00000000, and it equals (bit for bit) the documented init computed independently in
#      Python (tests/ref_fixture.py); also with --export-dtype bf16 (= the fp32 values rounded to nearest even);
#   2. 60 steps (gradient accumulation 2, clipping active in the first ~20 steps, llama3 rope_scaling, GQA, tied
#      embeddings, cosine schedule, more than one epoch): reference.py from step_00000000 logs the same losses,
#      validation losses and grad norms, and ends with the same weights as ./train's step_00000060; with
#      --residual-dtype bf16 or --logits-dtype fp32 (diagnostics that round as the GPU does) its losses move by a
#      rounding's worth, beyond that bound and not further;
#   3. the exported checkpoints step_00000010 and step_00000050, loaded by reference.py --score-step, give the loss that
#      ./train logged for the next step (the same weights, the same batches);
#   4. an untied model with the wsd schedule, no clipping and no accumulation, 20 steps, agrees the same way;
#   5. a warmup longer than the run: reference.py clamps it as ./train does, and they agree;
#   6. compare_losses.py's plot: the validation points of two logs at the same place both stay visible
#      (tests/plot_check.py);
#   7. bad input to reference.py (a truncated checkpoint, a config of another model): a message naming the file.
# Bounds, from measurements on this project's 2-core machine (docs/reference.md):
LOSS_TOL=1e-5     # max |loss difference| over the steps (measured 4.9e-7 over 60 steps; 8.1e-7 over 20, untied)
GNORM_RTOL=1e-4   # max relative grad-norm difference (measured 3.3e-6; 8.1e-7, untied)
WEIGHT_TOL=2e-5   # max |weight difference| after 60 steps (measured 5.4e-7)
SCORE_TOL=2e-6    # |reference loss - ./train's logged loss| for the same weights and batch (measured 1.0e-7, 2.3e-8)
set -u
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
PY="${PYTHON:-python3}"
TEXT="${SHARED_DATA:-../shared/data}/tinyshakespeare.txt"
[ -f "$TEXT" ] || { fail "no text at $TEXT (set SHARED_DATA)"; exit 1; }
if ! "$PY" -c "import torch, numpy" 2>"$TMP/err"; then
    fail "the PyTorch reference needs torch and numpy ($(tail -1 "$TMP/err")); scripts/install_deps.sh installs them"
    exit 1
fi
TRAIN="${TRAIN:-./train}"
[ -x "$TRAIN" ] || { fail "no $TRAIN (run make)"; exit 1; }
start=$(date +%s)

head -c 26000 "$TEXT" >"$TMP/text.txt"
if ! "$PY" scripts/prepare_data.py --tokenizer byte --text "$TMP/text.txt" --out "$TMP/data" --shard-tokens 7000 \
    --val-fraction 0.15 >"$TMP/prep.log" 2>&1; then
    fail "prepare_data.py: $(tail -3 "$TMP/prep.log")"
    exit 1
fi

# config NAME 'EXTRA JSON KEYS': the test's model and training config, with keys added or replaced.
config() {
    "$PY" - "$TMP" "$2" >"$TMP/$1.json" <<'EOF'
import json, sys
tmp, extra = sys.argv[1], sys.argv[2]
c = {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
     "rope_theta": 10000.0, "tie_word_embeddings": True, "initializer_range": 0.02,
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32},
     "train_data": tmp + "/data/train_*.bin", "val_data": tmp + "/data/val_*.bin", "tokenizer": "byte",
     "device": "cpu", "batch_size": 4, "seq_len": 64, "total_batch_tokens": 512, "steps": 60,
     "learning_rate": 2e-3, "warmup_steps": 5, "lr_schedule": "cosine", "min_lr_frac": 0.1, "weight_decay": 0.1,
     "grad_clip": 1.0, "seed": 1337, "eval_every": 20, "eval_batches": 4, "sample_every": 0}
c.update(json.loads("{" + extra + "}"))
print(json.dumps(c, indent=1))
EOF
}

# init NAME CONFIG [FLAGS]: the initial weights in $TMP/NAME/step_00000000, from ./train -n 0 (or, if ./train cannot
# do that, a FAIL line and the Python fixture, so that the remaining checks still run).
init() {
    local name=$1 cfg=$2
    shift 2
    if "$TRAIN" -c "$cfg" -n 0 -o "$TMP/$name" "$@" >"$TMP/$name.log" 2>&1 && [ -f "$TMP/$name/step_00000000/model.safetensors" ]; then
        return 0
    fi
    fail "./train -n 0 did not write $name/step_00000000 ($(tail -2 "$TMP/$name.log" | tr '\n' ' ')); using the Python fixture instead"
    "$PY" tests/ref_fixture.py init "$cfg" "$TMP/$name/step_00000000" >/dev/null
    return 1
}

# run_train NAME CONFIG [FLAGS]: ./train into $TMP/NAME.
run_train() {
    local name=$1 cfg=$2
    shift 2
    if "$TRAIN" -c "$cfg" -o "$TMP/$name" "$@" >"$TMP/$name.log" 2>&1; then
        return 0
    fi
    fail "./train -c $cfg $*: $(tail -3 "$TMP/$name.log" | tr '\n' ' ')"
    return 1
}

# reference NAME ARGS...: reference.py --out $TMP/NAME ARGS.
reference() {
    local name=$1
    shift
    # One thread: this model is too small to gain from more, and spinning threads on a busy machine cost 5x.
    if "$PY" scripts/reference.py --out "$TMP/$name" -q --threads 1 "$@" >"$TMP/$name.log" 2>&1; then
        return 0
    fi
    fail "reference.py $*: $(tail -3 "$TMP/$name.log" | tr '\n' ' ')"
    return 1
}

# compare WHAT LOG_A LOG_B [FLAGS]: compare_losses.py with the bounds; PASS/FAIL with its summary.
compare() {
    local what=$1 a=$2 b=$3
    shift 3
    "$PY" scripts/compare_losses.py "$a" "$b" --tolerance "$LOSS_TOL" --grad-norm-rtol "$GNORM_RTOL" "$@" \
        >"$TMP/cmp.out" 2>&1
    local rc=$?
    local summary
    summary=$(grep -E '^  (loss|val_loss|grad_norm|warning)' "$TMP/cmp.out" | sed -E 's/ +/ /g' | tr '\n' ';')
    if [ $rc -eq 0 ]; then pass "$what: $summary"; else fail "$what: $summary $(grep -E '^error' "$TMP/cmp.out")"; fi
}

# ---- 1. the initial checkpoint
config small ''
init init "$TMP/small.json"
"$PY" tests/ref_fixture.py init "$TMP/small.json" "$TMP/fixture/step_00000000" >"$TMP/fixture.log" 2>&1 \
    || fail "ref_fixture.py init: $(tail -2 "$TMP/fixture.log")"
"$PY" tests/ref_fixture.py compare "$TMP/fixture/step_00000000" "$TMP/init/step_00000000" --atol 0 \
    --label "./train -n 0 writes step_00000000 = the documented init computed in Python (bit for bit)"
if init init_bf16 "$TMP/small.json" --export-dtype bf16; then
    "$PY" tests/ref_fixture.py compare "$TMP/fixture/step_00000000" "$TMP/init_bf16/step_00000000" --atol 0 \
        --round-bf16 --label "--export-dtype bf16: the fp32 init rounded to nearest-even bf16, as reference.py reads it"
fi

# ---- 2. 60 steps, step by step
if run_train run "$TMP/small.json" --checkpoint-every 10 --keep-last 0; then
    "$PY" - "$TMP/run/log.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
norms = [r["grad_norm"] for r in recs if "grad_norm" in r]
clipped = sum(n > 1.0 for n in norms)
ok = len(norms) == 60 and 0 < clipped < 60
print(("PASS" if ok else "FAIL") + f" the 60-step run clips the gradient at {clipped} of {len(norms)} steps (some, not all)")
EOF
    if reference ref --init "$TMP/init/step_00000000" --config "$TMP/run/train_config.json" --save "$TMP/ref/final"; then
        compare "reference.py vs ./train, 60 steps (bounds: loss $LOSS_TOL abs, grad norm $GNORM_RTOL rel)" \
            "$TMP/run/log.jsonl" "$TMP/ref/log.jsonl" --png "$TMP/compare.png" --labels train,reference
        if [ -s "$TMP/compare.png" ] && head -c 8 "$TMP/compare.png" | grep -q PNG; then
            pass "compare_losses.py wrote a PNG plot ($(wc -c <"$TMP/compare.png") bytes)"
        else
            fail "compare_losses.py wrote no PNG plot"
        fi
        if [ -f "$TMP/run/step_00000060/model.safetensors" ]; then
            "$PY" tests/ref_fixture.py compare "$TMP/run/step_00000060" "$TMP/ref/final" --atol "$WEIGHT_TOL" \
                --label "the weights after 60 steps: ./train's step_00000060 vs reference.py's"
        else
            fail "./train wrote no step_00000060 checkpoint at the end of the run"
        fi
    fi
    # The comparison must be able to fail: the same reference with another learning rate differs by far more.
    if reference ref_lr --init "$TMP/init/step_00000000" --config "$TMP/run/train_config.json" --steps 60 \
        --learning-rate 2.002e-3; then
        if "$PY" scripts/compare_losses.py "$TMP/run/log.jsonl" "$TMP/ref_lr/log.jsonl" --tolerance "$LOSS_TOL" \
            --png '' --every -1 >"$TMP/cmp_lr.out" 2>&1; then
            fail "a reference run with the learning rate 0.1% higher passes the bound too: the check is too loose"
        else
            pass "the check can fail: a reference run with the learning rate 0.1% higher exceeds the bound ($(grep -E '^  loss' "$TMP/cmp_lr.out" | sed -E 's/ +/ /g'))"
        fi
    fi

    # The diagnostics --residual-dtype bf16 (the residual stream rounded as ./train's GPU activations are; its values
    # only with bf16-forward, its gradient only with bf16-backward, only the RMSNorms' backward's view of it with
    # bf16-saved) and --logits-dtype fp32 (the LM head's inputs rounded to bf16, as on the GPU) move the losses by a
    # rounding's worth: beyond the fp32 bound, far inside another model's difference.
    for flag in "--residual-dtype bf16" "--residual-dtype bf16-forward" "--residual-dtype bf16-backward" \
        "--residual-dtype bf16-saved" "--logits-dtype fp32"; do
        # shellcheck disable=SC2086  # the flag and its value
        reference ref_diag --init "$TMP/init/step_00000000" --config "$TMP/run/train_config.json" $flag --overwrite ||
            continue
        "$PY" - "$TMP/run/log.jsonl" "$TMP/ref_diag/log.jsonl" "$LOSS_TOL" "$flag" <<'EOF'
import json, sys
a, b = ({r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:3])
d = max(abs(a[s] - b[s]) for s in a if s in b)
ok = len(b) == 60 and float(sys.argv[3]) < d < 0.05
print(("PASS" if ok else "FAIL") + f" reference.py {sys.argv[4]} vs ./train (fp32), 60 steps: max |loss diff| "
      f"{d:.1e} (more than the fp32 bound {sys.argv[3]}, less than 0.05)")
EOF
    done

    # ---- 3. exported checkpoints scored by the reference
    for s in 10 50; do
        ckpt=$(printf '%s/run/step_%08d' "$TMP" "$s")
        if [ ! -f "$ckpt/model.safetensors" ]; then
            fail "./train --checkpoint-every 10 wrote no $(basename "$ckpt")"
            continue
        fi
        reference "score$s" --init "$ckpt" --config "$TMP/run/train_config.json" --score-step || continue
        "$PY" - "$TMP/run/log.jsonl" "$TMP/score$s/log.jsonl" "$((s + 1))" "$SCORE_TOL" <<'EOF'
import json, sys
step, tol = int(sys.argv[3]), float(sys.argv[4])
ours = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
theirs = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
if step not in theirs or step not in ours:
    print(f"FAIL no loss of step {step} in both logs")
    sys.exit()
d = abs(ours[step] - theirs[step])
print(("PASS" if d <= tol else "FAIL") + f" step_{step - 1:08d} loaded by reference.py: the loss of step {step}'s "
      f"batches is {theirs[step]:.9f}, ./train logged {ours[step]:.9f} (diff {d:.1e}, bound {tol:g}; the logged losses "
      f"of steps {step} and {step + 1} differ by {abs(ours[step] - ours[step + 1]):.1e})")
EOF
    done
fi

# ---- 4. untied embeddings, wsd schedule, no clipping, no accumulation, plain RoPE
config untied '"tie_word_embeddings": false, "rope_scaling": null, "lr_schedule": "wsd", "wsd_decay_frac": 0.3,
               "grad_clip": 0, "total_batch_tokens": 0, "batch_size": 8, "steps": 20, "eval_every": 10, "seed": 7'
if init init_untied "$TMP/untied.json" && run_train run_untied "$TMP/untied.json" &&
    reference ref_untied --init "$TMP/init_untied/step_00000000" --config "$TMP/run_untied/train_config.json"; then
    compare "untied, wsd, no clipping, 20 steps" "$TMP/run_untied/log.jsonl" "$TMP/ref_untied/log.jsonl" --png ''
fi
# ---- 5. a warmup longer than the run: both clamp it to the run's steps (and say so), and agree
if run_train short "$TMP/small.json" -n 4 --warmup-steps 50 --eval-every 0 &&
    reference ref_short --init "$TMP/init/step_00000000" --config "$TMP/short/train_config.json" --steps 4 \
        --warmup-steps 50; then
    if grep -q "warmup_steps (50) exceeds steps (4): the warmup is the run's 4 steps" "$TMP/ref_short.log" &&
        grep -q "warmup_steps (50) exceeds steps (4): the warmup is the run's 4 steps" "$TMP/short.log"; then
        pass "a 50-step warmup in a 4-step run: ./train and reference.py both clamp it and say so"
    else
        fail "warmup clamp notes: $(grep -h warmup "$TMP/short.log" "$TMP/ref_short.log" | tr '\n' ' ')"
    fi
    compare "a warmup clamped to the run's 4 steps, in both" "$TMP/short/log.jsonl" "$TMP/ref_short/log.jsonl" --png ''
fi

# ---- 6. compare_losses.py's plot: validation points of two logs at the same place both stay visible (the first
# log's marker is larger and hollow, the second's drawn inside it): the pixels around the point hold both colors.
"$PY" tests/plot_check.py "$TMP"

# ---- 7. bad input: a clear message naming the file (and the tensor or key), exit status 1
# expect_error WHAT PATTERN ARGS...: reference.py ARGS fails with a message matching PATTERN.
expect_error() {
    local what=$1 pattern=$2
    shift 2
    "$PY" scripts/reference.py "$@" >"$TMP/err.out" 2>&1
    local rc=$?
    if [ $rc -eq 1 ] && grep -qE -- "$pattern" "$TMP/err.out"; then
        pass "reference.py, $what: $(head -c 220 "$TMP/err.out" | tr '\n' ' ')"
    else
        fail "reference.py, $what: exit $rc, $(head -c 300 "$TMP/err.out" | tr '\n' ' ') (wanted /$pattern/)"
    fi
}
bad="$TMP/bad/step_00000000"
mkdir -p "$bad"
cp "$TMP/init/step_00000000/config.json" "$bad/"
head -c 300000 "$TMP/init/step_00000000/model.safetensors" >"$bad/model.safetensors"
expect_error "a truncated checkpoint" "bad/step_00000000/model\.safetensors: tensor model\.layers\..*truncated" \
    --init "$bad" --config "$TMP/small.json" --out "$TMP/bad_out"
expect_error "a config whose model differs from the checkpoint's" \
    "tie_word_embeddings is true in .*init/step_00000000/config\.json but false in .*untied\.json" \
    --init "$TMP/init/step_00000000" --config "$TMP/untied.json" --out "$TMP/bad_out"
expect_error "the train_config.json of a -n 0 checkpoint without --steps" "steps is 0" \
    --init "$TMP/init/step_00000000" --out "$TMP/bad_out"
echo "test_reference.sh took $(( $(date +%s) - start )) s"
