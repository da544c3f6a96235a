"""The fold of an aggregate rule's repeated hits: what its one finding needs, in constant memory.

A rule with `aggregate:` (preemption warnings, serving windows) reports every hit as one summary. `Fold`
updates the running figures (per-rank first facts, max/min/sum/first/last/count/list/distinct, first and last
line and time, ranks) as hits come, and says which hits must still be kept whole (the first, the first
specific one, those that add a distinct evidence line); `Firsts` keeps the hits that come first in line order
when they arrive out of order (the serving series' windows).
"""

from __future__ import annotations

import bisect
from typing import Any

from diagnoser.analysis.hits import Hit
from diagnoser.ingest.reader import Line
from diagnoser.rules.model import Rule

DISTINCT_MAX = 20  #: values a `distinct` aggregate keeps
#: values an `aggregate: list` fact keeps (the serving windows of a finding, at most)
MAX_LISTED = 100


class Firsts:
    """The hits of one aggregate rule that come first in line order, up to `max_evidence` distinct evidence
    lines (what advise takes the finding's first hit and evidence from), and those the fold kept."""

    def __init__(self, max_evidence: int) -> None:
        self.max_evidence = max_evidence
        self.first: list[tuple[int, int, Hit]] = []  # (line number, arrival, hit), sorted
        self.kept: list[tuple[int, Hit]] = []

    def add(self, index: int, hit: Hit, kept: bool) -> None:
        if kept:
            self.kept.append((index, hit))
        bisect.insort(self.first, (hit.line.number, index, hit), key=lambda e: (e[0], e[1]))
        seen: set[str] = set()
        for i, (_n, _a, h) in enumerate(self.first):
            seen.update(ev.text.strip() for ev in h.evidence)
            if len(seen) >= self.max_evidence:
                del self.first[i + 1:]
                break

    def held(self) -> list[tuple[int, Hit]]:
        return [*self.kept, *((a, h) for _n, a, h in self.first)]


class Fold:
    """Every hit of one aggregate rule, folded as it comes: what the finding needs, in constant memory.

    Hits are kept whole while they can still matter one by one (until the evidence has MAX_EVIDENCE distinct
    lines, and the first specific hit); the rest only update the running figures that advise._aggregate
    would compute from the whole group (per-rank first facts, max/min/sum/first/last/count, hits, first and
    last line and time, ranks), so 300,000 preemption warnings cost what six do.
    """

    def __init__(self, max_evidence: int) -> None:
        self.max_evidence = max_evidence
        self.count = 0
        self.ranks: set[int] = set()
        self._seen: set[str] = set()
        self._specific = False
        self._by_rank: dict[int, dict[str, Any]] = {}
        self._values: dict[str, list[Any]] = {}  #: name -> [count, max, min, sum, first, last, distinct]
        self._lists: dict[str, list[Any]] = {}   #: `aggregate: list` facts, the first MAX_LISTED values
        self._first_line = self._last_line = 0
        self._first_time: str | None = None
        self._last_time: str | None = None
        self._first_time_line = self._last_time_line = 0

    def add(self, hit: Hit) -> bool:
        """Fold one hit in; True when it must also be kept whole (the first hit, the first specific one, one that
        adds a distinct evidence line)."""
        first = self.count == 0
        self.count += 1
        self._note_place(hit.line)
        self._fold_facts(hit)
        specific = self._first_specific(hit)
        new_evidence = self._adds_evidence(hit)
        return first or specific or new_evidence

    def _note_place(self, line: Line) -> None:
        """Where the hits are: their ranks, the first and last line, the first and last time."""
        if line.rank is not None:
            self.ranks.add(line.rank)
        # hits arrive in line order, except a series window's (added at the end, at its first stats line)
        if self.count == 1 or line.number < self._first_line:
            self._first_line = line.number
        self._last_line = max(self._last_line, line.number)
        if line.timestamp:
            self._note_time(line.number, line.timestamp)

    def _note_time(self, number: int, timestamp: str) -> None:
        """The earliest line's timestamp (the smallest on that line) and the latest line's (the largest)."""
        if self._first_time is None or number < self._first_time_line or (
                number == self._first_time_line and timestamp < self._first_time):
            self._first_time, self._first_time_line = timestamp, number
        if number > self._last_time_line or (
                number == self._last_time_line and timestamp >= (self._last_time or "")):
            self._last_time, self._last_time_line = timestamp, number

    def _fold_facts(self, hit: Hit) -> None:
        """Each fact of the hit: the first value per rank, an `aggregate: list` fact's values, the running
        figures."""
        line = hit.line
        merged = self._by_rank.setdefault(line.rank if line.rank is not None else -1, {})
        aggregate = hit.rule.aggregate
        for k, v in hit.facts.items():
            if k not in merged:
                merged[k] = v
            if aggregate.get(k) == "list":
                kept = self._lists.setdefault(k, [])
                if v is not None and len(kept) < MAX_LISTED:
                    kept.append(v)
            self._fold_value(k, v)

    def _fold_value(self, name: str, v: Any) -> None:
        """One value into its fact's running figures: count, max, min, sum, first, last, distinct values."""
        acc = self._values.get(name)
        if acc is None:
            self._values[name] = [1, v, v, 0 + v if _summable(v) else None, v, v, {str(v)}]
            return
        acc[0] += 1
        if len(acc[6]) < DISTINCT_MAX:  # bounded: constant memory on a log of a million hits
            acc[6].add(str(v))
        acc[5] = v
        try:
            acc[1], acc[2] = max(acc[1], v), min(acc[2], v)
        except TypeError:
            acc[1] = acc[2] = None
        if acc[3] is not None:
            acc[3] = acc[3] + v if _summable(v) else None

    def _first_specific(self, hit: Hit) -> bool:
        """Whether this is the first hit of a specific (not generic) pattern."""
        if hit.pattern.generic or self._specific:
            return False
        self._specific = True
        return True

    def _adds_evidence(self, hit: Hit) -> bool:
        """Whether the hit adds a distinct evidence line before there are max_evidence of them."""
        added = False
        if len(self._seen) < self.max_evidence:
            for ev in hit.evidence:
                key = ev.text.strip()
                if key not in self._seen:
                    self._seen.add(key)
                    added = True
                    if len(self._seen) >= self.max_evidence:
                        break
        return added

    def facts(self, rule: Rule) -> dict[str, Any]:
        """What advise._aggregate gives for the whole group."""
        facts: dict[str, Any] = {}
        for rank in sorted(self._by_rank):
            for k, v in self._by_rank[rank].items():
                facts.setdefault(k, v)
        for name, how in rule.aggregate.items():
            acc = self._values.get(name)
            if how == "count":
                facts[name] = acc[0] if acc else 0
            elif acc is None:
                facts.pop(name, None)
            elif how == "list":
                facts[name] = list(self._lists.get(name, []))
            elif how == "distinct":
                facts[name] = sorted(acc[6])
            else:
                facts[name] = acc[{"max": 1, "min": 2, "sum": 3, "first": 4, "last": 5}[how]]
        facts["hits"] = self.count
        facts["first_line"], facts["last_line"] = self._first_line, self._last_line
        if self._first_time:
            facts["first_time"], facts["last_time"] = self._first_time, self._last_time
        return facts


def _summable(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
