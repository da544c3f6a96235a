"""The detectors: windows of trouble found on every point of one engine as it arrives, so each window is exact.

A `Point` is one interval of one engine (the stats line or scrape that closed it). Each detector keeps at most
one open `Window` and closes it into its list when the trouble ends: saturation (KV cache full with requests
waiting, or preemptions), a growing queue, a throughput collapse under the same load, a burst of failed requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from diagnoser.analysis.serving.clock import Clock
from diagnoser.ingest.line import Line

MERGE_GAP = 60.0         #: saturated points closer than this belong to one window
SATURATED_KV_PCT = 95.0  #: KV cache usage at which a queue means vLLM is out of cache
COLLAPSE_HISTORY = 6     #: points that make the throughput reference before a collapse
#: a failed-request window's example access lines (its evidence): the first few, the peak interval's, the last
FAILING_FIRST = 2
FAILING_PEAK = 2
#: the failing access lines an interval keeps (the first few and the last, as raw lines): what a window takes from
INTERVAL_FAILING = FAILING_FIRST + 1
#: the values a point may carry
FIELDS = ("kv_pct", "running", "waiting", "prompt_tps", "gen_tps", "preemptions", "swapped", "cpu_kv_pct",
          "prefix_hit_pct", "requests", "errors", "ttft_s", "e2e_s")


@dataclass
class Point:
    """One interval of one engine: the stats line (or scrape) that closed it."""

    t: float
    engine: str
    values: dict[str, float]
    line: Line | None = None
    #: its interval's failing access lines, (line number, raw line), in order: at most INTERVAL_FAILING
    failing: list[tuple[int, bytes]] | None = None

    def get(self, name: str, default: float = 0.0) -> float:
        v = self.values.get(name)
        return default if v is None else v


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
    #: a failed-request window's example access lines as read, (line number, raw line), until Windows decodes
    #: (and redacts) them into `examples`: its evidence instead of the stats lines
    failing: list[tuple[int, bytes]] | None = None
    examples: list[Line] | None = None

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


def saturated(values: dict[str, float]) -> bool:
    """A saturated point: KV cache at SATURATED_KV_PCT with requests waiting, or preemptions or swapping."""
    get = values.get
    return (get("kv_pct", 0.0) >= SATURATED_KV_PCT and get("waiting", 0.0) > 0) or get("preemptions", 0.0) > 0 \
        or get("swapped", 0.0) > 0


class Saturation:
    """KV cache at SATURATED_KV_PCT with requests waiting, or preemptions (or swapping) rising."""

    def __init__(self, out: list[Window]) -> None:
        self.out, self.open, self.seconds = out, None, 0.0

    def feed(self, p: Point, step: float) -> None:
        hot = saturated(p.values)
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


class QueueGrowth:
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


class Collapse:
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


class ErrorBurst:
    """Failed requests (5xx, 429) per interval, windows merged like saturation. A window keeps a few of its
    failing access lines (the first FAILING_FIRST, FAILING_PEAK of the interval with the most failures, the
    last), never all of them."""

    def __init__(self, out: list[Window]) -> None:
        self.out, self.open = out, None
        self.head: list[tuple[int, bytes]] = []  #: the open window's first failing lines
        self.peak: tuple[float, list[tuple[int, bytes]]] = (0.0, [])  #: its worst interval: failures, lines
        self.last: tuple[int, bytes] | None = None  #: its last failing line

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
            self.head, self.peak, self.last = [], (0.0, []), None
        w.add(p, errors, step)
        w.extra["errors"] += int(errors)
        w.extra["requests"] += int(p.get("requests"))
        for code, n in p.values.items():
            if code.startswith("status_"):
                codes = w.extra["status_codes"]
                codes[code[7:]] = codes.get(code[7:], 0) + int(n)
        failing = p.failing
        if failing:
            head = self.head
            if len(head) < FAILING_FIRST:
                head.extend(failing[:FAILING_FIRST - len(head)])
            if errors > self.peak[0]:
                self.peak = (errors, failing[:FAILING_PEAK])
            self.last = failing[-1]

    def _close(self) -> None:
        w = self.open
        if w is None:
            return
        self.open = None
        req = w.extra["requests"]
        w.extra["error_rate_pct"] = round(100.0 * w.extra["errors"] / req, 1) if req else None
        lines = {n: raw for n, raw in (*self.head, *self.peak[1], *([self.last] if self.last else []))}
        w.failing = sorted(lines.items()) or None
        self.head, self.peak, self.last = [], (0.0, []), None
        self.out.append(w)

    def finish(self) -> None:
        self._close()


def _median(values: Iterable[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

