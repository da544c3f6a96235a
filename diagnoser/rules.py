"""Rules: YAML signatures, loaded and validated once.

A rule is data: phrases fuzzy-matched against clean lines (or exact regexes), named regex groups that become
typed facts, jinja2 expressions that derive more facts, an advice template, fixes, a long explanation and
its own test cases. Adding or rewording a signature needs no Python change. Loading refuses a rule file
that would misbehave at run time (unknown key, bad regex, a template that names a fact the rule cannot
produce, no cases), naming the file and the key, so a typo never reaches a user's diagnosis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import regex
import yaml
from jinja2 import StrictUndefined, Undefined, nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from .series import SERIES_FACTS
from .stages import STAGES

SEVERITIES = ("error", "warning", "info")
FACT_TYPES = ("int", "float", "str", "gib", "size", "bytes", "list")
AGGREGATES = ("max", "min", "sum", "first", "last", "count", "list")

RULE_KEYS = {
    "id", "title", "severity", "stage", "fine_stage", "match", "extract", "facts", "derive", "when",
    "aggregate", "advice", "fixes", "explanation", "references", "cases", "fallback", "catalog",
    "overrides", "keep_when",
}
PATTERN_KEYS = {"phrase", "regex", "series", "threshold", "keywords", "generic", "stages", "catalog", "when"}
FIX_KEYS = {"flag", "value", "reason", "when", "env"}
CASE_KEYS = {"match", "near_miss"}
MATCH_CASE_KEYS = {"text", "facts", "stage", "context", "advice_contains"}

#: Words too common in vLLM logs to make a useful prefilter keyword.
STOPWORDS = {
    "request", "requests", "tokens", "token", "model", "models", "engine", "initializing", "memory", "cache",
    "please", "increasing", "decreasing", "should", "which", "their", "there", "would", "could", "because",
    "during", "before", "after", "while", "other", "available", "number", "maximum", "current", "config",
    "warning", "information", "process", "processes", "error", "using", "initialization", "following",
}

#: Names every template may use besides the rule's facts.
TEMPLATE_GLOBALS = {"ctx", "mem", "fn", "facts", "severity", "rule_id", "ranks", "command", "stage", "level",
                    "none", "true", "false", "loop", "range", "min", "max", "round", "int", "float", "abs",
                    "len", "sorted", "namespace", "dict", "list"}

DEFAULT_THRESHOLD = 85.0

#: yaml.safe_load's loader, libyaml's C build when present (ten times faster on the rule files).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RuleError(ValueError):
    """A rule file is wrong: carries the file and the key so the one-line message says what to change."""

    def __init__(self, path: str, key: str, message: str) -> None:
        super().__init__(f"{path}: {key}: {message}")
        self.path, self.key = path, key


@dataclass
class Pattern:
    """One way a rule recognises its message."""

    phrase: str | None
    regex: regex.Pattern[str] | None
    threshold: float
    keywords: list[str]
    generic: bool
    stages: tuple[str | None, ...] | None
    when: str | None
    catalog: list[str]
    #: `when` names only extracted facts: it can be tested before the (costlier) derived facts exist
    when_early: bool = False
    #: a window kind of the serving series (series.SERIES_FACTS): matched once per window, not per line
    series: str | None = None


@dataclass
class Extractor:
    """A regex whose named groups become facts; `tolerant` also finds it across wrapped lines."""

    pattern: regex.Pattern[str]
    _tolerant: regex.Pattern[str] | None = None

    @property
    def tolerant(self) -> regex.Pattern[str]:
        """Compiled on first use: most extractors never need the wrap-tolerant retry."""
        if self._tolerant is None:
            self._tolerant = _tolerant(self.pattern.pattern)
        return self._tolerant


@dataclass
class Fix:
    flag: str | None
    value: str
    reason: str
    when: str | None
    env: str | None


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
    cases: dict[str, list[Any]]
    fallback: bool
    path: str
    catalog: list[str] = field(default_factory=list)
    #: rules whose hits on the same line this one's hit replaces (a more precise reading of the same text)
    overrides: tuple[str, ...] = ()
    #: evaluated on the finished finding (facts, the whole log's ctx, its `line`): false drops the finding
    keep_when: str | None = None

    def produces(self) -> set[str]:
        """Every fact name this rule can hand to its templates."""
        names = set(self.facts) | set(self.derive) | set(self.aggregate)
        for ex in self.extractors:
            names |= set(ex.pattern.groupindex)
        if self.aggregate:
            names |= {"hits", "first_time", "last_time", "first_line", "last_line"}
        return names


def template_env() -> SandboxedEnvironment:
    """The one environment for advice templates and expressions: sandboxed, strict about names."""
    env = SandboxedEnvironment(undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                               keep_trailing_newline=False)
    env.filters["tokens"] = _tokens
    env.filters["gib"] = _gib
    env.tests["known"] = lambda v: not isinstance(v, Undefined) and v is not None
    return env


def _tokens(n: Any) -> str:
    """35000 -> '35,000'; an unknown value prints as '?' rather than failing the advice."""
    try:
        return f"{int(n):,}"
    except (TypeError, ValueError):
        return "?"


def _gib(x: Any) -> str:
    """4.6213 -> '4.62'."""
    try:
        return f"{float(x):.2f}"
    except (TypeError, ValueError):
        return "?"


def derive_keywords(phrase: str) -> list[str]:
    """Distinctive words of a phrase: what a line must contain before it is fuzzy-matched."""
    words = re.findall(r"[A-Za-z_][A-Za-z_'-]{4,}", phrase)
    ranked = sorted({w.lower().strip("'") for w in words if w.lower() not in STOPWORDS}, key=len, reverse=True)
    return ranked[:3] or [phrase.lower()[:24]]


def _tolerant(source: str) -> regex.Pattern[str]:
    """The same regex, allowing whitespace inserted anywhere (a terminal or chat window wrapped it)."""
    return regex.compile(f"(?:{source}){{i<=6:\\s}}", regex.BESTMATCH | regex.V0)


def _expr_names(env: SandboxedEnvironment, source: str, path: str, key: str) -> set[str]:
    try:
        ast = env.parse("{{ (" + source + ") }}")
    except TemplateSyntaxError as exc:
        raise RuleError(path, key, f"not a valid expression: {exc.message}") from None
    return _free_names(ast)


def _free_names(ast: nodes.Template) -> set[str]:
    """Names a template reads that it does not bind itself (set, for, macro arguments).

    A plain walk over the tree: jinja2.meta.find_undeclared_variables runs the code generator's scope
    analysis, which made loading the rules several times slower.
    """
    loads, stores = set(), set()
    for node in ast.find_all(nodes.Name):
        (loads if node.ctx == "load" else stores).add(node.name)
    return loads - stores


def _template_names(env: SandboxedEnvironment, source: str, path: str, key: str) -> set[str]:
    try:
        ast = env.parse(source)
    except TemplateSyntaxError as exc:
        raise RuleError(path, key, f"template does not parse (line {exc.lineno}): {exc.message}") from None
    return _free_names(ast)


def _check_names(names: set[str], allowed: set[str], path: str, key: str) -> None:
    unknown = sorted(n for n in names if n not in allowed and n not in TEMPLATE_GLOBALS)
    if unknown:
        raise RuleError(path, key, f"uses {', '.join(unknown)}, which this rule never produces "
                                   f"(extract a group of that name, add it under derive, or read it from ctx.)")


def _require(data: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str) -> Any:
    if key not in data:
        raise RuleError(path, key, "missing")
    value = data[key]
    if not isinstance(value, kind):
        raise RuleError(path, key, f"must be {getattr(kind, '__name__', kind)}")
    return value


def _check_mapping(item: Any, allowed: set[str], path: str, key: str, shape: str) -> dict[str, Any]:
    """A mapping whose keys are all known; else a RuleError naming the first unknown key."""
    if not isinstance(item, dict):
        raise RuleError(path, key, shape)
    bad = sorted(set(item) - allowed)
    if bad:
        raise RuleError(path, f"{key}.{bad[0]}" if key != "(top)" else bad[0],
                        f"unknown key; allowed: {', '.join(sorted(allowed))}")
    return item


def _compile(source: str, path: str, key: str) -> regex.Pattern[str]:
    try:
        return regex.compile(source, regex.V0)
    except regex.error as exc:
        raise RuleError(path, key, f"regex does not compile: {exc}") from None


def parse_rule(data: Any, path: str) -> Rule:
    """Validate one rule document and build the Rule."""
    _check_mapping(data, RULE_KEYS, path, "(top)", "a rule file holds one mapping (id, title, severity, match, ...)")
    rid = _require(data, "id", str, path)
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", rid):
        raise RuleError(path, "id", f"{rid!r} is not kebab-case")
    if Path(path).stem != rid and not path.startswith("<"):
        raise RuleError(path, "id", f"{rid!r} must match the file name {Path(path).stem!r}")
    severity = _require(data, "severity", str, path)
    if severity not in SEVERITIES:
        raise RuleError(path, "severity", f"{severity!r}; one of {', '.join(SEVERITIES)}")
    stage = data.get("stage")
    stage_list = list(stage) if isinstance(stage, list) else ([stage] if stage is not None else [])
    for s in stage_list:
        if s not in STAGES:
            raise RuleError(path, "stage", f"{s!r}; one of {', '.join(STAGES)} (or omit: taken from the log)")
    env = template_env()

    patterns: list[Pattern] = []
    for i, item in enumerate(_require(data, "match", list, path)):
        key = f"match[{i}]"
        _check_mapping(item, PATTERN_KEYS, path, key, "each match entry is a mapping with phrase: or regex:")
        phrase, rx, series = item.get("phrase"), item.get("regex"), item.get("series")
        if sum(bool(x) for x in (phrase, rx, series)) != 1:
            raise RuleError(path, key, "give exactly one of phrase:, regex: or series:")
        if series and series not in SERIES_FACTS:
            raise RuleError(path, f"{key}.series", f"{series!r}; one of {', '.join(SERIES_FACTS)}")
        compiled = _compile(rx, path, f"{key}.regex") if rx else None
        keywords = item.get("keywords") or (derive_keywords(phrase) if phrase else None)
        if series:
            keywords = []
        elif not keywords:
            raise RuleError(path, f"{key}.keywords", "a regex entry needs literal keywords: for the prefilter")
        stages = item.get("stages")
        if stages is not None:
            for s in stages:
                if s is not None and s not in STAGES:
                    raise RuleError(path, f"{key}.stages", f"{s!r}; one of {', '.join(STAGES)} or null")
            stages = tuple(stages)
        when = item.get("when")
        if when:
            _expr_names(env, when, path, f"{key}.when")
        patterns.append(Pattern(
            phrase=phrase, regex=compiled, threshold=float(item.get("threshold", DEFAULT_THRESHOLD)),
            keywords=[str(k) for k in keywords], generic=bool(item.get("generic")), stages=stages,
            when=when, catalog=list(item.get("catalog") or []), series=series,
        ))

    extractors = []
    for i, item in enumerate(data.get("extract") or []):
        key = f"extract[{i}]"
        source = item.get("regex") if isinstance(item, dict) else item
        if not isinstance(source, str):
            raise RuleError(path, key, "each extract entry is a regex (string or {regex: ...})")
        compiled = _compile(source, path, key)
        if not compiled.groupindex:
            raise RuleError(path, key, "an extract regex needs named groups (?P<name>...)")
        extractors.append(Extractor(compiled))

    facts = dict(data.get("facts") or {})
    for name, kind in facts.items():
        if kind not in FACT_TYPES:
            raise RuleError(path, f"facts.{name}", f"type {kind!r}; one of {', '.join(FACT_TYPES)}")
    aggregate = dict(data.get("aggregate") or {})
    for name, how in aggregate.items():
        if how not in AGGREGATES:
            raise RuleError(path, f"aggregate.{name}", f"{how!r}; one of {', '.join(AGGREGATES)}")

    rule = Rule(
        id=rid, title=_require(data, "title", str, path), severity=severity,
        stage=stage_list[0] if stage_list else None, stage_choices=tuple(stage_list),
        fine_stage=data.get("fine_stage"), patterns=patterns, extractors=extractors, facts=facts,
        derive=dict(data.get("derive") or {}), when=data.get("when"), aggregate=aggregate,
        advice=_require(data, "advice", str, path), fixes=[],
        explanation=_require(data, "explanation", str, path), references=list(data.get("references") or []),
        cases={}, fallback=bool(data.get("fallback")), path=path, catalog=list(data.get("catalog") or []),
        overrides=tuple(data.get("overrides") or ()),
        keep_when=data.get("keep_when"),
    )
    produced = rule.produces()
    groups = set()
    for ex in extractors:
        groups |= set(ex.pattern.groupindex)
    for p in patterns:
        if p.regex is not None:
            groups |= set(p.regex.groupindex)
        if p.series:
            groups |= set(SERIES_FACTS[p.series])
    produced |= groups
    for name in facts:
        if name not in groups and name not in rule.derive:
            raise RuleError(path, f"facts.{name}", "declared but no extract regex has a group of that name")
    for name, expr in rule.derive.items():
        _check_names(_expr_names(env, expr, path, f"derive.{name}"), produced, path, f"derive.{name}")
    if rule.when:
        _check_names(_expr_names(env, rule.when, path, "when"), produced, path, "when")
    if rule.keep_when:
        _check_names(_expr_names(env, rule.keep_when, path, "keep_when"), produced | {"line", "fine_stage"}, path,
                     "keep_when")
    for p in patterns:
        if p.when:
            used = _expr_names(env, p.when, path, "match.when")
            _check_names(used, produced, path, "match.when")
            p.when_early = not used & set(rule.derive)
    _check_names(_template_names(env, rule.advice, path, "advice"), produced, path, "advice")

    for i, item in enumerate(data.get("fixes") or []):
        key = f"fixes[{i}]"
        _check_mapping(item, FIX_KEYS, path, key, "each fix is a mapping: flag, value, reason[, when]")
        fix = Fix(flag=item.get("flag"), value=str(item.get("value", "")), reason=str(item.get("reason", "")),
                  when=item.get("when"), env=item.get("env"))
        if not fix.flag and not fix.env:
            raise RuleError(path, f"{key}.flag", "a fix names a flag (--max-model-len) or an env variable")
        for part, source in (("flag", fix.flag or ""), ("value", fix.value), ("reason", fix.reason)):
            _check_names(_template_names(env, source, path, f"{key}.{part}"), produced, path, f"{key}.{part}")
        if fix.when:
            _check_names(_expr_names(env, fix.when, path, f"{key}.when"), produced, path, f"{key}.when")
        rule.fixes.append(fix)

    cases = data.get("cases")
    if not isinstance(cases, dict) or not cases.get("match"):
        raise RuleError(path, "cases", "every rule needs cases.match (lines it must match) and cases.near_miss")
    _check_mapping(cases, CASE_KEYS, path, "cases", "cases is a mapping: match, near_miss")
    if not cases.get("near_miss"):
        raise RuleError(path, "cases.near_miss", "at least one near-miss line that must not match")
    for i, case in enumerate(cases["match"]):
        _check_mapping(case, MATCH_CASE_KEYS, path, f"cases.match[{i}]", "each case is a mapping: text, facts")
        if "text" not in case:
            raise RuleError(path, f"cases.match[{i}].text", "missing: the line(s) the rule must match")
    rule.cases = {"match": list(cases["match"]), "near_miss": list(cases["near_miss"])}
    return rule


def load_rule_file(path: Path) -> Rule:
    """Read and validate one rule file; unreadable or invalid YAML is a RuleError too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(str(path), "(file)", f"cannot read: {exc}") from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - the safe loader, in C when libyaml is there
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(yaml)"
        raise RuleError(str(path), where, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_rule(data, str(path))


def builtin_rules_dir() -> Path:
    """Rules ship inside the package (diagnoser.ruleset); a source checkout keeps them in ./rules."""
    try:
        pkg = resources.files("diagnoser.ruleset")
        if pkg.is_dir() and any(p.name.endswith(".yaml") for p in pkg.iterdir()):
            return Path(str(pkg))
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / "rules"


def load_rules(extra: tuple[Path, ...] = ()) -> list[Rule]:
    """Built-in rules plus any extra files or folders; ids must be unique."""
    paths = sorted(builtin_rules_dir().glob("*.yaml"))
    for p in extra:
        paths.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    rules: dict[str, Rule] = {}
    for p in paths:
        rule = load_rule_file(p)
        if rule.id in rules and rules[rule.id].path != rule.path:
            raise RuleError(str(p), "id", f"{rule.id!r} is already defined in {rules[rule.id].path}")
        rules[rule.id] = rule
    for rule in rules.values():
        for other in rule.overrides:
            if other not in rules:
                raise RuleError(rule.path, "overrides", f"{other!r} is not a rule id (`vllm-doctor rules` lists them)")
    return list(rules.values())


@lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules, loaded once per process."""
    return tuple(load_rules())
