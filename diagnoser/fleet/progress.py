"""A progress line on stderr while a scan runs, only when stderr is a terminal; redrawn at most 10 times a second."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO


class Progress:
    """`scan: 1,234/5,000 files  812 logs  3 unreadable  41.2 files/s`, drawn over itself with \\r."""

    def __init__(self, total: int | None, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)()) if enabled is None else enabled
        self.total = total
        self.files = self.logs = self.bad = 0
        self.start = time.monotonic()
        self._drawn = 0.0

    def update(self, files: int, logs: int, bad: int) -> None:
        self.files, self.logs, self.bad = files, logs, bad
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.files / max(now - self.start, 1e-6)
        of = f"/{self.total:,}" if self.total else ""
        bar = ""
        if self.total:
            done = int(20 * min(self.files / self.total, 1))
            bar = "[" + "#" * done + "." * (20 - done) + "] "
        self.stream.write(f"\rscan: {bar}{self.files:,}{of} files  {self.logs:,} logs  {self.bad:,} unreadable  "
                          f"{rate:,.1f} files/s\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()


def tracked(docs: Iterator[dict[str, Any]], progress: Progress) -> Iterator[dict[str, Any]]:
    """Pass documents through, counting files (a cut log's siblings share a file), logs and bad files."""
    from diagnoser.report.rows import source_of

    files = bad = 0
    last_source: str | None = None
    for logs, doc in enumerate(docs, 1):
        source = source_of(doc)
        if source != last_source:
            files += 1
            last_source = source
        if "error" in doc:
            bad += 1
        progress.update(files, logs, bad)
        yield doc
