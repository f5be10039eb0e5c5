#!/usr/bin/env python3
"""bench_prepare_data.py: the throughput of scripts/prepare_data.py on a generated corpus (TinyShakespeare repeated and
cut into documents of 1 to 25 kB) written as JSONL and as Parquet, for each worker count; prints a Markdown table of
wall time, CPU time (of all its processes), tokens/s and MB/s of text (the documents' UTF-8 bytes), and the load
average when each run ended (other work on the machine slows the wall time, not the CPU time).

    python3 scripts/bench_prepare_data.py --tokenizer ../shared/data/llama3_tokenizer.model --mb 300 --workers 1 2
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds():
    """User + system time of the finished child processes and theirs (prepare_data.py and its workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def documents(text, total_bytes):
    """Documents cut from text repeated until total_bytes, of sizes running through 1 to 25 kB."""
    at, size, made = 0, 1000, 0
    while made < total_bytes:
        if at + size > len(text):
            at = 0
        yield text[at : at + size]
        made += size
        at, size = at + size, 1000 + (size * 7919) % 24000


def write_corpus(directory, text, total_bytes):
    import pyarrow
    import pyarrow.parquet

    docs = list(documents(text, total_bytes))
    jsonl, parquet = os.path.join(directory, "corpus.jsonl"), os.path.join(directory, "corpus.parquet")
    with open(jsonl, "w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")
    pyarrow.parquet.write_table(pyarrow.table({"text": docs}), parquet, row_group_size=10000)
    return {"jsonl": jsonl, "parquet": parquet}, len(docs), sum(len(d.encode()) for d in docs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", default=os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"))
    parser.add_argument("--tokenizer", required=True, help="'byte' or a Llama 3 tokenizer.model")
    parser.add_argument("--mb", type=float, default=300, help="corpus size in MB of text (300)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dir", help="where to write the corpus and shards (default: a temporary directory)")
    args = parser.parse_args()
    text = open(args.text, encoding="utf-8").read()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        corpus, num_docs, text_bytes = write_corpus(tmp, text, int(args.mb * 1e6))
        sizes = {fmt: os.path.getsize(path) / 1e6 for fmt, path in corpus.items()}
        print(f"{num_docs:,} documents, {text_bytes / 1e6:.1f} MB of text; JSONL {sizes['jsonl']:.1f} MB, Parquet "
              f"{sizes['parquet']:.1f} MB; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
        print("| input | workers | wall s | CPU s | tokens | tokens/s | MB/s of text | load average |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for fmt, path in corpus.items():
            for workers in args.workers:
                out = os.path.join(tmp, f"out_{fmt}_{workers}")
                start, cpu = time.monotonic(), cpu_seconds()
                subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "prepare_data.py"), "--text", path,
                                "--tokenizer", args.tokenizer, "--out", out, "--workers", str(workers)],
                               check=True, stdout=subprocess.DEVNULL)
                wall, cpu = time.monotonic() - start, cpu_seconds() - cpu
                tokens = sum(json.load(open(os.path.join(out, "meta.json")))["tokens"].values())
                print(f"| {fmt} | {workers} | {wall:.1f} | {cpu:.1f} | {tokens:,} | {tokens / wall:,.0f} | "
                      f"{text_bytes / wall / 1e6:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
                subprocess.run(["rm", "-rf", out], check=True)


if __name__ == "__main__":
    main()
