#!/usr/bin/env bash
# test_hf_config.sh: ./train takes a Hugging Face directory whose config.json is in transformers 5's form
# (rope_parameters instead of rope_theta + rope_scaling, dtype, pad_token_id), llama3 scaling and plain RoPE: its
# --init-from gives the same model and bitwise the same exported weights as from transformers 4's form, and -c in one
# form agrees with --init-from in the other; a directory whose config gives both forms disagreeing is refused, naming
# both keys. The directories are ./train's own exports (-n 0), with config.json rewritten here. Run from the repo root.
source "$(dirname "$0")/shell_helpers.sh"
[ -x "$TRAIN" ] || { fail "no $TRAIN (run make)"; exit 1; }

python3 - "$TMP/data" <<'EOF'
import os, struct, sys
os.makedirs(sys.argv[1])
with open(os.path.join(sys.argv[1], "train_000.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 4000, *([0] * 253)))
    f.write(struct.pack("<4000H", *[i * 7 % 256 for i in range(4000)]))
EOF

# config NAME ROPE_JSON: a small model config with the given RoPE keys.
config() {
    cat >"$TMP/$1.json" <<EOF
{"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
 "tie_word_embeddings": false, $2,
 "train_data": "$TMP/data/train_*.bin", "batch_size": 2, "seq_len": 32, "tokenizer": "byte", "device": "cpu"}
EOF
}

# to_v5 SRC_DIR DST_DIR: a copy of an export with config.json as transformers 5.23 writes it.
to_v5() {
    mkdir -p "$2" && cp "$1/model.safetensors" "$2/" && python3 - "$1/config.json" "$2/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
rp = dict(c.pop("rope_scaling") or {"rope_type": "default"}, rope_theta=c.pop("rope_theta"))
c.pop("torch_dtype")
c.update(rope_parameters=rp, dtype="float32", pad_token_id=None, transformers_version="5.23.0")
json.dump(c, open(sys.argv[2], "w"), indent=2, sort_keys=True)
EOF
}

for rope in llama3 plain; do
    if [ $rope = llama3 ]; then
        config $rope '"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
         "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}'
    else
        config $rope '"rope_theta": 250000.0'
    fi
    if ! "$TRAIN" -c "$TMP/$rope.json" -n 0 -s 7 -o "$TMP/v4_$rope" >"$TMP/log" 2>&1; then
        fail "$rope: ./train -n 0: $(tail -2 "$TMP/log" | tr '\n' ' ')"
        continue
    fi
    v4="$TMP/v4_$rope/step_00000000"
    to_v5 "$v4" "$TMP/v5dir_$rope"
    if "$TRAIN" --init-from "$TMP/v5dir_$rope" -i "$TMP/data/train_*.bin" -t 32 -n 0 -o "$TMP/v5_$rope" \
        >"$TMP/log" 2>&1; then
        if cmp -s "$v4/model.safetensors" "$TMP/v5_$rope/step_00000000/model.safetensors" &&
            cmp -s "$v4/config.json" "$TMP/v5_$rope/step_00000000/config.json"; then
            pass "$rope: --init-from a transformers 5 config gives the same model and bitwise the same export"
        else
            fail "$rope: --init-from a transformers 5 config exports other weights or another config.json"
        fi
    else
        fail "$rope: --init-from a transformers 5 config: $(tail -2 "$TMP/log" | tr '\n' ' ')"
    fi
    if "$TRAIN" -c "$TMP/v5dir_$rope/config.json" --init-from "$v4" -i "$TMP/data/train_*.bin" -t 32 -n 0 \
        -o "$TMP/mixed_$rope" >"$TMP/log" 2>&1; then
        pass "$rope: -c in transformers 5's form agrees with --init-from in transformers 4's"
    else
        fail "$rope: -c (transformers 5) with --init-from (transformers 4): $(tail -2 "$TMP/log" | tr '\n' ' ')"
    fi
done

# Both forms in one file, disagreeing: refused, naming both keys and the file, nothing written.
if [ -d "$TMP/v5dir_llama3" ]; then
    mkdir -p "$TMP/both" && cp "$TMP/v5dir_llama3/model.safetensors" "$TMP/both/"
    python3 - "$TMP/v5dir_llama3/config.json" "$TMP/both/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_theta"] = 10000.0
json.dump(c, open(sys.argv[2], "w"))
EOF
    "$TRAIN" --init-from "$TMP/both" -i "$TMP/data/train_*.bin" -t 32 -n 0 -o "$TMP/both_run" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    want="$TMP/both/config.json: rope_theta (10000) and rope_parameters.rope_theta (500000) disagree"
    if [ $rc -ne 0 ] && grep -qF "$want" "$TMP/err" && [ ! -e "$TMP/both_run" ]; then
        pass "a config with rope_theta and rope_parameters.rope_theta disagreeing: exit $rc, $(head -c 200 "$TMP/err")"
    else
        fail "a config with both forms disagreeing: exit $rc, $(head -c 300 "$TMP/err")"
    fi
fi
