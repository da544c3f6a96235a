"""One engine's series: its chart buckets, its detectors with their closed windows, and its totals.

Every point of the engine goes to the buckets and to each detector that it can change; the track keeps the
peaks (KV cache usage, waiting, running), the logging interval and the prefix-cache hit rate weighted by prompt
throughput.
"""

from __future__ import annotations

from collections.abc import Callable

from diagnoser.analysis.serving.buckets import Buckets
from diagnoser.analysis.serving.detectors import Collapse, ErrorBurst, Point, QueueGrowth, Saturation, saturated
from diagnoser.analysis.serving.spill import LineDecoder, WindowFilter, Windows
from diagnoser.ingest.line import Line

DEFAULT_STEP = 10.0      #: seconds between stats lines when the log has no clock (vLLM's default interval)

_PEAKS = ("kv_pct", "waiting", "running")  #: a track's figures kept at their maximum


class Track:
    """One engine's series: its downsampled points, its detectors and its totals."""

    def __init__(self, engine: str, keep: WindowFilter | None = None,
                 evidence: Callable[[str], int | None] | None = None, decode: LineDecoder | None = None) -> None:
        self.engine = engine
        self.buckets = Buckets()
        self.windows: dict[str, Windows] = {
            k: Windows(k, keep, evidence(k) if evidence is not None else None, decode)
            for k in ("saturation", "queue-growth", "throughput-collapse", "error-burst")}
        self.sat = Saturation(self.windows["saturation"])
        self.queue = QueueGrowth(self.windows["queue-growth"])
        self.collapse = Collapse(self.windows["throughput-collapse"])
        self.errors = ErrorBurst(self.windows["error-burst"])
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
        if sat.open is not None or saturated(values):
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

