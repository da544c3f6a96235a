"""Match: rules against clean lines -> hits with typed facts.

Three steps per line, cheapest first: a literal keyword test (the prefilter already dropped most lines),
a rapidfuzz partial match of the rule's phrase against a window (the line plus the lines a terminal or a
chat window wrapped it onto), then the extract regexes on that window (with a whitespace-tolerant retry,
so a number split by a wrap still reads whole). A hit remembers the line's stage so that generic phrases
("CUDA out of memory") count only where their rule says they mean something.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from diagnoser.analysis.tracker import FRAME, TRACEBACK_START, is_exception_line, to_number
from diagnoser.ingest.dense import ShapeCache, digit_free, remember, shape_key, shape_safe
from diagnoser.ingest.keywords import LONG_TEXT, KeywordIndex, lowered
from diagnoser.ingest.line import Line
from diagnoser.ingest.reader import MAX_LINE
from diagnoser.ingest.selection import FOLLOW, WRAP_MAX
from diagnoser.ingest.unwrap import WRAP_MIN_WIDTH
from diagnoser.rules.loader import Pattern, Rule, wrap_tolerant
from diagnoser.vllm import memory, units
from diagnoser.vllm.stages import coarse

WINDOW_CHARS = 4000
DISTINCT_MAX = 20  #: values a `distinct` aggregate keeps
#: a piece this long is a cut of an enormous line (reader.MAX_LINE), not a wrapped message
CUT_PIECE = MAX_LINE // 2
#: distinct evidence lines a finding shows (advise) and an aggregate rule's fold keeps whole hits for
MAX_EVIDENCE = 6
#: values an `aggregate: list` fact keeps (the serving windows of a finding, at most)
MAX_LISTED = 100


@dataclass
class Hit:
    """One rule recognised at one place in the log."""

    rule: Rule
    pattern: Pattern
    line: Line
    end_line: int
    stage: str | None
    fine_stage: str | None
    facts: dict[str, Any]
    evidence: list[Line] = field(default_factory=list)


_SPACES = re.compile(r"\s+")


def type_fact(kind: str | None, raw: str) -> Any:
    """Typed value of one captured group; None when it does not parse (the fact is then absent)."""
    raw = raw.strip()
    if kind == "str":
        return _SPACES.sub(" ", raw)
    if kind == "list":
        return [p.strip(" '\"") for p in re.split(r"[,\s]+", raw) if p.strip(" '\"")]
    if kind in ("size",):
        return units.log_size_gib(raw)
    if kind == "bytes":
        n = to_number(raw.replace(" ", ""))
        return None if n is None else n / memory.GIB
    n = to_number(_SPACES.sub("", raw))
    if n is None:
        return None if kind in ("int", "float", "gib") else _SPACES.sub(" ", raw)
    if kind == "int":
        return int(n)
    if kind in ("float", "gib"):
        return float(n)
    return n


#: compiled expressions by source, shared by every Evaluator: a scan of many logs compiles each once
_EXPRESSIONS: dict[str, Any] = {}


class Evaluator:
    """Compiled jinja2 expressions (when:, derive:), evaluated leniently: a missing fact means no value."""

    def __init__(self) -> None:
        self.env: Any = None   # the sandbox (and jinja2) load on the first expression a log needs
        self._cache = _EXPRESSIONS

    def value(self, source: str, names: dict[str, Any]) -> Any:
        expr = self._cache.get(source)
        if expr is None:
            from diagnoser.rules.sandbox import expression, template_env

            if self.env is None:
                self.env = template_env()
            expr = self._cache[source] = expression(self.env, source)
        try:
            result = expr(**names)
        except Exception:  # noqa: BLE001 - an expression over missing or odd facts simply has no value
            return None
        if hasattr(result, "_undefined_name"):
            return None
        if isinstance(result, float) and not math.isfinite(result):
            return None
        return result

    def truth(self, source: str, names: dict[str, Any]) -> bool:
        return bool(self.value(source, names))


def template_names(facts: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """What templates and expressions see: facts by name, plus ctx and the sandbox's `mem` and `fn` namespaces."""
    from diagnoser.rules.sandbox import FN, MEM

    return {**facts, "facts": facts, "ctx": ctx, "mem": MEM, "fn": FN}


def derive_facts(rule: Rule, facts: dict[str, Any], ctx: dict[str, Any], ev: Evaluator,
                 stage: str | None = None) -> dict[str, Any]:
    """Add the rule's derived facts, in order; each sees the ones before it (and the stage of the failure)."""
    out = dict(facts)
    for name, source in rule.derive.items():
        value = ev.value(source, {**template_names(out, ctx), "stage": stage})
        if value is not None or name not in out:
            out[name] = value  # None: known to be unknown, so templates can test it without failing
    return out


def drop_shadowed(hits: list[Hit]) -> list[Hit]:
    """Hits that say less than another hit on the same line go.

    A generic hit yields to a specific hit of another rule; a rule yields to one that `overrides` it (a more
    precise reading of the same text). Lines are compared as objects: a flattened paste puts many records
    on one physical line, and each keeps its own hits.
    """
    by_line: dict[int, list[Hit]] = {}
    for h in hits:
        by_line.setdefault(id(h.line), []).append(h)
    out = []
    for h in hits:
        others = [o for o in by_line[id(h.line)] if o.rule.id != h.rule.id]
        if h.pattern.generic and any(not o.pattern.generic for o in others):
            continue
        if any(h.rule.id in o.rule.overrides for o in others):
            continue
        out.append(h)
    return out



class _Firsts:
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
        self._values: dict[str, list[Any]] = {}  #: name -> [count, max, min, sum, first, last]
        self._lists: dict[str, list[Any]] = {}   #: `aggregate: list` facts, the first MAX_LISTED values
        self._first_line = self._last_line = 0
        self._first_time: str | None = None
        self._last_time: str | None = None
        self._first_time_line = self._last_time_line = 0

    def add(self, hit: Hit) -> bool:
        """Fold one hit in; True when it must also be kept whole."""
        keep = self.count == 0
        self.count += 1
        line = hit.line
        if line.rank is not None:
            self.ranks.add(line.rank)
        # hits arrive in line order, except a series window's (added at the end, at its first stats line)
        if self.count == 1 or line.number < self._first_line:
            self._first_line = line.number
        self._last_line = max(self._last_line, line.number)
        if line.timestamp:
            if self._first_time is None or line.number < self._first_time_line or (
                    line.number == self._first_time_line and line.timestamp < self._first_time):
                self._first_time, self._first_time_line = line.timestamp, line.number
            if line.number > self._last_time_line or (
                    line.number == self._last_time_line and line.timestamp >= (self._last_time or "")):
                self._last_time, self._last_time_line = line.timestamp, line.number
        merged = self._by_rank.setdefault(line.rank if line.rank is not None else -1, {})
        aggregate, values = hit.rule.aggregate, self._values
        for k, v in hit.facts.items():
            if k not in merged:
                merged[k] = v
            if aggregate.get(k) == "list":
                kept = self._lists.setdefault(k, [])
                if v is not None and len(kept) < MAX_LISTED:
                    kept.append(v)
            acc = values.get(k)
            if acc is None:
                values[k] = [1, v, v, 0 + v if _summable(v) else None, v, v, {str(v)}]
                continue
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
        if not hit.pattern.generic and not self._specific:
            self._specific = keep = True
        if len(self._seen) < self.max_evidence:
            for ev in hit.evidence:
                key = ev.text.strip()
                if key not in self._seen:
                    self._seen.add(key)
                    keep = True
                    if len(self._seen) >= self.max_evidence:
                        break
        return keep

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


class Matcher:
    """Consumes (line, stage) pairs in order and collects hits; lines wait WRAP_MAX lines for their window."""

    def __init__(self, rules: list[Rule] | tuple[Rule, ...], ctx_source: Any = None) -> None:
        self.rules = list(rules)
        self.entries: list[tuple[Rule, Pattern, tuple[str, ...]]] = [
            (rule, p, tuple(k.lower() for k in p.keywords)) for rule in self.rules for p in rule.patterns
        ]
        self.index = KeywordIndex(kws for _, _, kws in self.entries)
        self._shapes = ShapeCache(self.index)
        #: per line shape, what its single-line window gave each shape-safe pattern (see _shaped)
        self._shaped_results: dict[bytes, dict[int, Any]] = {}
        self.hits: list[Hit] = []
        self.folds: dict[str, Fold] = {}  #: aggregate rules' hits, folded (advise uses them for the figures)
        self.ev = Evaluator()
        self._pending: deque[tuple[Line, str | None]] = deque()
        self._ctx_source = ctx_source  # an object with .as_dict() (the tracker's Context)
        self._series_entries: dict[str, list[tuple[Rule, Pattern]]] | None = None  # by window kind
        self._window_verdicts: dict[tuple[str, tuple[Any, ...]], bool] = {}

    def feed(self, line: Line, fine_stage: str | None) -> None:
        pending = self._pending
        pending.append((line, fine_stage))
        if len(pending) > 1 and _cut_before(pending[-2][0], line):
            # the piece before is a cut of an enormous line: no window reaches past it (see _window), so the
            # lines up to it are matched now rather than holding up to WRAP_MAX megabyte pieces
            while len(pending) > 1:
                self._match_first()
        elif len(pending) > WRAP_MAX:
            self._match_first()

    def finish(self) -> list[Hit]:
        while self._pending:
            self._match_first()
        return self.hits

    def series_hits(self, series: Any) -> list[Hit]:
        """Hits of the rules' `series:` entries: one per window the serving series found (or per engine for
        whole-series summaries), filtered by the entry's and the rule's `when` like any line's hit."""
        ctx = self._ctx_source.as_dict() if self._ctx_source is not None else {}
        plain: list[tuple[int, Hit]] = []  # (arrival, hit) of the other rules' hits, each its own finding
        arrivals = 0
        firsts: dict[str, _Firsts] = {}
        for rule, pattern, _ in self.entries:
            if pattern.series is None:
                continue
            for facts, evidence in series.candidates(pattern.series):
                scope = template_names(facts, ctx)
                if pattern.when and not self.ev.truth(pattern.when, scope):
                    continue
                if rule.when and not self.ev.truth(rule.when, template_names(
                        derive_facts(rule, facts, ctx, self.ev, "serving"), ctx)):
                    continue
                line = evidence[0] if evidence else Line(number=0, text="", raw="")
                hit = Hit(rule=rule, pattern=pattern, line=line, end_line=line.number, stage="serving",
                          fine_stage="serving", facts=facts, evidence=evidence)
                arrivals += 1
                if not rule.aggregate:
                    plain.append((arrivals, hit))
                    continue
                kept = self.folds.setdefault(rule.id, Fold(MAX_EVIDENCE)).add(hit)
                firsts.setdefault(rule.id, _Firsts(MAX_EVIDENCE)).add(arrivals, hit, kept)
        # an aggregate rule's hits are folded as they come: kept whole are those the fold asks for and the
        # first ones in line order (the finding's first hit and evidence); the rest are never held, not even
        # as a place in a list (constant memory on a long series of windows)
        whole = {i: h for f in firsts.values() for i, h in f.held()}
        hits = [h for _, h in sorted([*plain, *whole.items()], key=lambda e: e[0])]
        self.hits.extend(hits)
        return hits

    def series_keep(self, kind: str, facts: Mapping[str, Any]) -> bool:
        """Whether a rule's `series: KIND` entry may report a window with these facts of its own (the series
        asks as each window closes, and holds only those): True when an entry's `when` is true, or reads
        what only the end of the log tells (the serving time, the context, the window's listing)."""
        for rule, pattern in self._series_of(kind):
            if not pattern.when or rule.when or not _window_local(pattern.when):
                return True
            if self._window_truth(pattern.when, facts):
                return True
        return False

    def _series_of(self, kind: str) -> list[tuple[Rule, Pattern]]:
        """The rules' `series: KIND` entries."""
        if self._series_entries is None:
            self._series_entries = {}
            for rule, pattern, _ in self.entries:
                if pattern.series is not None:
                    self._series_entries.setdefault(pattern.series, []).append((rule, pattern))
        return self._series_entries.get(kind, [])

    def series_evidence(self, kind: str) -> int | None:
        """After how many distinct evidence lines a track's windows of KIND no longer show theirs: MAX_EVIDENCE
        when one aggregate rule reads KIND and series_keep tells exactly which windows it reports (a `when`
        of the window's own facts, no rule `when`); else None (every window's lines may show).

        That rule's Fold and _Firsts hold whole only hits that add a distinct evidence line before MAX_EVIDENCE,
        in line order: a later window of the same track (its windows come in line order) is never one.
        """
        entries = self._series_of(kind)
        if len(entries) != 1:
            return None
        rule, pattern = entries[0]
        if not rule.aggregate or rule.when or (pattern.when and not _window_local(pattern.when)):
            return None
        return MAX_EVIDENCE

    def _window_truth(self, source: str, facts: Mapping[str, Any]) -> bool:
        """A window-local `when` on a window's facts, remembered by the values of the names it reads (a long
        series repeats a few: `points >= 3 and running >= 8` sees small counts)."""
        names = _names(source)
        values = tuple(facts.get(n, _ABSENT) for n in names)
        # (the type too: 3 and 3.0 are equal keys, and an expression may tell them apart)
        key = (source, tuple((v, type(v)) for v in values))
        try:
            found = self._window_verdicts.get(key)
        except TypeError:  # a value that is a dict or a list: evaluated each time
            return self.ev.truth(source, _window_scope(facts, names, values))
        if found is None:
            found = remember(self._window_verdicts, key, self.ev.truth(source, _window_scope(facts, names, values)))
        return found

    @property
    def held(self) -> int:
        """Lines waiting for their window (live mode matches them with finish() once the input is idle)."""
        return len(self._pending)

    # -- internals -----------------------------------------------------------------------------------

    def _window(self) -> list[Line]:
        """The first pending line and the lines that continue its message (a wrapped paste).

        Up to FOLLOW lines continue a message; more only while each piece has the width of the first (a
        hard wrap cuts every line of a message at the same column).
        """
        first = self._pending[0][0]
        lines = [first]
        for nxt, _ in itertools.islice(self._pending, 1, None):
            prev = lines[-1]
            if _cut_before(prev, nxt):
                break  # pieces of one enormous line: each is matched alone (joining them made it quadratic)
            if not _continues(first, prev, nxt):
                break
            if len(lines) > FOLLOW and not _full_piece(prev, first):
                break
            lines.append(nxt)
        return lines

    def _match_first(self) -> None:
        line, fine = self._pending[0]
        try:
            if line.user_content or not line.text:
                return
            long = len(line.text) >= LONG_TEXT  # never repeats its shape: no key (see ShapeCache.matches)
            low = None  # lower-cased when a rule is a candidate (a long text's only when a keyword is there)
            entries = self.entries
            key = b"" if long else shape_key(line.text)
            candidates = [entries[i] for i in self._shapes.matches(line.text, None, key or None)]
            if not candidates:
                wrapped = self._wrapped_candidates(line)
                if wrapped is None:
                    return
                candidates, window, texts, lows = wrapped
            else:
                window = self._window()
                texts = joined_texts(window) if len(window) > 1 else (line.text,)
                lows = [t.lower() for t in texts] if len(window) > 1 else [lowered(line.text) if low is None else low]
            processed: list[str] | None = None
            stage = coarse(fine)
            ctx_dict: dict[str, Any] | None = None
            # one line alone (no wrapped pieces) of a shape seen before: its patterns' answers are known
            shaped = self._shaped(key) if len(window) == 1 and len(texts) == 1 and not long else None
            found: dict[str, Hit] = {}  # one hit per rule per line: the most specific pattern wins
            for rule, pattern, kws in candidates:
                if pattern.stages is not None and stage not in pattern.stages:
                    continue
                facts: dict[str, Any] = {}
                if pattern.regex is not None:
                    groups = _regex_groups(pattern.regex, rule, line.text, window, texts, shaped)
                    if groups is None:
                        continue
                    facts.update(self._typed(rule, groups))
                else:
                    cached = shaped.get(id(pattern)) if shaped is not None else None
                    if cached is None:
                        if processed is None:
                            processed = [default_process(_focus(t, lw, kws, len(pattern.phrase or "")))
                                         for t, lw in zip(texts, lows, strict=True)]
                        cached = any(phrase_score(pattern.phrase or "", pr, pattern.threshold) for pr in processed)
                        if shaped is not None and len(line.text) <= 800 and _phrase_safe(pattern, kws):
                            shaped[id(pattern)] = cached
                    if not cached:
                        continue
                if shaped is not None:
                    extracted = self._extract_shaped(rule, line.text, shaped)
                else:
                    extracted = self._extract(rule, texts, line.text if len(window) > 1 else None)
                facts.update({k: v for k, v in extracted.items() if k not in facts})
                late_when = pattern.when if pattern.when and not pattern.when_early else None
                if ctx_dict is None and (pattern.when or rule.when or "last_stats" in rule.facts):
                    # the context as the rules see it: only for a matched pattern that reads it
                    ctx_dict = self._ctx_source.as_dict(internal=True) if self._ctx_source is not None else {}
                ctx = ctx_dict or {}
                if pattern.when_early and not self.ev.truth(
                        pattern.when, {**template_names(facts, ctx), "level": line.level}):
                    continue  # e.g. a stats line below the saturation threshold: no need to derive anything
                if late_when or rule.when:  # derived facts are only for these tests here (advise derives again)
                    names = derive_facts(rule, facts, ctx, self.ev, stage)
                    scope = {**template_names(names, ctx), "level": line.level}
                    if late_when and not self.ev.truth(late_when, scope):
                        continue
                    if rule.when and not self.ev.truth(rule.when, scope):
                        continue
                if "last_stats" in rule.facts and ctx.get("last_stats_text"):
                    facts.setdefault("last_stats", ctx["last_stats_text"])  # what it did before it failed
                hit = Hit(rule=rule, pattern=pattern, line=line, end_line=window[-1].number, stage=stage,
                          fine_stage=fine, facts=facts, evidence=window)
                best = found.get(rule.id)
                if best is None or (best.pattern.generic, -len(best.facts)) > (pattern.generic, -len(facts)):
                    found[rule.id] = hit
            self._collect(list(found.values()))
        finally:
            self._pending.popleft()

    def _wrapped_candidates(
            self, line: Line) -> tuple[list[Any], list[Line], tuple[str, ...] | list[str], list[str]] | None:
        """No keyword on the line itself: one cut in two by a terminal's wrap may stand on the joined window
        (candidates, window, texts, lower-cased texts), else None. A keyword whole on a later line starts that
        line's own window, and a piece of an enormous line is its own window (its keywords were just looked for)."""
        if len(self._pending) < 2 or not _continues(line, line, self._pending[1][0]):
            return None
        if _cut_before(line, self._pending[1][0]):
            return None
        window = self._window()
        texts = joined_texts(window)
        lows = [t.lower() for t in texts]
        pieces = [w.text.lower() for w in window[1:]]
        index = self.index
        cut = {w for lw in lows for w in index.present(lw)} - {w for pc in pieces for w in index.present(pc)}
        candidates = [self.entries[i] for i in index.owners(w for w in index.words if w in cut)] if cut else []
        return (candidates, window, texts, lows) if candidates else None

    def _collect(self, hits: list[Hit]) -> None:
        """Keep a line's hits; an aggregate rule's are folded (Fold), and kept whole only while they matter."""
        if not any(h.rule.aggregate for h in hits):
            self.hits.extend(hits)
            return
        # the advisor drops the shadowed ones (shadowing is per line; one hit shadows nothing)
        live = {id(h) for h in (hits if len(hits) == 1 else drop_shadowed(hits))}
        for hit in hits:
            if not hit.rule.aggregate:
                self.hits.append(hit)
            elif id(hit) in live:
                fold = self.folds.get(hit.rule.id)
                if fold is None:
                    fold = self.folds[hit.rule.id] = Fold(MAX_EVIDENCE)
                if fold.add(hit):
                    self.hits.append(hit)

    def _shaped(self, key: bytes) -> dict[int, Any]:
        """The answers known for a line shape: pattern id -> phrase verdict, or a regex's group spans."""
        found = self._shaped_results.get(key)
        if found is None:
            found = remember(self._shaped_results, key, {})
        return found

    def _extract_shaped(self, rule: Rule, text: str, shaped: dict[int, Any]) -> dict[str, Any]:
        """_extract on a line alone, each shape-safe extractor's spans found once per shape."""
        facts: dict[str, Any] = {}
        plan = shaped.get(id(rule.extractors))
        if plan is not None:  # every extractor is shape-safe: where each one's groups are, in order
            for name, a, b, known in plan:
                value = known if known is not _VARIES else type_fact(rule.facts.get(name), text[a:b])
                if value is not None and value != "":  # as _typed keeps them
                    facts.setdefault(name, value)
            return facts
        if rule.extractors and all(_safe(ex.pattern) for ex in rule.extractors):
            plan = []
            for ex in rule.extractors:
                m = self._extract_match(ex, text)
                if m is not None:
                    plan.extend((name, *m.span(name), _known(rule, name, m.group(name))) for name in m.groupdict())
            shaped[id(rule.extractors)] = plan
            return self._extract_shaped(rule, text, shaped)
        for ex in rule.extractors:
            if _safe(ex.pattern):
                groups = _groups(shaped, ex, text, lambda ex=ex: self._extract_match(ex, text))
            else:
                m = self._extract_match(ex, text)
                groups = None if m is None else m.groupdict()
            if groups is None:
                continue
            for name, value in self._typed(rule, groups).items():
                facts.setdefault(name, value)
        return facts

    @staticmethod
    def _extract_match(ex: Any, text: str) -> Any:
        """One extractor on a line alone: the regex, else its wrap-tolerant form (as _extract tries them)."""
        m = ex.pattern.search(text)
        if m is None and len(text) < WINDOW_CHARS:
            need = required_literal(ex.pattern.pattern)
            if not need or need in "".join(text.split()).lower():
                m = ex.tolerant.search(text)
        return m

    def _extract(self, rule: Rule, texts: tuple[str, ...] | list[str] | str,
                 first_line: str | None = None) -> dict[str, Any]:
        """Facts from the extract regexes: on the first line alone when it holds them whole, else on the
        joined window (a number cut by a wrap), else allowing whitespace inserted anywhere."""
        if isinstance(texts, str):
            texts = (texts,)
        facts: dict[str, Any] = {}
        squeezed: str | None = None  # the first text without whitespace, lower-cased (on first need)
        for ex in rule.extractors:
            m = _on_line(ex.pattern, rule, first_line) if first_line is not None else None
            if m is None:
                m = _search(ex.pattern, texts, None)
            if m is None and len(texts[0]) < WINDOW_CHARS:
                # the wrap-tolerant retry is slow (fuzzy matching): only where its leading text is there
                need = required_literal(ex.pattern.pattern)
                if need and squeezed is None:
                    squeezed = "".join(texts[0].split()).lower()
                if not need or need in squeezed:
                    m = ex.tolerant.search(texts[0])
            if m is None:
                continue
            for name, value in self._typed(rule, m.groupdict()).items():
                facts.setdefault(name, value)
        return facts

    @staticmethod
    def _typed(rule: Rule, groups: dict[str, str | None]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, raw in groups.items():
            if raw is None:
                continue
            value = type_fact(rule.facts.get(name), raw)
            if value is not None and value != "":
                out[name] = value
        return out


#: Names a series `when` may read that are only known at the end: the serving and saturated time, the source,
#: the window's listing and time labels (the clock learns the year late), the context, the facts as a whole.
_LATE_NAMES = frozenset({"_serving_seconds", "_saturated_seconds", "source", "_window", "start", "end", "ctx",
                         "facts"})
_NAME = re.compile(r"[A-Za-z_]\w*")


def _window_local(source: str) -> bool:
    """Whether an expression reads nothing of _LATE_NAMES (any word counts, quoted or not: a safe guess)."""
    return not _LATE_NAMES.intersection(_names(source))


_ABSENT = object()


def _window_scope(facts: Mapping[str, Any], names: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Any]:
    """What a window-local expression sees: only the facts it names (`values`: theirs, in `names`' order), not
    every fact of the window (the time labels cost a strftime each); all of them when it reads `facts` itself."""
    if "facts" in names:
        return template_names(dict(facts), {})
    return template_names({n: v for n, v in zip(names, values, strict=True) if v is not _ABSENT}, {})


@functools.lru_cache(maxsize=256)
def _names(source: str) -> tuple[str, ...]:
    """Every word of an expression: a superset of the names it reads (the rest are constants to it)."""
    return tuple(sorted(set(_NAME.findall(source))))


_SAFE: dict[int, tuple[Any, bool]] = {}


def _safe(pattern: Any) -> bool:
    """shaped.shape_safe of a compiled regex, once per pattern object."""
    found = _SAFE.get(id(pattern))
    if found is None or found[0] is not pattern:
        found = _SAFE[id(pattern)] = (pattern, shape_safe(pattern.pattern))
    return found[1]


def _phrase_safe(pattern: Pattern, keywords: tuple[str, ...]) -> bool:
    """A phrase's verdict is the same on every line of one shape when neither the processed phrase nor the
    keywords that place the focus hold a digit (a digit of the line then never equals one of the phrase)."""
    return digit_free(default_process(pattern.phrase or ""), *keywords)


def _groups(shaped: dict[int, Any], pattern: Any, text: str, search: Any) -> dict[str, str | None] | None:
    """A match's groupdict on `text`, its spans found once per shape (`search()` gives the match)."""
    spans = shaped.get(id(pattern), False)
    if spans is False:
        m = search()
        spans = shaped[id(pattern)] = None if m is None else {k: m.span(k) for k in m.groupdict()}
    if spans is None:
        return None
    return _at_spans(text, spans)


_VARIES = object()


def _known(rule: Rule, name: str, raw: str | None) -> Any:
    """A group's typed fact when it is the same on every line of the shape (the group took no part, or its
    text holds no digit and types to an immutable value), else _VARIES: typed on each line."""
    if raw is None:
        return None
    if not digit_free(raw):
        return _VARIES
    value = type_fact(rule.facts.get(name), raw)
    return value if value is None or isinstance(value, (str, int, float)) else _VARIES


def _at_spans(text: str, spans: dict[str, tuple[int, int]]) -> dict[str, str | None]:
    """A groupdict rebuilt from spans found on another text of the same shape (-1: the group took no part)."""
    return {k: (text[a:b] if a != -1 else None) for k, (a, b) in spans.items()}


def _continues(first: Line, prev: Line, nxt: Line) -> bool:
    """Whether `nxt` can be the next piece of the message that `first` starts (`prev` is the piece before)."""
    if nxt.number not in (prev.number, prev.number + 1):
        return False
    if nxt.level or nxt.user_content:
        return False
    if nxt.proc_key != first.proc_key:
        # a terminal or chat window wraps the text after the tag: the pieces carry no tag of their own
        if nxt.process is not None or nxt.rank is not None:
            return False
    elif first.level and nxt.process is not None:
        # vLLM repeats its header on every line it logs: a tagged line without one is another write
        return False
    t = nxt.text.lstrip()
    if not t or t.startswith(TRACEBACK_START) or FRAME.match(t) or is_exception_line(t) or _HEADER_START.match(t):
        return False
    return not (t.startswith(("^", "~")) or prev.text.rstrip().endswith(("^", "~")))


def _cut_before(prev: Line, nxt: Line) -> bool:
    """`nxt` is the next piece of the enormous line that `prev` is a cut of (reader.MAX_LINE)."""
    return nxt.number == prev.number and len(prev.text) >= CUT_PIECE


def _full_piece(prev: Line, first: Line) -> bool:
    """`prev` was cut at the same column as the first piece: the message goes on."""
    width = len(first.raw.rstrip("\r\n"))
    return width >= WRAP_MIN_WIDTH and len(prev.raw.rstrip("\r\n")) == width


#: The start of a vLLM header that the prefix stripper did not take (the line was cut inside it).
_HEADER_START = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:")
_DIGIT_JOIN = re.compile(r"(?:\d|\d\.)$")


def joined_texts(window: list[Line]) -> tuple[str, str]:
    """The message of a wrapped window, two ways: `spaced` puts a space at each cut (a chat window wrapped
    at a space and dropped it) except inside a number; `tight` joins the pieces as they are (a terminal cut
    the line at a column, inside a word). Whitespace kept at a cut is kept in both."""
    spaced = [window[0].text.strip()]
    tight = [window[0].text.strip()]
    for prev, nxt in zip(window, window[1:], strict=False):
        piece = nxt.text.strip()
        if not piece:
            continue
        kept_space = prev.raw[-1:].isspace() or nxt.text[:1].isspace()
        left = spaced[-1]
        in_number = bool(_DIGIT_JOIN.search(left)) and (piece[0].isdigit() or (
            piece[0] == "." and piece[1:2].isdigit() and left[-1:].isdigit()))
        spaced.append(piece if in_number and not kept_space else " " + piece)
        tight.append(" " + piece if kept_space else piece)
    return "".join(spaced), "".join(tight)


NUMERIC = ("int", "float", "gib", "size", "bytes")


def _regex_groups(regex: Any, rule: Rule, text: str, window: list[Line], texts: tuple[str, ...] | list[str],
                  shaped: dict[Any, Any] | None) -> dict[str, str | None] | None:
    """A pattern's named groups on its line (or the window a wrap made of it), None where it does not match: a
    line of a shape seen before answers from the shape; a wrapped message is searched on the line first, then on
    the joined window, then wrap-tolerantly on its first text."""
    if shaped is not None and _safe(regex):
        return _groups(shaped, regex, text, lambda p=regex: p.search(text))
    m = _on_line(regex, rule, text) if len(window) > 1 else None
    m = m or _search(regex, texts, None)
    if m is None and len(window) > 1:
        m = _search(_tolerant_of(regex), texts[:1], None)
    return m.groupdict() if m else None


def _on_line(pattern: Any, rule: Rule, text: str) -> Any:
    """A match on the first line of a window, unless a number it captured runs into the line's end (the
    number may go on in the next piece: the joined window decides). Text captures stop at the line's end,
    so that the next, unrelated line (a shell prompt, chatter) never becomes part of them."""
    m = pattern.search(text)
    if m is None:
        return None
    end = len(text.rstrip())
    for name, value in m.groupdict().items():
        if value is None or m.end(name) < end:
            continue
        kind = rule.facts.get(name)
        if kind in NUMERIC or (kind is None and re.fullmatch(r"[\d.,]+", value)):
            return None
    return m


def _search(pattern: Any, texts: tuple[str, ...] | list[str], default: Any) -> Any:
    for text in texts:
        m = pattern.search(text)
        if m is not None:
            return m
    return default


_TOLERANT: dict[tuple[str, type], Any] = {}


def _tolerant_of(pattern: Any) -> Any:
    """A match regex that also allows whitespace inserted by a wrap (compiled once per pattern)."""
    key = (pattern.pattern, type(pattern))
    found = _TOLERANT.get(key)
    if found is None:
        found = _TOLERANT[key] = wrap_tolerant(pattern)
    return found


_REQUIRED: dict[str, str] = {}


def required_literal(source: str) -> str:
    r"""The literal text every match of the regex `source` starts with, lower-cased and without whitespace
    ('' when there is none to tell): a text whose whitespace-free form lacks it cannot match the regex even
    with whitespace inserted anywhere (the wrap-tolerant form).

    >>> required_literal(r'\bKV cache usage: (?P<pct>[\d.]+)%')
    'kvcacheusage:'
    >>> required_literal(r'Running: (\d+)|Waiting')
    ''
    """
    found = _REQUIRED.get(source)
    if found is not None:
        return found
    depth, i, in_class = 0, 0, False
    while i < len(source):  # an alternation at the top level: no literal is required
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            _REQUIRED[source] = ""
            return ""
        i += 1
    out: list[str] = []
    i = 2 if source.startswith("\\b") else 0
    while i < len(source):
        c = source[i]
        if c == "\\":
            nxt = source[i + 1:i + 2]
            if not nxt or nxt.isalnum():
                break  # a class (\d, \s), an anchor (\b) or an escape of a control character
            lit, step = nxt, 2
        elif c in "()[]{}?*+|^$.":
            break
        else:
            lit, step = c, 1
        if source[i + step:i + step + 1] in ("?", "*", "+", "{"):
            break  # this character is quantified: it may be absent or repeated
        out.append(lit)
        i += step
    found = _REQUIRED[source] = "".join("".join(out).split()).lower()
    return found


def _content_words(text: str) -> list[str]:
    return [w for w in text.split() if len(w) >= 4]


def phrase_score(phrase: str, processed: str, threshold: float) -> float:
    """How well a (default_process'ed) window carries a phrase, 0 below the threshold.

    partial_ratio tolerates small edits and re-punctuation; word coverage tolerates a dropped or added
    clause (releases reword messages that way) without accepting a different message that shares a few
    words, because it needs nearly all of the phrase's content words.
    """
    target = default_process(phrase)
    score = fuzz.partial_ratio(target, processed, score_cutoff=threshold)
    if score:
        return score
    words = _content_words(target)
    if len(words) < 5:
        return 0.0
    have = set(processed.split())
    coverage = 100.0 * sum(w in have for w in words) / len(words)
    return coverage if coverage >= threshold else 0.0


def _focus(text: str, low: str, keywords: tuple[str, ...], phrase_len: int) -> str:
    """For a very long line (a flattened paste), only the text around the keyword is scored."""
    span = max(4 * phrase_len, 400)
    if len(text) <= 2 * span:
        return text
    positions = [low.find(k) for k in keywords if low.find(k) >= 0]
    if not positions:
        return text[: 2 * span]
    pos = min(positions)
    return text[max(0, pos - span): pos + span]
