#!/usr/bin/env python3
"""prepare_data.py: tokenizes a text into llm.c-format train/val token shards (and meta.json) for ./train.

    python scripts/prepare_data.py --tokenizer byte --out data/tinyshakespeare_byte
    python scripts/prepare_data.py --tokenizer path/to/tokenizer.model --text input.txt --out data/mytext_llama3

The text (TinyShakespeare, downloaded, unless --text is given) is split into documents at blank lines; the last
--val-fraction of the documents is the validation split (like nanoGPT). Byte vocabulary: the tokens are the UTF-8
bytes, in uint16 shards, with no BOS. Llama 3 (a tiktoken-format tokenizer.model): every document starts with BOS
<|begin_of_text|> = 128000, in uint32 shards. Shards are OUT/train_000000.bin, OUT/val_000000.bin, ...: a header of
256 int32 (magic, version 1, token count) then the tokens, little-endian; each is written to a temporary name and
renamed when complete.
"""
import argparse
import array
import json
import os
import re
import sys
import urllib.error
import urllib.request

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
MAGIC = {"uint16": 20240520, "uint32": 20240801}
SHARD_VERSION = 1
HEADER_INTS = 256
MAX_SHARD_TOKENS = 2**31 - 1  # the header's token count is an int32

LLAMA3_NUM_RANKS = 128000
LLAMA3_BOS = 128000
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPECIAL_NAMES = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
] + [f"<|reserved_special_token_{i}|>" for i in range(3, 248)]
SHARD_NAME = re.compile(r"^(train|val)_\d{6}\.bin$")


def die(message):
    print(f"prepare_data.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def read_text(path):
    """The text of --text, or TinyShakespeare downloaded when no path is given."""
    if path is None:
        print(f"downloading {TINYSHAKESPEARE_URL}")
        try:
            with urllib.request.urlopen(TINYSHAKESPEARE_URL, timeout=30) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as e:
            die(
                f"could not download TinyShakespeare from {TINYSHAKESPEARE_URL} ({getattr(e, 'reason', e)}); "
                "if this machine is offline, pass --text PATH with a local copy of the text"
            )
        source = TINYSHAKESPEARE_URL
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            die(f"cannot read the text file {path}: {e.strerror}")
        source = path
    try:
        return data.decode("utf-8"), source
    except UnicodeDecodeError as e:
        die(f"the text {source} is not UTF-8 (byte {e.start}: {e.reason})")


class Tokenizer:
    """spec "byte" or a tiktoken-format Llama 3 tokenizer.model; encode_batch(texts) gives one id list per text."""

    def __init__(self, spec):
        self.spec = spec
        if spec == "byte":
            self.vocab_size, self.bos, self.dtype = 256, None, "uint16"
            self.encoding = None
            return
        try:
            import tiktoken
            from tiktoken.load import load_tiktoken_bpe
        except ImportError:
            die("the Llama 3 tokenizer needs the tiktoken package (pip install tiktoken)")
        if not os.path.isfile(spec):
            die(f"tokenizer file {spec} not found (--tokenizer takes 'byte' or the path of a Llama 3 tokenizer.model)")
        # tiktoken caches even local files under their path in a temporary directory, so an edited or replaced file
        # would be read from a stale copy: an empty cache directory turns that cache off.
        os.environ["TIKTOKEN_CACHE_DIR"] = ""
        try:
            ranks = load_tiktoken_bpe(spec)
        except (ValueError, OSError) as e:
            die(f"cannot load the tokenizer file {spec}: {e}")
        if sorted(ranks.values()) != list(range(LLAMA3_NUM_RANKS)):
            die(
                f"tokenizer file {spec} has {len(ranks)} distinct tokens with ranks "
                f"{min(ranks.values(), default=None)}..{max(ranks.values(), default=None)}; "
                f"a Llama 3 tokenizer.model has ranks 0..{LLAMA3_NUM_RANKS - 1}"
            )
        special = {name: LLAMA3_NUM_RANKS + i for i, name in enumerate(LLAMA3_SPECIAL_NAMES)}
        self.encoding = tiktoken.Encoding(
            name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=special
        )
        self.vocab_size, self.bos, self.dtype = self.encoding.n_vocab, LLAMA3_BOS, "uint32"

    def encode_batch(self, texts):
        if self.encoding is None:
            return [t.encode("utf-8") for t in texts]
        # encode_ordinary: text that looks like a special token ("<|eot_id|>") is ordinary text here
        return [[self.bos] + ids for ids in self.encoding.encode_ordinary_batch(texts)]


def split_documents(text):
    """Documents at blank lines; each keeps its trailing "\\n\\n", so that their concatenation is the text."""
    sections = text.split("\n\n")
    documents = [s + "\n\n" for s in sections[:-1]] + [sections[-1]]
    return [d for d in documents if d]


class ShardWriter:
    """Writes one split's token stream as shards of shard_tokens tokens (the last one shorter)."""

    def __init__(self, out_dir, split, dtype, shard_tokens):
        self.out_dir, self.split, self.dtype, self.shard_tokens = out_dir, split, dtype, shard_tokens
        self.typecode = "H" if dtype == "uint16" else next(c for c in "IL" if array.array(c).itemsize == 4)
        self.buffer = array.array(self.typecode)
        self.files, self.num_tokens = [], 0

    def add(self, ids):
        self.buffer.extend(ids)
        while len(self.buffer) >= self.shard_tokens:
            self._write(self.buffer[: self.shard_tokens])
            del self.buffer[: self.shard_tokens]

    def close(self):
        if len(self.buffer):
            self._write(self.buffer)
            self.buffer = array.array(self.typecode)

    def _write(self, tokens):
        name = f"{self.split}_{len(self.files):06d}.bin"
        path = os.path.join(self.out_dir, name)
        header = array.array("i", [MAGIC[self.dtype], SHARD_VERSION, len(tokens)] + [0] * (HEADER_INTS - 3))
        tokens = array.array(self.typecode, tokens)
        if sys.byteorder == "big":
            header.byteswap()
            tokens.byteswap()
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(header.tobytes())
                f.write(tokens.tobytes())
            os.replace(path + ".tmp", path)
        except OSError as e:
            die(f"cannot write the shard {path}: {e.strerror}")
        self.files.append(name)
        self.num_tokens += len(tokens)


def progress(done, total, label, width=40):
    filled = width * done // max(total, 1)
    percent = 100 * done // max(total, 1)
    print(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {percent:3d}% ({done:,}/{total:,} chars)",
          end="", file=sys.stderr, flush=True)


def tokenize(documents, num_train, tokenizer, writers, batch_docs=512):
    """Tokenizes the documents into the writers (the first num_train into "train"), with a progress bar."""
    total_chars = sum(len(d) for d in documents)
    done_chars = 0
    for start in range(0, len(documents), batch_docs):
        batch = documents[start : start + batch_docs]
        for i, ids in enumerate(tokenizer.encode_batch(batch), start):
            writers["train" if i < num_train else "val"].add(ids)
        done_chars += sum(len(d) for d in batch)
        progress(done_chars, total_chars, "tokenizing")
    print(file=sys.stderr)
    for writer in writers.values():
        writer.close()


def remove_stale_shards(out_dir, written):
    """Removes train_*/val_* shards left in out_dir by an earlier run (they would be read as part of this data)."""
    stale = [n for n in os.listdir(out_dir) if SHARD_NAME.match(n) and n not in written]
    for name in stale:
        os.remove(os.path.join(out_dir, name))
    if stale:
        print(f"removed {len(stale)} shard(s) of an earlier run from {out_dir}")


def write_json(path, obj):
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        os.replace(path + ".tmp", path)
    except OSError as e:
        die(f"cannot write {path}: {e.strerror}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", help="the text file (UTF-8); default: download TinyShakespeare")
    parser.add_argument("--tokenizer", default="byte", help="'byte' or the path of a Llama 3 tiktoken tokenizer.model")
    parser.add_argument("--out", required=True, help="the output directory")
    parser.add_argument("--val-fraction", type=float, default=0.1, help="the last fraction of the documents (0.1)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (100,000,000)")
    args = parser.parse_args()
    if not 0 <= args.val_fraction < 1:
        die(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        die(f"--shard-tokens must be in [1, {MAX_SHARD_TOKENS}], got {args.shard_tokens}")

    tokenizer = Tokenizer(args.tokenizer)
    text, source = read_text(args.text)
    documents = split_documents(text)
    if not documents:
        die(f"the text {source} is empty")
    num_val = 0
    if args.val_fraction > 0:
        if len(documents) < 2:
            die(f"the text {source} has no blank line, so no second document for validation: pass --val-fraction 0")
        num_val = min(max(1, round(len(documents) * args.val_fraction)), len(documents) - 1)
    num_train = len(documents) - num_val

    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        die(f"cannot create the output directory {args.out}: {e.strerror}")
    writers = {split: ShardWriter(args.out, split, tokenizer.dtype, args.shard_tokens) for split in ("train", "val")}
    tokenize(documents, num_train, tokenizer, writers)
    remove_stale_shards(args.out, {n for w in writers.values() for n in w.files})

    meta = {
        "text": source,
        # absolute, so that ./train's "tokenizer": "auto" finds the file from any working directory
        "tokenizer": tokenizer.spec if tokenizer.spec == "byte" else os.path.abspath(tokenizer.spec),
        "vocab_size": tokenizer.vocab_size,
        "bos_id": tokenizer.bos,
        "token_dtype": tokenizer.dtype,
        "magic": MAGIC[tokenizer.dtype],
        "val_fraction": args.val_fraction,
        "shard_tokens": args.shard_tokens,
        "documents": {"train": num_train, "val": num_val},
        "tokens": {split: w.num_tokens for split, w in writers.items()},
        "files": {split: w.files for split, w in writers.items()},
    }
    write_json(os.path.join(args.out, "meta.json"), meta)

    print(f"{len(documents):,} documents ({num_train:,} train, {num_val:,} val), vocabulary {args.tokenizer} "
          f"({tokenizer.vocab_size:,} ids, {tokenizer.dtype} tokens)")
    for split, w in writers.items():
        print(f"{split}: {w.num_tokens:,} tokens in {len(w.files)} file(s): {', '.join(w.files) or '-'}")
    print(f"wrote {sum(len(w.files) for w in writers.values())} shard(s) and meta.json to {args.out}")


if __name__ == "__main__":
    main()
