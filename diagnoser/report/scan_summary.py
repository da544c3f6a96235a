"""The fleet summary behind `scan --format text|markdown`: counters over every log, in constant memory.

Counts per rule (logs it fired in), per model, per GPU and per vLLM release, the logs with errors,
warnings, nothing, or that could not be read; and the worst logs (most severe first finding, then the most
errors) kept in a bounded heap. Nothing is kept per log beyond the heap.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from diagnoser.report.rows import gpu_label, is_not_vllm

SEVERITY_RANK = {"error": 3, "warning": 2, "info": 1}
UNKNOWN = "(not in the log)"


@dataclass
class Worst:
    """One of the worst logs: its path and first (primary) finding."""

    path: str
    severity: str
    rule: str
    title: str
    stage: str | None
    line: int
    errors: int


@dataclass
class FleetSummary:
    """Folds scan documents one at a time; `worst` keeps only the `top` most severe logs."""

    top: int = 10
    logs: int = 0
    status: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    rule_severity: dict[str, str] = field(default_factory=dict)
    rule_title: dict[str, str] = field(default_factory=dict)
    models: Counter[str] = field(default_factory=Counter)
    gpus: Counter[str] = field(default_factory=Counter)
    releases: Counter[str] = field(default_factory=Counter)
    bad: list[tuple[str, str]] = field(default_factory=list)
    bad_kept: int = 20
    _heap: list[tuple[tuple[int, int, int], int, Worst]] = field(default_factory=list)
    _order: int = 0

    def add(self, doc: dict[str, Any]) -> None:
        self.logs += 1
        self._order += 1
        if "error" in doc:
            self.status["unreadable"] += 1
            if len(self.bad) < self.bad_kept:
                self.bad.append((str(doc["input"]["path"]), str(doc["error"]["message"])))
            return
        if is_not_vllm(doc):
            self.status["not-vllm"] += 1  # a binary file, notes, another program's log: not clean, not a vLLM log
            return
        counts = doc.get("summary") or {}
        worst = next((s for s in ("error", "warning") if counts.get(s)), None)
        self.status[worst or "clean"] += 1
        ctx = doc.get("context") or {}
        self.models[str(ctx.get("model") or UNKNOWN)] += 1
        self.gpus[gpu_label(ctx) or UNKNOWN] += 1
        self.releases[str(ctx.get("version") or UNKNOWN)] += 1
        for rule in dict.fromkeys(f["rule"] for f in doc["findings"]):
            self.rules[rule] += 1
        for f in doc["findings"]:
            self.rule_severity.setdefault(f["rule"], f["severity"])
            self.rule_title.setdefault(f["rule"], f["title"])
        if worst is None or not doc["findings"]:
            return
        first = doc["findings"][0]
        entry = Worst(str(doc["input"]["path"]), first["severity"], first["rule"], first["title"], first["stage"],
                      int(first["line"] or 0), int(counts.get("error", 0)))
        # earlier logs win ties (negative order): the heap's smallest is the one to drop
        key = (SEVERITY_RANK.get(first["severity"], 0), entry.errors, -self._order)
        if len(self._heap) < self.top:
            heapq.heappush(self._heap, (key, self._order, entry))
        elif key > self._heap[0][0]:
            heapq.heapreplace(self._heap, (key, self._order, entry))

    @property
    def worst(self) -> list[Worst]:
        return [e for _, _, e in sorted(self._heap, key=lambda t: t[0], reverse=True)]

    def not_vllm_words(self, sep: str = ", ") -> str:
        """'2 not vLLM logs' / '1 not a vLLM log' after `sep`; nothing when every file was a vLLM log."""
        n = self.status["not-vllm"]
        return "" if not n else sep + (f"{n:,} not a vLLM log" if n == 1 else f"{n:,} not vLLM logs")

    def failed(self) -> int:
        return self.status["unreadable"]

    @property
    def readable(self) -> int:
        return self.logs - self.status["unreadable"] - self.status["not-vllm"]

    def breakdowns(self) -> list[tuple[str, str, Counter[str]]]:
        """The fleet's counters every summary format prints: (title, what is counted, counter)."""
        return [("By model", "model", self.models), ("By GPU", "GPU", self.gpus),
                ("By vLLM release", "release", self.releases)]
