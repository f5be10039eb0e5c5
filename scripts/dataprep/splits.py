"""splits.py: which records form the validation split (the last --val-fraction of them, as the single-file preparation
always did, which needs the record count; or the first --val-docs), and batches of documents that never straddle the
boundary between two splits."""
from dataprep.errors import PrepError


def split_ranges(total, val_fraction, val_docs, description):
    """[(split, first record, end record)] in record order; an end of None runs to the end of an uncounted stream."""
    if val_docs is not None:
        if total is not None and val_docs >= total:
            raise PrepError(f"--val-docs {val_docs}: {description} has {total} records, so none would be left for "
                            "training")
        return [("val", 0, val_docs), ("train", val_docs, total)]
    if val_fraction == 0:
        return [("train", 0, total)]
    if total is None:
        raise PrepError(f"{description} does not state its number of records, which --val-fraction needs to place "
                        "the validation split at its end: pass --val-docs N (the first N records) or --val-fraction 0")
    if total < 2:
        raise PrepError(f"{description} has {total} record(s) (documents), so none for validation: "
                        "pass --val-fraction 0")
    num_val = min(max(1, round(total * val_fraction)), total - 1)
    return [("train", 0, total - num_val), ("val", total - num_val, total)]


def batches(records, ranges, max_chars):
    """((split, record numbers), texts) of consecutive documents, up to max_chars characters (or one document)."""
    current, numbers, texts, chars = 0, [], [], 0
    for number, text in records:
        while ranges[current][2] is not None and number >= ranges[current][2]:
            current += 1
        split = ranges[current][0]
        if numbers and (split != batch_split or chars + len(text) > max_chars):
            yield (batch_split, numbers), texts
            numbers, texts, chars = [], [], 0
        batch_split = split
        numbers.append(number)
        texts.append(text)
        chars += len(text)
    if numbers:
        yield (batch_split, numbers), texts
