#!/usr/bin/env python3
"""prepare_data.py: tokenizes a corpus into llm.c-format train/val token shards (and meta.json) for ./train.

    python scripts/prepare_data.py --tokenizer byte --out data/tinyshakespeare_byte
    python scripts/prepare_data.py --tokenizer path/to/tokenizer.model --text input.txt --out data/mytext_llama3
    python scripts/prepare_data.py --tokenizer tokenizer.model --text corpus/ 'more/*.parquet' --out data/corpus
    python scripts/prepare_data.py --tokenizer tokenizer.model --text src/ --format txt --doc-per-file --eos \
        --val-split random --skip-invalid --out data/code
    python scripts/prepare_data.py --tokenizer tokenizer.model --hf-dataset HuggingFaceFW/fineweb-edu \\
        --hf-name sample-10BT --val-docs 10000 --out data/fineweb

Inputs: --text (repeatable, several values each) names files, directories (their files with a known name ending, or
every file with --format, recursively, sorted by path) and glob patterns (** for any depth), read in that order;
symbolic links are followed. Without --text or --hf-dataset, TinyShakespeare is downloaded. Formats by name ending or
--format: plain text (.txt: documents end at blank lines, each keeping its blank line; with --doc-per-file a file is one
document), JSON lines (.jsonl: one object per line, its --text-field string is a document), Parquet (.parquet: the
--text-field column); .txt.gz and .jsonl.gz are read through gzip. --hf-dataset streams a Hugging Face dataset through
the datasets library. Everything is streamed: memory does not grow with the corpus. A first pass counts the records and
finds what cannot be read as text, or entered: it stops the run naming every one, or with --skip-invalid is left out
and listed at the end.

Validation (--val-split tail): the last --val-fraction of the records (documents), as the single-text preparation
always did, or the first --val-docs records; --val-split random draws as many at random (--seed). Byte vocabulary: the
tokens are the UTF-8 bytes, in uint16 shards, with no BOS. Llama 3 (a tiktoken-format tokenizer.model): every document
starts with BOS <|begin_of_text|> = 128000 (and with --eos ends with <|end_of_text|> = 128001), in uint32 shards. The
documents are tokenized in order on --workers processes, so the shards do not depend on the worker count. Shards are
OUT/train_000000.bin, OUT/val_000000.bin, ... of --shard-tokens tokens (the last of a split shorter): a header of 256
int32 (magic, version 1, token count) then the tokens, little-endian; each is written under a temporary name and
renamed when complete.

Reruns: OUT/progress.json records the settings and how far each split's complete shards go; a rerun of the same
command resumes there (an interrupted or failed run loses at most its partial shards, which it removes), and one after
a complete run has nothing to do. A rerun with other inputs or settings stops unless --overwrite, which removes the
earlier shards and starts again, or unless the earlier run completed no shard. One run at a time per --out: a lock file
in it (flock) refuses a second, naming the first's PID.
"""
import argparse
import os
import signal
import sys

from dataprep.errors import PrepError
from dataprep.hub import HubCorpus
from dataprep.inputs import LocalCorpus, download, expand_inputs
from dataprep.lock import OutDirLock
from dataprep.prepare import prepare
from dataprep.readers import FORMATS
from dataprep.resume import open_out_dir
from dataprep.shards import MAX_SHARD_TOKENS
from dataprep.splits import Splits
from dataprep.tokenizer import Tokenizer

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", nargs="+", action="extend", metavar="INPUT",
                        help="files, directories or glob patterns (repeatable); default: download TinyShakespeare")
    parser.add_argument("--format", choices=sorted(FORMATS),
                        help="the format of every input, whatever its name (default: by name ending)")
    parser.add_argument("--text-field", default="text", help="the JSONL field / Parquet column of the text (text)")
    parser.add_argument("--doc-per-file", action="store_true",
                        help="a text file is one document, its whole content (default: documents end at blank lines)")
    parser.add_argument("--eos", action="store_true",
                        help="end every document with the end-of-text token (Llama 3: 128001 <|end_of_text|>)")
    parser.add_argument("--hf-dataset", metavar="NAME", help="a Hugging Face dataset, streamed (needs datasets)")
    parser.add_argument("--hf-name", help="the dataset's configuration (e.g. sample-10BT)")
    parser.add_argument("--hf-split", default="train", help="the dataset's split (train)")
    parser.add_argument("--tokenizer", default="byte", help="'byte' or the path of a Llama 3 tiktoken tokenizer.model")
    parser.add_argument("--out", required=True, help="the output directory")
    parser.add_argument("--val-fraction", type=float, help="the fraction of the records for validation (0.1)")
    parser.add_argument("--val-docs", type=int, metavar="N", help="N records for validation instead")
    parser.add_argument("--val-split", choices=["tail", "random"], default="tail",
                        help="tail: the last --val-fraction of the records, or the first --val-docs (the default); "
                        "random: as many drawn at random with --seed")
    parser.add_argument("--seed", type=int, help="the seed of --val-split random (0)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (100,000,000)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizer processes (all cores)")
    parser.add_argument("--overwrite", action="store_true", help="remove an earlier preparation in --out first")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="leave out the files and records that cannot be read as text, listing them at the end "
                        "(default: the first pass over the inputs stops the run, naming every one)")
    args = parser.parse_args()
    if args.val_docs is not None and args.val_fraction is not None:
        raise PrepError("--val-fraction and --val-docs both place the validation split: pass one of them")
    if args.val_docs is not None and args.val_docs < 1:
        raise PrepError(f"--val-docs must be at least 1, got {args.val_docs} (--val-fraction 0: no validation split)")
    if args.val_docs is None and args.val_fraction is None:
        args.val_fraction = 0.1
    if args.val_fraction is not None and not 0 <= args.val_fraction < 1:
        raise PrepError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        raise PrepError(f"--shard-tokens must be in [1, {MAX_SHARD_TOKENS}], got {args.shard_tokens}")
    if args.workers < 1:
        raise PrepError(f"--workers must be at least 1, got {args.workers}")
    if args.seed is not None and args.val_split != "random":
        raise PrepError("--seed draws the validation records of --val-split random: pass that too, or no --seed")
    if args.val_split == "random" and args.seed is None:
        args.seed = 0
    if args.hf_dataset and args.text:
        raise PrepError("--text and --hf-dataset both name the corpus: pass one of them")
    return args


def open_corpus(args):
    """The corpus, its records counted; the description used in messages."""
    if args.hf_dataset:
        corpus = HubCorpus(args.hf_dataset, args.hf_name, args.hf_split, args.text_field)
        return corpus, f"the Hugging Face dataset {corpus.description}"
    files, problems = expand_inputs(args.text, args.format) if args.text else ([download(TINYSHAKESPEARE_URL)], [])
    print(f"counting the records of {len(files)} input file(s)")
    corpus = LocalCorpus(files, args.text_field, args.doc_per_file, problems, args.skip_invalid)
    description = files[0].path if len(files) == 1 else f"the {len(files)} input files"
    if corpus.total == 0:
        raise PrepError(f"{description}: no records (empty" + (f"; left out: {corpus.summary()})" if corpus.skipped
                                                                 else ")"))
    return corpus, description


def file_range(files):
    return f"{files[0]} .. {files[-1]}" if len(files) > 2 else ", ".join(files) or "-"


def main():
    args = parse_args()
    tokenizer = Tokenizer(args.tokenizer, args.eos)
    corpus, description = open_corpus(args)
    splits = Splits(corpus.total, args.val_fraction, args.val_docs, args.val_split, args.seed, description)
    settings = {
        "inputs": corpus.identity(),
        "text_field": args.text_field,
        "doc_per_file": args.doc_per_file,
        "eos": args.eos,
        **tokenizer.identity(),
        "shard_tokens": args.shard_tokens,
        "val_fraction": args.val_fraction,
        "val_docs": args.val_docs,
        "val_split": args.val_split,
        "seed": args.seed,
    }
    with OutDirLock(args.out):
        state, record = open_out_dir(args.out, settings, args.overwrite)
        if state == "complete":
            shards = sum(len(files) for files in record["files"].values())
            print(f"{args.out} already holds this preparation ({shards} shard(s) and meta.json): nothing to do")
            return
        if state == "resume":
            shards = sum(len(split["files"]) for split in record["splits"].values())
            start = min([s["next_record"] for s in record["splits"].values() if not s["complete"]], default=None)
            print(f"resuming the preparation in {args.out} at " + ("the end" if start is None else f"record {start:,}")
                  + f" after {shards} complete shard(s)")
        meta = prepare(args.out, corpus, tokenizer, splits, settings, record, args.shard_tokens, args.workers)

    documents = meta["documents"]
    print(f"{sum(documents.values()):,} documents ({documents['train']:,} train, {documents['val']:,} val) from "
          f"{description}, vocabulary {args.tokenizer} ({tokenizer.vocab_size:,} ids, {tokenizer.dtype} tokens)")
    for split, files in meta["files"].items():
        print(f"{split}: {meta['tokens'][split]:,} tokens in {len(files)} file(s): {file_range(files)}")
    print(f"wrote {sum(len(f) for f in meta['files'].values())} shard(s) and meta.json to {args.out}")
    if meta["skipped"]:
        print(f"left out, as what cannot be read as text (--skip-invalid): {corpus.summary()}:\n  "
              + "\n  ".join(meta["skipped"]))


class Terminated(BaseException):
    """SIGTERM (a scheduler's stop, kill): the run ends as on Ctrl-C, its partial shard removed."""


def terminate(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, terminate)
    try:
        main()
    except PrepError as e:
        print(f"\nprepare_data.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except (KeyboardInterrupt, Terminated) as e:
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"\nprepare_data.py: {how}: the complete shards are kept; the same command resumes", file=sys.stderr)
        sys.exit(143 if isinstance(e, Terminated) else 130)
    # the run is complete: a SIGTERM from here on ends the process as by default, not with a traceback from the
    # interpreter's exit handlers (and a status of 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
