#!/usr/bin/env bash
# test_cli.sh: ./train's command line and its handling of bad input: each bad config, flag or shard must give a clear
# message (naming the file, key or flag) and a nonzero exit, and must not damage an existing run. Run from the repo root.
source "$(dirname "$0")/shell_helpers.sh"

# make_shard PATH MAGIC VERSION DTYPE N_HEADER N_TOKENS [TRUNCATE_BYTES] [MAX_ID]
make_shard() {
    python3 - "$@" <<'EOF'
import struct, sys, random
path, magic, version, dtype, n_header, n_tok = sys.argv[1], *map(int, sys.argv[2:4]), sys.argv[4], *map(int, sys.argv[5:7])
cut = int(sys.argv[7]) if len(sys.argv) > 7 else 0
max_id = int(sys.argv[8]) if len(sys.argv) > 8 else 255
rng = random.Random(1)
header = [0] * 256
header[0], header[1], header[2] = magic, version, n_header
body = struct.pack("<256i", *header) + struct.pack("<%d%s" % (n_tok, dtype), *[rng.randrange(max_id + 1) for _ in range(n_tok)])
open(path, "wb").write(body[: len(body) - cut])
EOF
}

mkdir -p "$TMP/good" "$TMP/weightless"
make_shard "$TMP/good/train_000.bin" 20240520 1 H 5000 5000
make_shard "$TMP/good/val_000.bin" 20240520 1 H 2000 2000

# A small model config for these tests.
cat >"$TMP/small.json" <<EOF
{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
 "tie_word_embeddings": true, "train_data": "$TMP/good/train_*.bin", "val_data": "$TMP/good/val_*.bin",
 "batch_size": 2, "seq_len": 32, "steps": 3, "warmup_steps": 1, "eval_every": 2, "eval_batches": 2,
 "sample_every": 0, "tokenizer": "byte"}
EOF
# cfg_with 'KEY: VALUE' > file: the small config with one key added or replaced.
cfg_with() {
    python3 - "$TMP/small.json" "$1" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(json.loads("{" + sys.argv[2] + "}"))
print(json.dumps(c))
EOF
}

# --help documents every training flag.
if $TRAIN --help >"$TMP/help" 2>&1 && grep -q -- "--learning-rate" "$TMP/help" && grep -q -- "--total-batch-tokens" "$TMP/help" \
    && grep -q -- "--lr-schedule" "$TMP/help" && grep -q -- "--eval-every" "$TMP/help" && grep -q -- "--resume" "$TMP/help" \
    && grep -q -- "--init-from" "$TMP/help" && grep -q -- "--checkpoint-every" "$TMP/help" && grep -q -- "--keep-last" "$TMP/help"; then
    pass "--help exits 0 and lists the flags"
else
    fail "--help"
fi

# --help shows the values of the config a plain ./train uses, and names it; with -c, that file's; from a directory
# without the default config, the built-in defaults, saying so.
$TRAIN --help >"$TMP/help" 2>&1
if grep -q "Values in \[brackets\]: those of configs/llama3_tiny.json, which a plain ./train uses" "$TMP/help" &&
    grep -qE -- "-n, --steps N .*\[1000\]$" "$TMP/help" && grep -qE -- "-l, --learning-rate F .*\[0.003\]$" "$TMP/help" &&
    grep -qE "^  num_attention_heads .*\[4\]$" "$TMP/help" && grep -qE "^  num_key_value_heads .*\[2\]$" "$TMP/help"; then
    pass "--help shows configs/llama3_tiny.json's values: $(grep -E -- '--steps|--learning-rate' "$TMP/help" | sed -E 's/ +/ /g' | tr '\n' ' ')"
else
    fail "--help values: $(grep -E 'Values|--steps|--learning-rate|num_attention_heads' "$TMP/help" | tr '\n' ' ')"
fi
$TRAIN -c "$TMP/small.json" --help >"$TMP/help_c" 2>&1
if grep -q "those of $TMP/small.json, which ./train with this -c uses" "$TMP/help_c" &&
    grep -qE -- "-n, --steps N .*\[3\]$" "$TMP/help_c" && grep -qE "^  hidden_size .*\[32\]$" "$TMP/help_c"; then
    pass "-c FILE --help shows that file's values"
else
    fail "-c FILE --help: $(grep -E 'Values|--steps|hidden_size' "$TMP/help_c" | tr '\n' ' ')"
fi
(cd "$TMP" && $TRAIN --help >"$TMP/help_builtin" 2>&1)
if grep -q "the built-in defaults (the config file, configs/llama3_tiny.json unless -c, cannot be read" "$TMP/help_builtin" &&
    grep -qE -- "-n, --steps N .*\[100\]$" "$TMP/help_builtin"; then
    pass "--help away from the default config shows the built-in defaults and says so"
else
    fail "--help built-in: $(grep -E 'Values|--steps' "$TMP/help_builtin" | tr '\n' ' ')"
fi

# --flag=value is --flag value (for -c and --generate too); a switch takes no value.
if $TRAIN --config="$TMP/small.json" --steps=2 --learning-rate=1e-3 --out-dir="$TMP/eq" --log-every=1 >"$TMP/out" 2>&1 &&
    python3 -c "import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if c['steps'] == 2 and c['learning_rate'] == 1e-3 and c['log_every'] == 1 else 1)" "$TMP/eq/train_config.json" &&
    [ "$(grep -c '"loss"' "$TMP/eq/log.jsonl")" -eq 2 ]; then
    pass "--config=FILE --steps=2 --learning-rate=1e-3 --out-dir=DIR: the values are taken"
else
    fail "--flag=value: $(tail -3 "$TMP/out")"
fi
expect_fail "a switch given a value" "flag --overwrite takes no value \(got \"--overwrite=yes\"\)" $TRAIN -c "$TMP/small.json" --overwrite=yes
expect_fail "--flag= with an empty value" "flag --steps: expected a number, got \"\"" $TRAIN -c "$TMP/small.json" --steps=

# Unknown flags and keys name the nearest known ones (other programs' names too).
expect_fail "--lr suggests --learning-rate" "unknown flag \"--lr\" \(did you mean --learning-rate\?\)" $TRAIN --lr 1e-3
expect_fail "--max-steps suggests --steps" "unknown flag \"--max-steps\" \(did you mean --steps\?\)" $TRAIN --max-steps=5
expect_fail "a misspelt flag suggests the flag" "unknown flag \"--warmup-step\" \(did you mean --warmup-steps\?\)" $TRAIN --warmup-step 5
expect_fail "a misspelt switch suggests the switch" "unknown flag \"--resum\" \(did you mean --resume\?\)" $TRAIN --resum
expect_fail "a flag near nothing suggests nothing" "unknown flag \"--frobnicate\" \(see ./train --help\)" $TRAIN --frobnicate 1
cfg_with '"lr": 0.1' >"$TMP/c_lr.json"
expect_fail "config key lr suggests learning_rate" "c_lr\.json: unknown key \"lr\" \(did you mean learning_rate\?\)" $TRAIN -c "$TMP/c_lr.json"
cfg_with '"hidden_sise": 32' >"$TMP/c_hs.json"
expect_fail "a misspelt model key suggests the key" "unknown key \"hidden_sise\" \(did you mean hidden_size\?\)" $TRAIN -c "$TMP/c_hs.json"

# Configs.
expect_fail "missing config file" "nonexistent\.json.*cannot open" $TRAIN -c "$TMP/nonexistent.json"
echo '{"hidden_size": 32,, }' >"$TMP/garbage.json"
expect_fail "garbage config" "garbage\.json.*not valid JSON" $TRAIN -c "$TMP/garbage.json"
echo '[1, 2]' >"$TMP/array.json"
expect_fail "config that is not an object" "array\.json.*object" $TRAIN -c "$TMP/array.json"
cfg_with '"lerning_rate": 0.1' >"$TMP/c1.json"
expect_fail "unknown key" "c1\.json.*unknown key \"lerning_rate\" \(did you mean learning_rate\?\)" $TRAIN -c "$TMP/c1.json"
cfg_with '"hidden_size": "big"' >"$TMP/c2.json"
expect_fail "wrong type" "c2\.json.*hidden_size.*must be a number" $TRAIN -c "$TMP/c2.json"
cfg_with '"num_key_value_heads": 3, "num_attention_heads": 4, "head_dim": 8' >"$TMP/c3.json"
expect_fail "heads not a multiple of kv heads" "c3\.json.*multiple of num_key_value_heads" $TRAIN -c "$TMP/c3.json"
cfg_with '"hidden_size": 30, "num_attention_heads": 4' >"$TMP/c4.json"
expect_fail "hidden_size not divisible by heads" "c4\.json.*hidden_size.*num_attention_heads" $TRAIN -c "$TMP/c4.json"
cfg_with '"total_batch_tokens": 100' >"$TMP/c5.json"
expect_fail "total batch not a multiple of B*T" "total_batch_tokens.*multiple" $TRAIN -c "$TMP/c5.json"
cfg_with '"hidden_act": "gelu"' >"$TMP/c6.json"
expect_fail "unsupported activation" "c6\.json.*hidden_act.*not supported" $TRAIN -c "$TMP/c6.json"
cfg_with '"seq_len": 128' >"$TMP/c7.json"
expect_fail "seq_len beyond max_position_embeddings" "seq_len.*max_position_embeddings" $TRAIN -c "$TMP/c7.json"
cfg_with '"rope_scaling": {"rope_type": "yarn", "factor": 2}' >"$TMP/c8.json"
expect_fail "unsupported rope scaling" "rope_scaling.*yarn" $TRAIN -c "$TMP/c8.json"
cfg_with '"vocab_size": 100' >"$TMP/c9.json"
expect_fail "tokenizer larger than the vocabulary" "tokenizer byte has 256 tokens.*vocab_size is 100" $TRAIN -c "$TMP/c9.json" -o "$TMP/r9"
cfg_with '"intermediate_size": 0' >"$TMP/c10.json"
expect_fail "zero dimension" "intermediate_size.*out of range" $TRAIN -c "$TMP/c10.json"

# Flags.
expect_fail "non-numeric flag value" "--learning-rate.*expected a number.*abc" $TRAIN -c "$TMP/small.json" --learning-rate abc
expect_fail "out-of-range flag value" "-b.*batch_size.*out of range" $TRAIN -c "$TMP/small.json" -b 0
expect_fail "unknown flag" "unknown flag \"--lernrate\"" $TRAIN -c "$TMP/small.json" --lernrate 1
expect_fail "a flag that is a model key" "unknown flag \"--hidden-size\"" $TRAIN -c "$TMP/small.json" --hidden-size 64
expect_fail "flag without a value" "--steps needs a value" $TRAIN -c "$TMP/small.json" --steps
expect_fail "bad choice" "lr_schedule must be one of" $TRAIN -c "$TMP/small.json" --lr-schedule cosinus
expect_fail "cuda on a CPU-only build or bad device" "device|CUDA" $TRAIN -c "$TMP/small.json" --device tpu
expect_fail "--resume-fallback without --resume" "--resume-fallback only goes with --resume" $TRAIN -c "$TMP/small.json" --resume-fallback
expect_fail "bad export dtype" "export_dtype must be one of f32\|bf16" $TRAIN -c "$TMP/small.json" --export-dtype f64
expect_fail "--init-from a directory without config.json" "nowhere/config\.json.*cannot open" $TRAIN --init-from "$TMP/nowhere"
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: c[k] for k in c if k in ('hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'vocab_size', 'max_position_embeddings', 'rms_norm_eps', 'tie_word_embeddings')}, open(sys.argv[2], 'w'))" "$TMP/small.json" "$TMP/weightless/config.json"
expect_fail "--init-from a directory without weights" "weightless.*neither model\.safetensors nor model\.safetensors\.index\.json" \
    $TRAIN -c "$TMP/small.json" --init-from "$TMP/weightless" -o "$TMP/r6"
expect_fail "steps beyond the 8-digit checkpoint names" "steps = 1e\+08 is out of range" $TRAIN -c "$TMP/small.json" -n 100000000

# Shards.
expect_fail "no shard matches" "nothing_here_\*\.bin.*: prepare the shards with scripts/prepare_data.py" $TRAIN -c "$TMP/small.json" -i "$TMP/nothing_here_*.bin" -o "$TMP/r1"
expect_fail "the default data not made yet" "no token shard files match .*data/tinyshakespeare_byte/train_\*\.bin': run \`make data\`" \
    $TRAIN -c "$TMP/small.json" -i "$TMP/data/tinyshakespeare_byte/train_*.bin" -o "$TMP/r1"
# Data of a larger vocabulary (Llama 3 ids, as its meta.json says) for a byte-vocabulary model: the message says so
# and names the key to set.
mkdir -p "$TMP/l3data"
make_shard "$TMP/l3data/train_000.bin" 20240801 1 I 5000 5000 0 128255
echo '{"tokenizer": "byte", "vocab_size": 128256}' >"$TMP/l3data/meta.json"
expect_fail "Llama 3 ids for a byte-vocabulary model" \
    "outside the vocabulary of 256 ids.*l3data/meta\.json says the data has a vocabulary of 128256 ids and the model has 256: set vocab_size \(config .*small\.json\) to 128256" \
    $TRAIN -c "$TMP/small.json" -i "$TMP/l3data/train_*.bin" -o "$TMP/r7"
mkdir -p "$TMP/trunc" "$TMP/magic" "$TMP/oov" "$TMP/ver"
make_shard "$TMP/trunc/train_000.bin" 20240520 1 H 5000 5000 100
expect_fail "truncated shard" "trunc/train_000\.bin" $TRAIN -c "$TMP/small.json" -i "$TMP/trunc/*.bin" -o "$TMP/r2"
make_shard "$TMP/magic/train_000.bin" 12345 1 H 5000 5000
expect_fail "wrong magic" "magic/train_000\.bin.*magic" $TRAIN -c "$TMP/small.json" -i "$TMP/magic/*.bin" -o "$TMP/r3"
make_shard "$TMP/ver/train_000.bin" 20240520 7 H 5000 5000
expect_fail "wrong version" "ver/train_000\.bin.*version" $TRAIN -c "$TMP/small.json" -i "$TMP/ver/*.bin" -o "$TMP/r4"
make_shard "$TMP/oov/train_000.bin" 20240520 1 H 5000 5000 0 1000
expect_fail "token id outside the vocabulary" "oov/train_000\.bin.*(vocab|token)" $TRAIN -c "$TMP/small.json" -i "$TMP/oov/*.bin" -o "$TMP/r5"
# ... and it stops before the run directory is written: the corrected command then runs into the same -o.
if [ ! -e "$TMP/r5/train_config.json" ] && [ ! -e "$TMP/r5/log.jsonl" ] &&
   $TRAIN -c "$TMP/small.json" -o "$TMP/r5" -n 1 --eval-every 0 --sample-every 0 >"$TMP/out" 2>&1; then
    pass "out-of-vocabulary data leaves nothing in the run directory; the corrected command runs there"
else
    fail "out-of-vocabulary data: $(ls "$TMP/r5" 2>&1 | tr '\n' ' ') $(tail -2 "$TMP/out")"
fi

# A run shorter than its warmup works and says what was clamped.
if $TRAIN -c "$TMP/small.json" -n 2 --warmup-steps 50 --eval-every 0 --sample-every 0 -o "$TMP/short" >"$TMP/out" 2>&1 &&
   grep -q "warmup_steps (50) exceeds steps (2): the warmup is the run's 2 steps" "$TMP/out" &&
   [ "$(grep -c '"loss"' "$TMP/short/log.jsonl")" -eq 2 ]; then
    pass "-n 2 with a 50-step warmup trains 2 steps and says the warmup was clamped"
else
    fail "-n 2 with a 50-step warmup: $(tail -3 "$TMP/out")"
fi

# Non-finite values: initial weights all 1e30 (finite: weights that are not are refused as they load) make every loss
# non-finite. By default the run stops at step 1, naming it, with no update and no step record; --skip-nonfinite 2
# skips two steps (logged as skipped) and stops at the third.
$TRAIN -c "$TMP/small.json" -n 0 -o "$TMP/w0" >/dev/null 2>&1
python3 - "$TMP/w0/step_00000000/model.safetensors" <<'EOF'
import json, struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
assert all(t["dtype"] == "F32" for k, t in json.loads(b[8:8 + n]).items() if k != "__metadata__")
b[8 + n:] = struct.pack("<f", 1e30) * ((len(b) - 8 - n) // 4)
open(path, "wb").write(b)
EOF
NF=(-c "$TMP/small.json" --init-from "$TMP/w0/step_00000000" -n 4 --eval-every 0 --sample-every 0)
$TRAIN "${NF[@]}" -o "$TMP/nf1" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -ne 0 ] && grep -q "step 1: the loss is not finite.*--skip-nonfinite" "$TMP/err" && ! grep -q '"loss"' "$TMP/nf1/log.jsonl"; then
    pass "a non-finite loss stops the run at step 1 with no update and no step record: $(grep -m1 "step 1" "$TMP/err" | head -c 200)"
else
    fail "non-finite loss: exit $rc, $(head -c 300 "$TMP/err")"
fi
$TRAIN "${NF[@]}" --skip-nonfinite 2 -o "$TMP/nf2" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -ne 0 ] && grep -q "step 3: the loss is not finite" "$TMP/err" && grep -q "skipped step 2 of at most 2" "$TMP/out" &&
   [ "$(grep -c '"skipped"' "$TMP/nf2/log.jsonl")" -eq 2 ]; then
    pass "--skip-nonfinite 2 skips two non-finite steps, logs them as skipped and stops at the third"
else
    fail "--skip-nonfinite 2: exit $rc, $(tail -2 "$TMP/out") $(head -c 300 "$TMP/err")"
fi

# No GPU: a ./train built with the CUDA backend on a machine without a GPU says so in one line and trains on the CPU.
if ldd "$TRAIN" 2>/dev/null | grep -q libcudart && [ ! -e /dev/nvidia0 ]; then
    $TRAIN -c "$TMP/small.json" -n 1 -o "$TMP/nogpu" >"$TMP/out" 2>"$TMP/err"
    if grep -qE "^note: no GPU found \(.+\); training on the CPU$" "$TMP/err" && grep -q "^backend: cpu" "$TMP/out"; then
        pass "no GPU: $(grep '^note' "$TMP/err")"
    else
        fail "no GPU: $(head -c 300 "$TMP/err")"
    fi
fi

# --log-every N prints the first, every Nth and the last step, each with the elapsed time and the ETA, while log.jsonl
# keeps every step.
if $TRAIN -c "$TMP/small.json" -n 9 --log-every 4 --eval-every 0 -o "$TMP/every" >"$TMP/out" 2>&1 &&
    [ "$(grep -E '^step +[0-9]+/9 \|' "$TMP/out" | sed -E 's/^step +([0-9]+).*/\1/' | tr '\n' ' ')" = "1 4 8 9 " ] &&
    [ "$(grep -cE '^step .* \| [0-9.]+s elapsed \| ETA [0-9.]+s$' "$TMP/out")" -eq 4 ] &&
    [ "$(grep -c '"loss"' "$TMP/every/log.jsonl")" -eq 9 ]; then
    pass "--log-every 4 prints steps 1, 4, 8, 9 with elapsed and ETA; log.jsonl has all 9: $(grep -m1 '^step' "$TMP/out")"
else
    fail "--log-every 4: $(grep '^step' "$TMP/out" | tr '\n' ' ')"
fi

# A good run, then the same run directory again must be refused without touching the log.
if $TRAIN -c "$TMP/small.json" -o "$TMP/run" >"$TMP/out" 2>&1 && [ "$(grep -c '"loss"' "$TMP/run/log.jsonl")" -eq 3 ] \
    && grep -q '"val_loss"' "$TMP/run/log.jsonl"; then
    pass "a small run writes 3 step records and a validation record"
else
    fail "small run: $(tail -5 "$TMP/out")"
fi
cp "$TMP/run/log.jsonl" "$TMP/log.before"
expect_fail "existing run directory" "already holds a run.*--overwrite" $TRAIN -c "$TMP/small.json" -o "$TMP/run"
if cmp -s "$TMP/log.before" "$TMP/run/log.jsonl"; then pass "the refused run left the old log untouched"; else fail "log changed"; fi

# Memory preflight. A run prints what it needs of the backend's memory (the checkpoint snapshot included: on the CPU
# it is the backend's memory) and what is available, and the CPU backend's peak is that estimate. A model too large (the issue's: hidden_size 4096, 32/8 heads, vocab_size 2^24, over 1 TiB)
# and a batch too large (2^20 sequences of 2047 tokens, TiBs of activations) stop before anything is allocated or
# written: exit status 1, a sentence with what is needed and available and what to lower, no run directory, and an
# existing run as it was even with --overwrite.
$TRAIN -c "$TMP/small.json" -n 2 -o "$TMP/mem" >"$TMP/out" 2>&1
need=$(sed -n 's/^memory: \([0-9.]* [MG]iB\) needed .*/\1/p' "$TMP/out")
if grep -qE '^memory: [0-9.]+ MiB needed \(params [0-9.]+, grads [0-9.]+, adam [0-9.]+, activations [0-9.]+, workspace [0-9.]+, checkpoint snapshot [0-9.]+\), [0-9.]+ [MG]iB of host memory available$' "$TMP/out" &&
   [ -n "$need" ] && [ "$(sed -n 's/^peak cpu memory: //p' "$TMP/out")" = "$need" ]; then
    pass "a run prints the memory it needs and has, and the CPU backend's peak is the estimate ($(grep '^memory:' "$TMP/out"); $(grep '^peak' "$TMP/out"))"
else
    fail "memory line: $(grep -E '^(memory|peak)' "$TMP/out")"
fi
# expect_no_memory NAME PATTERN OUT_DIR ARGS...: ./train ARGS -o OUT_DIR exits with status 1 and a message matching
# PATTERN, and OUT_DIR is not created (or, when it holds a run, not a byte of it changes).
expect_no_memory() {
    local name=$1 pattern=$2 dir=$3
    shift 3
    local before
    before=$(cd "$dir" 2>/dev/null && find . -type f -exec md5sum {} + | sort)
    $TRAIN "$@" -o "$dir" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    local after
    after=$(cd "$dir" 2>/dev/null && find . -type f -exec md5sum {} + | sort)
    if [ $rc -eq 1 ] && grep -qE -- "$pattern" "$TMP/err" && grep -q '^memory: ' "$TMP/out" &&
       { [ -n "$before" ] || [ ! -e "$dir" ]; } && [ "$before" = "$after" ]; then
        pass "$name: exit 1, nothing written: $(head -c 400 "$TMP/err")"
    else
        fail "$name: exit $rc, $(ls "$dir" 2>&1 | head -3 | tr '\n' ' ') stderr: $(head -c 400 "$TMP/err") (wanted /$pattern/)"
    fi
}
cfg_with '"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 16777216' >"$TMP/huge.json"
expect_no_memory "a model too large for the host's memory" \
    "not enough host memory: this run needs [0-9.]+ GiB and [0-9.]+ [MG]iB is available, and the model alone .* takes [0-9.]+ GiB: use a smaller model \(hidden_size, intermediate_size, num_hidden_layers, vocab_size of .*huge\.json\)" \
    "$TMP/huge" -c "$TMP/huge.json" -d cpu
expect_no_memory "a model too large, into an existing run with --overwrite" "not enough host memory" \
    "$TMP/run" -c "$TMP/huge.json" --overwrite
cfg_with '"max_position_embeddings": 4096' >"$TMP/long.json"
expect_no_memory "a batch too large for the host's memory" \
    "not enough host memory: this run needs [0-9.]+ GiB and [0-9.]+ [MG]iB is available; lower batch_size \(-b, now 1048576\) or seq_len \(-t, now 2047\): the activations and workspace .* take [0-9.]+ GiB" \
    "$TMP/longrun" -c "$TMP/long.json" -b 1048576 -t 2047
expect_fail "a micro-batch beyond int rows" "batch_size\*seq_len \(2147483648\) exceeds 2147483647" \
    $TRAIN -c "$TMP/long.json" -b 1048576 -t 2048

# A Hugging Face config.json without training keys, with the data as a flag.
python3 - "$TMP/small.json" >"$TMP/hf.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
hf = {k: c[k] for k in ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "vocab_size", "max_position_embeddings", "rms_norm_eps",
                        "tie_word_embeddings"]}
hf.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "torch_dtype": "bfloat16",
           "bos_token_id": 1, "eos_token_id": [2, 3], "rope_scaling": None, "attention_bias": False})
print(json.dumps(hf))
EOF
if $TRAIN -c "$TMP/hf.json" -i "$TMP/good/train_*.bin" -b 2 -t 32 -n 2 --sample-every 0 -o "$TMP/hfrun" >"$TMP/out" 2>&1 \
    && [ "$(grep -c '"loss"' "$TMP/hfrun/log.jsonl")" -eq 2 ]; then
    pass "a plain Hugging Face config.json trains with flags for the data and batch"
else
    fail "HF config run: $(tail -5 "$TMP/out")"
fi
