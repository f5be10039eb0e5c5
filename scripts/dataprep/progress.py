"""progress.py: the progress line on stderr: records read (percent) when their total is known, documents, tokens,
tokens/s, MB/s of text and the ETA. On a terminal it is redrawn in place at most twice a second; in a log, a line every
30 seconds; and a last line with the time taken."""
import sys
import time


def duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    def __init__(self, total, first_record, stream=sys.stderr):
        """total: the records (None when unknown); first_record: where this run starts (a resumed run's)."""
        self.total, self.first, self.stream = total, first_record, stream
        self.tty = stream.isatty()
        self.interval = 0.5 if self.tty else 30.0
        self.start = self.last = time.monotonic()

    def update(self, records, documents, tokens, text_bytes, final=False):
        """records: the records read so far (from record 0); the rest count this run's work."""
        now = time.monotonic()
        if not final and now - self.last < self.interval:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        parts = [f"{documents:,} documents", f"{tokens:,} tokens", f"{tokens / elapsed:,.0f} tokens/s",
                 f"{text_bytes / elapsed / 1e6:.2f} MB/s"]
        if self.total:
            parts.insert(0, f"{100 * records / self.total:5.1f}% of {self.total:,} records")
            done = (records - self.first) / max(self.total - self.first, 1)
            if not final and done > 0:
                parts.append(f"ETA {duration(elapsed * (1 - done) / done)}")
        if final:
            parts.append(f"took {duration(elapsed)}")
        line = " | ".join(parts)
        if self.tty:
            print("\r" + line + "\x1b[K", end="\n" if final else "", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)
