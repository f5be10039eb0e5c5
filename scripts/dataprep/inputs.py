"""inputs.py: the corpus of local inputs: --text arguments (files, directories, glob patterns; walk.py) expanded into an
ordered list of files, each with its format (its name ending, or --format for every file) and record count, read as
one stream of records numbered across the files."""
import contextlib
import gzip
import hashlib
import io
import os
import urllib.error
import urllib.request
import zlib

from dataprep import readers, walk
from dataprep.errors import PrepError

EXTENSIONS = [  # (name ending, format, gzip-compressed)
    (".txt", "txt", False),
    (".txt.gz", "txt", True),
    (".jsonl", "jsonl", False),
    (".jsonl.gz", "jsonl", True),
    (".parquet", "parquet", False),
]
KNOWN = ", ".join(ending for ending, _, _ in EXTENSIONS)


def format_of(path, forced):
    """(format, gzip-compressed) of a file from --format (forced) or its name; None for an unknown name ending."""
    if forced:
        compressed = path.endswith(".gz")
        if compressed and forced == "parquet":
            raise PrepError(f"{path}: a gzip-compressed Parquet file (Parquet compresses inside the file)")
        return forced, compressed
    return next(((fmt, gz) for ending, fmt, gz in EXTENSIONS if path.endswith(ending)), None)


class InputFile:
    """A file of the corpus (or, with data, the downloaded text)."""

    def __init__(self, path, fmt, compressed, data=None):
        self.path, self.format, self.compressed, self.data = path, fmt, compressed, data

    def open(self):
        if self.data is not None:
            return io.BytesIO(self.data)
        return gzip.open(self.path, "rb") if self.compressed else open(self.path, "rb")

    def identity(self):
        """What a rerun must find unchanged to resume: the path, format, size and modification time (or digest)."""
        if self.data is not None:
            return {"path": self.path, "format": self.format, "bytes": len(self.data),
                    "sha256": hashlib.sha256(self.data).hexdigest()}
        stat = os.stat(self.path)
        return {"path": os.path.abspath(self.path), "format": self.format, "gzip": self.compressed,
                "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def directory_inputs(directory, forced, problems):
    """The files under a directory with a known name ending, or every one with --format, sorted by path."""
    before = len(problems)
    found = [path for path in walk.directory_files(directory, problems) if forced or format_of(path, None)]
    if not found and len(problems) == before:
        raise PrepError(f"--text {directory}: the directory holds no file" +
                        ("" if forced else f" ending in {KNOWN} (or pass --format for every file)"))
    return found


def expand_inputs(arguments, forced):
    """The InputFiles of the --text arguments, in argument order, each file once; and the problems met (what could not
    be entered or read), each a message naming the path."""
    files, seen, problems = [], set(), []
    for argument in arguments:
        if walk.MAGIC.search(argument):
            before = len(problems)
            matches = walk.glob_matches(argument, problems)
            if not matches and len(problems) == before:
                raise PrepError(f"--text {argument}: the pattern matches no file")
        elif os.path.exists(argument):
            matches = [argument]
        else:
            raise PrepError(f"--text {argument}: no such file or directory")
        for match in matches:
            what = walk.kind(match, problems)
            for path in directory_inputs(match, forced, problems) if what == "dir" else [match] if what else []:
                if os.path.realpath(path) in seen:
                    continue
                seen.add(os.path.realpath(path))
                known = format_of(path, forced)
                if known is None:
                    raise PrepError(f"{path}: unknown format (a name ending in {KNOWN}, or pass --format)")
                files.append(InputFile(path, *known))
    return files, list(dict.fromkeys(problems))  # a directory that two patterns meet, named once


def download(url):
    """The text at url as an input file held in memory."""
    print(f"downloading {url}")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as e:
        raise PrepError(f"could not download {url} ({getattr(e, 'reason', e)}); if this machine is offline, pass "
                        "--text PATH with a local copy of the text")
    return InputFile(url, "txt", False, data)


@contextlib.contextmanager
def read_errors(source):
    """Turns the I/O errors of reading a file (unreadable, not gzip, truncated) into a PrepError naming it."""
    try:
        yield
    except (OSError, EOFError, zlib.error) as e:
        raise PrepError(f"cannot read {source.path}: {getattr(e, 'strerror', None) or e}") from e


class LocalCorpus:
    """The records of the files, numbered from 0 across them, each file's from the sum of the counts before it. A first
    pass counts each file's records and finds what cannot be read as text; that and the problems met finding the files
    stop the run, every one named, unless skip_invalid: then a file that cannot be read has no records, an invalid
    record gives no document, and each is listed in skipped. doc_per_file: a text file is one record."""

    def __init__(self, files, field, doc_per_file, problems, skip_invalid):
        self.files, self.field, self.doc_per_file, self.skip_invalid = files, field, doc_per_file, skip_invalid
        self.skipped, self.counts = list(problems), []  # skipped: a line naming each input left out in whole or part
        self.left_out, self.invalid, self.partly = len(problems), 0, 0  # inputs left out whole; invalid records, files
        for source in files:
            try:
                with read_errors(source):
                    count, invalid, first = readers.scan(source, field, doc_per_file)
            except PrepError as e:
                count, invalid, first = 0, 0, str(e)
                self.left_out += 1
            self.counts.append(count)
            unit = readers.reader(source, doc_per_file).unit
            if invalid and unit == "file":  # the file's one record (--doc-per-file)
                self.left_out += 1
            elif invalid:
                first += f" (and {invalid - 1} more {unit}{'s' * (invalid > 2)} like it)" if invalid > 1 else ""
                self.invalid, self.partly = self.invalid + invalid, self.partly + 1
            if first:
                self.skipped.append(first)
        self.total = sum(self.counts)
        if self.skipped and not skip_invalid:
            raise PrepError(f"the first pass over the inputs found what cannot be read as text ({self.summary()}):\n  "
                            + "\n  ".join(self.skipped) + "\npass --skip-invalid to prepare the rest without them")

    def summary(self):
        """How much is left out: "2 inputs whole, 5 records of 1 file"."""
        return ", ".join([f"{self.left_out} input{'s' * (self.left_out != 1)} whole"] * bool(self.left_out) +
                         [f"{self.invalid} record{'s' * (self.invalid != 1)} of {self.partly} "
                          f"file{'s' * (self.partly != 1)}"] * bool(self.invalid))

    def names(self):
        return [source.path for source in self.files]

    def identity(self):
        return [dict(source.identity(), records=n) for source, n in zip(self.files, self.counts)]

    def empty_message(self):
        return f"the inputs hold no text: {', '.join(self.names())}"

    def records(self, start):
        """(record number, text) of every record from start on whose text makes a document."""
        offset = 0
        for source, count in zip(self.files, self.counts):
            if count and start < offset + count:  # (a file left out whole counts no records)
                with read_errors(source):
                    first = max(0, start - offset)
                    for index, text in readers.documents(source, self.field, self.doc_per_file, first,
                                                         self.skip_invalid):
                        yield offset + index, text
            offset += count
