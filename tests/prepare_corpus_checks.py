#!/usr/bin/env python3
"""prepare_corpus_checks.py (run by tests/test_prepare_data.sh): scripts/prepare_data.py on a corpus that it writes in
a temporary directory (plain text, JSONL and Parquet files, gzip-compressed ones, a directory and a glob pattern): the
token stream of each split equals tokenizing the documents directly, in order (byte and Llama 3 vocabularies); shard
sizes; 1, 2 and 3 workers give the same bytes; a run killed mid-way and rerun resumes and gives the same bytes; bad
input stops with a message naming the file and a nonzero exit. Prints one PASS or FAIL line per check.

    python3 tests/prepare_corpus_checks.py SHARED_DATA_DIR
"""
import glob
import gzip
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import check  # noqa: E402
from dataprep import readers  # noqa: E402
from dataprep.tokenizer import LLAMA3_PATTERN  # noqa: E402 (the pattern is Llama 3's definition, not our code)

BOS = 128000
EOS = 128001
SHARD_TOKENS = 3001
LARGE_SHARD_TOKENS = 20011


def command(args):
    return [sys.executable, os.path.join(ROOT, "scripts", "prepare_data.py")] + [str(a) for a in args]


def run(args):
    """(exit status, stdout + stderr) of prepare_data.py."""
    done = subprocess.run(command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return done.returncode, done.stdout


def files_of(out):
    """{name: bytes} of every file in out."""
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(out, "*")))}


def read_shards(out, label):
    """{split: tokens} of a complete output directory, checking each shard's header and size."""
    meta = json.load(open(os.path.join(out, "meta.json")))
    size = 2 if meta["token_dtype"] == "uint16" else 4
    tokens, ok = {}, True
    for split in ("train", "val"):
        tokens[split] = []
        names = meta["files"][split]
        ok = ok and names == [f"{split}_{i:06d}.bin" for i in range(len(names))]
        for i, name in enumerate(names):
            data = open(os.path.join(out, name), "rb").read()
            magic, version, count = struct.unpack_from("<3i", data)
            last = i == len(names) - 1
            ok = ok and magic == meta["magic"] and version == 1 and len(data) == 1024 + count * size
            ok = ok and (count == meta["shard_tokens"] if not last else 0 < count <= meta["shard_tokens"])
            tokens[split] += struct.unpack_from(f"<{count}{'H' if size == 2 else 'I'}", data, 1024)
        ok = ok and len(tokens[split]) == meta["tokens"][split]
    check(ok, f"{label}: shards named in order, headers right, {meta['shard_tokens']} tokens in each but a split's "
          "last, token counts as meta.json says")
    return tokens, meta


# --- the corpus -------------------------------------------------------------------------------------------------------

def text_records(data):
    sections = data.decode("utf-8").split("\n\n")
    return [s + "\n\n" for s in sections[:-1]] + ([sections[-1]] if sections[-1] else [])


def jsonl_records(data, field="text"):
    return [json.loads(line)[field] if line.strip() else "" for line in data.split(b"\n")[:-1]]


def write_corpus(tmp, shakespeare):
    """Writes the corpus; returns (its --text arguments, every record's text in the order prepare_data.py reads)."""
    import pyarrow
    import pyarrow.parquet

    paragraphs = text_records(shakespeare[:60000].encode())
    corpus, extra = os.path.join(tmp, "corpus"), os.path.join(tmp, "extra")
    os.makedirs(os.path.join(corpus, "sub"))
    os.makedirs(extra)
    records = []

    plays = (shakespeare[60000:75000] + "\n\nNURSE:\nA naïve café — ünïcode, 日本語.\n\n\n\nEnd").encode()
    open(os.path.join(corpus, "1_plays.txt"), "wb").write(plays)
    records += text_records(plays)

    lines = [json.dumps({"id": i, "text": p}, ensure_ascii=i % 2 == 0) for i, p in enumerate(paragraphs[:200])]
    lines[5] = ""  # a blank line: a record without a document
    lines[6] = json.dumps({"text": ""})  # an empty text: no document either
    lines[7] = json.dumps({"text": "<|eot_id|> is ordinary text here, and so is <|begin_of_text|>"})
    lines[8] = json.dumps({"text": "carriage return\r\nline"}) + "\r"
    jsonl = ("\n".join(lines) + "\n").encode()
    open(os.path.join(corpus, "2_lines.jsonl"), "wb").write(jsonl)
    records += [json.loads(line)["text"] if line.strip() else "" for line in lines]

    rows = paragraphs[200:330] + ["", "x"]
    table = pyarrow.table({"text": rows, "n": list(range(len(rows)))})
    pyarrow.parquet.write_table(table, os.path.join(corpus, "sub", "3_rows.parquet"), row_group_size=17)
    records += rows

    more = ("\n".join(json.dumps({"text": p}) for p in paragraphs[330:400]) + "\n").encode()
    open(os.path.join(corpus, "sub", "4_more.jsonl.gz"), "wb").write(gzip.compress(more))
    records += jsonl_records(more)
    gzipped = shakespeare[75000:90000].encode()
    open(os.path.join(corpus, "sub", "5_more.txt.gz"), "wb").write(gzip.compress(gzipped))
    records += text_records(gzipped)

    open(os.path.join(corpus, ".hidden.txt"), "w").write("not read: a hidden file\n")
    open(os.path.join(corpus, "notes.md"), "w").write("not read: not a known name ending\n")
    pyarrow.parquet.write_table(pyarrow.table({"text": paragraphs[400:]}), os.path.join(extra, "6_extra.parquet"))
    records += paragraphs[400:]
    return [corpus, os.path.join(extra, "*.parquet")], records


def expected_tokens(records, encode, val_fraction=0.1):
    """{split: tokens} from tokenizing each record's text directly; the last val_fraction of the records are val."""
    num_val = min(max(1, round(len(records) * val_fraction)), len(records) - 1)
    streams = {"train": [], "val": []}
    documents = {"train": 0, "val": 0}
    for i, text in enumerate(records):
        split = "val" if i >= len(records) - num_val else "train"
        if text.strip():  # an empty record, or one of only whitespace, gives no document
            streams[split] += encode(text)
            documents[split] += 1
    return streams, documents


def split_documents(tokens):
    """A Llama 3 token stream cut into its documents' tokens (each starts with BOS, which no text encodes to)."""
    starts = [i for i, t in enumerate(tokens) if t == BOS] + [len(tokens)]
    return [tuple(tokens[a:b]) for a, b in zip(starts, starts[1:])]


def random_split(tokens, documents, encode):
    """Checks that the splits' documents are the documents, each once, each split's in corpus order; returns the
    indices of the validation documents (None if not so)."""
    index = {tuple(encode(text)): i for i, text in enumerate(documents)}
    found = {split: [index.get(d, -1) for d in split_documents(tokens[split])] for split in ("train", "val")}
    ok = all(found[split] == sorted(found[split]) for split in found)
    return found["val"] if ok and sorted(found["train"] + found["val"]) == list(range(len(documents))) else None


def llama3_encoder(path):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    enc = tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=load_tiktoken_bpe(path),
                            special_tokens={"<|begin_of_text|>": BOS})
    return lambda text: [BOS] + enc.encode_ordinary(text)


# --- the checks -------------------------------------------------------------------------------------------------------

def check_tokens(tmp, inputs, records, kind, tokenizer, encode):
    out = os.path.join(tmp, f"{kind}_2")
    rc, log = run(["--text"] + inputs + ["--tokenizer", tokenizer, "--out", out, "--shard-tokens", SHARD_TOKENS,
                                         "--workers", 2])
    check(rc == 0, f"{kind}: prepare_data.py on {len(records)} records of txt, jsonl, parquet, gz, a directory and a "
          f"glob" + ("" if rc == 0 else f": {log[-600:]}"))
    if rc:
        return
    tokens, meta = read_shards(out, kind)
    expected, documents = expected_tokens(records, encode)
    for split in ("train", "val"):
        check(tokens[split] == expected[split] and meta["documents"][split] == documents[split],
              f"{kind}: the {split} tokens ({len(expected[split])}) are the {documents[split]} documents tokenized "
              "directly, in order")
    check(len(meta["files"]["train"]) > 3 and meta["files"]["val"], f"{kind}: several train shards and a val shard")
    check(set(files_of(out)) == set(meta["files"]["train"] + meta["files"]["val"] + ["meta.json"]),
          f"{kind}: the directory holds exactly meta.json and the shards")


def stop_after_shards(args, out, shards, attempts=3):
    """Starts prepare_data.py and stops it (SIGSTOP, with its workers) once its progress.json lists that many train
    shards (0: once it exists); returns the process (stopped, or ended on its own) and the last progress record read.
    A run that ends before the stop reaches it (on a loaded machine this test can be held up for longer than a short
    run takes) is started again on a fresh out, up to attempts runs in all."""
    for attempt in range(attempts):
        process = subprocess.Popen(command(args + ["--out", out]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        record, deadline = None, time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            try:
                record = json.load(open(os.path.join(out, "progress.json")))
            except (OSError, ValueError):
                record = None
            if record and len(record["splits"]["train"]["files"]) >= shards:
                os.killpg(process.pid, signal.SIGSTOP)
                break
            time.sleep(0.005)
        if process.poll() is None or attempt == attempts - 1:
            return process, record
        process.stderr.close()
        shutil.rmtree(out, ignore_errors=True)


def kill_after_shards(args, out, shards):
    """Starts prepare_data.py and kills it (SIGKILL, with its workers) once its progress.json lists that many train
    shards; returns the last progress record it read, or None."""
    process, record = stop_after_shards(args, out, shards)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return record if process.returncode == -signal.SIGKILL else None


def continue_run(process, sig=signal.SIGCONT):
    """Sends sig (and SIGCONT) to a process stopped by stop_after_shards; waits for it; returns (status, stderr)."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
        os.killpg(process.pid, signal.SIGCONT)
    return process.wait(), process.stderr.read()


def check_large(tmp, shakespeare, tokenizer):
    """A JSONL corpus of many batches (2 MB, documents of 1-25 kB): its tokens; 1, 2 and 3 workers give the same
    bytes; a run killed after a few shards and rerun resumes in the middle of a document and gives a straight run's
    bytes."""
    text = shakespeare * 2
    documents, at, size = [], 0, 1000
    while at < len(text):
        documents.append(text[at : at + size])
        at, size = at + size, 1000 + (size * 7919) % 24000
    path = os.path.join(tmp, "large.jsonl")
    open(path, "w").write("".join(json.dumps({"text": d}) + "\n" for d in documents))
    args = ["--text", path, "--tokenizer", tokenizer, "--shard-tokens", LARGE_SHARD_TOKENS]
    outs = {workers: os.path.join(tmp, f"large_{workers}") for workers in (1, 2, 3)}
    rc, log = run(args + ["--workers", 1, "--out", outs[1]])
    check(rc == 0, f"large: prepare_data.py on {len(documents)} documents" + ("" if rc == 0 else f": {log[-600:]}"))
    if rc:
        return
    tokens, meta = read_shards(outs[1], "large")
    expected, counts = expected_tokens(documents, llama3_encoder(tokenizer))
    check(tokens == expected and meta["documents"] == counts,
          f"large: the tokens ({len(expected['train'])} train, {len(expected['val'])} val) are the documents "
          "tokenized directly, in order")
    for workers in (2, 3):
        rc, log = run(args + ["--workers", workers, "--out", outs[workers]])
    check(files_of(outs[1]) == files_of(outs[2]) == files_of(outs[3]),
          f"large: 1, 2 and 3 workers write the same bytes ({len(files_of(outs[1]))} files)")

    resumed = os.path.join(tmp, "resumed")
    record = kill_after_shards(args + ["--workers", 1], resumed, 3)
    total = len(meta["files"]["train"])
    left = os.listdir(resumed) if os.path.isdir(resumed) else []
    train = record["splits"]["train"] if record else {"files": [], "skip_tokens": 0, "next_record": None}
    check(3 <= len(train["files"]) < total and train["skip_tokens"] > 0 and "meta.json" not in left,
          f"resume: killed after {len(train['files'])} of {total} train shards, {train['skip_tokens']} tokens into "
          f"record {train['next_record']} (progress.json, no meta.json)")
    rc, log = run(args + ["--workers", 2, "--out", resumed])
    check(rc == 0 and "resuming" in log and files_of(resumed) == files_of(outs[1]),
          "resume: the rerun (2 workers) resumes and writes bytewise the straight run's shards and meta.json, and "
          "nothing else" + ("" if rc == 0 else f": {log[-600:]}"))
    check_large_random(tmp, args, documents, tokenizer)
    return args, outs[1]


def check_large_random(tmp, args, documents, tokenizer):
    """--val-split random on the large corpus: the splits' documents; a run killed while both splits have shards in
    progress resumes each where its complete shards end, to a straight run's bytes."""
    args = args + ["--val-split", "random", "--seed", 11, "--val-fraction", 0.3]
    straight, resumed = os.path.join(tmp, "large_random"), os.path.join(tmp, "resumed_random")
    rc, log = run(args + ["--workers", 2, "--out", straight])
    val = random_split(read_shards(straight, "large, random")[0], documents, llama3_encoder(tokenizer)) if rc == 0 \
        else None
    check(val is not None and len(val) == round(0.3 * len(documents)),
          f"large, --val-split random: {len(val or [])} of {len(documents)} documents drawn for validation, the rest "
          "for training, each once, in order" + ("" if rc == 0 else f": {log[-400:]}"))
    record = kill_after_shards(args + ["--workers", 1], resumed, 12)
    at = {split: (len(s["files"]), s["next_record"], s["skip_tokens"]) for split, s in (record or {"splits": {}})[
        "splits"].items()}
    rc, log = run(args + ["--workers", 2, "--out", resumed])
    check(record is not None and at["val"][0] >= 1 and rc == 0 and "resuming" in log and
          files_of(resumed) == files_of(straight),
          f"large, --val-split random: killed with (shards, next record, tokens into it) {at}, the rerun resumes both "
          "splits and writes bytewise a straight run's files" + ("" if rc == 0 else f": {log[-400:]}"))


def check_one_run_per_out(tmp, args, straight):
    """A second run into an --out that a first run holds (stopped once its progress.json exists) is refused, naming the
    first's PID, and changes nothing there, with --overwrite as well; the first, continued, ends as a straight run."""
    out = os.path.join(tmp, "held")
    first, record = stop_after_shards(args + ["--workers", 1], out, 0)
    before = files_of(out)
    results = [run(args + ["--out", out] + extra) for extra in ([], ["--overwrite"])]
    changed = files_of(out) != before
    status, err = continue_run(first)
    refused = all(rc == 1 and f"process {first.pid}" in log and out in log for rc, log in results)
    check(record is not None and refused and not changed,
          f"two runs into one --out: the second (and one with --overwrite) is refused naming the first's PID "
          f"({first.pid}) and changes nothing" + ("" if refused and not changed else f": {results[0][1][-400:]}"))
    check(status == 0 and files_of(out) == files_of(straight) and sorted(os.listdir(out)) == list(files_of(out)),
          "two runs into one --out: the first, continued, writes a straight run's bytes and leaves no lock file"
          + ("" if status == 0 else f": [{status}] {err[-400:]}"))


def check_failed_runs(tmp, args, straight):
    """A run that fails on an input that disappears mid-way leaves its complete shards and progress.json but no .tmp
    shard; one that fails or is stopped (SIGTERM) before its first shard leaves nothing, and one killed then (SIGKILL)
    does not stop a rerun with other inputs. ("Before its first shard": shards larger than the corpus.)"""
    large, tokenizer = args[args.index("--text") + 1], args[args.index("--tokenizer") + 1]
    gone = os.path.join(tmp, "gone.jsonl")
    failed = os.path.join(tmp, "failed")
    for shards, out in ((2, failed), (0, failed + "_early")):
        open(gone, "w").write('{"text": "read after the other file"}\n' * 50)
        shard_tokens = LARGE_SHARD_TOKENS if shards else 10**7
        process, record = stop_after_shards(["--text", large, gone, "--tokenizer", tokenizer, "--shard-tokens",
                                             shard_tokens, "--workers", 1], out, shards)
        ended = process.poll() is not None
        os.remove(gone)
        status, err = continue_run(process)
        names = os.listdir(out) if os.path.isdir(out) else None
        if shards:
            ok = names is not None and "progress.json" in names and not [n for n in names if n.endswith(".tmp")] and \
                len([n for n in names if n.endswith(".bin")]) >= shards
            expected = "its complete shards and progress.json are kept, no .tmp shard is left"
        else:
            ok = names is None
            expected = "the output directory is removed (it held no complete shard)"
        check(record is not None and not ended and status == 1 and gone in err and ok,
              f"a run whose input disappears {f'after {shards} shards' if shards else 'before its first shard'}: exit "
              f"status 1 naming it; {expected}" + (": the run ended before the stop reached it" if ended else "")
              + ("" if status == 1 and ok else f": [{status}] {names} {err[-300:]}"))
    rc, log = run(args + ["--out", failed])
    check(rc == 1 and "inputs differ" in log and "--overwrite" in log,
          "a rerun with other inputs after a failed run that completed shards is refused" + ("" if rc else ": exit 0"))

    whole = ["--text", large, "--tokenizer", tokenizer, "--shard-tokens", 10**7]
    stopped = os.path.join(tmp, "stopped")
    process, record = stop_after_shards(whole, stopped, 0)
    ended = process.poll() is not None
    status, err = continue_run(process, signal.SIGTERM)
    check(record is not None and not ended and status == 143 and "terminated" in err and not os.path.exists(stopped),
          "a run stopped by SIGTERM before its first shard: exit status 143, nothing left"
          + (": the run ended before the stop reached it" if ended else "")
          + ("" if status == 143 else f": [{status}] {err[-200:]}"))
    killed = os.path.join(tmp, "killed")
    process, record = stop_after_shards(whole, killed, 0)
    continue_run(process, signal.SIGKILL)
    rc, log = run(args + ["--out", killed])
    check(record is not None and rc == 0 and files_of(killed) == files_of(straight),
          "a rerun with other settings after a run killed (SIGKILL) before its first shard is not refused, and "
          "writes a straight run's bytes" + ("" if rc == 0 else f": {log[-400:]}"))


def check_sections_across_chunks():
    """Text files are read in chunks of readers.CHUNK_BYTES: a blank line split across two chunks, runs of newlines
    and text without a blank line give the sections of str.split at every chunk size."""
    import io

    texts = ["", "a", "\n", "\n\n", "\n\n\n", "a\n\nb", "a\n\n\nb\n\n\n\nc\n", "ab\n\n", "x\n" * 9 + "\n\ny",
             "é\n\nü\n\n\n日本\n"]
    saved, ok = readers.CHUNK_BYTES, True
    try:
        for size in (1, 2, 3, 5, 64):
            readers.CHUNK_BYTES = size
            for text in texts:
                data = text.encode()
                sections = list(readers.text_sections(io.BytesIO(data)))
                ok = ok and [s.decode() for _, s in sections] == text_records(data)
                ok = ok and all(data[offset : offset + len(s)] == s for offset, s in sections)
    finally:
        readers.CHUNK_BYTES = saved
    check(ok, "text files split at blank lines as str.split does, with chunks of 1, 2, 3, 5 and 64 bytes")


def uint16_bytes(texts):
    data = "".join(texts).encode("utf-8")
    return struct.pack(f"<{len(data)}H", *data)


def check_other_inputs(tmp, paragraphs):
    """--format and --text-field: a .json file of JSON lines whose text is in "body"; repeated --text flags."""
    a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
    open(a, "w").write("".join(json.dumps({"body": p}) + "\n" for p in paragraphs[:30]))
    open(b, "w").write("".join(json.dumps({"body": p}) + "\n" for p in paragraphs[30:40]))
    out = os.path.join(tmp, "other")
    rc, log = run(["--text", b, "--text", a, "--format", "jsonl", "--text-field", "body", "--tokenizer", "byte",
                   "--out", out, "--val-docs", 10])
    ok = rc == 0
    if ok:
        meta = json.load(open(os.path.join(out, "meta.json")))
        tokens = {}
        for split in ("train", "val"):
            tokens[split] = b"".join(open(os.path.join(out, n), "rb").read()[1024:] for n in meta["files"][split])
        ok = tokens["val"] == uint16_bytes(paragraphs[30:40]) and tokens["train"] == uint16_bytes(paragraphs[:30])
    check(ok, "--format jsonl reads .json files, --text-field body, repeated --text in order, --val-docs 10: the "
          "first 10 records are val" + ("" if rc == 0 else f": {log[-600:]}"))


def write_code(tmp, files):
    """A directory of files .py files (some with blank lines, one empty, one of only blank lines) and a latin-1 one;
    returns its path and {path: text} of the UTF-8 ones, in path order."""
    code = os.path.join(tmp, "pysrc")
    os.makedirs(os.path.join(code, "pkg"))
    sources = {}
    for i in range(files):
        name = os.path.join(code, "pkg" if i % 3 else "", f"m{i:03d}.py")
        sources[name] = "" if i == 7 else "\n\n\n" if i == 8 else \
            f'"""Module {i}: naïve."""\nimport os\n\n\ndef f{i}(x):\n    return x * {i}\n' + "\n\n# end\n" * (i % 4)
        open(name, "w").write(sources[name])
    open(os.path.join(code, "pkg", "latin1.py"), "wb").write("# caf\u00e9\nx = 1\n".encode("latin-1"))
    return code, dict(sorted(sources.items()))


def check_code(tmp, tokenizer, encode):
    """--format txt --doc-per-file --eos on a directory of .py files: each file is one document, BOS, its whole
    content, EOS; --eos with the byte vocabulary is refused."""
    code, sources = write_code(tmp, 40)
    out = os.path.join(tmp, "pysrc_whole")
    rc, log = run(["--text", code, "--format", "txt", "--doc-per-file", "--eos", "--skip-invalid", "--tokenizer",
                   tokenizer, "--val-fraction", 0, "--out", out])
    ok = rc == 0
    if ok:
        tokens, meta = read_shards(out, "--doc-per-file --eos")
        documents = [text for text in sources.values() if text.strip()]
        expected = [t for text in documents for t in encode(text) + [EOS]]
        ok = tokens["train"] == expected and meta["documents"]["train"] == len(documents) and meta["eos_id"] == EOS
    check(ok, f"--format txt --doc-per-file --eos on a directory of .py files: each of the {len(sources) - 2} "
          f"nonblank files is one document, BOS, its whole content, EOS {EOS}; meta.json says eos_id"
          + ("" if rc == 0 else f": {log[-400:]}"))
    expect_error(tmp, "--eos with the byte vocabulary", ["--text", code, "--format", "txt", "--eos"],
                 ["--eos", "byte vocabulary"])

    args = ["--text", code, "--format", "txt", "--doc-per-file", "--eos", "--skip-invalid", "--tokenizer", tokenizer,
            "--val-split", "random", "--val-fraction", 0.25]
    chosen, outs = {}, {}
    for seed, workers in ((5, 1), (5, 2), (6, 2)):
        outs[seed, workers] = out = os.path.join(tmp, f"pysrc_random_{seed}_{workers}")
        rc, log = run(args + ["--seed", seed, "--workers", workers, "--out", out])
        if rc == 0:
            tokens, meta = read_shards(out, f"--val-split random --seed {seed}")
            chosen[seed, workers] = random_split(tokens, documents, lambda text: encode(text) + [EOS])
        else:
            chosen[seed, workers] = log[-400:]
    val, tail = chosen[5, 1], list(range(len(documents)))[-len(chosen[5, 1] or []):]
    check(isinstance(val, list) and 0 < len(val) <= round(0.25 * (len(sources) + 1)) and val != tail,
          f"--val-split random --seed 5 --val-fraction 0.25: the splits hold every document once, each in corpus "
          f"order; validation documents {val} of {len(documents)} (10 of the 41 records), not the last ones")
    check(files_of(outs[5, 1]) == files_of(outs[5, 2]) and isinstance(chosen[6, 2], list) and chosen[6, 2] != val,
          f"--val-split random: the same seed gives the same bytes (1 and 2 workers), another seed other documents "
          f"({chosen[6, 2]})")
    expect_error(tmp, "--seed without --val-split random", ["--text", code, "--format", "txt", "--seed", 1],
                 ["--seed", "--val-split random"])


def check_walks(tmp):
    """--format txt takes a directory's files whatever their names end with; symbolic links to directories are followed,
    each directory once; what cannot be entered (a dangling link, a link that loops, a directory without permission)
    stops the run, every one named."""
    code, outside = os.path.join(tmp, "code"), os.path.join(tmp, "outside")
    for directory in ("sub", ".hidden"):
        os.makedirs(os.path.join(code, directory))
    os.makedirs(outside)
    sources = {"a.py": "import os\n\n\ndef main():\n    pass\n", "sub/b.py": "x = 1\n", ".hidden/c.py": "hidden\n",
               "notes": "no name ending\n\nat all\n"}
    for name, text in sources.items():
        open(os.path.join(code, name), "w").write(text)
    open(os.path.join(outside, "d.py"), "w").write("linked = True\n")
    os.symlink(outside, os.path.join(code, "linked"))
    os.symlink("..", os.path.join(code, "sub", "up"))  # back to code/: walked once
    read = ["a.py", "linked/d.py", "notes", "sub/b.py"]
    expected = list("".join(open(os.path.join(code, name)).read() for name in read).encode())
    args = ["--format", "txt", "--tokenizer", "byte", "--val-fraction", 0]
    for label, inputs in (("a directory", [code]), ("a ** pattern", [os.path.join(code, "**", "*")])):
        out = os.path.join(tmp, "walked")
        rc, log = run(["--text"] + inputs + args + ["--out", out])
        ok = rc == 0 and read_shards(out, f"--format txt, {label}")[0]["train"] == expected
        check(ok, f"--format txt, {label}: every file ({', '.join(read)}) read once, in path order, a symbolic link to "
              "a directory followed, one back up not walked again, hidden names left out"
              + ("" if rc == 0 else f": {log[-400:]}"))
        subprocess.run(["rm", "-rf", out])

    os.symlink(os.path.join(tmp, "nowhere"), os.path.join(code, "sub", "dangling"))
    os.symlink("loop", os.path.join(code, "loop"))
    problems = [os.path.join(code, "sub", "dangling"), os.path.join(code, "loop")]
    locked = os.path.join(code, "locked")
    os.makedirs(locked)
    os.chmod(locked, 0)
    if os.access(locked, os.R_OK):  # root reads any directory
        print("SKIP a directory without read permission: this user (root) reads it all the same; the dangling and "
              "looping links stand for it")
    else:
        problems.append(locked)
    expect_error(tmp, "a directory walk that meets what it cannot enter", ["--text", code] + args,
                 problems + ["cannot read the directory" if locked in problems else "does not exist", "loops"])
    out = os.path.join(tmp, "walked")
    rc, log = run(["--text", code, "--skip-invalid"] + args + ["--out", out])
    left_out = log[log.find("left out"):]
    check(rc == 0 and all(problem in left_out for problem in problems) and
          read_shards(out, "--skip-invalid walk")[0]["train"] == expected,
          "--skip-invalid: the walk goes on past what it cannot enter, and the run lists each at the end"
          + ("" if rc == 0 else f": {log[-400:]}"))
    os.chmod(locked, 0o755)


def check_invalid(tmp):
    """A corpus with a file of each format that cannot be read as text in part or whole: without --skip-invalid the
    first pass names every one and nothing is written; with it the rest is prepared, and each is listed at the end and
    in meta.json."""
    import pyarrow
    import pyarrow.parquet

    mixed = os.path.join(tmp, "mixed")
    os.makedirs(mixed)
    p = lambda name: os.path.join(mixed, name)  # noqa: E731
    open(p("1_good.txt"), "w").write("a first document\n\na second\n")
    open(p("2_garbage.parquet"), "wb").write(b"not a parquet file")
    open(p("3_latin1.txt"), "wb").write("kept\n\ncaf\u00e9 left out\n\nkept too\n".encode("latin-1"))
    open(p("4_lines.jsonl"), "w").write('{"text": "line one"}\n{"text": "two\n{"text": "line three"}\n{"text": null}\n')
    pyarrow.parquet.write_table(pyarrow.table({"text": ["row zero", None, "row two"]}), p("5_rows.parquet"))
    kept = ["a first document\n\n", "a second\n", "kept\n\n", "kept too\n", "line one", "line three", "row zero",
            "row two"]
    problems = [p("2_garbage.parquet") + ": not a readable Parquet file",
                p("3_latin1.txt") + ": not UTF-8 text at byte 9",  # its second section
                p("4_lines.jsonl") + " line 2: not JSON", "(and 1 more line like it)", p("5_rows.parquet") + " row 1"]
    args = ["--text", mixed, "--tokenizer", "byte", "--val-fraction", 0]
    expect_error(tmp, "inputs that cannot be read as text, in part or whole", args,
                 problems + ["1 input whole, 4 records of 3 files", "--skip-invalid"])
    out = os.path.join(tmp, "skipped")
    rc, log = run(args + ["--skip-invalid", "--out", out])
    ok = rc == 0
    if ok:
        tokens, meta = read_shards(out, "--skip-invalid")
        left_out = log[log.find("left out"):]
        ok = tokens["train"] == list("".join(kept).encode()) and meta["documents"]["train"] == len(kept) and \
            all(problem in left_out for problem in problems) and len(meta["skipped"]) == 4 and \
            "1 input whole, 4 records of 3 files" in left_out
    check(ok, "--skip-invalid: the rest of the corpus is prepared, and each file that is left out in part or whole is "
          "listed at the end and in meta.json" + ("" if rc == 0 else f": {log[-500:]}"))


def expect_error(tmp, description, args, expected, absent=()):
    """prepare_data.py stops with exit status 1 and a message holding each of expected and none of absent, and leaves
    no output directory."""
    out = os.path.join(tmp, "error_out")
    rc, log = run(args + ["--out", out])
    ok = rc == 1 and "error:" in log and all(e in log for e in expected) and "Traceback" not in log
    ok = ok and not any(a in log for a in absent) and not os.path.exists(out)
    check(ok, f"bad input, {description}: exit status 1, the message names {', '.join(expected)}"
          + (f" and not {', '.join(absent)}" if absent else "") + ", nothing written"
          + ("" if ok else f": [{rc}] {log[-500:]}"))
    subprocess.run(["rm", "-rf", out])


def check_errors(tmp):
    import pyarrow
    import pyarrow.parquet

    bad = os.path.join(tmp, "bad")
    os.makedirs(os.path.join(bad, "empty_dir"))
    p = lambda name: os.path.join(bad, name)  # noqa: E731
    open(p("good.txt"), "w").write("a document\n\nanother\n")
    expect_error(tmp, "a missing file", ["--text", p("good.txt"), p("missing.jsonl")], [p("missing.jsonl")])
    expect_error(tmp, "a pattern that matches nothing", ["--text", p("*.parquet")], [p("*.parquet"), "matches no"])
    expect_error(tmp, "a directory without inputs", ["--text", p("empty_dir")], [p("empty_dir"), ".jsonl"])
    open(p("notes.md"), "w").write("text\n")
    expect_error(tmp, "an unknown name ending", ["--text", p("notes.md")], [p("notes.md"), "--format"])
    open(p("garbage.parquet"), "wb").write(b"this is not a parquet file at all")
    expect_error(tmp, "an unreadable Parquet file", ["--text", p("garbage.parquet")], [p("garbage.parquet"), "Parquet"])
    open(p("plain.jsonl.gz"), "w").write('{"text": "not compressed"}\n')
    expect_error(tmp, "an unreadable gzip file", ["--text", p("plain.jsonl.gz")], [p("plain.jsonl.gz"), "gzip"])
    pyarrow.parquet.write_table(pyarrow.table({"content": ["a", "b"]}), p("nofield.parquet"))
    expect_error(tmp, "a Parquet file without the text column", ["--text", p("nofield.parquet")],
                 [p("nofield.parquet"), "'text'", "'content'"])
    pyarrow.parquet.write_table(pyarrow.table({"text": [1, 2]}), p("ints.parquet"))
    expect_error(tmp, "a Parquet text column of integers", ["--text", p("ints.parquet")], [p("ints.parquet"), "int64"])
    open(p("nofield.jsonl"), "w").write('{"text": "one"}\n{"text": "two"}\n{"body": "three"}\n')
    expect_error(tmp, "a JSONL line without the text field", ["--text", p("nofield.jsonl"), "--val-fraction", 0],
                 [p("nofield.jsonl") + " line 3", "'text'", "'body'"])
    open(p("notjson.jsonl"), "w").write('{"text": "one"}\n{"text": "two\n')
    expect_error(tmp, "a line that is not JSON", ["--text", p("notjson.jsonl"), "--val-fraction", 0],
                 [p("notjson.jsonl") + " line 2", "not JSON"])
    open(p("latin1.txt"), "wb").write("caf\u00e9 au lait\n\nd\u00e9j\u00e0 vu\n".encode("latin-1"))
    expect_error(tmp, "a non-UTF-8 text file", ["--text", p("latin1.txt")], [p("latin1.txt"), "UTF-8", "byte 3"])
    open(p("latin1.jsonl"), "wb").write('{"text": "ok"}\n{"text": "caf\u00e9"}\n'.encode("latin-1"))
    expect_error(tmp, "a non-UTF-8 JSONL line", ["--text", p("latin1.jsonl")], [p("latin1.jsonl") + " line 2", "UTF-8"])
    open(p("surrogate.jsonl"), "w").write('{"text": "ok \\ud83d\\ude00"}\n{"text": "half \\ud83d of a pair"}\n')
    expect_error(tmp, "an unpaired surrogate escape", ["--text", p("surrogate.jsonl")],
                 [p("surrogate.jsonl") + " line 2", "surrogate"])
    open(p("empty.txt"), "w").close()
    expect_error(tmp, "an empty corpus", ["--text", p("empty.txt")], [p("empty.txt"), "no records"])
    open(p("null.jsonl"), "w").write('{"text": "one"}\n{"text": null}\n')
    expect_error(tmp, "a JSONL text field that is null", ["--text", p("null.jsonl"), "--val-fraction", 0],
                 [p("null.jsonl") + " line 2", "the 'text' field is null, not a string"], absent=["NoneType"])
    open(p("array.jsonl"), "w").write('{"text": "one"}\n["two"]\n')
    expect_error(tmp, "a JSONL line that is an array", ["--text", p("array.jsonl"), "--val-fraction", 0],
                 [p("array.jsonl") + " line 2", "the line is an array, not an object"], absent=["list"])
    open(p("blank_lines.txt"), "w").write("\n\n\n \n\n\t\n\n\n")
    expect_error(tmp, "a text file of only blank lines", ["--text", p("blank_lines.txt")],
                 [p("blank_lines.txt"), "no text"])
    open(p("blank.jsonl"), "w").write('{"text": ""}\n\n{"text": ""}\n{"text": " \\n "}\n')
    expect_error(tmp, "a corpus of empty texts", ["--text", p("blank.jsonl")], [p("blank.jsonl"), "no text"])
    expect_error(tmp, "too few records for validation", ["--text", p("good.txt"), "--val-docs", 2],
                 ["--val-docs 2", "none would be left"])
    # the datasets package hidden behind a module that fails to import, as where it is not installed
    shadow = os.path.join(tmp, "no_datasets")
    os.makedirs(shadow)
    open(os.path.join(shadow, "datasets.py"), "w").write("raise ImportError('no datasets here')\n")
    env = dict(os.environ, PYTHONPATH=shadow)
    done = subprocess.run(command(["--hf-dataset", "HuggingFaceFW/fineweb-edu", "--out", os.path.join(tmp, "hf")]),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    nothing = not os.path.exists(os.path.join(tmp, "hf"))
    check(done.returncode == 1 and "pip install datasets" in done.stdout and nothing,
          "--hf-dataset without the datasets package: exit status 1, the message says to install it, nothing written")


def main():
    shared = sys.argv[1]
    shakespeare = open(os.path.join(shared, "tinyshakespeare.txt"), encoding="utf-8").read()
    tokenizer = os.path.join(shared, "llama3_tokenizer.model")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        check(False, "pyarrow is importable (scripts/install_deps.sh installs it)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        inputs, records = write_corpus(tmp, shakespeare)
        check_tokens(tmp, inputs, records, "byte", "byte", lambda text: list(text.encode("utf-8")))
        check_tokens(tmp, inputs, records, "llama3", tokenizer, llama3_encoder(tokenizer))
        large = check_large(tmp, shakespeare, tokenizer)
        if large:
            check_one_run_per_out(tmp, *large)
            check_failed_runs(tmp, *large)
        check_sections_across_chunks()
        check_other_inputs(tmp, text_records(shakespeare[:20000].encode()))
        check_errors(tmp)
        check_walks(tmp)
        check_invalid(tmp)
        check_code(tmp, tokenizer, llama3_encoder(tokenizer))
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
