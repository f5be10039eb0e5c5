"""pool.py: tokenizes batches of documents on worker processes and yields the results in the batches' order, so that
the output does not depend on the number of workers; at most two batches per worker are in flight, so memory does not
grow with the corpus. One worker tokenizes in this process."""
import collections
import multiprocessing

from dataprep.tokenizer import encode_in_worker, init_worker


def tokenize_in_order(tokenizer, batches, workers):
    """(tag, tokenizer.encode_documents(texts)) for each (tag, texts) of batches, in order; (tag, None) for a mark
    (texts None), passed through in its place."""
    if workers == 1:
        for tag, texts in batches:
            yield tag, None if texts is None else tokenizer.encode_documents(texts)
        return
    # spawn, not fork: the parent may hold pyarrow's threads, which a forked child would inherit mid-state
    arguments = (tokenizer.spec, tokenizer.eos is not None)
    with multiprocessing.get_context("spawn").Pool(workers, init_worker, arguments) as pool:
        in_flight = collections.deque()
        for tag, texts in batches:
            in_flight.append((tag, None if texts is None else pool.apply_async(encode_in_worker, (texts,))))
            if len(in_flight) >= 2 * workers:
                tag, result = in_flight.popleft()
                yield tag, None if result is None else result.get()
        while in_flight:
            tag, result = in_flight.popleft()
            yield tag, None if result is None else result.get()
