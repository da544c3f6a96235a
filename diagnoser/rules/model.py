"""The rule model: what a loaded, validated rule is (`Rule`, its `Pattern`s, `Extractor`s and `Fix`es).

A rule is data: phrases fuzzy-matched against clean lines (or exact regexes), named regex groups that become
typed facts, jinja2 expressions that derive more facts, an advice template, fixes, a long explanation and
its own test cases. This module holds those objects, the language's vocabulary (severities, fact types,
aggregates), the regex of a rule pack bounded in time (`TimedPattern`) and its wrap-tolerant form, and
`RuleError`, the one-line "path: key: what to change" every check raises (checks.py builds rules, loader.py
reads them from files).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diagnoser.errors import InputError, LimitError

SEVERITIES = ("error", "warning", "info")
#: The one severity order (most severe first): ranking, --fail-on and every report use it.
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
FACT_TYPES = ("int", "float", "str", "gib", "size", "bytes", "list")
AGGREGATES = ("max", "min", "sum", "first", "last", "count", "list", "distinct")
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


#: Words too common in vLLM logs to make a useful prefilter keyword.
STOPWORDS = {
    "request", "requests", "tokens", "token", "model", "models", "engine", "initializing", "memory", "cache",
    "please", "increasing", "decreasing", "should", "which", "their", "there", "would", "could", "because",
    "during", "before", "after", "while", "other", "available", "number", "maximum", "current", "config",
    "warning", "information", "process", "processes", "error", "using", "initialization", "following",
}

DEFAULT_THRESHOLD = 85.0


def derive_keywords(phrase: str) -> list[str]:
    """Distinctive words of a phrase: what a line must contain before it is fuzzy-matched."""
    words = re.findall(r"[A-Za-z_][A-Za-z_'-]{4,}", phrase)
    ranked = sorted({w.lower().strip("'") for w in words if w.lower() not in STOPWORDS}, key=len, reverse=True)
    return ranked[:3] or [phrase.lower()[:24]]


class RuleError(InputError, ValueError):
    """A rule file is wrong: carries the file and the key so the one-line message says what to change."""

    def __init__(self, path: str, key: str, message: str) -> None:
        super().__init__(f"{path}: {key}: {message}")
        self.path, self.key = path, key


@dataclass
class Pattern:
    """One way a rule recognises its message."""

    phrase: str | None
    #: the regex's text (None for a phrase or a series); `regex` is it compiled
    source: str | None
    threshold: float
    keywords: list[str]
    generic: bool
    stages: tuple[str | None, ...] | None
    when: str | None
    catalog: list[str]
    #: `when` names only extracted facts: it can be tested before the (costlier) derived facts exist
    when_early: bool = False
    #: a window kind of the serving series (SERIES_FACTS): matched once per window, not per line
    series: str | None = None
    #: components (data/places.yaml) the line's traceback must point at (analysis/frames.py); None: any line
    components: tuple[str, ...] | None = None
    #: the compiled regex: given at load for a rule pack (checked and timed), else compiled on first use
    compiled: Any = field(default=None, repr=False, compare=False)

    @property
    def regex(self) -> Any:
        """The compiled regex (None for a phrase or a series): a shipped rule's `re` pattern on first use (most
        patterns never see a line holding their keywords); a rule pack's TimedPattern, given at load."""
        if self.compiled is None and self.source is not None:
            self.compiled = compile_shipped(self.source)
        return self.compiled


@dataclass
class Extractor:
    """A regex whose named groups become facts; `tolerant` also finds it across wrapped lines."""

    source: str
    #: the compiled regex: given at load for a rule pack (checked and timed), else compiled on first use
    compiled: Any = field(default=None, repr=False, compare=False)
    _tolerant: Any = field(default=None, repr=False, compare=False)

    @property
    def pattern(self) -> Any:
        """The compiled regex (a shipped rule's on first use: extractors run only after their rule matched)."""
        if self.compiled is None:
            self.compiled = compile_shipped(self.source)
        return self.compiled

    @property
    def tolerant(self) -> Any:
        """Compiled on first use: most extractors never need the wrap-tolerant retry."""
        if self._tolerant is None:
            self._tolerant = wrap_tolerant(self.pattern)
        return self._tolerant


def compile_shipped(source: str) -> re.Pattern[str]:
    """A shipped rule's regex compiled: with `re`, about 3x quicker to compile than the `regex` module (a run
    compiles the regexes of every rule some line touched), and reviewed, so it runs untimed. The suite checks
    every shipped regex this way (checks.py, trusted) and runs each rule's cases through it."""
    return re.compile(source)


def compile_pack(source: str) -> Any:
    """A rule pack's regex compiled with the `regex` module's version 0 (`re`'s syntax and behaviour), whose
    searches can be bounded in time (TimedPattern)."""
    import regex

    return regex.compile(source, regex.V0)


#: Seconds one search of a rule pack's regex may take (the regex module stops it at about twice this).
REGEX_TIMEOUT = 0.5


class TimedPattern:
    """A rule pack's compiled regex whose every search is bounded in time.

    Built-in rules are reviewed and use plain compiled patterns (a timeout costs ~9 µs per search); a
    `--rules` pattern that runs past REGEX_TIMEOUT on some line stops the run with a LimitError naming the
    file and the key, rather than hanging a CI job.
    """

    __slots__ = ("_compiled", "path", "key")

    def __init__(self, compiled: Any, path: str, key: str) -> None:
        self._compiled, self.path, self.key = compiled, path, key

    def search(self, text: str, *args: Any) -> Any:
        try:
            return self._compiled.search(text, *args, timeout=REGEX_TIMEOUT)
        except TimeoutError:
            raise LimitError(f"{self.path}: {self.key}: the regex ran longer than {REGEX_TIMEOUT:g} s on one line "
                             "(catastrophic backtracking?); simplify it") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)


def like(model: Any, compiled: Any) -> Any:
    """`compiled` bounded in time when `model` is (the wrap-tolerant form of a rule pack's regex)."""
    return TimedPattern(compiled, model.path, model.key) if isinstance(model, TimedPattern) else compiled


@dataclass
class Fix:
    flag: str | None
    value: str
    reason: str
    when: str | None
    env: str | None
    #: a step that tells what is wrong (with a cost, e.g. --enforce-eager), not the fix: shown as a diagnostic run
    diagnostic: bool = False


#: a shipped rule's fields parsed on first read (loader.shipped_rule, load_deferred)
_DEFERRED_FIELDS = frozenset({"extractors", "derive", "advice", "fixes", "explanation", "references"})


@dataclass
class Rule:
    """A loaded, validated rule."""

    id: str
    title: str
    severity: str
    stage: str | None  #: the failure's stage; None: taken from the log
    stage_choices: tuple[str, ...]  #: a list in YAML: the log's stage when it is one of these, else the first
    fine_stage: str | None
    patterns: list[Pattern]
    extractors: list[Extractor]
    facts: dict[str, str]
    derive: dict[str, str]
    when: str | None
    aggregate: dict[str, str]
    advice: str
    fixes: list[Fix]
    explanation: str
    references: list[str]
    #: `match` and `near_miss` lists (a shipped rule's are parsed on first look: InlineCases)
    cases: Mapping[str, list[Any]]
    fallback: bool
    path: str
    catalog: list[str] = field(default_factory=list)
    #: rules whose hits on the same line this one's hit replaces (a more precise reading of the same text)
    overrides: tuple[str, ...] = ()
    #: rules whose errors in the same start-up this one's error causes: they become its evidence, not errors
    explains: tuple[str, ...] = ()
    #: evaluated on the finished finding (facts, the whole log's ctx, its `line`): false drops the finding
    keep_when: str | None = None
    #: context, not a finding: shown in the report, never counted or gated on (the start-up summary)
    context: bool = False
    #: a message that reports another failure (EngineDeadError, "Worker failed"): ranked after every other error
    wrapper: bool = False

    if not TYPE_CHECKING:  # (for mypy, a Rule has its fields only)

        def __getattr__(self, name: str) -> Any:
            """A shipped rule's long parts (advice, explanation, fixes, extract, references, most often derive) are
            parsed the first time one is read (loader.shipped_rule): a run reads them only for the rules it reports."""
            deferred = self.__dict__.get("_deferred")
            if deferred is None or name not in _DEFERRED_FIELDS:  # (copy and pickle probe dunders here)
                raise AttributeError(name)
            from diagnoser.rules.loader import load_deferred

            load_deferred(self, deferred)
            return self.__dict__[name]

    def stage_of(self, seen: str | None, generic: bool) -> str | None:
        """The finding's stage from the stage the log showed (`seen`, None when the lines did not say).

        The log's stage when the rule allows it; a rule without a stage takes the log's, unknown included. An
        unknown stage becomes the rule's own only when the rule has one stage, or the matched message was its
        specific wording (which names the stage); a generic message (an exception class, torch's OOM text) on
        a multi-stage rule stays unknown: a default would decide the fix for the paste."""
        if not self.stage or seen in self.stage_choices:
            return seen
        if seen is None and generic and len(self.stage_choices) > 1:
            return None
        return self.stage

    def produces(self) -> set[str]:
        """Every fact name this rule can hand to its templates."""
        names = set(self.facts) | set(self.derive) | set(self.aggregate)
        for ex in self.extractors:
            names |= set(ex.pattern.groupindex)
        if self.aggregate:
            names |= {"hits", "first_time", "last_time", "first_line", "last_line"}
        return names


class InlineCases(Mapping[str, list[Any]]):
    """A shipped rule's `cases:` (its YAML text), parsed on first look: only the tests and `rules --test` read
    them, and they are over a third of the rule files."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._parsed: dict[str, list[Any]] | None = None

    def _cases(self) -> dict[str, list[Any]]:
        if self._parsed is None:
            from diagnoser.datafiles import yaml_load

            cases = (yaml_load(self._text) or {}).get("cases") or {}
            self._parsed = {"match": list(cases.get("match") or []), "near_miss": list(cases.get("near_miss") or [])}
        return self._parsed

    def __getitem__(self, key: str) -> list[Any]:
        return self._cases()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cases())

    def __len__(self) -> int:
        return len(self._cases())


def wrap_tolerant(pattern: Any) -> Any:
    """The same regex, allowing whitespace inserted anywhere (a terminal or chat window wrapped it).

    The one builder of the wrap-tolerant form, for match and extract regexes alike; bounded in time when
    `pattern` is (a rule pack's)."""
    import regex  # fuzzy matching (`{i<=6:\\s}`) is the regex module's alone

    flags = regex.BESTMATCH | regex.V0 | (pattern.flags & regex.IGNORECASE)
    return like(pattern, regex.compile(f"(?:{pattern.pattern}){{i<=6:\\s}}", flags))

