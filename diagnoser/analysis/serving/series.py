"""Track the serving phase over time: stats lines, access lines and /metrics scrapes -> one series per engine.

What vLLM says about itself under load is periodic: V0's "Avg prompt throughput ... Pending: N reqs, GPU KV
cache usage: X%, CPU KV cache usage: Y%", V1's "Engine 000: ... Waiting: N reqs, GPU KV cache usage: X%,
Prefix cache hit rate: Y%" (one line per data-parallel engine; later releases add "Preemptions: N"), V0's
preemption warnings with their cumulative count, uvicorn's access lines (status codes), and Prometheus
scrapes of `/metrics`. Each becomes a point in time (the log's own clock; the year is often missing).

`Series` is the one the pipeline feeds (lines, raw blocks for access lines) and the matcher asks (the windows
a rule's `series:` entry matches, the JSON's `series`); it turns stats lines and scrapes into points and hands
each to its engine's `Track` (track.py). The rest of the package: stats_lines.py (where a stats line's figures
are, access lines per interval), clock.py (the log's own clock), detectors.py (points and the windows found on
them), buckets.py (the chart's downsampled points), spill.py (closed windows in bounded memory), facts.py (what
a rule sees of a window), metrics.py (Prometheus text).
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from diagnoser.analysis.serving.clock import Clock
from diagnoser.analysis.serving.detectors import INTERVAL_FAILING, Point, Window
from diagnoser.analysis.serving.facts import window_facts
from diagnoser.analysis.serving.metrics import KEYWORDS as METRIC_KEYWORDS
from diagnoser.analysis.serving.metrics import MetricsReader, Scrape
from diagnoser.analysis.serving.spill import MAX_WINDOWS, WindowFilter, evidence_lines
from diagnoser.analysis.serving.stats_lines import BLOCK_ERROR, V0_PLANS, access_counts, stat_values
from diagnoser.analysis.serving.track import DEFAULT_STEP, Track
from diagnoser.ingest.clean import physical_to_lines
from diagnoser.ingest.keywords import SMALL_BLOCK, KeywordIndex
from diagnoser.ingest.line import Line
from diagnoser.ingest.redact import Redactor

#: Lines the series reads: the reader's prefilter must keep them.
KEYWORDS = ("Avg prompt throughput", "KV cache usage:", "Running:", "RUNNING:", "Preemptions:", "is preempted by",
            "Prefix cache hit rate", *METRIC_KEYWORDS)

#: what observe() looks for after the metrics (case-sensitive, as its `in` tests)
_OBSERVED = KeywordIndex([w] for w in ("throughput", "KV cache usage", "RUNNING:", "is preempted by"))


class Series:
    """The serving phase of one input, fed line by line (and raw blocks, for access lines)."""

    def __init__(self, keep: WindowFilter | None = None, evidence: Callable[[str], int | None] | None = None,
                 redact: bool = True) -> None:
        self.clock = Clock()
        self.keep = keep  #: which closed windows a rule may report (the others are counted, not held)
        self.evidence = evidence  #: see Windows.evidence
        #: the failing access lines shown as evidence are redacted as the reader redacts every line (unless
        #: --no-redact); what that removed, by kind (the report adds it to the reader's count)
        self.redact = redact
        self.redactions: Counter[str] = Counter()
        self.tracks: dict[str, Track] = {}
        self.metrics = MetricsReader()
        # (stats line no., requests, codes, failing access lines: (line no., raw line), a few) per interval
        self._pending_http: deque[tuple[int, int, dict[str, int], list[tuple[int, bytes]]]] = deque()
        self._open_http: list[Any] = [0, {}, []]
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
            span = V0_PLANS(text)
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
        Of the failing access lines, each interval keeps a few raw (its first ones and its last, with their line
        numbers): a failed-request window's evidence, decoded and redacted only for a window a rule reports.
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
            if e > first:
                self._count_errors(errors[first:e])
                self._note_failing(block, errors[first:e], first_number, pos, k, index, line_map)
            if start == len(block):
                break
            k = index.at(start) if index is not None else k + block.count(b"\n", pos, start)
            number = first_number + (line_map[k] if line_map is not None and k < len(line_map) else k)
            self._pending_http.append((number + 1, *self._open_http))
            self._open_http = [0, {}, []]
            pos = start

    def _note_failing(self, block: bytes, errors: list[re.Match[bytes]], first_number: int, pos: int, k: int,
                      index: Any, line_map: list[int] | None) -> None:
        """Keep the open interval's first failing access lines and its last (INTERVAL_FAILING at most, raw, with
        their line numbers): a window's evidence is taken from them. `pos`: where the interval's part of the
        block starts (a line start), `k`: the block's lines before it."""
        held = self._open_http[2]
        picked = errors if len(errors) <= INTERVAL_FAILING else [*errors[:INTERVAL_FAILING - 1], errors[-1]]
        at = pos
        for m in picked:
            start = block.rfind(b"\n", pos, m.start()) + 1 or pos
            if index is not None:
                k = index.at(start)
            else:
                k += block.count(b"\n", at, start)
                at = start
            end = block.find(b"\n", m.end())
            raw = block[start:end if end != -1 else len(block)]
            _keep_failing(held, (first_number + (line_map[k] if line_map is not None and k < len(line_map) else k) + 1,
                                 bytes(raw)))

    def _decode(self, number: int, raw: bytes) -> Line | None:
        """A failing access line as the reader makes every line it shows: cleaned, redacted (each line by a
        redactor of its own: a secret cut at the end of one is no reason to redact the start of an unrelated
        next one), parsed."""
        redactor = Redactor() if self.redact else None
        lines = list(physical_to_lines(number, raw, redactor, False))
        if redactor is not None:
            self.redactions.update(redactor.counts)
        return next((ln for ln in lines if " HTTP/" in ln.text), lines[0] if lines else None)

    def _count_errors(self, errors: list[re.Match[bytes]]) -> None:
        codes = self._open_http[1]
        for m in errors:
            code = m.group(1).decode()
            codes[code] = codes.get(code, 0) + 1

    def _stats(self, line: Line) -> None:
        values, engine = stat_values(line.text)
        if "kv_pct" not in values and "running" not in values:
            if "prefix_hit_pct" in values and self.tracks:  # V0's companion line: the interval just logged
                track = next(iter(self.tracks.values()))
                if track.last_t is not None:
                    track.prefix[0] += values["prefix_hit_pct"]
                    track.prefix[1] += 1
                    track.prefix[2] += 1
                    track.prefix[3] = max(track.prefix[3], values["prefix_hit_pct"])
            return
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
        failing = self._take_http(line.number, values)
        self._last_t = t
        self._add(Point(t, engine, values, line, failing or None))

    def _take_http(self, number: int, values: dict[str, float]) -> list[tuple[int, bytes]] | None:
        """The interval's requests and failed statuses into `values`; its failing access lines (a few)."""
        if not self._http_seen:
            return None
        requests, codes = 0, {}
        failing: list[tuple[int, bytes]] = []
        # one interval per stats line: several can share a physical line (an OTLP record holds many lines)
        own = False
        while self._pending_http and (self._pending_http[0][0] < number or
                                      (self._pending_http[0][0] == number and not own)):
            own = own or self._pending_http[0][0] == number
            _, n, c, f = self._pending_http.popleft()
            requests += n
            for k, v in c.items():
                codes[k] = codes.get(k, 0) + v
            for item in f:
                _keep_failing(failing, item)
        values["requests"] = float(requests)
        values["errors"] = float(sum(codes.values()))
        for k, v in codes.items():
            values[f"status_{k}"] = float(v)
        return failing

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
            track = self.tracks[p.engine] = Track(p.engine, self.keep, self.evidence, self._decode)
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
        return window_facts(w, self.clock, common, listed), evidence_lines(w)

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


def _keep_failing(held: list[tuple[int, bytes]], line: tuple[int, bytes]) -> None:
    """Add a failing access line to an interval's few: the first INTERVAL_FAILING - 1 stay, the last slot is the
    latest."""
    if len(held) < INTERVAL_FAILING:
        held.append(line)
    else:
        held[-1] = line


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

