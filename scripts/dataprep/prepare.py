"""prepare.py: one run of the preparation: the corpus's records from where the output directory's progress record says
(or from the first), tokenized in batches on the worker pool, each split's documents into its own ShardWriter in record
order (the splits' records may interleave), the progress record rewritten after every shard, and meta.json written at
the end in its place. A split's writer resumes where its complete shards end; the run reads from the earliest such
record, passing over what a split holds already. A run that fails (an error, Ctrl-C, SIGTERM) removes its partial
shards, and its progress record too if no shard is complete."""
import os

from dataprep.errors import PrepError
from dataprep.pool import tokenize_in_order
from dataprep.progress import ProgressBar
from dataprep.resume import META, PROGRESS, remove, write_json
from dataprep.shards import MAGIC, NOTHING, ShardWriter
from dataprep.splits import batches

BATCH_CHARS = 1 << 18


def prepare(out, corpus, tokenizer, splits, settings, record, shard_tokens, workers):
    """Writes the shards and meta.json into out (which exists); record: the progress record to resume from, or None.
    Returns the meta.json object."""
    done = record["splits"] if record else {}
    writers = {}

    def save():
        write_json(os.path.join(out, PROGRESS),
                   {"settings": settings, "splits": {split: w.state() for split, w in writers.items()}})

    for split in splits.names:
        state = done.get(split, dict(NOTHING, next_record=splits.first(split)))
        writers[split] = ShardWriter(out, split, tokenizer.dtype, shard_tokens, save, state)
    if record is None:
        save()  # the directory now says what is being prepared in it
    try:
        tokenize(corpus, tokenizer, splits, writers, workers)
        return finish(out, corpus, tokenizer, splits, settings, writers)
    except BaseException:
        for writer in writers.values():
            writer.abort()
        if not any(writer.files for writer in writers.values()):
            try:
                remove(out, [PROGRESS])  # nothing to resume: a rerun starts again, whatever its settings
            except PrepError:
                pass
        raise


def tokenize(corpus, tokenizer, splits, writers, workers):
    """Each open split's documents from its resume position on, tokenized, into its writer; the writers closed."""
    positions = {split: w.resume_at for split, w in writers.items() if not w.closed}
    if not positions:
        return
    start = min(record for record, _ in positions.values())
    bar = ProgressBar(corpus.total, start)
    read, documents, tokens, text_bytes = start, 0, 0, 0
    stream = batches(corpus.records(start), splits, {split: at[0] for split, at in positions.items()}, BATCH_CHARS)
    for (split, numbers), result in tokenize_in_order(tokenizer, stream, workers):
        if numbers is None:  # the split's records are all read
            writers[split].close()
            continue
        data, counts, size = result
        record, skip = positions[split]
        skip = skip if numbers[0] == record else 0  # the tokens of a resumed document in complete shards already
        writers[split].add(data, counts, numbers, skip)
        read, documents, tokens = max(read, numbers[-1] + 1), documents + len(numbers), tokens + sum(counts) - skip
        text_bytes += size
        bar.update(read, documents, tokens, text_bytes)
    bar.update(corpus.total or read, documents, tokens, text_bytes, final=True)


def finish(out, corpus, tokenizer, splits, settings, writers):
    """meta.json in place of the progress record, once every split holds text."""
    states = {split: writers[split].state() if split in writers else NOTHING for split in ("train", "val")}
    if not any(state["tokens"] for state in states.values()):
        raise PrepError(corpus.empty_message())
    for split in splits.names:
        if not states[split]["tokens"]:
            raise PrepError(f"the {split} split ({splits.describe(split)}) holds no text")
    meta = {
        "inputs": corpus.names(),
        "tokenizer": settings["tokenizer"],
        "vocab_size": tokenizer.vocab_size,
        "bos_id": tokenizer.bos,
        "eos_id": tokenizer.eos,
        "token_dtype": tokenizer.dtype,
        "magic": MAGIC[tokenizer.dtype],
        "doc_per_file": settings["doc_per_file"],
        "val_split": settings["val_split"],
        "seed": settings["seed"],
        "val_fraction": settings["val_fraction"],
        "val_docs": settings["val_docs"],
        "shard_tokens": settings["shard_tokens"],
        "skipped": corpus.skipped,
        "documents": {split: state["documents"] for split, state in states.items()},
        "tokens": {split: state["tokens"] for split, state in states.items()},
        "files": {split: state["files"] for split, state in states.items()},
        "settings": settings,
    }
    write_json(os.path.join(out, META), meta)
    remove(out, [PROGRESS])
    return meta
