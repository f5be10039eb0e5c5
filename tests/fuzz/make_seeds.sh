#!/usr/bin/env bash
# make_seeds.sh: builds the fuzz harnesses' seed corpora in build/fuzz/seeds (make fuzz-seeds): token shards of the
# start of TinyShakespeare made by scripts/prepare_data.py (byte-level and Llama 3), a 3-step ./train run on them (its
# log.jsonl and train_config.json), then build/fuzz/fuzz_seeds, which writes checkpoints of the fuzz model and turns
# everything (with configs/*.json and the tokenizer file) into seeds.
# Takes the text and the tokenizer from $SHARED (default ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARED="${SHARED:-../shared/data}"
PYTHON="${PYTHON:-python3}"
text="$SHARED/tinyshakespeare.txt"
tokenizer="$SHARED/llama3_tokenizer.model"
for f in "$text" "$tokenizer"; do
    [ -f "$f" ] || { echo "make_seeds.sh: no $f (set SHARED to the directory holding it)" >&2; exit 1; }
done
out=build/fuzz/seeds
rm -rf "$out"
mkdir -p "$out/inputs"
head -c 4000 "$text" >"$out/inputs/tinyshakespeare_head.txt"
# prepare TOKENIZER OUT SHARD_TOKENS: shards of the text; its output only when it fails
prepare() {
    local log
    log=$("$PYTHON" scripts/prepare_data.py --text "$out/inputs/tinyshakespeare_head.txt" --tokenizer "$1" --out "$2" \
        --shard-tokens "$3" 2>&1) || { echo "$log" >&2; exit 1; }
}
prepare byte "$out/data_byte" 1500
prepare "$tokenizer" "$out/data_llama3" 400
printf 'naïve café — ünïcode 日本語 🙂 (a+b)*c != {d}; "quoted" \n\n\t  spaces   and\r\nnewlines\n' \
    >"$out/inputs/unicode.txt"
# a few steps of ./train on the byte shards: a real log.jsonl (with validation and samples) and train_config.json
run="$out/run"
if ! log=$(./train -c configs/llama3_tiny.json -i "$out/data_byte/train_*.bin" -j "$out/data_byte/val_*.bin" \
        -o "$run" -d cpu -b 2 -t 32 -n 3 --eval-every 2 --eval-batches 1 --sample-every 2 --sample-tokens 8 \
        --tokenizer byte 2>&1); then
    echo "$log" >&2
    exit 1
fi
cp "$run/log.jsonl" "$out/inputs/run.jsonl"
cp "$run/train_config.json" "$out/inputs/run_train_config.json"
build/fuzz/fuzz_seeds "$out" "$tokenizer" configs/*.json "$out"/data_*/*.bin "$out"/inputs/*

for d in "$out"/*/; do
    case "$d" in */data_*/|*/inputs/|*/work/|*/run/) continue ;; esac
    echo "seeds: $(ls "$d" | wc -l) in $d"
done
