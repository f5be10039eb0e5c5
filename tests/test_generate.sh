#!/usr/bin/env bash
# test_generate.sh: ./train --generate on the CPU, on a small byte-level model trained here for 2 steps (checkpoints
# after each) from an init of std 0.3, large enough that the argmax path is no loop: each token of it comes from
# another context, and the largest logits stand apart:
#   - temperature 0 prints the prompt and the argmax path, token by token the argmax of the PyTorch reference's logits
#     (tests/generate_check.py, teacher-forced, fp32); top-k 1 at temperature 1 is that same path;
#   - the same seed gives the same text, another seed another; top-k 3 at temperature 1.5 draws only among the
#     reference's 3 largest logits;
#   - DIR may be a checkpoint, a run directory (its newest checkpoint) or a Hugging Face directory (transformers 5's
#     config.json, no train_config.json): the same text; generation stops after the model's eos_token_id;
#   - nothing is written (no run directory, the run's files unchanged); the text on stdout, the token rate on stderr;
#   - the tokenizer: --tokenizer, the tokenizer.model that a Llama 3 run's checkpoints carry (a checkpoint copied
#     elsewhere generates with no flag), byte for a byte run or 256 ids, and a clear error for another vocabulary
#     without one or a tokenizer larger than the vocabulary;
#   - bad use (a missing directory, one that is neither a model nor a run, --generate with -c or --resume).
source "$(dirname "$0")/shell_helpers.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
SHARED="${SHARED_DATA:-../shared/data}"
[ -f "$SHARED/tinyshakespeare.txt" ] || { fail "no text at $SHARED/tinyshakespeare.txt (set SHARED_DATA)"; exit 1; }
[ -x "$TRAIN" ] || { fail "no $TRAIN (run make)"; exit 1; }

head -c 20000 "$SHARED/tinyshakespeare.txt" >"$TMP/text.txt"
python3 scripts/prepare_data.py --tokenizer byte --text "$TMP/text.txt" --out "$TMP/data" >"$TMP/prep.log" 2>&1 ||
    { fail "prepare_data.py: $(tail -3 "$TMP/prep.log")"; exit 1; }
cat >"$TMP/small.json" <<EOF
{"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
 "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, "tie_word_embeddings": true,
 "initializer_range": 0.3, "train_data": "$TMP/data/train_*.bin", "tokenizer": "byte", "device": "cpu",
 "batch_size": 4, "seq_len": 64, "steps": 2, "learning_rate": 1e-2, "checkpoint_every": 1, "keep_last": 0}
EOF
"$TRAIN" -c "$TMP/small.json" -o "$TMP/run" >"$TMP/train.log" 2>&1 ||
    { fail "training: $(tail -3 "$TMP/train.log")"; exit 1; }
CKPT="$TMP/run/step_00000002"
PROMPT="ROMEO:"
N=80
ASK=(--sample-prompt "$PROMPT" --sample-tokens $N)

# gen NAME ARGS...: ./train --generate ARGS into $TMP/NAME.out (stdout) and NAME.err; returns its status.
gen() {
    local name=$1
    shift
    "$TRAIN" --generate "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
}
check() { python3 tests/generate_check.py "$@"; }
# show FILE [N]: its first N bytes (default 50) printable on one line.
show() { head -c "${2:-50}" "$1" | cat -v | tr '\n' '|'; }
# edit_json SRC DST PYTHON: DST is the JSON of SRC after the Python statements PYTHON on it (as c).
edit_json() {
    python3 -c "import json, sys; c = json.load(open(sys.argv[1])); $3; json.dump(c, open(sys.argv[2], 'w'))" "$1" "$2"
}

# 1. Greedy: the argmax path of the reference, with the text on stdout and the rate on stderr.
if gen greedy "$CKPT" "${ASK[@]}" --temperature 0; then
    check "$CKPT" "$PROMPT" "$TMP/greedy.out" --tokens $N --argmax --label "temperature 0 is the argmax path"
    if grep -qE "^generate: $N tokens in [0-9.]+ s: [0-9.]+ tokens/s" "$TMP/greedy.err" &&
        ! grep -q "tokens/s" "$TMP/greedy.out"; then
        pass "the text on stdout ($(show "$TMP/greedy.out")...), the rate on stderr:" \
            "$(grep tokens/s "$TMP/greedy.err")"
    else
        fail "stdout/stderr: $(head -c 200 "$TMP/greedy.err")"
    fi
else
    fail "--generate, temperature 0: $(tail -2 "$TMP/greedy.err")"
fi
gen top1 "$CKPT" "${ASK[@]}" --temperature 1 --top-k 1 -s 9
cmp -s "$TMP/greedy.out" "$TMP/top1.out" && pass "top-k 1 at temperature 1 gives the argmax path" ||
    fail "top-k 1 at temperature 1 differs from temperature 0: $(show "$TMP/top1.out" 100)"

# 2. Seeds and top-k.
gen seed5a "$CKPT" "${ASK[@]}" --temperature 0.9 -s 5
gen seed5b "$CKPT" "${ASK[@]}" --temperature 0.9 -s 5
gen seed6 "$CKPT" "${ASK[@]}" --temperature 0.9 -s 6
if [ -s "$TMP/seed5a.out" ] && cmp -s "$TMP/seed5a.out" "$TMP/seed5b.out" &&
    ! cmp -s "$TMP/seed5a.out" "$TMP/seed6.out" && ! cmp -s "$TMP/seed5a.out" "$TMP/greedy.out"; then
    pass "the same seed gives the same text, another seed another: $(show "$TMP/seed5a.out" 40) /" \
        "$(show "$TMP/seed6.out" 40)"
else
    fail "seeds: $(show "$TMP/seed5a.out") / $(show "$TMP/seed5b.out") / $(show "$TMP/seed6.out")"
fi
if gen topk "$CKPT" "${ASK[@]}" --temperature 1.5 --top-k 3 -s 11; then
    check "$CKPT" "$PROMPT" "$TMP/topk.out" --tokens $N --top-k 3 --label "top-k 3 at temperature 1.5"
else
    fail "--top-k 3: $(tail -2 "$TMP/topk.err")"
fi

# 3. Which directories: a run directory means its newest checkpoint; a Hugging Face directory in transformers 5's
# form (config.json and model.safetensors only) is the same model.
gen rundir "$TMP/run" "${ASK[@]}" --temperature 0
gen step1 "$TMP/run/step_00000001" "${ASK[@]}" --temperature 0
if cmp -s "$TMP/greedy.out" "$TMP/rundir.out" && ! cmp -s "$TMP/step1.out" "$TMP/rundir.out" &&
    grep -q "run/step_00000002 " "$TMP/rundir.err"; then
    pass "a run directory generates from its newest checkpoint, not the one before ($(head -1 "$TMP/rundir.err"))"
else
    fail "run directory: $(head -c 200 "$TMP/rundir.err")"
fi
mkdir -p "$TMP/hf" && cp "$CKPT/model.safetensors" "$TMP/hf/"
# hf_config EOS: the checkpoint's config.json as transformers 5 writes it, with eos_token_id EOS, into $TMP/hf.
hf_config() {
    edit_json "$CKPT/config.json" "$TMP/hf/config.json" "c['rope_parameters'] = dict(c.pop('rope_scaling'),
        rope_theta=c.pop('rope_theta')); c.pop('torch_dtype'); c.update(dtype='float32', eos_token_id=$1,
        transformers_version='5.23.0')"
}
hf_config None
gen hf "$TMP/hf" "${ASK[@]}" --temperature 0
cmp -s "$TMP/greedy.out" "$TMP/hf.out" && pass "a Hugging Face directory (transformers 5 config) gives the same text" ||
    fail "Hugging Face directory: $(head -c 200 "$TMP/hf.err")"
# EOS: the byte of the 10th generated token as eos_token_id: the text ends at its first occurrence.
eos=$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read()[len(sys.argv[2]) + 9])' "$TMP/greedy.out" "$PROMPT")
hf_config "$eos"
gen eos "$TMP/hf" "${ASK[@]}" --temperature 0
if python3 - "$TMP/greedy.out" "$TMP/eos.out" "$PROMPT" "$eos" <<'PY'
import sys
full, cut, p, eos = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read(), len(sys.argv[3]), int(sys.argv[4])
end = full.index(bytes([eos]), p) + 1
sys.exit(0 if cut == full[:end] + b"\n" else 1)
PY
then
    pass "generation stops after the model's eos_token_id ($eos): $(show "$TMP/eos.out" 200)"
else
    fail "eos_token_id $eos: $(show "$TMP/eos.out" 120)"
fi

# 4. Nothing is written: run from an empty directory, and the run's files stay as they were.
mkdir "$TMP/cwd"
before=$(cd "$TMP/run" && find . -type f -exec md5sum {} + | sort)
(cd "$TMP/cwd" && "$TRAIN" --generate "$TMP/run" --sample-prompt "$PROMPT" --sample-tokens 20 >/dev/null 2>&1)
after=$(cd "$TMP/run" && find . -type f -exec md5sum {} + | sort)
if [ -z "$(ls -A "$TMP/cwd")" ] && [ "$before" = "$after" ]; then
    pass "--generate writes nothing (no run directory; the run's files unchanged)"
else
    fail "--generate wrote something: $(ls -A "$TMP/cwd") / run files changed: $([ "$before" = "$after" ] || echo yes)"
fi

# 5. Tokenizers. A checkpoint of a byte-vocabulary run of 300 ids takes the byte vocabulary from its
# train_config.json; the same weights as a Hugging Face directory (no train_config.json) have no default; --tokenizer
# byte fits them; a tokenizer larger than the vocabulary is refused.
edit_json "$TMP/small.json" "$TMP/v300.json" "c['vocab_size'] = 300"
"$TRAIN" -c "$TMP/v300.json" -n 0 -o "$TMP/v300" >"$TMP/v300.log" 2>&1 ||
    fail "-n 0 of the 300-id model: $(tail -2 "$TMP/v300.log")"
if gen v300run "$TMP/v300" --sample-prompt "$PROMPT" --sample-tokens 5 && grep -q "tokenizer byte" "$TMP/v300run.err"; then
    pass "a byte-vocabulary run of 300 ids generates with no --tokenizer (its train_config.json names byte)"
else
    fail "the 300-id byte run without --tokenizer: $(tail -2 "$TMP/v300run.err")"
fi
mkdir -p "$TMP/v300hf" && cp "$TMP/v300/step_00000000/config.json" "$TMP/v300/step_00000000/model.safetensors" "$TMP/v300hf/"
expect_fail "a 300-id Hugging Face directory without a tokenizer" \
    "no tokenizer: no tokenizer.model beside the weights.*300 ids.*--tokenizer" "$TRAIN" --generate "$TMP/v300hf"
if gen v300 "$TMP/v300hf" --sample-prompt "$PROMPT" --sample-tokens 5 --tokenizer byte &&
    grep -q "tokenizer byte" "$TMP/v300.err"; then
    pass "--tokenizer byte on a 300-id model"
else
    fail "--tokenizer byte on a 300-id model: $(tail -2 "$TMP/v300.err")"
fi
# A run on Llama 3 tokens (tokenizer "auto": the data's meta.json names the file): its checkpoints carry
# tokenizer.model, so the run directory, and a checkpoint copied elsewhere on its own, generate with no flag, from
# any working directory.
LLAMA3="$SHARED/llama3_tokenizer.model"
if [ -f "$LLAMA3" ]; then
    expect_fail "a tokenizer larger than the model's vocabulary" \
        "tokenizer .* has 128256 tokens but the model's vocab_size is 300" \
        "$TRAIN" --generate "$TMP/v300" --tokenizer "$LLAMA3"
    python3 scripts/prepare_data.py --tokenizer "$LLAMA3" --text "$TMP/text.txt" --out "$TMP/l3data" \
        >"$TMP/l3prep.log" 2>&1 || fail "prepare_data.py, Llama 3: $(tail -2 "$TMP/l3prep.log")"
    edit_json "$TMP/small.json" "$TMP/l3.json" "c.update(vocab_size=128256, hidden_size=32, intermediate_size=64,
        num_hidden_layers=1, tokenizer='auto', train_data='$TMP/l3data/train_*.bin', steps=1, checkpoint_every=0)"
    mkdir -p "$TMP/elsewhere" "$TMP/cwd2"
    if "$TRAIN" -c "$TMP/l3.json" -o "$TMP/l3" >"$TMP/l3.log" 2>&1 && cmp -s "$LLAMA3" "$TMP/l3/step_00000001/tokenizer.model" &&
        cp -r "$TMP/l3/step_00000001" "$TMP/elsewhere/copied" &&
        (cd "$TMP/cwd2" && "$TRAIN" --generate "$TMP/elsewhere/copied" --sample-prompt "Hello world" --sample-tokens 5 \
            --temperature 0 >"$TMP/l3.out" 2>"$TMP/l3.err") &&
        grep -q "tokenizer $TMP/elsewhere/copied/tokenizer.model" "$TMP/l3.err" &&
        [ "$(head -c 11 "$TMP/l3.out")" = "Hello world" ] && [ "$(wc -c <"$TMP/l3.out")" -gt 12 ]; then
        pass "a checkpoint of a Llama 3 run, copied elsewhere on its own, generates with no flag: $(show "$TMP/l3.out" 100)"
    else
        fail "a copied checkpoint of a Llama 3 run: $(tail -2 "$TMP/l3.log") $(tail -2 "$TMP/l3.err" 2>/dev/null)"
    fi
    if gen l3run "$TMP/l3" --sample-prompt "Hello world" --sample-tokens 5 --temperature 0 &&
        cmp -s "$TMP/l3.out" "$TMP/l3run.out"; then
        pass "the Llama 3 run directory generates the same with no flag"
    else
        fail "the Llama 3 run directory: $(tail -2 "$TMP/l3run.err")"
    fi
    # A checkpoint without tokenizer.model (as written before checkpoints carried it) takes the file that its
    # train_config.json names (meta.json's absolute path, here).
    cp -r "$TMP/l3/step_00000001" "$TMP/elsewhere/old" && rm "$TMP/elsewhere/old/tokenizer.model"
    if gen l3old "$TMP/elsewhere/old" --sample-prompt "Hello world" --sample-tokens 5 --temperature 0 &&
        grep -q "tokenizer /[^ ]*/$(basename "$LLAMA3")," "$TMP/l3old.err" && cmp -s "$TMP/l3.out" "$TMP/l3old.out"; then
        pass "a checkpoint without tokenizer.model takes the tokenizer its train_config.json names"
    else
        fail "train_config.json's tokenizer: $(tail -2 "$TMP/l3old.err")"
    fi
    # --tokenizer still overrides what the checkpoint carries.
    if gen l3byte "$TMP/elsewhere/copied" --sample-prompt "Hi" --sample-tokens 3 --tokenizer byte &&
        grep -q "tokenizer byte" "$TMP/l3byte.err"; then
        pass "--tokenizer overrides the checkpoint's tokenizer.model"
    else
        fail "--tokenizer override: $(tail -2 "$TMP/l3byte.err")"
    fi
else
    fail "no Llama 3 tokenizer at $LLAMA3 (set SHARED_DATA)"
fi

# 6. Bad use.
mkdir "$TMP/empty"
expect_fail "a missing directory" "--generate: $TMP/nope is not a directory" "$TRAIN" --generate "$TMP/nope"
expect_fail "a directory that is neither a model nor a run" \
    "$TMP/empty holds neither a config.json.*nor a complete checkpoint" "$TRAIN" --generate "$TMP/empty"
expect_fail "--generate with -c" "takes the model from DIR: it does not go with -c" \
    "$TRAIN" --generate "$CKPT" -c "$TMP/small.json"
expect_fail "--generate with --resume" "it does not go with --resume" "$TRAIN" --generate "$CKPT" --resume -o "$TMP/run"
expect_fail "--generate without a directory" "flag --generate needs a directory" "$TRAIN" --generate
