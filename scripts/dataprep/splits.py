"""splits.py: which split each record is in, and batches of documents of one split each. --val-split tail (the default)
places the validation records by position: the last --val-fraction of them, as the single-file preparation always did
(which needs the record count), or the first --val-docs. random draws that many records with --seed, by selection
sampling over random.Random(seed).random(), whose sequence Python keeps the same across versions: the same corpus,
count and seed give the same split on any machine."""
import random

from dataprep.errors import PrepError


class Splits:
    def __init__(self, total, val_fraction, val_docs, how, seed, description):
        """total: the record count (None when a stream does not state it)."""
        self.total, self.seed = total, seed
        if val_docs is not None:
            if total is not None and val_docs >= total:
                raise PrepError(f"--val-docs {val_docs}: {description} has {total} records, so none would be left for "
                                "training")
            num_val = val_docs
        elif val_fraction == 0:
            num_val = 0
        elif total is None:
            raise PrepError(f"{description} does not state its number of records, which --val-fraction needs to place "
                            "the validation split: pass --val-docs N (the first N records) or --val-fraction 0")
        elif total < 2:
            raise PrepError(f"{description} has {total} record(s) (documents), so none for validation: "
                            "pass --val-fraction 0")
        else:
            num_val = min(max(1, round(total * val_fraction)), total - 1)
        self.names = ["train", "val"] if num_val else ["train"]
        self.num_val = num_val
        self.chosen = None  # random: a flag per record, 1 for validation
        if how == "random" and num_val:
            if total is None:
                raise PrepError(f"{description} does not state its number of records, which --val-split random needs "
                                "to draw the validation records: pass --val-split tail")
            self.chosen = draw(total, num_val, seed)
            self.ranges = {split: (self.chosen.find(flag), self.chosen.rfind(flag) + 1) for split, flag in
                           (("train", 0), ("val", 1))}
        elif val_docs is not None:  # tail: the first N, for a stream whose length is not known
            self.ranges = {"val": (0, val_docs), "train": (val_docs, total)}
        else:
            self.ranges = {"train": (0, total - num_val), "val": (total - num_val, total)}

    def of(self, record):
        """The split of a record."""
        if self.chosen is not None:
            return "val" if record < self.total and self.chosen[record] else "train"
        first, end = self.ranges["val"]
        return "val" if first <= record < end else "train"

    def first(self, split):
        """The split's first record."""
        return self.ranges[split][0]

    def end(self, split):
        """One past the split's last record (None: it runs to the end of a stream whose length is not known)."""
        return self.ranges[split][1]

    def describe(self, split):
        """The split's records in words, for messages."""
        if self.chosen is not None:
            count = self.num_val if split == "val" else self.total - self.num_val
            return f"{count} records drawn at random with --seed {self.seed}"
        first, end = self.ranges[split]
        return f"records {first}..{end - 1 if end is not None else 'end'}"


def draw(total, count, seed):
    """A bytearray of total flags, count of them 1, chosen at random (Knuth's selection sampling, algorithm S)."""
    rng, chosen, left = random.Random(seed), bytearray(total), count
    for record in range(total):
        if not left:
            break
        if rng.random() * (total - record) < left:
            chosen[record], left = 1, left - 1
    return chosen


def batches(records, splits, positions, max_chars):
    """((split, record numbers), texts) of documents of one split, in record order, up to max_chars characters (or one
    document); and ((split, None), None) once the split's records have all been read. positions: {split: its first
    record still to write} for each split being written (the others' records, and those before it, are passed over)."""
    pending = {split: ([], []) for split in positions}  # the documents of each split's next batch
    chars = dict.fromkeys(positions, 0)

    def flush(split):
        numbers, texts = pending[split]
        if numbers:
            yield (split, numbers), texts
        pending[split], chars[split] = ([], []), 0

    for number, text in records:
        for split in [s for s in pending if splits.end(s) is not None and number >= splits.end(s)]:
            yield from flush(split)
            del pending[split]
            yield (split, None), None
        split = splits.of(number)
        if split not in pending or number < positions[split]:
            continue
        if pending[split][0] and chars[split] + len(text) > max_chars:
            yield from flush(split)
        pending[split][0].append(number)
        pending[split][1].append(text)
        chars[split] += len(text)
    for split in list(pending):
        yield from flush(split)
        yield (split, None), None
