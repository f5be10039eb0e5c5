"""prepare.py: one run of the preparation: the corpus's records from where the output directory's progress record says
(or from the first), tokenized in batches on the worker pool, into one ShardWriter per split in record order, the
progress record rewritten after every shard, and meta.json written at the end in its place. A run that fails (an
error, Ctrl-C, SIGTERM) removes its partial shard, and its progress record too if no shard is complete."""
import os

from dataprep.errors import PrepError
from dataprep.pool import tokenize_in_order
from dataprep.progress import ProgressBar
from dataprep.resume import META, PROGRESS, remove, write_json
from dataprep.shards import MAGIC, ShardWriter
from dataprep.splits import batches

BATCH_CHARS = 1 << 18
NOTHING = {"files": [], "tokens": 0, "documents": 0}


def prepare(out, corpus, tokenizer, ranges, settings, record, shard_tokens, workers):
    """Writes the shards and meta.json into out (which exists); record: the progress record to resume from, or None.
    Returns the meta.json object."""
    start, skip = (record["next_record"], record["skip_tokens"]) if record else (0, 0)
    done = record["splits"] if record else {}
    finished = {}  # the states of the splits whose last shard is written
    writers = []  # the others, in record order; the first is the one being written

    def save():
        position = writers[0].resume_at if writers else (corpus.total, 0)
        write_json(os.path.join(out, PROGRESS), {
            "settings": settings, "next_record": position[0], "skip_tokens": position[1],
            "splits": dict(finished, **{w.split: w.state() for w in writers}),
        })

    def close_first():
        writer = writers.pop(0)
        writer.close()
        finished[writer.split] = writer.state()
        save()

    for split, first, end in ranges:
        if end is not None and end <= start:
            finished[split] = done.get(split, NOTHING)
        else:
            at = (start, skip) if first <= start else (first, 0)
            writers.append(ShardWriter(out, split, tokenizer.dtype, shard_tokens, save, done.get(split, NOTHING), at))
    if record is None:
        save()  # the directory now says what is being prepared in it

    try:
        bar = ProgressBar(corpus.total, start)
        documents = tokens = text_bytes = 0
        stream = batches(corpus.records(start), ranges, BATCH_CHARS)
        for (split, numbers), (data, counts, size) in tokenize_in_order(tokenizer, stream, workers):
            while writers[0].split != split:
                close_first()
            first_skip = skip if numbers[0] == start else 0
            writers[0].add(data, counts, numbers, first_skip)
            documents, tokens = documents + len(numbers), tokens + sum(counts) - first_skip
            text_bytes += size
            bar.update(numbers[-1] + 1, documents, tokens, text_bytes)
        while writers:
            close_first()
        bar.update(corpus.total or 0, documents, tokens, text_bytes, final=True)

        splits = {split: finished.get(split, NOTHING) for split in ("train", "val")}
        if not any(s["tokens"] for s in splits.values()):
            raise PrepError(corpus.empty_message())
        for split, first, end in ranges:
            if not splits[split]["tokens"]:
                raise PrepError(f"the {split} split (records {first}..{end - 1 if end else 'end'}) holds no text")
        meta = {
            "inputs": corpus.names(),
            "tokenizer": settings["tokenizer"],
            "vocab_size": tokenizer.vocab_size,
            "bos_id": tokenizer.bos,
            "eos_id": tokenizer.eos,
            "doc_per_file": settings["doc_per_file"],
            "token_dtype": tokenizer.dtype,
            "magic": MAGIC[tokenizer.dtype],
            "val_fraction": settings["val_fraction"],
            "val_docs": settings["val_docs"],
            "shard_tokens": shard_tokens,
            "skipped": corpus.skipped,
            "documents": {split: s["documents"] for split, s in splits.items()},
            "tokens": {split: s["tokens"] for split, s in splits.items()},
            "files": {split: s["files"] for split, s in splits.items()},
            "settings": settings,
        }
        write_json(os.path.join(out, META), meta)
        remove(out, [PROGRESS])
        return meta
    except BaseException:
        for writer in writers:
            writer.abort()
        if not any(split["files"] for split in list(finished.values()) + [w.state() for w in writers]):
            try:
                remove(out, [PROGRESS])  # nothing to resume: a rerun starts again, whatever its settings
            except PrepError:
                pass
        raise
