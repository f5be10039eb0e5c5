#!/usr/bin/env bash
# test_prepare_data.sh: runs scripts/prepare_data.py on a few KB of TinyShakespeare (plus a line of non-ASCII text)
# with the byte vocabulary and with the Llama 3 tokenizer, and checks the shards with Python (headers, token counts,
# shard sizes, decoding back to the text), reruns (nothing to do; other settings refused; --overwrite), and the errors for
# bad inputs; make data-code (the standard library's files, each a document); then tests/prepare_corpus_checks.py
# (many inputs and formats, workers, resume, one run per directory, directory walks, bad corpora, random splits).
# Prints one PASS or FAIL line per check.
set -u
cd "$(dirname "$0")/.."
SHARED_DATA="${SHARED_DATA:-$(cd .. && pwd)/shared/data}"
PYTHON="${PYTHON:-python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

SHARD_TOKENS=1000
text="$tmp/input.txt"
tokenizer="$SHARED_DATA/llama3_tokenizer.model"
if ! head -n 200 "$SHARED_DATA/tinyshakespeare.txt" >"$text" 2>/dev/null || [ ! -s "$text" ]; then
    echo "FAIL cannot read $SHARED_DATA/tinyshakespeare.txt (set SHARED_DATA to the directory that holds it)"
    exit 1
fi
printf '\nNURSE:\nA naïve café — ünïcode, 日本語.\n' >>"$text"

# check_shards DIR byte|llama3: the checks of one output directory, one PASS/FAIL line each.
check_shards() {
    "$PYTHON" - "$1" "$2" "$text" "$tokenizer" "$SHARD_TOKENS" <<'EOF'
import glob, json, os, struct, sys

out, kind, text_path, tokenizer_path, shard_tokens = sys.argv[1:4] + [sys.argv[4], int(sys.argv[5])]
text = open(text_path, "rb").read().decode("utf-8")
BOS_NAME = "<|begin_of_text|>"

def check(ok, message):
    print(("PASS " if ok else "FAIL ") + f"{kind}: {message}")

meta = json.load(open(os.path.join(out, "meta.json")))
dtype, size, magic = ("uint16", 2, 20240520) if kind == "byte" else ("uint32", 4, 20240801)
vocab_size = 256 if kind == "byte" else 128256
check(meta["token_dtype"] == dtype and meta["magic"] == magic and meta["vocab_size"] == vocab_size,
      f"meta.json: {dtype} tokens, magic {magic}, vocab size {meta['vocab_size']}")
on_disk = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*")))
listed = sorted(meta["files"]["train"] + meta["files"]["val"] + ["meta.json"])
check(on_disk == listed, f"the directory holds exactly meta.json and the listed shards ({len(listed) - 1})")

tokens, headers_ok = {}, True
for split in ("train", "val"):
    tokens[split] = []
    files = meta["files"][split]
    check(files == [f"{split}_{i:06d}.bin" for i in range(len(files))], f"{split} shards named {split}_000000.bin ...")
    for i, name in enumerate(files):
        data = open(os.path.join(out, name), "rb").read()
        m, version, count = struct.unpack_from("<3i", data)
        last = i == len(files) - 1
        ok = (m == magic and version == 1 and len(data) == 1024 + count * size and
              (count == shard_tokens if not last else 0 < count <= shard_tokens) and
              not any(struct.unpack_from("<253i", data, 12)))
        headers_ok = headers_ok and ok
        tokens[split] += struct.unpack_from(f"<{count}{'H' if size == 2 else 'I'}", data, 1024)
    check(len(tokens[split]) == meta["tokens"][split], f"{split}: {len(tokens[split])} tokens, as meta.json says")
check(headers_ok, f"every header has magic {magic}, version 1 and the token count of the file's size; "
      f"every shard but the last of a split holds {shard_tokens} tokens")
check(len(meta["files"]["train"]) > 1 and len(meta["files"]["val"]) >= 1, "several train shards and a val shard")

documents = meta["documents"]["train"] + meta["documents"]["val"]
if kind == "byte":
    check(bytes(tokens["train"] + tokens["val"]) == text.encode("utf-8"), "train + val tokens are the text's bytes")
    split_text = {split: bytes(tokens[split]).decode("utf-8") for split in tokens}
else:
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        check(False, "tiktoken is importable (pip install tiktoken)")
        sys.exit(0)
    sys.path.insert(0, "scripts")
    from dataprep.tokenizer import LLAMA3_PATTERN
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    enc = tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=load_tiktoken_bpe(tokenizer_path),
                            special_tokens={BOS_NAME: 128000})
    check(enc.decode(tokens["train"] + tokens["val"]) == BOS_NAME + text.replace("\n\n", "\n\n" + BOS_NAME),
          "train + val decode (tiktoken) to the text with BOS before every blank-line-separated document")
    check(tokens["train"].count(128000) + tokens["val"].count(128000) == documents and
          tokens["val"].count(128000) == meta["documents"]["val"] and tokens["train"][0] == tokens["val"][0] == 128000,
          f"{documents} BOS tokens, one per document; both splits start with BOS")
    split_text = {split: enc.decode([t for t in tokens[split] if t != 128000]) for split in tokens}
check(split_text["train"] + split_text["val"] == text and split_text["train"].endswith("\n\n") and
      split_text["val"].count("\n\n") == meta["documents"]["val"] - 1,
      f"val holds the last {meta['documents']['val']} whole documents")
check(meta["documents"]["val"] == round(0.1 * documents), f"val is 10% of {documents} documents")
EOF
}

# run NAME ARGS...: runs prepare_data.py, keeping its output in $tmp/NAME.log; returns its status.
run() {
    local name=$1
    shift
    "$PYTHON" scripts/prepare_data.py "$@" >"$tmp/$name.log" 2>&1
}

# snapshot DIR: the names, sizes, modification times and checksums of DIR's files.
snapshot() {
    (cd "$1" && ls -l --time-style=+%s.%N && md5sum ./*)
}

if run byte --text "$text" --tokenizer byte --out "$tmp/byte" --shard-tokens $SHARD_TOKENS; then
    echo "PASS byte: prepare_data.py runs"
    grep -q 'documents' "$tmp/byte.log" && grep -q '^train: .* tokens' "$tmp/byte.log" &&
        grep -q '^val: ' "$tmp/byte.log" && echo "PASS byte: prints a summary" ||
        echo "FAIL byte: prints a summary: $(tail -3 "$tmp/byte.log")"
    check_shards "$tmp/byte" byte
    before=$(snapshot "$tmp/byte")
    run byte_same --text "$text" --tokenizer byte --out "$tmp/byte" --shard-tokens $SHARD_TOKENS &&
        grep -q 'nothing to do' "$tmp/byte_same.log" && [ "$(snapshot "$tmp/byte")" = "$before" ] &&
        echo "PASS byte: a rerun of a complete preparation has nothing to do and changes no file" ||
        echo "FAIL byte: a rerun of a complete preparation has nothing to do and changes no file: $(cat "$tmp/byte_same.log")"
    if run byte_other --text "$text" --tokenizer byte --out "$tmp/byte" --shard-tokens 100000; then
        echo "FAIL byte: a rerun with other settings is refused: exit status 0"
    elif grep -q 'shard_tokens differ.*--overwrite' "$tmp/byte_other.log" &&
        [ "$(snapshot "$tmp/byte")" = "$before" ]; then
        echo "PASS byte: a rerun with other settings is refused (naming shard_tokens and --overwrite), no file changed"
    else
        echo "FAIL byte: a rerun with other settings is refused, no file changed: $(cat "$tmp/byte_other.log")"
    fi
    run byte_rerun --text "$text" --tokenizer byte --out "$tmp/byte" --shard-tokens 100000 --overwrite &&
        [ "$(ls "$tmp/byte")" = "$(printf 'meta.json\ntrain_000000.bin\nval_000000.bin')" ] &&
        echo "PASS byte: a rerun with larger shards and --overwrite removes the earlier run's extra shards" ||
        echo "FAIL byte: a rerun with larger shards and --overwrite removes the earlier run's extra shards:" $(ls "$tmp/byte")
else
    echo "FAIL byte: prepare_data.py failed: $(tail -5 "$tmp/byte.log")"
fi

if [ ! -f "$tokenizer" ]; then
    echo "FAIL llama3: no tokenizer file at $tokenizer (set SHARED_DATA to its directory)"
elif run llama3 --text "$text" --tokenizer "$tokenizer" --out "$tmp/llama3" --shard-tokens $SHARD_TOKENS; then
    echo "PASS llama3: prepare_data.py runs"
    check_shards "$tmp/llama3" llama3
else
    echo "FAIL llama3: prepare_data.py failed: $(tail -5 "$tmp/llama3.log")"
fi

# Bad inputs: a nonzero exit and a message naming the file.
expect_error() {
    local description=$1 expected=$2
    shift 2
    if run error "$@"; then
        echo "FAIL $description: exit status 0"
    elif grep -qF -- "$expected" "$tmp/error.log"; then
        echo "PASS $description: nonzero exit, message names $expected"
    else
        echo "FAIL $description: the message does not name $expected: $(cat "$tmp/error.log")"
    fi
}
expect_error "a missing --text file" "$tmp/no_such.txt" --text "$tmp/no_such.txt" --tokenizer byte --out "$tmp/err1"
printf 'IQ== 0\nnot-base64! 1\n' >"$tmp/bad.model"
expect_error "a malformed tokenizer file" "$tmp/bad.model" --text "$text" --tokenizer "$tmp/bad.model" --out "$tmp/err2"
printf 'IQ== 0\nIg== 1\n' >"$tmp/short.model"
expect_error "a tokenizer file without 128000 ranks" "$tmp/short.model" --text "$text" --tokenizer "$tmp/short.model" \
    --out "$tmp/err3"
expect_error "a missing tokenizer file" "$tmp/no_such.model" --text "$text" --tokenizer "$tmp/no_such.model" \
    --out "$tmp/err4"
[ ! -e "$tmp/err1" ] && [ ! -e "$tmp/err2" ] && echo "PASS bad inputs write nothing" ||
    echo "FAIL bad inputs write nothing: $(ls -d "$tmp"/err* 2>/dev/null)"

# make data-code: the second built-in dataset (Python's standard library, a file per document, EOS, a random split),
# into $tmp; it reads this machine's standard library and takes a few seconds. (BUILD: the record of the compiler
# flags that reading the Makefile writes goes to $tmp, not over the build's.)
if ${MAKE:-make} -s data-code CODE_OUT="$tmp/code" TOKENIZER="$tokenizer" PYTHON="$PYTHON" BUILD="$tmp/build" \
    >"$tmp/code.log" 2>&1; then
    "$PYTHON" - "$tmp/code" <<'EOF'
import json, os, struct, sys
out = sys.argv[1]
meta = json.load(open(os.path.join(out, "meta.json")))
counts, ends = {}, True
for split in ("train", "val"):
    tokens = []
    for name in meta["files"][split]:
        data = open(os.path.join(out, name), "rb").read()
        tokens += struct.unpack_from(f"<{struct.unpack_from('<3i', data)[2]}I", data, 1024)
    counts[split] = (tokens.count(128000), tokens.count(128001), len(tokens))
    ends = ends and tokens[0] == 128000 and tokens[-1] == 128001
ok = all(bos == eos == meta["documents"][split] for split, (bos, eos, _) in counts.items())
inputs = meta["inputs"]
print(("PASS" if ok and ends and meta["val_split"] == "random" and meta["eos_id"] == 128001 else "FAIL") +
      f" make data-code: {meta['documents']} documents, each BOS ... EOS (BOS, EOS, tokens per split: {counts}), "
      "a random validation split")
print(("PASS" if counts["train"][2] >= 300 * 4 * 2048 and len(inputs) > 1000 and
       not any("site-packages" in path for path in inputs) and any(path.endswith("/os.py") for path in inputs)
       else "FAIL") + f" make data-code: {len(inputs)} .py files of the standard library (no site-packages), "
      f"{counts['train'][2]:,} train tokens, at least the 2,457,600 of a 300-step 1B run at 4 x 2048")
EOF
else
    echo "FAIL make data-code: $(tail -5 "$tmp/code.log")"
fi

"$PYTHON" tests/prepare_corpus_checks.py "$SHARED_DATA"
