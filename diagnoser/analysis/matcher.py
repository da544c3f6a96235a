"""Match: rules against clean lines -> hits with typed facts.

The first pending line is matched once the lines its message may have wrapped onto have arrived (WRAP_MAX
lines later), in steps, cheapest first: the keyword gate (the rules whose literal keywords the line holds;
the prefilter already dropped most lines), each candidate pattern's stage gate, its match (a regex, or a
rapidfuzz match of its phrase against the window: phrase.py), its facts (the extract regexes on that window,
with a whitespace-tolerant retry so a number split by a wrap still reads whole: extract.py), and its `when`.
A hit remembers the line's stage so that generic phrases ("CUDA out of memory") count only where their rule
says they mean something. An aggregate rule's hits are folded as they come (fold.py). The rules' `series:`
entries are matched against the serving series' windows at the end (`series_hits`).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rapidfuzz.utils import default_process

from diagnoser.analysis.expressions import Evaluator, derive_facts, template_names
from diagnoser.analysis.extract import extract, extract_shaped, regex_groups, typed_facts
from diagnoser.analysis.fold import Firsts, Fold
from diagnoser.analysis.hits import MAX_EVIDENCE, Hit, drop_shadowed
from diagnoser.analysis.phrase import focus, phrase_safe, phrase_score
from diagnoser.analysis.window import continues, cut_before, joined_texts, message_window
from diagnoser.ingest.dense import ShapeCache, remember, shape_key
from diagnoser.ingest.keywords import LONG_TEXT, KeywordIndex, lowered
from diagnoser.ingest.reader import Line
from diagnoser.ingest.selection import WRAP_MAX
from diagnoser.lazyre import lazy
from diagnoser.rules.model import Pattern, Rule
from diagnoser.vllm.stages import coarse

#: one rule pattern with its keywords lower-cased (what the keyword gate looks for)
Entry = tuple[Rule, Pattern, tuple[str, ...]]


@dataclass
class _LineScan:
    """What the candidate patterns of one line share: the line, the window of lines its message wrapped onto
    and their texts, its stage, and what is worked out once for all of them."""

    line: Line
    fine_stage: str | None
    stage: str | None
    window: list[Line]
    texts: tuple[str, ...] | list[str]
    lows: list[str]  #: the texts lower-cased
    #: the answers known for the line's shape (a line alone, no wrapped pieces), else None
    shaped: dict[int, Any] | None
    #: the texts as phrases are scored (default_process'ed around the first phrase pattern's keywords)
    processed: list[str] | None = None
    #: the context as the rules see it, taken when the first matched pattern that reads it needs it
    ctx: dict[str, Any] | None = None


class Matcher:
    """Consumes (line, stage) pairs in order and collects hits; lines wait WRAP_MAX lines for their window."""

    def __init__(self, rules: list[Rule] | tuple[Rule, ...], ctx_source: Any = None) -> None:
        self.rules = list(rules)
        self.entries: list[Entry] = [
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
        if len(pending) > 1 and cut_before(pending[-2][0], line):
            # the piece before is a cut of an enormous line: no window reaches past it (see message_window), so the
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
        firsts: dict[str, Firsts] = {}
        for rule, pattern, _ in self.entries:
            if pattern.series is None:
                continue
            for facts, evidence in series.candidates(pattern.series):
                scope = template_names(facts, ctx)
                if pattern.when and not self.ev.truth(pattern.when, scope, rule.id):
                    continue
                if rule.when and not self.ev.truth(rule.when, template_names(
                        derive_facts(rule, facts, ctx, self.ev, "serving"), ctx), rule.id):
                    continue
                line = evidence[0] if evidence else Line(number=0, text="", raw="")
                hit = Hit(rule=rule, pattern=pattern, line=line, end_line=line.number, stage="serving",
                          fine_stage="serving", facts=facts, evidence=evidence)
                arrivals += 1
                if not rule.aggregate:
                    plain.append((arrivals, hit))
                    continue
                kept = self.folds.setdefault(rule.id, Fold(MAX_EVIDENCE)).add(hit)
                firsts.setdefault(rule.id, Firsts(MAX_EVIDENCE)).add(arrivals, hit, kept)
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

        That rule's Fold and Firsts hold whole only hits that add a distinct evidence line before MAX_EVIDENCE,
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

    def _match_first(self) -> None:
        """Match the first pending line (with the lines its message wrapped onto) and pop it: the keyword gate
        picks the candidate patterns; each passes its stage gate, matches (regex or phrase), takes its facts
        and passes its `when`; the most specific hit of each rule is kept."""
        line, fine = self._pending[0]
        try:
            if line.user_content or not line.text:
                return
            gated = self._keyword_gate(line, fine)
            if gated is None:
                return
            candidates, scan = gated
            found: dict[str, Hit] = {}  # one hit per rule per line: the most specific pattern wins
            for rule, pattern, kws in candidates:
                if pattern.stages is not None and scan.stage not in pattern.stages:
                    continue  # the stage gate
                if pattern.components is not None and line.component not in pattern.components:
                    continue  # the place gate: the component the line's traceback points at
                facts = self._pattern_facts(scan, rule, pattern, kws)
                if facts is None:
                    continue
                self._add_extracted(scan, rule, facts)
                hit = self._hit_if_when(scan, rule, pattern, facts)
                if hit is not None:
                    _keep_most_specific(found, hit)
            self._collect(list(found.values()))
        finally:
            self._pending.popleft()

    def _keyword_gate(self, line: Line, fine: str | None) -> tuple[list[Entry], _LineScan] | None:
        """The patterns whose keywords the line holds (else those whose keyword a wrap cut across the line and
        the next), with what they share; None when no pattern can match."""
        long = len(line.text) >= LONG_TEXT  # never repeats its shape: no key (see ShapeCache.matches)
        key = b"" if long else shape_key(line.text)
        candidates = [self.entries[i] for i in self._shapes.matches(line.text, None, key or None)]
        if not candidates:
            wrapped = self._wrapped_candidates(line)
            if wrapped is None:
                return None
            candidates, window, texts, lows = wrapped
        else:
            window = message_window(self._pending)
            texts = joined_texts(window) if len(window) > 1 else (line.text,)
            lows = [t.lower() for t in texts] if len(window) > 1 else [lowered(line.text)]
        # one line alone (no wrapped pieces) of a shape seen before: its patterns' answers are known
        shaped = self._shaped(key) if len(window) == 1 and len(texts) == 1 and not long else None
        return candidates, _LineScan(line=line, fine_stage=fine, stage=coarse(fine), window=window, texts=texts,
                                     lows=lows, shaped=shaped)

    @staticmethod
    def _pattern_facts(scan: _LineScan, rule: Rule, pattern: Pattern, kws: tuple[str, ...]) -> dict[str, Any] | None:
        """The pattern on the line: a regex's groups as typed facts, or {} for a phrase found; None: no match."""
        if pattern.regex is not None:
            groups = regex_groups(pattern.regex, rule, scan.line.text, scan.window, scan.texts, scan.shaped)
            return None if groups is None else typed_facts(rule, groups)
        return {} if _phrase_found(scan, pattern, kws) else None

    @staticmethod
    def _add_extracted(scan: _LineScan, rule: Rule, facts: dict[str, Any]) -> None:
        """Add the facts of the rule's extract regexes that the pattern's own groups did not give."""
        if scan.shaped is not None:
            extracted = extract_shaped(rule, scan.line.text, scan.shaped)
        else:
            extracted = extract(rule, scan.texts, scan.line.text if len(scan.window) > 1 else None)
        facts.update({k: v for k, v in extracted.items() if k not in facts})

    def _hit_if_when(self, scan: _LineScan, rule: Rule, pattern: Pattern, facts: dict[str, Any]) -> Hit | None:
        """The hit, when the pattern's and the rule's `when` hold (a rule that declares `last_stats` gets the
        stats line before it); else None."""
        reads_ctx = bool(pattern.when or rule.when or "last_stats" in rule.facts)
        ctx = self._scan_context(scan) if reads_ctx else {}
        if not self._when_holds(scan, rule, pattern, facts, ctx):
            return None
        if "last_stats" in rule.facts and ctx.get("last_stats_text"):
            facts.setdefault("last_stats", ctx["last_stats_text"])  # what it did before it failed
        return Hit(rule=rule, pattern=pattern, line=scan.line, end_line=scan.window[-1].number, stage=scan.stage,
                   fine_stage=scan.fine_stage, facts=facts, evidence=scan.window)

    def _scan_context(self, scan: _LineScan) -> dict[str, Any]:
        """The context as the rules see it, taken once per line (and only for a matched pattern that reads it)."""
        if scan.ctx is None:
            scan.ctx = self._ctx_source.as_dict(internal=True) if self._ctx_source is not None else {}
        return scan.ctx

    def _when_holds(self, scan: _LineScan, rule: Rule, pattern: Pattern, facts: dict[str, Any],
                    ctx: dict[str, Any]) -> bool:
        """The pattern's `when` (on the extracted facts alone when it reads no derived fact: `when_early`), then
        the pattern's other `when` and the rule's, on the facts with the rule's derived ones."""
        level = scan.line.level
        if pattern.when_early and not self.ev.truth(pattern.when, {**template_names(facts, ctx), "level": level},
                                                    rule.id):
            return False  # e.g. a stats line below the saturation threshold: no need to derive anything
        late_when = pattern.when if pattern.when and not pattern.when_early else None
        if late_when or rule.when:  # derived facts are only for these tests here (advise derives again)
            names = derive_facts(rule, facts, ctx, self.ev, scan.stage)
            scope = {**template_names(names, ctx), "level": level}
            if late_when and not self.ev.truth(late_when, scope, rule.id):
                return False
            if rule.when and not self.ev.truth(rule.when, scope, rule.id):
                return False
        return True

    def _wrapped_candidates(
            self, line: Line) -> tuple[list[Entry], list[Line], tuple[str, ...] | list[str], list[str]] | None:
        """No keyword on the line itself: one cut in two by a terminal's wrap may stand on the joined window
        (candidates, window, texts, lower-cased texts), else None. A keyword whole on a later line starts that
        line's own window, and a piece of an enormous line is its own window (its keywords were just looked for)."""
        if len(self._pending) < 2 or not continues(line, line, self._pending[1][0]):
            return None
        if cut_before(line, self._pending[1][0]):
            return None
        window = message_window(self._pending)
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


def _phrase_found(scan: _LineScan, pattern: Pattern, kws: tuple[str, ...]) -> bool:
    """The pattern's phrase matched fuzzily on the line's texts; a line alone of a shape seen before answers from
    the shape (when the verdict is the same on every line of it: phrase_safe)."""
    shaped = scan.shaped
    found = shaped.get(id(pattern)) if shaped is not None else None
    if found is None:
        if scan.processed is None:
            scan.processed = [default_process(focus(t, lw, kws, len(pattern.phrase or "")))
                              for t, lw in zip(scan.texts, scan.lows, strict=True)]
        found = any(phrase_score(pattern.phrase or "", pr, pattern.threshold) for pr in scan.processed)
        if shaped is not None and len(scan.line.text) <= 800 and phrase_safe(pattern, kws):
            shaped[id(pattern)] = found
    return bool(found)


def _keep_most_specific(found: dict[str, Hit], hit: Hit) -> None:
    """One hit per rule per line: a specific pattern's before a generic one's, then the one with more facts."""
    best = found.get(hit.rule.id)
    if best is None or (best.pattern.generic, -len(best.facts)) > (hit.pattern.generic, -len(hit.facts)):
        found[hit.rule.id] = hit


#: Names a series `when` may read that are only known at the end: the serving and saturated time, the source,
#: the window's listing and time labels (the clock learns the year late), the context, the facts as a whole.
_LATE_NAMES = frozenset({"_serving_seconds", "_saturated_seconds", "source", "_window", "start", "end", "ctx",
                         "facts"})
_NAME = lazy(r"[A-Za-z_]\w*")


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
