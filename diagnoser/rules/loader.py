"""Loading rules: the shipped rules once per process, and rule files or folders given with `--rules`.

A rule pack's file is read as bounded YAML and checked into a `Rule` (checks.py); ids must be unique across
everything loaded, and every `overrides` must name a loaded rule. Unreadable files and invalid YAML are
`RuleError`s too, naming the file and the line.

The shipped rules are checked by the test suite (`checked_builtin_rules`, every CI run), not on every run:
`builtin_rules` reads them as they are, their regexes compiled on first use and their `cases:` parsed only
when a test or `rules --test` reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from diagnoser.lazyre import lazy
from diagnoser.rules.model import (
    DEFAULT_THRESHOLD,
    Extractor,
    Fix,
    InlineCases,
    Pattern,
    Rule,
    RuleError,
    derive_keywords,
)


def load_rule_file(path: Path, trusted: bool = False) -> Rule:
    """Read and validate one rule file; unreadable or invalid YAML is a RuleError too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(str(path), "(file)", f"cannot read: {exc}") from None
    import yaml

    from diagnoser import safeyaml

    try:
        data = safeyaml.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(yaml)"
        raise RuleError(str(path), where, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    from diagnoser.rules.checks import parse_rule  # a rule pack's file: every check

    return parse_rule(data, str(path), trusted)


def builtin_rules_dir() -> Path:
    """Rules ship inside the package (diagnoser.ruleset); a source checkout keeps them in ./rules."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "ruleset", package.parent / "rules"):
        if (candidate / "__init__.py").is_file():
            return candidate
    from importlib import resources  # an unusual install (zipped, or a finder without plain folders)

    try:
        pkg = resources.files("diagnoser.ruleset")
        if pkg.is_dir() and any(p.name.endswith(".yaml") for p in pkg.iterdir()):
            return Path(str(pkg))
    except (ModuleNotFoundError, TypeError):
        pass
    return package.parent / "rules"


def _rule_paths(extra: tuple[Path, ...]) -> list[Path]:
    paths: list[Path] = []
    for p in extra:
        paths.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return paths


def _add_rules(rules: dict[str, Rule], paths: list[Path], trusted: bool = False,
               shadowed: list[str] | None = None) -> None:
    """Load and fully validate each file into `rules` (by id); ids must be unique, overrides must exist.

    `trusted`: the shipped rules, whose regexes run without the per-match timeout rule packs get.
    `shadowed`: these files may replace a rule already in `rules` (a pack under test); its id is listed there."""
    added = []
    for p in paths:
        rule = load_rule_file(p, trusted=trusted)
        if rule.id in rules and Path(rules[rule.id].path).resolve() != p.resolve():
            if shadowed is None or any(r.id == rule.id for r in added):
                raise RuleError(str(p), "id", f"{rule.id!r} is already defined in {rules[rule.id].path}")
            shadowed.append(rule.id)
        rules[rule.id] = rule
        added.append(rule)
    for rule in added:
        for other in rule.overrides:
            if other not in rules:
                raise RuleError(rule.path, "overrides", f"{other!r} is not a rule id (`vllm-doctor rules` lists them)")


def load_rules(extra: tuple[Path, ...] = ()) -> list[Rule]:
    """Built-in rules plus any extra files or folders (always fully validated); ids must be unique."""
    rules = {r.id: r for r in builtin_rules()}
    _add_rules(rules, _rule_paths(extra))
    return list(rules.values())


def load_pack(pack: tuple[Path, ...], extra: tuple[Path, ...] = ()) -> tuple[list[Rule], list[str]]:
    """The rules a pack's cases run against (`rules --test`): the shipped rules and `extra`, with the pack's
    rules in place of those of the same id (so a copy of the shipped folder tests itself); and the ids the pack
    shadows."""
    rules = {r.id: r for r in load_rules(extra)}
    shadowed: list[str] = []
    _add_rules(rules, _rule_paths(pack), shadowed=shadowed)
    return list(rules.values()), shadowed


@lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules, loaded once per process and trusted: the suite runs every check on them
    (`checked_builtin_rules`), so a run only reads them; their regexes run untimed."""
    rules = {}
    for path in sorted(builtin_rules_dir().glob("*.yaml")):
        rule = shipped_rule(path)
        if rule.id in rules:
            raise RuleError(str(path), "id", f"{rule.id!r} is already defined in {rules[rule.id].path}")
        rules[rule.id] = rule
    return tuple(rules.values())


def checked_builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules with every check a rule pack gets (the suite's and CI's; never cached)."""
    loaded: dict[str, Rule] = {}
    _add_rules(loaded, sorted(builtin_rules_dir().glob("*.yaml")), trusted=True)
    return tuple(loaded.values())


#: a top-level key after the first line (led by the newline: `re` then scans for it like a literal, ~10x quicker
#: than a MULTILINE `^`)
_TOP_KEY = lazy(r"\n[A-Za-z_]+:")
_FIRST_KEY = lazy(r"[A-Za-z_]+:")
#: a `when:` key inside `match:` (indented: a top-level `when:` is the rule's own)
_MATCH_WHEN = lazy(r"^\s+(?:-\s+)?when:", re.MULTILINE)


def _key_starts(text: str) -> list[int]:
    """Where each top-level key starts (its line's start)."""
    starts = [m.start() + 1 for m in _TOP_KEY.finditer(text)]
    return [0, *starts] if _FIRST_KEY.match(text) else starts


#: A shipped rule's top-level keys parsed when it is loaded (what the matcher reads of every rule); the others
#: (advice, explanation, fixes, extract, references, derive unless a `when` in `match` reads it: about two thirds
#: of the text) are parsed the first time one is read, by load_deferred (most rules never see a matching line).
_EAGER_KEYS = frozenset({"id", "title", "severity", "stage", "fine_stage", "match", "facts", "when", "aggregate",
                         "fallback", "catalog", "overrides", "explains", "keep_when", "context", "wrapper"})


def split_top_keys(text: str, eager: frozenset[str]) -> tuple[str, str]:
    """(the YAML of the top-level keys in `eager`, the YAML of the others): a rule file's text cut where each
    top-level key starts at its line's start (anything before the first key stays with the first part)."""
    starts = _key_starts(text)
    if not starts:
        return text, ""
    now, later = [text[:starts[0]]], []
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        key = text[start:text.index(":", start)]
        (now if key in eager else later).append(text[start:end])
    return "".join(now), "".join(later)


@dataclass(frozen=True)
class RuleText:
    """A shipped rule file's text cut into the parts parsed at different times."""

    #: the YAML of the keys the matcher reads of every rule (parsed at load)
    now: str
    #: the YAML of `derive` when a `when` in `match` reads a derived fact (parsed at load too), else ""
    derive: str
    #: the YAML of the other keys (advice, explanation, fixes...: parsed on first read)
    later: str
    #: the trailing `cases:` block, kept as text until a test reads it; None when the file has none there
    cases: str | None

    def yaml_texts(self) -> tuple[str, ...]:
        """The texts a load parses as YAML (what scripts/gen-parsed-yaml records)."""
        return tuple(t for t in (self.now, self.derive, self.later) if t)


def split_rule_text(text: str) -> RuleText:
    """A shipped rule file's text cut into its parts (see RuleText)."""
    at = 0 if text.startswith("cases:") else text.find("\ncases:") + 1
    last = at > 0 or text.startswith("cases:")  # `cases:` is the last top-level key: kept as text
    cases_text = text[at:] if last and not _TOP_KEY.search(text, at) else None
    body = text[:at] if cases_text is not None else text
    now, later = split_top_keys(body, _EAGER_KEYS)
    derive = ""
    if _MATCH_WHEN.search(now):  # a `when` in `match` may read a derived fact: when_early needs derive's names
        derive, later = split_top_keys(later, frozenset({"derive"}))
    return RuleText(now=now, derive=derive, later=later, cases=cases_text)


def shipped_rule(path: Path) -> Rule:
    """A shipped rule file built into a Rule without the checks (checked_builtin_rules runs them in the
    suite): its regexes compiled on first use, its trailing `cases:` kept as text until read, and its long parts
    (model._DEFERRED_FIELDS) parsed on first read."""
    from diagnoser.datafiles import yaml_load

    parts = split_rule_text(path.read_text(encoding="utf-8"))
    data = yaml_load(parts.now) or {}
    if parts.derive:
        data.update(yaml_load(parts.derive) or {})
    cases_text, later = parts.cases, parts.later
    cases: Any = InlineCases(cases_text) if cases_text else _plain_cases(data.get("cases") or {})
    stage = data.get("stage")
    stages = list(stage) if isinstance(stage, list) else ([stage] if stage is not None else [])
    derive = dict(data.get("derive") or {})
    rule = Rule.__new__(Rule)
    rule.__dict__.update(
        id=data["id"], title=data["title"], severity=data["severity"],
        stage=stages[0] if stages else None, stage_choices=tuple(stages), fine_stage=data.get("fine_stage"),
        patterns=[_shipped_pattern(item, derive) for item in data["match"]],
        facts=dict(data.get("facts") or {}), when=data.get("when"),
        aggregate=dict(data.get("aggregate") or {}), cases=cases,
        fallback=bool(data.get("fallback")), path=str(path), catalog=list(data.get("catalog") or []),
        overrides=tuple(data.get("overrides") or ()), explains=tuple(data.get("explains") or ()),
        keep_when=data.get("keep_when"), context=bool(data.get("context")), wrapper=bool(data.get("wrapper")),
    )
    if "derive" in data:
        rule.derive = derive
    rule._deferred = later  # type: ignore[attr-defined]  # parsed by Rule.__getattr__ -> load_deferred
    return rule


def load_deferred(rule: Rule, text: str) -> None:
    """Set a shipped rule's deferred fields from the YAML text of its deferred keys (on its first read of one)."""
    from diagnoser.datafiles import yaml_load

    data = (yaml_load(text) if text else None) or {}
    values: dict[str, Any] = {
        "extractors": [Extractor(x["regex"] if isinstance(x, dict) else x) for x in data.get("extract") or []],
        "advice": data["advice"], "explanation": data["explanation"],
        "fixes": [Fix(flag=f.get("flag"), value=str(f.get("value", "")), reason=str(f.get("reason", "")),
                      when=f.get("when"), env=f.get("env"), diagnostic=bool(f.get("diagnostic", False)))
                  for f in data.get("fixes") or []],
        "references": list(data.get("references") or []),
    }
    if "derive" not in rule.__dict__:
        values["derive"] = dict(data.get("derive") or {})
    rule.__dict__.update(values)
    rule.__dict__.pop("_deferred", None)


def _plain_cases(cases: dict[str, Any]) -> dict[str, list[Any]]:
    return {"match": list(cases.get("match") or []), "near_miss": list(cases.get("near_miss") or [])}


def _shipped_pattern(item: dict[str, Any], derive: dict[str, str]) -> Pattern:
    phrase, series, when = item.get("phrase"), item.get("series"), item.get("when")
    threshold = item.get("threshold")
    keywords = [] if series else (item.get("keywords") or derive_keywords(phrase))
    stages = item.get("stages")
    components = item.get("components")
    return Pattern(phrase=phrase, source=item.get("regex"),
                   threshold=DEFAULT_THRESHOLD if threshold is None else float(threshold),
                   keywords=[str(k) for k in keywords], generic=bool(item.get("generic")),
                   stages=None if stages is None else tuple(stages), when=when,
                   catalog=list(item.get("catalog") or []), series=series,
                   components=None if components is None else tuple(components),
                   when_early=bool(when) and not names_read(when) & set(derive))


_STRING = lazy(r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"')
_NAME = lazy(r"(?<![\w.])[A-Za-z_]\w*")


def names_read(expression: str) -> set[str]:
    """The words an expression may read as names: each identifier outside string literals and not after a
    dot (a superset of what jinja2's parser finds; enough to tell whether a `when` reads a derived fact)."""
    return set(_NAME.findall(_STRING.sub("''", expression)))
