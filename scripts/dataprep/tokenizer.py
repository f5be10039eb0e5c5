"""tokenizer.py: the byte vocabulary and the Llama 3 tokenizer (a tiktoken-format tokenizer.model), encoding a batch of
documents into the little-endian token bytes of a shard, and the per-process state of the worker pool."""
import array
import hashlib
import os
import signal
import sys

from dataprep.errors import PrepError

LLAMA3_NUM_RANKS = 128000
LLAMA3_BOS = 128000
LLAMA3_EOS = 128001  # <|end_of_text|>
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
TYPECODES = {"uint16": "H", "uint32": next(c for c in "IL" if array.array(c).itemsize == 4)}


class Tokenizer:
    """spec "byte" or the path of a tiktoken-format Llama 3 tokenizer.model; eos: end every document with the
    end-of-text token (--eos)."""

    def __init__(self, spec, eos=False):
        self.spec, self.eos = spec, LLAMA3_EOS if eos else None
        if spec == "byte":
            if eos:
                raise PrepError("--eos: the byte vocabulary has no end-of-text token (its 256 ids are the bytes)")
            self.vocab_size, self.bos, self.dtype = 256, None, "uint16"
            self.encoding = None
            return
        try:
            import tiktoken
            from tiktoken.load import load_tiktoken_bpe
        except ImportError:
            raise PrepError("the Llama 3 tokenizer needs the tiktoken package (pip install tiktoken)")
        if not os.path.isfile(spec):
            raise PrepError(
                f"tokenizer file {spec} not found (--tokenizer takes 'byte' or the path of a Llama 3 tokenizer.model)"
            )
        # tiktoken caches even local files under their path in a temporary directory, so an edited or replaced file
        # would be read from a stale copy: an empty cache directory turns that cache off.
        os.environ["TIKTOKEN_CACHE_DIR"] = ""
        try:
            ranks = load_tiktoken_bpe(spec)
        except (ValueError, OSError) as e:
            raise PrepError(f"cannot load the tokenizer file {spec}: {e}")
        if sorted(ranks.values()) != list(range(LLAMA3_NUM_RANKS)):
            raise PrepError(
                f"tokenizer file {spec} has {len(ranks)} distinct tokens with ranks "
                f"{min(ranks.values(), default=None)}..{max(ranks.values(), default=None)}; "
                f"a Llama 3 tokenizer.model has ranks 0..{LLAMA3_NUM_RANKS - 1}"
            )
        special = {name: LLAMA3_NUM_RANKS + i for i, name in enumerate(LLAMA3_SPECIAL_NAMES)}
        self.encoding = tiktoken.Encoding(
            name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=special
        )
        self.vocab_size, self.bos, self.dtype = self.encoding.n_vocab, LLAMA3_BOS, "uint32"

    def identity(self):
        """What names this vocabulary in meta.json and the resume record: 'byte', or the file's path and digest."""
        if self.encoding is None:
            return {"tokenizer": "byte"}
        with open(self.spec, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        # absolute, so that ./train's "tokenizer": "auto" finds the file from any working directory
        return {"tokenizer": os.path.abspath(self.spec), "tokenizer_sha256": digest}

    def encode_documents(self, texts):
        """The documents' tokens, concatenated, as little-endian shard bytes; the token count of each document; and
        the documents' size in UTF-8 bytes. Llama 3: every document starts with BOS (and ends with EOS with --eos);
        text that looks like a special token ("<|eot_id|>") is ordinary text."""
        tokens = array.array(TYPECODES[self.dtype])
        counts, text_bytes = [], 0
        for text in texts:
            data = text.encode("utf-8")
            text_bytes += len(data)
            before = len(tokens)
            if self.encoding is None:
                tokens.extend(data)
            else:
                tokens.append(self.bos)
                tokens.extend(self.encoding.encode_ordinary(text))
                if self.eos is not None:
                    tokens.append(self.eos)
            counts.append(len(tokens) - before)
        if sys.byteorder == "big":
            tokens.byteswap()
        return tokens.tobytes(), counts, text_bytes


_worker_tokenizer = None


def init_worker(spec, eos):
    """The pool's initializer: each worker process loads the tokenizer once, and leaves Ctrl-C to the main process
    (which stops the pool)."""
    global _worker_tokenizer
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_tokenizer = Tokenizer(spec, eos)


def encode_in_worker(texts):
    return _worker_tokenizer.encode_documents(texts)
