"""The pipeline in one place: read -> track -> match -> advise, in one streaming pass."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from diagnoser.analysis.advise import Advisor, Finding
from diagnoser.analysis.hits import Hit
from diagnoser.analysis.matcher import Matcher
from diagnoser.analysis.serving.series import KEYWORDS as SERIES_KEYWORDS
from diagnoser.analysis.serving.series import Series
from diagnoser.analysis.serving.stats_lines import BLOCK_ERROR
from diagnoser.analysis.tracker import Context, Tracker, landmark_keywords
from diagnoser.ingest.keywords import SMALL_BLOCK, BlockPattern
from diagnoser.ingest.prefilter import Prefilter
from diagnoser.ingest.reader import ReadStats, read_lines
from diagnoser.ingest.redact import Redactor
from diagnoser.lazyre import lazy
from diagnoser.rules.loader import builtin_rules
from diagnoser.rules.model import Rule


@dataclass
class Report:
    """What one input produced: its context and its ranked findings."""

    path: str
    lines: int
    bytes: int
    context: Context
    findings: list[Finding]
    redactions: dict[str, int] = field(default_factory=dict)
    #: the input showed a sign of vLLM (a header, the name, a setting, a finding): else it is not a vLLM log
    vllm_seen: bool = True
    #: the serving phase over time (None when the input had no stats line, access line or scrape)
    series: Series | None = None

    @property
    def started(self) -> bool:
        """The log shows a server or engine that became ready (or served): what `check` requires of a start-up."""
        ctx = self.context
        return bool(ctx.server_started or ctx.engine_ready or ctx.stats_lines)

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            if not f.rule.context:
                out[f.severity] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (schema_version 1): exactly what `--format json` prints for this input."""
        from diagnoser.analysis.contract import report_dict

        return report_dict(self)


_PREFILTERS: dict[int, tuple[object, Prefilter]] = {}


#: Bytes that only a vLLM log (or a report about one) holds: the name, or vLLM's `LEVEL MM-DD HH:MM:SS` header.
#: A file without any sign (one enormous line, binary input) is searched to its end: with hyperscan, one caseless
#: pass over each chunk as read; else in lower-cased bytes (a case-insensitive alternation in `re` runs at a few
#: MB/s, slower than lower() and the plain one).
_SIGN = rb"vllm|(?:info|warning|error|debug|critical) \d\d-\d\d \d\d:\d\d:\d\d"
_VLLM_SIGN = BlockPattern(lazy(_SIGN), 40)
_VLLM_SIGN_ANYCASE = BlockPattern(lazy(_SIGN, re.IGNORECASE), 40)
_SIGN_MAX = 32  #: bytes of the longest sign, at least: what a sign cut between two chunks has in each
_SIGN_HEAD = 4096  #: bytes of a chunk searched for a sign before the whole of it


class _Sniffer:
    """A pass-through of the input stream that notes whether any vLLM sign went by (until one does)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._read = getattr(stream, "read1", stream.read)
        self.found = False
        self._tail = b""

    def read1(self, n: int = -1) -> bytes:
        chunk = self._read(n)
        if not self.found and chunk:
            big = len(chunk) >= SMALL_BLOCK
            if big:
                # a log shows its sign in its first lines: the head is searched as a short chunk is, and only a
                # chunk without one there pays for hyperscan's database (compiled on first use, ~8 ms)
                self.found = _VLLM_SIGN.search((self._tail + chunk[:_SIGN_HEAD]).lower())
            if not self.found:
                if big and _VLLM_SIGN_ANYCASE.accelerated:  # no lower-cased copy of the chunk
                    self.found = (_VLLM_SIGN.search((self._tail + chunk[:_SIGN_MAX]).lower())
                                  or _VLLM_SIGN_ANYCASE.search(chunk))
                else:
                    self.found = _VLLM_SIGN.search((self._tail + chunk).lower())
            self._tail = chunk[-_SIGN_MAX:]
        return chunk

    read = read1


def prefilter_for(rules: list[Rule] | tuple[Rule, ...]) -> Prefilter:
    """Every keyword any rule or the tracker needs: the only lines the doctor ever decodes.

    Built once per rule set object (a scan diagnoses thousands of logs with the same rules).
    """
    cached = _PREFILTERS.get(id(rules))
    if cached is not None and cached[0] is rules:
        return cached[1]
    words = [k for r in rules for p in r.patterns for k in p.keywords]
    prefilter = Prefilter([*words, *landmark_keywords(), *SERIES_KEYWORDS], extras=(BLOCK_ERROR,))
    if len(_PREFILTERS) >= 16:
        _PREFILTERS.clear()
    _PREFILTERS[id(rules)] = (rules, prefilter)  # the reference keeps the id from being reused
    return prefilter


def diagnose(stream: BinaryIO, path: str = "-", rules: list[Rule] | tuple[Rule, ...] | None = None,
             redact: bool = True, on_hit: Callable[[Hit], None] | None = None) -> Report:
    """Diagnose one binary stream in constant memory.

    `on_hit` sees every hit as soon as it is matched (live mode: a server still running).
    """
    rules = builtin_rules() if rules is None else rules
    redactor = Redactor() if redact else None
    stats = ReadStats()
    tracker = Tracker()
    matcher = Matcher(rules, tracker.context)
    # windows no rule can report are counted, not held; those it reports, past the first few, without text
    series = Series(keep=matcher.series_keep, evidence=matcher.series_evidence, redact=redact)
    seen = 0
    sniffer = _Sniffer(stream)
    for line in read_lines(sniffer, prefilter_for(rules), redactor, stats,  # type: ignore[arg-type]
                           on_block=series.access_block):
        matcher.feed(line, tracker.observe(line))
        series.observe(line)
        if on_hit is not None and len(matcher.hits) > seen:
            for hit in matcher.hits[seen:]:
                on_hit(hit)
            seen = len(matcher.hits)
    hits = matcher.finish()
    tracker.finish()
    series.finish(tracker.context)
    windowed = matcher.series_hits(series)
    if on_hit is not None:
        for hit in [*hits[seen:len(hits) - len(windowed)], *windowed]:
            on_hit(hit)
    hits = sorted(hits, key=lambda h: h.line.number)  # a window's hit belongs where its first line is
    findings = Advisor().findings(hits, tracker.context, matcher.folds)
    # a file name can carry a secret too (a signed URL's query, a token in a folder name): shown redacted
    shown = Redactor()(path) if redact else path
    redactions = dict(redactor.counts) if redactor else {}
    for kind, n in series.redactions.items():  # the failing access lines a burst shows, redacted as decoded
        redactions[kind] = redactions.get(kind, 0) + n
    return Report(path=shown, lines=stats.lines, bytes=stats.bytes, context=tracker.context,
                  findings=findings, redactions=redactions,
                  vllm_seen=bool(sniffer.found or findings or tracker.context.as_dict() or not series.empty),
                  series=None if series.empty else series)


def diagnose_text(text: str, rules: list[Rule] | tuple[Rule, ...] | None = None, redact: bool = True) -> Report:
    """Convenience for tests and pasted fragments."""
    return diagnose(io.BytesIO(text.encode("utf-8")), "-", rules, redact)
