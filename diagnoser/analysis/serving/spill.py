"""One detector's closed windows in bounded memory: the first held, the rest spilled to a temporary file.

A window that no rule can report is counted, and kept (without its lines) only among the first MAX_WINDOWS the
JSON lists. Of the others, the first MAX_WINDOWS stay in memory and the rest go to an anonymous temporary file in
batches, read back in order when the log ends: a log that opens and closes windows all the time holds as many,
and every report is what holding them all gives.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from typing import Any

from diagnoser.analysis.serving.detectors import Window
from diagnoser.analysis.serving.facts import LocalFacts
from diagnoser.ingest.line import Line

MAX_WINDOWS = 100        #: windows listed per detector (all of them are counted)

#: Whether a rule may report a closed window: (kind, facts of the window alone) -> False when none can.
WindowFilter = Callable[[str, Mapping[str, Any]], bool]
#: A raw line (its number, its bytes) as the reader would give it: cleaned, redacted (unless --no-redact), parsed.
LineDecoder = Callable[[int, bytes], Line | None]


class Windows:
    """One detector's closed windows, in order. A window that no rule can report (its `when` is false on the
    window's own facts) is counted, and kept (without its lines) only if it is among the first MAX_WINDOWS
    that the JSON lists. The others are held: the first MAX_WINDOWS in memory, the rest spilled to a temporary
    file (_Spill) and read back in order at the end, so a log of any length holds a bounded number of windows
    and every report is what holding them all gives."""

    def __init__(self, kind: str, keep: WindowFilter | None, evidence: int | None = None,
                 decode: LineDecoder | None = None) -> None:
        self.kind, self.keep = kind, keep
        #: turns a window's failing access lines (raw) into its example lines; None: they are not shown
        self.decode = decode
        self.total = 0
        #: the windows' lengths summed in order; saturated_seconds adds the engines' sums (with whole seconds, as
        #: vLLM's clock gives, the sum of every window in order; else it may differ from that in the last bit)
        self.seconds = 0.0
        #: distinct evidence lines after which a reported window's lines no longer show (Matcher.series_evidence)
        self.evidence = evidence
        self._shown: set[str] = set()  #: the distinct evidence lines of the reported windows so far, up to that
        self._held: list[Window] = []  #: the first MAX_WINDOWS windows held
        self._spill: _Spill | None = None  #: the rest

    def append(self, w: Window) -> None:
        w.index = self.total
        self.total += 1
        if self.kind == "saturation":
            self.seconds += w.seconds
        failing, w.failing = w.failing, None
        if self.keep is not None and not self.keep(self.kind, LocalFacts(w)):
            if w.index >= MAX_WINDOWS:
                return
            w.dropped, w.first_line, w.peak_line = True, None, None
        elif self.evidence is not None and w.first_line is not None and len(self._shown) >= self.evidence:
            # its hit is folded, never shown: its place (line number, time, rank) is all it needs to keep,
            # so a long log's reported windows hold no text (nor are its failing lines decoded)
            first = w.first_line
            w.first_line = Line(number=first.number, text="", raw="", rank=first.rank,
                                timestamp=first.timestamp)
            w.peak_line = None
            if failing and self.decode is not None:
                w.examples = [Line(number=failing[0][0], text="", raw="")]
        else:
            if failing and self.decode is not None:
                w.examples = [ln for number, raw in failing if (ln := self.decode(number, raw)) is not None] or None
            if self.evidence is not None and w.first_line is not None:
                self._shown.update(ln.text.strip() for ln in evidence_lines(w))
        if len(self._held) < MAX_WINDOWS:
            self._held.append(w)
            return
        if self._spill is None:
            self._spill = _Spill()
        self._spill.add(_window_record(w))

    def first(self, n: int) -> list[Window]:
        """The first n windows held (n <= MAX_WINDOWS: those the JSON lists)."""
        return self._held[:n]

    def __iter__(self) -> Iterator[Window]:
        yield from self._held
        if self._spill is not None:
            kind = self.kind
            for record in self._spill:
                yield _window_of(kind, record)

    def __len__(self) -> int:
        """The windows held (in memory or spilled): every window a rule may report, and the first dropped ones."""
        return len(self._held) + (len(self._spill) if self._spill is not None else 0)

    def __bool__(self) -> bool:
        return bool(self._held)


def evidence_lines(w: Window) -> list[Line]:
    """What a window shows as evidence: its example lines (a failed-request window's failing access lines),
    else its first line and its peak line."""
    if w.examples:
        return list(w.examples)
    out = [w.first_line] if w.first_line is not None else []
    if w.peak_line is not None and w.peak_line is not w.first_line:
        out.append(w.peak_line)
    return out


SPILL_BATCH = 512  #: windows written to the spill file at a time


class _Spill:
    """Records (tuples of plain values) appended in order and read back in that order, in constant memory: in
    batches of SPILL_BATCH, marshalled to an anonymous temporary file (unlinked at once, closed with its Windows or
    at exit). When no such file can be made or written (no usable $TMPDIR, a full disk, no file descriptor left),
    the rest stay in memory: the same records in the same order."""

    def __init__(self) -> None:
        self._file: Any = None
        self._end = 0               #: bytes of whole batches in the file
        self._failed = False        #: no file (or a write failed): records stay in `_memory`
        self._memory: list[tuple[Any, ...]] = []
        self._batch: list[tuple[Any, ...]] = []
        self._count = 0

    def add(self, record: tuple[Any, ...]) -> None:
        self._count += 1
        if self._failed:
            self._memory.append(record)
            return
        batch = self._batch
        batch.append(record)
        if len(batch) >= SPILL_BATCH:
            self._flush()

    def _flush(self) -> None:
        import marshal

        batch, self._batch = self._batch, []
        try:
            if self._file is None:
                import tempfile  # here, not at the top: only a log with many windows pays for its import

                self._file = tempfile.TemporaryFile(prefix="vllm-doctor-windows-")  # noqa: SIM115 - closed at exit
            data = marshal.dumps(batch)
            self._file.seek(self._end)
            self._file.write(len(data).to_bytes(8, "little") + data)  # its length first: read back in one read
            self._file.flush()
            self._end += 8 + len(data)
        except (OSError, ValueError):  # no temporary file, or the disk is full: the rest in memory
            self._failed = True
            self._memory.extend(batch)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self._file is not None and self._end:
            import marshal

            read, at = self._file.read, 0
            while at < self._end:
                self._file.seek(at)
                size = int.from_bytes(read(8), "little")
                yield from marshal.loads(read(size))
                at += 8 + size
        yield from self._memory
        yield from self._batch


_LINE_STATE = operator.attrgetter(*(f.name for f in fields(Line)))
_WINDOW_STATE = operator.attrgetter("engine", "start", "end", "step", "points", "peak_kv", "max_waiting",
                                    "max_running", "preemptions", "extra", "_peak_score", "index", "dropped")


def _window_record(w: Window) -> tuple[Any, ...]:
    """A closed window as plain values (for _Spill): its figures, then its lines (the peak line True when it is
    the first line, as one object)."""
    first, peak = w.first_line, w.peak_line
    return (*_WINDOW_STATE(w), None if first is None else _LINE_STATE(first),
            None if peak is None else True if peak is first else _LINE_STATE(peak),
            None if w.examples is None else tuple(map(_LINE_STATE, w.examples)))


def _window_of(kind: str, record: tuple[Any, ...]) -> Window:
    """The window _window_record gave `record` for."""
    (engine, start, end, step, points, peak_kv, max_waiting, max_running, preemptions, extra, peak_score, index,
     dropped, first, peak, examples) = record
    first_line = None if first is None else Line(*first)
    peak_line = None if peak is None else first_line if peak is True else Line(*peak)
    return Window(kind, engine, start, end, step, first_line, peak_line, points, peak_kv, max_waiting, max_running,
                  preemptions, extra, peak_score, index, dropped,
                  examples=None if examples is None else [Line(*e) for e in examples])

