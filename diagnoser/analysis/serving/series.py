"""Track the serving phase over time: stats lines, access lines and /metrics scrapes -> one series per engine.

What vLLM says about itself under load is periodic: V0's "Avg prompt throughput ... Pending: N reqs, GPU KV
cache usage: X%, CPU KV cache usage: Y%", V1's "Engine 000: ... Waiting: N reqs, GPU KV cache usage: X%,
Prefix cache hit rate: Y%" (one line per data-parallel engine; later releases add "Preemptions: N"), V0's
preemption warnings with their cumulative count, uvicorn's access lines (status codes), and Prometheus
scrapes of `/metrics`. Each becomes a point in time (the log's own clock; the year is often missing).

Memory stays flat on a log of any length: the points kept for charts are downsampled into a bounded number
of buckets (min/max/mean each), while the detectors that find windows (saturation, a growing queue, a
throughput collapse, an error burst) run on every point as it arrives, so each window is exact. Of the closed
windows, the first MAX_WINDOWS per detector and engine stay in memory and the rest go to a temporary file, read
back in order when the log ends (`Windows`): a log that opens and closes windows all the time holds as many.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime
import operator
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from diagnoser.analysis.serving.metrics import KEYWORDS as METRIC_KEYWORDS
from diagnoser.analysis.serving.metrics import MetricsReader, Scrape
from diagnoser.ingest.dense import ShapePlans
from diagnoser.ingest.keywords import SMALL_BLOCK, BlockPattern, KeywordIndex
from diagnoser.ingest.line import Line

MAX_BUCKETS = 600        #: points kept per engine for charts (each a bucket of raw points)
MAX_WINDOWS = 100        #: windows listed per detector (all of them are counted)
DEFAULT_STEP = 10.0      #: seconds between stats lines when the log has no clock (vLLM's default interval)
MERGE_GAP = 60.0         #: saturated points closer than this belong to one window
SATURATED_KV_PCT = 95.0  #: KV cache usage at which a queue means vLLM is out of cache
COLLAPSE_HISTORY = 6     #: points that make the throughput reference before a collapse
FIELDS = ("kv_pct", "running", "waiting", "prompt_tps", "gen_tps", "preemptions", "swapped", "cpu_kv_pct",
          "prefix_hit_pct", "requests", "errors", "ttft_s", "e2e_s")

_WINDOW_FACTS = ("start", "end", "seconds", "peak_kv_usage_pct", "max_waiting", "preemptions", "engine", "points",
                 "kv_usage_pct", "waiting", "running", "series_preemptions", "source", "_window", "_finished",
                 "_interval", "_serving_seconds", "_saturated_seconds")
#: What a rule's `series: KIND` entry matches, and the facts each match carries.
SERIES_FACTS: dict[str, tuple[str, ...]] = {
    "saturation": _WINDOW_FACTS,
    "queue-growth": (*_WINDOW_FACTS, "growth_per_min", "sustained_gen_tps", "recovered"),
    "throughput-collapse": (*_WINDOW_FACTS, "baseline_gen_tps", "collapsed_gen_tps", "cause"),
    "error-burst": (*_WINDOW_FACTS, "errors", "requests", "status_codes", "error_rate_pct"),
    "prefix-cache": ("prefix_hit_pct", "max_prefix_hit_pct", "points", "seconds", "engine", "peak_kv_usage_pct",
                     "source", "_serving_seconds", "_saturated_seconds"),
}

#: Lines the series reads: the reader's prefilter must keep them.
KEYWORDS = ("Avg prompt throughput", "KV cache usage:", "Running:", "RUNNING:", "Preemptions:", "is preempted by",
            "Prefix cache hit rate", *METRIC_KEYWORDS)

ENGINE = re.compile(r"\bEngine (\d+): |\b(\d+) Engines Aggregated: ")
STAT_FIELDS = {
    "prompt_tps": re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s"),
    "gen_tps": re.compile(r"(?:Avg generation throughput|^Throughput): ([\d.]+) tokens/s"),
    "running": re.compile(r"(?:Running: |RUNNING: )(\d+)"),
    "waiting": re.compile(r"(?:Waiting: |Pending: |WAITING: )(\d+)"),
    "swapped": re.compile(r"Swapped: (\d+) reqs"),
    "preemptions": re.compile(r"Preemptions: (\d+)"),
    "prefix_hit_pct": re.compile(r"Prefix cache hit rate: (?:GPU: )?([\d.]+)%"),
}
KV_USAGE = re.compile(r"\b([A-Z]+) KV cache usage: ([\d.]+)%")
V0_PREEMPTED = re.compile(r"is preempted by PreemptionMode\.\w+.*?(?:total_num_cumulative_preemption=(\d+))?$")
ISO_TIME = re.compile(r"^\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")
VLLM_TIME = re.compile(r"^(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)$")
#: raw-block markers: where a stats line starts a new interval; an access line's status code
STATS_MARK = b"Avg prompt throughput"
BLOCK_ERROR = BlockPattern(re.compile(rb' HTTP/[12](?:\.[01])?" (5\d\d|429)\b'), 20)


#: A year-less time this far before the previous one is in the next year (a log across New Year).
NEW_YEAR_GAP = 180 * 86400


@lru_cache(maxsize=4096)  # a dense log repeats each second on several lines
def vllm_time_seconds(text: str, year: int = 2000) -> float | None:
    """vLLM's year-less header time as seconds since the epoch, in `year`: '01-18 20:15:59' -> 948226559.0
    (year 2000, a leap year, so 02-29 parses); None for another shape or an impossible date."""
    m = VLLM_TIME.match(text)
    if not m:
        return None
    mo, d, h, mi, s = map(int, m.groups())
    days = _month_start(year, mo)
    # calendar.timegm's own arithmetic (linear in the day and the time), the month's start computed once
    return None if days is None else float((((days + d - 1) * 24 + h) * 60 + mi) * 60 + s)


@lru_cache(maxsize=1024)
def _month_start(year: int, month: int) -> int | None:
    """Days from the epoch to a month's first day (None: no such month), as calendar.timegm counts them."""
    try:
        return datetime.date(year, month, 1).toordinal() - _EPOCH_ORDINAL
    except (ValueError, OverflowError):
        return None


_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


class Clock:
    """The log's own clock -> seconds. vLLM's header has no year: a year-less clock counts from 2000 (a leap
    year, so 02-29 parses) and steps a year when the date runs backwards (a log across New Year)."""

    def __init__(self) -> None:
        self.year_known = False
        self.relative = False
        self._year = 2000
        self._last: float | None = None
        self.source: str | None = None   #: "vllm" or "iso", set by the first timed line

    def of_line(self, line: Line) -> float | None:
        """One clock for the whole log, chosen by its first timed line: vLLM's own header time (the same
        whatever shipper wrapped the line), else a shipper's ISO time (which carries the year)."""
        if line.timestamp and self.source != "iso" and VLLM_TIME.match(line.timestamp):
            self.source = "vllm"
            before = self._last
            t = vllm_time_seconds(line.timestamp, self._year)
            if t is not None and before is not None and t < before - NEW_YEAR_GAP:
                self._year += 1
                t = vllm_time_seconds(line.timestamp, self._year)
            if t is not None:
                self._last = t
            return t
        m = ISO_TIME.match(line.raw) if self.source != "vllm" else None
        if m:
            self.source = "iso"
            y, mo, d, h, mi, s = (int(g) for g in m.groups())
            self.year_known = True
            return self._stamp(y, mo, d, h, mi, s)
        return None

    def _stamp(self, y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
        try:
            t = float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
        except (ValueError, OverflowError):
            return None
        self._last = t
        return t

    def label(self, t: float) -> str:
        """A time as the log would print it: 'MM-DD HH:MM:SS', with the year when the log had one."""
        if self.relative:
            t = max(0, int(t))
            return f"+{t // 3600}:{t // 60 % 60:02d}:{t % 60:02d}"
        import time

        st = time.gmtime(t)
        return time.strftime("%Y-%m-%d %H:%M:%S" if self.year_known else "%m-%d %H:%M:%S", st)


@dataclass
class Point:
    """One interval of one engine: the stats line (or scrape) that closed it."""

    t: float
    engine: str
    values: dict[str, float]
    line: Line | None = None

    def get(self, name: str, default: float = 0.0) -> float:
        v = self.values.get(name)
        return default if v is None else v


class Buckets:
    """A bounded, downsampled series: at most MAX_BUCKETS buckets; when full, neighbours merge in pairs."""

    def __init__(self, capacity: int = MAX_BUCKETS) -> None:
        self.capacity = capacity
        self.width = 1  #: raw points per bucket
        self.items: list[dict[str, Any]] = []

    def add(self, t: float, values: dict[str, float]) -> None:
        last = self.items[-1] if self.items else None
        if last is None or last["n"] >= self.width:
            last = {"t0": t, "t1": t, "n": 0, "f": {}}
            self.items.append(last)
            if len(self.items) > self.capacity:
                self._halve()
                last = self.items[-1]
        last["t1"] = t
        last["n"] += 1
        f = last["f"]
        for name, v in values.items():
            if v is None or v - v != 0:  # not math.isfinite(v), without the call: inf - inf and nan are nan
                continue
            agg = f.get(name)
            if agg is None:
                f[name] = [v, v, v, 1]
            else:  # min() and max() without the calls: the first of equals stays, as they keep it
                if v < agg[0]:
                    agg[0] = v
                if v > agg[1]:
                    agg[1] = v
                agg[2] += v
                agg[3] += 1

    def _halve(self) -> None:
        # each pair merges into its first bucket, in place (nothing else holds a bucket or its lists)
        items = self.items
        for a, b in zip(items[0::2], items[1::2], strict=False):
            f = a["f"]
            for k, v in b["f"].items():
                agg = f.get(k)
                if agg is None:
                    f[k] = v
                    continue
                if v[0] < agg[0]:  # min() and max() without the calls, as in add()
                    agg[0] = v[0]
                if v[1] > agg[1]:
                    agg[1] = v[1]
                agg[2] += v[2]
                agg[3] += v[3]
            a["t1"] = b["t1"]
            a["n"] += b["n"]
        self.items = items[0::2]
        self.width *= 2

    def points(self, clock: Clock) -> list[dict[str, Any]]:
        out = []
        for b in self.items:
            p: dict[str, Any] = {"t": round(b["t0"], 3), "time": clock.label(b["t0"]), "n": b["n"]}
            for k, (lo, hi, total, n) in b["f"].items():
                p[k] = {"min": _r(lo), "max": _r(hi), "mean": _r(total / n)}
            out.append(p)
        return out


def _r(v: float) -> float:
    return round(v, 2) if abs(v) < 1e6 else round(v)


@dataclass(slots=True)
class Window:
    """A stretch of time one detector flagged: exact, from every raw point inside it."""

    kind: str
    engine: str
    start: float
    end: float
    step: float
    first_line: Line | None
    peak_line: Line | None = None
    points: int = 0
    peak_kv: float = 0.0
    max_waiting: float = 0.0
    max_running: float = 0.0
    preemptions: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    _peak_score: float = -1.0
    index: int = 0          #: the detector's count of windows before this one (in its engine)
    dropped: bool = False   #: no rule can report it: kept (without lines) only for the JSON's first windows

    @property
    def seconds(self) -> float:
        return self.end - self.start + self.step

    def add(self, p: Point, score: float, step: float) -> None:
        # max(a, b) without the calls: b when b > a, else a (as max keeps the first of equals, and of nan)
        if step < self.step:
            self.step = step
        self.end = p.t
        self.points += 1
        get = p.values.get  # Point.get without the call: a point's values are never None
        v = get("kv_pct", 0.0)
        if v > self.peak_kv:
            self.peak_kv = v
        v = get("waiting", 0.0)
        if v > self.max_waiting:
            self.max_waiting = v
        v = get("running", 0.0)
        if v > self.max_running:
            self.max_running = v
        self.preemptions += get("preemptions", 0.0)
        if score > self._peak_score and p.line is not None:
            self._peak_score, self.peak_line = score, p.line

    def as_dict(self, clock: Clock) -> dict[str, Any]:
        out = {"start": clock.label(self.start), "end": clock.label(self.end), "seconds": round(self.seconds),
               "peak_kv_usage_pct": round(self.peak_kv, 1), "max_waiting": int(self.max_waiting),
               "preemptions": int(self.preemptions)}
        if self.engine != "0":
            out["engine"] = self.engine
        out.update(self.extra)
        return out


def _hot(values: dict[str, float]) -> bool:
    """A saturated point: KV cache at SATURATED_KV_PCT with requests waiting, or preemptions or swapping."""
    get = values.get
    return (get("kv_pct", 0.0) >= SATURATED_KV_PCT and get("waiting", 0.0) > 0) or get("preemptions", 0.0) > 0 \
        or get("swapped", 0.0) > 0


class _Saturation:
    """KV cache at SATURATED_KV_PCT with requests waiting, or preemptions (or swapping) rising."""

    def __init__(self, out: list[Window]) -> None:
        self.out, self.open, self.seconds = out, None, 0.0

    def feed(self, p: Point, step: float) -> None:
        hot = _hot(p.values)
        w = self.open
        if w is not None and p.t - w.end > MERGE_GAP:
            self._close()
            w = None
        if not hot:
            return
        if w is None:
            w = self.open = Window("saturation", p.engine, p.t, p.t, step, p.line)
        w.add(p, p.get("waiting") + 1000 * p.get("preemptions") + p.get("kv_pct"), step)

    def _close(self) -> None:
        if self.open is not None:
            self.seconds += self.open.seconds
            self.out.append(self.open)
            self.open = None

    def finish(self) -> None:
        self._close()


class _QueueGrowth:
    """Waiting requests growing without recovering: from the start of a queue to its peak; a fall below half
    of the peak so far restarts the growth there."""

    def __init__(self, out: list[Window]) -> None:
        self.out, self.open = out, None
        self.gen = [0, 0]  #: the open window's generation tokens/s: sum (left to right, as sum() adds), count
        self.peak_t = 0.0
        self.first_waiting = 0.0

    def feed(self, p: Point, step: float) -> None:
        get = p.values.get  # Point.get without the call: a point's values are never None
        waiting = get("waiting", 0.0)
        w = self.open
        if w is not None and (waiting == 0 or waiting < 0.5 * w.max_waiting):
            self._close(recovered=waiting == 0)
            w = None
        if waiting <= 0:
            return
        if w is None:
            w = self.open = Window("queue-growth", p.engine, p.t, p.t, step, p.line)
            self.gen, self.first_waiting = [0, 0], waiting
        if waiting >= w.max_waiting:
            self.peak_t = p.t
        w.add(p, waiting, step)
        gen = self.gen  # a running sum, not every point's value: a queue open for days holds no list
        gen[0] += get("gen_tps", 0.0)
        gen[1] += 1
        w.extra["_finished"] = w.extra.get("_finished", 0.0) + get("finished", 0.0)

    def _close(self, recovered: bool) -> None:
        w = self.open
        self.open = None
        if w is None or self.peak_t <= w.start:
            return
        w.end = self.peak_t  # the window is the growth: start of the queue to its peak
        minutes = max(w.seconds / 60.0, 1e-9)
        total, n = self.gen
        w.extra.update({
            "growth_per_min": round((w.max_waiting - self.first_waiting) / minutes, 2),
            "sustained_gen_tps": round(total / n, 1) if n else 0.0,
            "recovered": recovered,
        })
        self.out.append(w)

    def finish(self) -> None:
        self._close(recovered=False)


class _Collapse:
    """Generation throughput below half of what it was, while the load (running + waiting) holds."""

    def __init__(self, out: list[Window]) -> None:
        self.out, self.open = out, None
        #: the last COLLAPSE_HISTORY loaded points' generation tokens/s and load, in step
        self.gens: deque[float] = deque(maxlen=COLLAPSE_HISTORY)
        self.loads: deque[float] = deque(maxlen=COLLAPSE_HISTORY)
        self.ref: tuple[float, float] = (0.0, 0.0)
        self._ref_stale = True  # the history changed since self.ref was taken from it
        self.causes: dict[str, int] = {}

    def feed(self, p: Point, step: float) -> None:
        if "gen_tps" not in p.values:
            return
        get = p.values.get
        gen, load = get("gen_tps", 0.0), get("running", 0.0) + get("waiting", 0.0)
        low = False
        # the medians only when they can tell: gen at half the history's largest or more is not below half of
        # its median (an open window keeps the reference it opened with; the history is the same meanwhile)
        if len(self.gens) == COLLAPSE_HISTORY and load > 0 and (
                self.open is not None or not self._ref_stale or gen < 0.5 * max(self.gens)):
            if self.open is None and self._ref_stale:
                self.ref = (_median(self.gens), _median(self.loads))
                self._ref_stale = False
            ref_gen, ref_load = self.ref
            low = ref_gen >= 50 and gen < 0.5 * ref_gen and load >= 0.75 * ref_load
        if not low:
            if self.open is not None:
                self._close()
            if load > 0:
                self.gens.append(gen)
                self.loads.append(load)
                self._ref_stale = True
            return
        w = self.open
        if w is None:
            w = self.open = Window("throughput-collapse", p.engine, p.t, p.t, step, p.line)
            w.extra.update({"baseline_gen_tps": round(ref_gen, 1), "_gen": 0.0})
            self.causes = {}
        w.add(p, -gen, step)
        w.extra["_gen"] += gen
        cause = ("swapping" if get("swapped", 0.0) > 0 or get("cpu_kv_pct", 0.0) > 0 else
                 "preemption" if get("preemptions", 0.0) > 0 or get("kv_pct", 0.0) >= SATURATED_KV_PCT else
                 "stuck engine" if gen == 0 and get("running", 0.0) > 0 else "unknown")
        self.causes[cause] = self.causes.get(cause, 0) + 1

    def _close(self) -> None:
        w = self.open
        if w is None:
            return
        self.open = None
        w.extra["collapsed_gen_tps"] = round(w.extra.pop("_gen") / w.points, 1)
        w.extra["cause"] = max(self.causes, key=lambda c: (self.causes[c], c != "unknown"))
        self.out.append(w)

    def finish(self) -> None:
        self._close()


class _Errors:
    """Failed requests (5xx, 429) per interval, windows merged like saturation."""

    def __init__(self, out: list[Window]) -> None:
        self.out, self.open = out, None

    def feed(self, p: Point, step: float) -> None:
        errors = p.get("errors")
        w = self.open
        if w is not None and p.t - w.end > MERGE_GAP:
            self._close()
            w = None
        if errors <= 0:
            return
        if w is None:
            w = self.open = Window("error-burst", p.engine, p.t, p.t, step, p.line)
            w.extra.update({"errors": 0, "requests": 0, "status_codes": {}})
        w.add(p, errors, step)
        w.extra["errors"] += int(errors)
        w.extra["requests"] += int(p.get("requests"))
        for code, n in p.values.items():
            if code.startswith("status_"):
                codes = w.extra["status_codes"]
                codes[code[7:]] = codes.get(code[7:], 0) + int(n)

    def _close(self) -> None:
        w = self.open
        if w is None:
            return
        self.open = None
        req = w.extra["requests"]
        w.extra["error_rate_pct"] = round(100.0 * w.extra["errors"] / req, 1) if req else None
        self.out.append(w)

    def finish(self) -> None:
        self._close()


def _median(values: Iterable[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


#: Whether a rule may report a closed window: (kind, facts of the window alone) -> False when none can.
WindowFilter = Callable[[str, Mapping[str, Any]], bool]


class Windows:
    """One detector's closed windows, in order. A window that no rule can report (its `when` is false on the
    window's own facts) is counted, and kept (without its lines) only if it is among the first MAX_WINDOWS
    that the JSON lists. The others are held: the first MAX_WINDOWS in memory, the rest spilled to a temporary
    file (_Spill) and read back in order at the end, so a log of any length holds a bounded number of windows
    and every report is what holding them all gives."""

    def __init__(self, kind: str, keep: WindowFilter | None, evidence: int | None = None) -> None:
        self.kind, self.keep = kind, keep
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
        if self.keep is not None and not self.keep(self.kind, LocalFacts(w)):
            if w.index >= MAX_WINDOWS:
                return
            w.dropped, w.first_line, w.peak_line = True, None, None
        elif self.evidence is not None and w.first_line is not None:
            if len(self._shown) >= self.evidence:
                # its hit is folded, never shown: its place (line number, time, rank) is all it needs to keep,
                # so a long log's reported windows hold no text
                first = w.first_line
                w.first_line = Line(number=first.number, text="", raw="", rank=first.rank,
                                    timestamp=first.timestamp)
                w.peak_line = None
            else:
                self._shown.update(ln.text.strip() for ln in (w.first_line, w.peak_line) if ln is not None)
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
            None if peak is None else True if peak is first else _LINE_STATE(peak))


def _window_of(kind: str, record: tuple[Any, ...]) -> Window:
    """The window _window_record gave `record` for."""
    (engine, start, end, step, points, peak_kv, max_waiting, max_running, preemptions, extra, peak_score, index,
     dropped, first, peak) = record
    first_line = None if first is None else Line(*first)
    peak_line = None if peak is None else first_line if peak is True else Line(*peak)
    return Window(kind, engine, start, end, step, first_line, peak_line, points, peak_kv, max_waiting, max_running,
                  preemptions, extra, peak_score, index, dropped)


class LocalFacts(Mapping[str, Any]):
    """`window_facts(w, None, {}, None)`, each fact computed when asked: the series asks whether a rule may
    report each window as it closes, and a rule's `when` reads two or three of them (the labels, which cost a
    strftime, only when asked)."""

    __slots__ = ("w", "_all")

    def __init__(self, w: Window) -> None:
        self.w = w
        self._all: dict[str, Any] | None = None

    def _facts(self) -> dict[str, Any]:
        if self._all is None:
            self._all = window_facts(self.w, None, {}, None)
        return self._all

    def __getitem__(self, name: str) -> Any:
        own = _LOCAL_FACTS.get(name)
        if own is not None:
            return own(self.w)
        if not name.startswith("_") and name in self.w.extra:
            return self.w.extra[name]
        if name not in _LABELS:  # a word of the expression that is no fact (`and`, a constant's name)
            raise KeyError(name)
        return self._facts()[name]

    def get(self, name: str, default: Any = None) -> Any:
        """Mapping.get without its KeyError for each word of an expression that is no fact."""
        if name in _LOCAL_FACTS or name in _LABELS or (not name.startswith("_") and name in self.w.extra):
            return self[name]
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._facts())

    def __len__(self) -> int:
        return len(self._facts())


#: the facts of window_facts that are a window's own figures (no clock, no listing), as it computes them
_LOCAL_FACTS: dict[str, Callable[[Window], Any]] = {
    "seconds": lambda w: round(w.seconds), "points": lambda w: w.points,
    "kv_usage_pct": lambda w: round(w.peak_kv, 1), "waiting": lambda w: int(w.max_waiting),
    "running": lambda w: int(w.max_running), "series_preemptions": lambda w: int(w.preemptions),
    "engine": lambda w: w.engine, "_finished": lambda w: w.extra.get("_finished", 0.0), "_interval": lambda w: w.step,
}
_LABELS = ("start", "end", "_window")  #: window_facts' other facts


def window_facts(w: Window, clock: Clock | None, common: dict[str, Any], listed: dict[str, Any] | None
                 ) -> dict[str, Any]:
    """What a rule's `series:` entry sees of one window (`clock` None: the labels are not known yet)."""
    d = w.as_dict(clock if clock is not None else Clock())
    return {**common, **{k: v for k, v in w.extra.items() if not k.startswith("_")},
            "_window": listed, "seconds": d["seconds"], "start": d["start"], "end": d["end"],
            "points": w.points, "kv_usage_pct": d["peak_kv_usage_pct"], "waiting": d["max_waiting"],
            "running": int(w.max_running), "series_preemptions": d["preemptions"], "engine": w.engine,
            "_finished": w.extra.get("_finished", 0.0), "_interval": w.step}


_PEAKS = ("kv_pct", "waiting", "running")  #: a track's figures kept at their maximum


class Track:
    """One engine's series: its downsampled points, its detectors and its totals."""

    def __init__(self, engine: str, keep: WindowFilter | None = None,
                 evidence: Callable[[str], int | None] | None = None) -> None:
        self.engine = engine
        self.buckets = Buckets()
        self.windows: dict[str, Windows] = {
            k: Windows(k, keep, evidence(k) if evidence is not None else None)
            for k in ("saturation", "queue-growth", "throughput-collapse", "error-burst")}
        self.sat = _Saturation(self.windows["saturation"])
        self.queue = _QueueGrowth(self.windows["queue-growth"])
        self.collapse = _Collapse(self.windows["throughput-collapse"])
        self.errors = _Errors(self.windows["error-burst"])
        self.detectors = [self.sat, self.queue, self.collapse, self.errors]
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.step = DEFAULT_STEP
        self.points = 0
        self.peak: dict[str, float] = {}
        self.prefix = [0.0, 0.0, 0, 0.0]  # sum(hit * prompt), sum(prompt), points, max hit
        self.first_line: Line | None = None

    def add(self, p: Point) -> None:
        t, values = p.t, p.values
        if self.last_t is not None and t > self.last_t:
            # the logging interval: the shortest spacing seen (a quiet gap is not an interval)
            gap = t - self.last_t
            self.step = gap if self.points == 1 or gap < self.step else self.step
        if self.first_t is None:
            self.first_t, self.first_line = t, p.line
        self.last_t = t
        self.points += 1
        self.buckets.add(t, values)
        peak = self.peak
        for name in _PEAKS:  # max(peak, v) without the call: v when v > peak
            v = values.get(name)
            if v is not None or name in values:
                was = peak.get(name, 0.0)
                peak[name] = v if v > was else was  # type: ignore[operator]
        hit = values.get("prefix_hit_pct")
        if hit is not None or "prefix_hit_pct" in values:
            weight = values.get("prompt_tps")
            weight = 1.0 if weight is None else weight
            if weight > 0:
                prefix = self.prefix
                prefix[0] += hit * weight  # type: ignore[operator]
                prefix[1] += weight
                prefix[2] += 1
                prefix[3] = hit if hit > prefix[3] else prefix[3]  # type: ignore[operator]
        step = self.step
        # a detector is asked only when the point can change it: one that has no open window ignores a point
        # below its threshold (most points of a healthy log), the tests are each feed's first return
        get = values.get
        sat = self.sat
        if sat.open is not None or _hot(values):
            sat.feed(p, step)
        queue, collapse, errors = self.queue, self.collapse, self.errors
        if queue.open is not None or not get("waiting", 0.0) <= 0:
            queue.feed(p, step)
        collapse.feed(p, step)
        if errors.open is not None or not get("errors", 0.0) <= 0:
            errors.feed(p, step)

    def finish(self) -> None:
        for d in self.detectors:
            d.finish()

    @property
    def seconds(self) -> float:
        if self.first_t is None or self.last_t is None:
            return 0.0
        return self.last_t - self.first_t + self.step


#: what observe() looks for after the metrics (case-sensitive, as its `in` tests)
_OBSERVED = KeywordIndex([w] for w in ("throughput", "KV cache usage", "RUNNING:", "is preempted by"))



def access_counts(block: bytes, gaps: list[tuple[int, int]] | None = None, starts: list[int] | None = None
                  ) -> tuple[list[int], list[int]] | None:
    """(where the block's stats lines start, the access lines (` HTTP/`) before each and after the last), within
    `gaps` (None: the whole block); None when the block holds no access line. The passes over the whole block
    that Series.access_block needs, as a function of the block alone.
    `starts`: the block's keyword lines (the reader's hits; a stats line is one), else the block is searched.

    >>> block = b'GET / HTTP/1.1" 200\\nINFO Avg prompt throughput: 1\\nGET / HTTP/1.1" 200\\n'
    >>> access_counts(block)
    ([20], [1, 1])
    """
    ranges = [(0, len(block))] if gaps is None else gaps
    if all(block.find(b" HTTP/", a, b) == -1 for a, b in ranges):
        return None
    find = block.find
    if starts is not None:  # a stats line holds a keyword: among the hits, without a pass over the block
        cuts = [s for s in starts if find(STATS_MARK, s, find(b"\n", s)) != -1]
    else:  # where each stats line starts: literal finds (a regex with a leading [^\n]* is quadratic)
        cuts = []
        i = find(STATS_MARK)
        while i != -1:
            cuts.append(block.rfind(b"\n", 0, i) + 1)
            nl = find(b"\n", i)
            i = find(STATS_MARK, nl) if nl != -1 else -1
    counts: list[int] = []
    pos, r = 0, 0
    for start in [*cuts, len(block)]:
        n = 0
        while r < len(ranges):
            a, b = ranges[r]
            lo, hi = max(a, pos), min(b, start)
            if lo < hi:
                n += block.count(b" HTTP/", lo, hi)
            if b > start:
                break
            r += 1
        counts.append(n)
        pos = start
    return cuts, counts


class Series:
    """The serving phase of one input, fed line by line (and raw blocks, for access lines)."""

    def __init__(self, keep: WindowFilter | None = None, evidence: Callable[[str], int | None] | None = None
                 ) -> None:
        self.clock = Clock()
        self.keep = keep  #: which closed windows a rule may report (the others are counted, not held)
        self.evidence = evidence  #: see Windows.evidence
        self.tracks: dict[str, Track] = {}
        self.metrics = MetricsReader()
        self._pending_http: deque[tuple[int, int, dict[str, int]]] = deque()  # (stats line no., requests, codes)
        self._open_http: list[Any] = [0, {}]
        self._http_seen = False
        self._last_t: float | None = None
        self._v0_total = 0
        self._v0_pending = 0.0
        self._scrapes = 0
        self._prev_scrape: dict[str, Scrape] = {}
        self._first_scrape: dict[str, tuple[Scrape, Scrape]] = {}
        self.cache_info: dict[str, str] = {}

    # -- input ---------------------------------------------------------------------------------------

    def observe(self, line: Line) -> None:
        text = line.text
        if not text:
            return
        first = text[0]
        if first in "#vh" and text.startswith(("vllm:", "# ", "http_requests")) and self.metrics.feed(text):
            if self.metrics.current.line is None:
                self.metrics.current.line = line
            for scrape in self.metrics.take():
                self._scrape(scrape)
            return
        if len(text) >= SMALL_BLOCK and not _OBSERVED.any_in(text):
            return  # a piece of an enormous line: one pass (hyperscan's, when installed) instead of four
        if "throughput" in text or "KV cache usage" in text or "RUNNING:" in text:
            self._stats(line)
        elif "is preempted by" in text:
            span = _V0_PLANS(text)
            if span is not None:
                total = int(text[span[0]:span[1]]) if span[0] != -1 else self._v0_total + 1
                self._v0_pending += max(total - self._v0_total, 0)
                self._v0_total = max(total, self._v0_total)

    def access_block(self, first_number: int, block: bytes, gaps: list[tuple[int, int]] | None = None,
                     index: Any = None, line_map: list[int] | None = None, starts: list[int] | None = None,
                     found: dict[Any, list[re.Match[bytes]]] | None = None) -> None:
        """Count access lines and their failed statuses in a raw block, split at its stats lines (an access
        line has no clock: it belongs to the interval that the next stats line closes). `gaps`: the ranges
        outside request-logger lines (None: the whole block); a prompt that quotes an access line is no request.
        `index`: the reader's newline counts of the block (selection.LineIndex), else they are counted here.
        `line_map`: the physical line of each of the block's lines (a shipper's record may hold several, an
        OTLP export). `starts`: where the block's keyword lines start (the reader's hits), stats lines among
        them; else the block is searched for them. `found`: the reader's search of the gaps for BLOCK_ERROR
        among others (Prefilter.scan), else the block is searched for it here.
        """
        counted = access_counts(block, gaps, starts)
        if counted is None:
            return
        cuts, counts = counted
        self._http_seen = True
        ranges = [(0, len(block))] if gaps is None else gaps
        errors = (found[BLOCK_ERROR] if found is not None and BLOCK_ERROR in found
                  else [m for a, b in ranges for m in BLOCK_ERROR.finditer(block, a, b)])
        pos, k, e = 0, 0, 0  # k: the block's lines before `pos`
        for i, start in enumerate([*cuts, len(block)]):
            self._open_http[0] += counts[i]
            first = e
            while e < len(errors) and errors[e].start() < start:
                e += 1
            self._count_errors(errors[first:e])
            if start == len(block):
                break
            k = index.at(start) if index is not None else k + block.count(b"\n", pos, start)
            number = first_number + (line_map[k] if line_map is not None and k < len(line_map) else k)
            self._pending_http.append((number + 1, self._open_http[0], self._open_http[1]))
            self._open_http = [0, {}]
            pos = start

    def _count_errors(self, errors: list[re.Match[bytes]]) -> None:
        codes = self._open_http[1]
        for m in errors:
            code = m.group(1).decode()
            codes[code] = codes.get(code, 0) + 1

    def _stats(self, line: Line) -> None:
        text = line.text
        names, spans, engine_span = _STAT_PLANS(text)
        try:  # one C-level pass: slices, floats, the dict
            values = dict(zip(names, map(float, map(text.__getitem__, spans)), strict=True))
        except ValueError:  # a malformed number ('1.2.3' fits [\d.]+): that field only is not read
            values = {name: v for name, span in zip(names, spans, strict=True)
                      if (v := _number(text[span])) is not None}
        if "kv_pct" not in values and "running" not in values:
            if "prefix_hit_pct" in values and self.tracks:  # V0's companion line: the interval just logged
                track = next(iter(self.tracks.values()))
                if track.last_t is not None:
                    track.prefix[0] += values["prefix_hit_pct"]
                    track.prefix[1] += 1
                    track.prefix[2] += 1
                    track.prefix[3] = max(track.prefix[3], values["prefix_hit_pct"])
            return
        engine = engine_span if isinstance(engine_span, str) else (text[slice(*engine_span)].lstrip("0") or "0")
        t = self.clock.of_line(line)
        if t is None:
            self.clock.relative = self.clock.relative or self._last_t is None
            t = (self._last_t + DEFAULT_STEP) if self._last_t is not None else 0.0
            if not self.clock.relative:
                t = self._last_t or 0.0
        if self._v0_pending:
            values["preemptions"] = values.get("preemptions", 0.0) + self._v0_pending
            self._v0_pending = 0.0
        values.setdefault("preemptions", 0.0)
        self._take_http(line.number, values)
        self._last_t = t
        self._add(Point(t, engine, values, line))

    @staticmethod
    def _stat_plan(text: str) -> tuple[tuple[str, ...], tuple[slice, ...], str | tuple[int, int]]:
        """Where a stats line's values are: the fields in the order they are read, their slices, and the engine
        ("0", "all", or where its number is). Positions only (digit classes), so one plan serves a shape."""
        fields = []
        for name, rx in STAT_FIELDS.items():
            m = rx.search(text)
            if m:
                fields.append((name, m.start(1), m.end(1)))
        kv = list(KV_USAGE.finditer(text))
        if kv:
            fields.append(("kv_pct", kv[0].start(2), kv[0].end(2)))
            if len(kv) > 1 and kv[1].group(1) == "CPU":
                fields.append(("cpu_kv_pct", kv[1].start(2), kv[1].end(2)))
        m = ENGINE.search(text)
        engine: str | tuple[int, int] = (m.start(1), m.end(1)) if m and m.group(1) else ("all" if m else "0")
        return tuple(f[0] for f in fields), tuple(slice(a, b) for _, a, b in fields), engine

    def _take_http(self, number: int, values: dict[str, float]) -> None:
        if not self._http_seen:
            return
        requests, codes = 0, {}
        # one interval per stats line: several can share a physical line (an OTLP record holds many lines)
        own = False
        while self._pending_http and (self._pending_http[0][0] < number or
                                      (self._pending_http[0][0] == number and not own)):
            own = own or self._pending_http[0][0] == number
            _, n, c = self._pending_http.popleft()
            requests += n
            for k, v in c.items():
                codes[k] = codes.get(k, 0) + v
        values["requests"] = float(requests)
        values["errors"] = float(sum(codes.values()))
        for k, v in codes.items():
            values[f"status_{k}"] = float(v)

    def _scrape(self, scrape: Scrape) -> None:
        self._scrapes += 1
        if scrape.info:
            self.cache_info.update(scrape.info)
        if scrape.time is None:
            self.clock.relative = True
            scrape.time = (self._last_t + DEFAULT_STEP) if self._last_t is not None else 0.0
        else:
            self.clock.year_known = True
        self._last_t = scrape.time
        if scrape.status and not scrape.values:
            scrape.values["0"] = {}
        for engine, vals in scrape.values.items():
            prev = self._prev_scrape.get(engine)
            mine = Scrape(time=scrape.time, values={engine: vals}, status=scrape.status if engine == "0" else {},
                          line=scrape.line)
            self._prev_scrape[engine] = mine
            if prev is None:
                self._first_scrape[engine] = (mine, mine)
                continue
            if engine in self._first_scrape:  # the first scrape of this engine has a successor: no counts of its own
                first, _ = self._first_scrape.pop(engine)
                self._add(Point(first.time or 0.0, engine, _gauges(first.values[engine], None, None, 0.0), first.line))
            dt = (mine.time or 0.0) - (prev.time or 0.0)
            point = Point(mine.time or 0.0, engine, _gauges(vals, prev.values[engine], dt, None), mine.line)
            _status_delta(point.values, mine.status, prev.status)
            self._add(point)

    def _add(self, p: Point) -> None:
        track = self.tracks.get(p.engine)
        if track is None:
            track = self.tracks[p.engine] = Track(p.engine, self.keep, self.evidence)
        track.add(p)

    # -- results -------------------------------------------------------------------------------------

    def finish(self, ctx: Any = None) -> None:
        self.metrics.finish()
        for scrape in self.metrics.take():
            self._scrape(scrape)
        for engine, (first, _) in self._first_scrape.items():
            # one scrape: the state now; its counters count since the server started
            vals = first.values[engine]
            point = Point(first.time or 0.0, engine, _gauges(vals, None, None, vals.get("preemptions", 0.0)),
                          first.line)
            _status_delta(point.values, first.status, {})
            self._add(point)
        self._first_scrape.clear()
        for track in self.tracks.values():
            track.finish()
        if ctx is not None:
            self._fill_context(ctx)

    def _fill_context(self, ctx: Any) -> None:
        peaks = [t.peak for t in self.tracks.values()]
        for name, attr, kind in (("kv_pct", "peak_kv_usage_pct", float), ("waiting", "max_waiting_reqs", int),
                                 ("running", "max_running_reqs", int)):
            got = [p[name] for p in peaks if name in p]
            if got and getattr(ctx, attr, None) is None:
                setattr(ctx, attr, kind(max(got)))
        info = self.cache_info
        for key, attr, kind in (("num_gpu_blocks", "num_gpu_blocks", int), ("block_size", "block_size", int),
                                ("gpu_memory_utilization", "gpu_memory_utilization", float)):
            if info.get(key) not in (None, "", "None") and getattr(ctx, attr, None) is None:
                with contextlib.suppress(ValueError):
                    setattr(ctx, attr, kind(float(info[key])))
        if self._scrapes and ctx.stats_lines == 0:
            ctx.engine = ctx.engine or None

    @property
    def empty(self) -> bool:
        return not self.tracks

    @property
    def source(self) -> str:
        return "metrics" if self._scrapes else "log"

    @property
    def serving_seconds(self) -> float:
        return sum(t.seconds for t in self.tracks.values())

    @property
    def saturated_seconds(self) -> float:
        return sum(t.windows["saturation"].seconds for t in self.tracks.values())

    def windows(self, kind: str) -> Iterator[Window]:
        for track in self.tracks.values():
            yield from track.windows.get(kind, [])

    def candidates(self, kind: str) -> Iterator[tuple[dict[str, Any], list[Line]]]:
        """What a rule's `series:` entry matches: (facts, evidence lines) per window, or per engine for the
        whole-series summaries (prefix-cache)."""
        common = {"_serving_seconds": round(self.serving_seconds, 1),
                  "_saturated_seconds": round(self.saturated_seconds, 1), "source": self.source}
        if kind == "prefix-cache":
            for track in self.tracks.values():
                hit_sum, weight, n, top = track.prefix
                if not n:
                    continue
                facts = {**common, "prefix_hit_pct": round(hit_sum / weight, 2) if weight else 0.0,
                         "max_prefix_hit_pct": top, "points": n, "seconds": round(track.seconds),
                         "engine": track.engine, "peak_kv_usage_pct": track.peak.get("kv_pct")}
                yield facts, [track.first_line] if track.first_line else []
            return
        if self.serving_seconds and all(t.points <= 1 for t in self.tracks.values()):
            common["_serving_seconds"] = 0.0  # one scrape: the state now, no time to share out
        offset = 0  # windows of the engines before (numbered across engines, as they are listed)
        for track in self.tracks.values():
            ws = track.windows.get(kind)
            if ws is None:
                continue
            for w in ws:
                if not w.dropped:
                    yield self._candidate(w, offset + w.index, common)
            offset += ws.total

    def _candidate(self, w: Window, i: int, common: dict[str, Any]) -> tuple[dict[str, Any], list[Line]]:
        d = w.as_dict(self.clock)
        timed = self.tracks[w.engine].points > 1
        listed = {k: v for k, v in d.items() if not k.startswith("_")} if i < MAX_WINDOWS and timed else None
        evidence = [w.first_line] if w.first_line is not None else []
        if w.peak_line is not None and w.peak_line is not w.first_line:
            evidence.append(w.peak_line)
        return window_facts(w, self.clock, common, listed), evidence

    def to_dict(self) -> dict[str, Any]:
        """The `series` object of the JSON report: downsampled points and windows per engine."""
        return {
            "source": self.source,
            "clock": "relative" if self.clock.relative else ("absolute" if self.clock.year_known else "no-year"),
            "serving_seconds": round(self.serving_seconds, 1),
            "engines": {
                e: {"points": t.buckets.points(self.clock), "bucket_points": t.buckets.width,
                    "windows": {k: [w.as_dict(self.clock) for w in ws.first(MAX_WINDOWS)] for k, ws in t.windows.items()
                                if ws}}
                for e, t in sorted(self.tracks.items())
            },
        }


_STAT_PLANS = ShapePlans(Series._stat_plan)
#: where a V0 preemption warning's cumulative count is: None (no warning), (-1, -1) (no count), or its span
_V0_PLANS = ShapePlans(lambda text: (m.span(1) if (m := V0_PREEMPTED.search(text)) else None))


def _number(text: str) -> float | None:
    """float(text), None when it is no number."""
    try:
        return float(text)
    except ValueError:
        return None


def _gauges(vals: dict[str, float], prev: dict[str, float] | None, dt: float | None,
            preemptions: float | None) -> dict[str, float]:
    """A scrape's fields as a point: gauges as read, counters as rates (tokens/s) or deltas (preemptions)."""
    out: dict[str, float] = {k: vals[k] for k in ("kv_pct", "running", "waiting", "swapped", "cpu_kv_pct",
                                                   "prefix_hit_pct") if k in vals}
    if prev is not None and dt and dt > 0:
        def delta(name: str) -> float | None:
            if name not in vals or name not in prev:
                return None
            d = vals[name] - prev[name]
            return d if d >= 0 else vals[name]  # a counter reset: the server restarted

        for name in ("prompt_tps", "gen_tps"):
            d = delta(name)
            if d is not None:
                out[name] = d / dt
        d = delta("preemptions")
        out["preemptions"] = d or 0.0
        for name in ("finished",):
            d = delta(name)
            if d is not None:
                out[name] = d
        q, h = delta("prefix_queries"), delta("prefix_hits")
        if q and h is not None:
            out["prefix_hit_pct"] = 100.0 * h / q
        for kind in ("ttft", "e2e"):
            s, c = delta(f"{kind}_sum"), delta(f"{kind}_count")
            if s is not None and c:
                out[f"{kind}_s"] = s / c
    else:
        out["preemptions"] = preemptions or 0.0
    return out


def _status_delta(values: dict[str, float], now: dict[str, float], before: dict[str, float]) -> None:
    """http_requests_total by status: requests and failed requests (5xx, 429) since the last scrape."""
    if not now:
        return
    requests = errors = 0.0
    for code, n in now.items():
        d = n - before.get(code, 0.0)
        d = d if d >= 0 else n
        requests += d
        if code.startswith("5") or code == "429":
            errors += d
            if d:
                values[f"status_{code}"] = d
    values["requests"], values["errors"] = requests, errors
