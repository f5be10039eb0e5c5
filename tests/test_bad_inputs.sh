#!/usr/bin/env bash
# test_bad_inputs.sh: files given where another kind is wanted, and values a run cannot use, are refused by what they
# are, before anything is written: a directory or a device as the config (-c) or the tokenizer, bytes after a config's
# closing brace, model.safetensors that is a directory, weights that are not finite (--generate prints nothing,
# --init-from makes no run directory), and a total_batch_tokens of more micro-steps than a step counts.
source "$(dirname "$0")/shell_helpers.sh"
export OMP_NUM_THREADS=1
check() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }

python3 - "$TMP" <<'EOF'
import struct, sys, random
rng = random.Random(2)
header = [0] * 256
header[0], header[1], header[2] = 20240520, 1, 4000
open(f"{sys.argv[1]}/train_000.bin", "wb").write(struct.pack("<256i", *header) + struct.pack("<4000H", *[rng.randrange(256) for _ in range(4000)]))
EOF
cat >"$TMP/small.json" <<EOF
{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 64, "tie_word_embeddings": true,
 "train_data": "$TMP/train_*.bin", "tokenizer": "byte", "batch_size": 2, "seq_len": 32, "steps": 2}
EOF
SMALL=(-c "$TMP/small.json")

mkdir -p "$TMP/adir"
expect_fail "-c a directory says it is one" "config $TMP/adir: is a directory" "$TRAIN" -c "$TMP/adir" -o "$TMP/r1"
expect_fail "-c /dev/zero is refused at once (not read until memory runs out)" "config /dev/zero: is not a regular file" \
    timeout 20 "$TRAIN" -c /dev/zero -o "$TMP/r1"
{ cat "$TMP/small.json"; echo '} trailing'; } >"$TMP/trailing.json"
expect_fail "bytes after a config's closing brace are refused, naming the line" \
    "config $TMP/trailing.json: more after the JSON value's end \(line 4\)" "$TRAIN" -c "$TMP/trailing.json" -o "$TMP/r1"
expect_fail "--tokenizer a directory says it is one" "tokenizer file $TMP/adir: is a directory" \
    "$TRAIN" "${SMALL[@]}" --tokenizer "$TMP/adir" -o "$TMP/r1"
expect_fail "total_batch_tokens of 2^31 micro-batches of 2 x 64 is refused, naming the keys" \
    "total_batch_tokens \(274877906944\) is 2147483648 micro-batches of batch_size\*seq_len \(2 x 64\)" \
    "$TRAIN" "${SMALL[@]}" -t 64 --total-batch-tokens 274877906944 -o "$TMP/r1"
check "none of these made a run directory" '[ ! -e "$TMP/r1" ]'

# Weights: a --steps 0 export, one copy with its data all NaN, one whose model.safetensors is a directory.
"$TRAIN" "${SMALL[@]}" --steps 0 -o "$TMP/init" >"$TMP/init.out" 2>&1 || fail "--steps 0: $(tail -3 "$TMP/init.out")"
cp -r "$TMP/init/step_00000000" "$TMP/nan"
python3 - "$TMP/nan/model.safetensors" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
start = 8 + struct.unpack_from("<Q", b)[0]
b[start:] = struct.pack("<f", float("nan")) * ((len(b) - start) // 4)
open(sys.argv[1], "wb").write(b)
EOF
"$TRAIN" --generate "$TMP/nan" --sample-tokens 8 >"$TMP/gen.out" 2>"$TMP/gen.err"
rc=$?
check "--generate with NaN weights: a message naming the tensor, nonzero, and no text" \
    '[ $rc -ne 0 ] && grep -q "the weights of $TMP/nan: tensor model.embed_tokens.weight holds NaN at element 0" "$TMP/gen.err" && [ ! -s "$TMP/gen.out" ]'
expect_fail "--init-from NaN weights is refused" "tensor .* holds NaN" "$TRAIN" "${SMALL[@]}" --init-from "$TMP/nan" \
    -o "$TMP/r2"
check "... before the run directory exists" '[ ! -e "$TMP/r2" ]'
cp -r "$TMP/init/step_00000000" "$TMP/stdir"
rm "$TMP/stdir/model.safetensors" && mkdir "$TMP/stdir/model.safetensors"
expect_fail "a model.safetensors that is a directory says so" "$TMP/stdir/model.safetensors: is a directory" \
    "$TRAIN" --generate "$TMP/stdir" --sample-tokens 4
