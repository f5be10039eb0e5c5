"""shards.py: writes one split's token stream as llm.c-format shards OUT/{split}_NNNNNN.bin of shard_tokens tokens (the
last one shorter): a header of 256 int32 (magic, version 1, token count), then the tokens, little-endian (the format
data/dataloader.c reads). The tokens go straight into NAME.tmp, renamed to NAME when the shard is complete, so a shard
name only ever holds a complete shard and memory holds one batch. The writer also tracks, per document, where its last
complete shard ends in records: where a resumed run starts. A run that fails removes its partial shard (abort)."""
import array
import collections
import os
import sys

from dataprep.errors import PrepError

MAGIC = {"uint16": 20240520, "uint32": 20240801}
SHARD_VERSION = 1
HEADER_INTS = 256
MAX_SHARD_TOKENS = 2**31 - 1  # the header's token count is an int32
NOTHING = {"files": [], "tokens": 0, "documents": 0, "next_record": 0, "skip_tokens": 0, "complete": False}


class ShardWriter:
    def __init__(self, out_dir, split, dtype, shard_tokens, on_shard, done):
        """done: the split's state so far (a resumed run's, or NOTHING): its complete shards' files, tokens and
        documents, the position after them (next_record, and skip_tokens of it in them), and whether its last shard is
        written (complete); on_shard(): called after each shard is renamed, and at close."""
        self.out_dir, self.split, self.dtype, self.shard_tokens = out_dir, split, dtype, shard_tokens
        self.token_bytes = 2 if dtype == "uint16" else 4
        self.on_shard = on_shard
        self.files, self.tokens, self.documents = list(done["files"]), done["tokens"], done["documents"]
        self.resume_at = (done["next_record"], done["skip_tokens"])
        self.closed = done["complete"]
        self.pending = collections.deque()  # per document not yet all in complete shards: [record, tokens, left]
        self.file, self.in_file, self.last_record = None, 0, None

    def state(self):
        return {"files": self.files, "tokens": self.tokens, "documents": self.documents,
                "next_record": self.resume_at[0], "skip_tokens": self.resume_at[1], "complete": self.closed}

    def add(self, data, counts, records, skip=0):
        """Appends the documents records[i] of counts[i] tokens each, concatenated in data; the first skip tokens of
        the first are in complete shards already (a resumed run starts in the middle of that document)."""
        for i, (record, count) in enumerate(zip(records, counts)):
            self.pending.append([record, count, count - (skip if i == 0 else 0)])
        self.last_record = records[-1]
        data = memoryview(data)[skip * self.token_bytes :]
        while len(data):
            if self.file is None:
                self.file = self._open()
            take = min(self.shard_tokens - self.in_file, len(data) // self.token_bytes) * self.token_bytes
            self._guard(lambda: self.file.write(data[:take]))
            data = data[take:]
            self.in_file += take // self.token_bytes
            if self.in_file == self.shard_tokens:
                self._finish()

    def close(self):
        """Writes the last, shorter shard."""
        if self.in_file:
            self._finish()
        self.closed = True
        self.on_shard()

    def abort(self):
        """After a failure: the partial shard is closed and removed (the complete ones stay)."""
        if self.file is not None:
            self.file.close()
            try:
                os.remove(self._path() + ".tmp")
            except OSError:
                pass  # a rerun removes it
            self.file, self.in_file = None, 0

    def _path(self):
        return os.path.join(self.out_dir, f"{self.split}_{len(self.files):06d}.bin")

    def _guard(self, action):
        try:
            return action()
        except OSError as e:
            raise PrepError(f"cannot write the shard {self._path()}: {e.strerror}")

    def _open(self):
        file = self._guard(lambda: open(self._path() + ".tmp", "wb"))
        self._guard(lambda: file.write(bytes(HEADER_INTS * 4)))  # the header, once the count is known
        return file

    def _finish(self):
        header = array.array("i", [MAGIC[self.dtype], SHARD_VERSION, self.in_file] + [0] * (HEADER_INTS - 3))
        if sys.byteorder == "big":
            header.byteswap()
        path = self._path()

        def write_and_rename():
            self.file.seek(0)
            self.file.write(header.tobytes())
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(path + ".tmp", path)

        self._guard(write_and_rename)
        self.files.append(os.path.basename(path))
        self.tokens += self.in_file
        left = self.in_file
        while self.pending and self.pending[0][2] <= left:
            left -= self.pending.popleft()[2]
            self.documents += 1
        if self.pending:
            self.pending[0][2] -= left
            record, count, rest = self.pending[0]
            self.resume_at = (record, count - rest)
        else:
            self.resume_at = (self.last_record + 1, 0)
        self.file, self.in_file = None, 0
        self.on_shard()
