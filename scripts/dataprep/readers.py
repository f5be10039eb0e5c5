"""readers.py: the record formats of input files. A record is one document: a section of a text file up to and
including a blank line (the sections concatenate to the text, as the single-file split always did), one line of a JSONL
file (the string in its text field), one row of a Parquet file (its text column); with --doc-per-file, a text file's
whole content. Each format reads a file's records
from a given record on, streamed: memory holds one section, one line or one batch of rows; a record that cannot be read
as text (not UTF-8, not JSON, no string in the field) comes as Invalid, the file's first pass (scan) counts both, and
a file that cannot be read at all raises PrepError. Records whose text is empty or only whitespace (a blank JSONL line,
"", a run of blank lines) give no document. Every message names the file and the record."""
import json
import re

from dataprep.errors import PrepError

CHUNK_BYTES = 1 << 20
PARQUET_BATCH_ROWS = 1024
UNPAIRED_SURROGATE = re.compile("[\ud800-\udfff]")


class Invalid:
    """A record that cannot be read as text; message names the file, the record and the problem."""

    def __init__(self, message):
        self.message = message


def is_document(text):
    """Whether a record's text makes a document: not empty, not only whitespace."""
    return bool(text) and not text.isspace()


def json_kind(value):
    """What a parsed JSON value (or a dataset's cell) is, in JSON's words: null, true, a number, an array ..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def text_sections(stream):
    """(byte offset, bytes) of each section of a binary stream, split after every "\\n\\n" as str.split does."""
    pending, offset = bytearray(), 0
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        search = max(0, len(pending) - 1)  # the tail holds no "\n\n": only one that starts at its last byte is new
        pending += chunk
        start = 0
        while (end := pending.find(b"\n\n", search)) >= 0:
            yield offset + start, bytes(pending[start : end + 2])
            start = search = end + 2
        del pending[:start]
        offset += start
    if pending:
        yield offset, bytes(pending)


def decoded(source, data, offset=0):
    """data (bytes of source from offset) as text, or Invalid."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        return Invalid(f"{source.path}: not UTF-8 text at byte {offset + e.start} ({e.reason})")


class TextFormat:
    name, unit = "txt", "section"

    @staticmethod
    def records(source, field, start):
        with source.open() as stream:
            for index, (offset, section) in enumerate(text_sections(stream)):
                if index >= start:
                    yield index, decoded(source, section, offset)


class WholeTextFormat:
    """A text file as one record (--doc-per-file): its whole content, held in memory."""
    name, unit = "txt", "file"

    @staticmethod
    def records(source, field, start):
        if start == 0:
            with source.open() as stream:
                yield 0, decoded(source, stream.read())


class JsonlFormat:
    name, unit = "jsonl", "line"

    @staticmethod
    def records(source, field, start):
        with source.open() as stream:
            for index, line in enumerate(stream):
                if index >= start:
                    try:
                        yield index, JsonlFormat.text_of(line, f"{source.path} line {index + 1}", field)
                    except PrepError as e:
                        yield index, Invalid(str(e))

    @staticmethod
    def text_of(raw, where, field):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PrepError(f"{where}: not UTF-8 text at byte {e.start} of the line ({e.reason})")
        if not line.strip():
            return ""
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PrepError(f"{where}: not JSON ({e.msg.removesuffix(' at')} at column {e.colno})")
        if not isinstance(record, dict):
            raise PrepError(f"{where}: the line is {json_kind(record)}, not an object with a {field!r} field")
        if field not in record:
            raise PrepError(f"{where}: no {field!r} field (it has {', '.join(map(repr, record)) or 'none'}; "
                            "--text-field names the field that holds the text)")
        text = record[field]
        if not isinstance(text, str):
            raise PrepError(f"{where}: the {field!r} field is {json_kind(text)}, not a string")
        # only a \uXXXX escape makes a surrogate; the regex runs on the few lines that have one
        if (b"\\ud" in raw or b"\\uD" in raw) and UNPAIRED_SURROGATE.search(text):
            raise PrepError(f"{where}: the {field!r} field holds an unpaired surrogate escape (\\ud800-\\udfff), "
                            "which is not Unicode text")
        return text


class ParquetFormat:
    name, unit = "parquet", "row"

    @staticmethod
    def open_file(source, field):
        """The pyarrow ParquetFile, after checking that its field is a text column."""
        try:
            import pyarrow
            import pyarrow.parquet
        except ImportError:
            raise PrepError(f"reading {source.path} needs the pyarrow package (pip install pyarrow)")
        try:
            parquet = pyarrow.parquet.ParquetFile(source.path)
        except (pyarrow.ArrowException, OSError) as e:
            raise PrepError(f"{source.path}: not a readable Parquet file ({e})")
        schema = parquet.schema_arrow
        if schema.get_field_index(field) < 0:
            raise PrepError(f"{source.path}: no {field!r} column (it has {', '.join(map(repr, schema.names))}; "
                            "--text-field names the column that holds the text)")
        kind = schema.field(field).type
        if not (pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind)):
            raise PrepError(f"{source.path}: the {field!r} column holds {kind}, not strings")
        return parquet

    @staticmethod
    def records(source, field, start):
        import pyarrow

        parquet = ParquetFormat.open_file(source, field)
        group, index = 0, 0  # whole row groups before start are not read
        while group < parquet.num_row_groups and index + parquet.metadata.row_group(group).num_rows <= start:
            index += parquet.metadata.row_group(group).num_rows
            group += 1
        batches = parquet.iter_batches(PARQUET_BATCH_ROWS, range(group, parquet.num_row_groups), [field])
        try:
            for batch in batches:
                for text in batch.column(0).to_pylist():
                    if index >= start:
                        yield index, Invalid(f"{source.path} row {index}: the {field!r} column is null") \
                            if text is None else text
                    index += 1
        except (pyarrow.ArrowException, UnicodeDecodeError) as e:
            raise PrepError(f"{source.path}: cannot read row {index} on ({e})")


FORMATS = {f.name: f for f in (TextFormat, JsonlFormat, ParquetFormat)}


def reader(source, whole):
    """The format that reads source: its own, or with whole (--doc-per-file) a text file as one record."""
    return WholeTextFormat if whole and source.format == "txt" else FORMATS[source.format]


def scan(source, field, whole):
    """The first pass over a file: (its records, how many of them are invalid, the first invalid one's message)."""
    records, invalid, first = 0, 0, None
    for _, record in reader(source, whole).records(source, field, 0):
        records += 1
        if isinstance(record, Invalid):
            invalid, first = invalid + 1, first or record.message
    return records, invalid, first


def documents(source, field, whole, start, skip_invalid):
    """(record number, text) of each record from start on whose text makes a document; an invalid record stops the
    run, or with skip_invalid gives no document."""
    for index, record in reader(source, whole).records(source, field, start):
        if isinstance(record, Invalid):
            if not skip_invalid:
                raise PrepError(record.message)
        elif is_document(record):
            yield index, record
