"""Checks of a rule document: a parsed YAML mapping validated part by part and built into a `Rule`.

`parse_rule` refuses a document that would misbehave at run time (unknown key, wrong YAML type, bad or
catastrophic regex, a template that names a fact the rule cannot produce or a helper that does not exist, no
cases), each with a `RuleError` naming the file and the key, so a typo never reaches a user's diagnosis.
Each part has its own function, in the order a reader meets them in the file: the header, the match
patterns, the extract regexes and fact types, the templates against the facts, the fixes, the cases.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import regex

from diagnoser.rules.model import (
    AGGREGATES,
    DEFAULT_THRESHOLD,
    FACT_TYPES,
    SERIES_FACTS,
    SEVERITIES,
    Extractor,
    Fix,
    Pattern,
    Rule,
    RuleError,
    TimedPattern,
    compile_pack,
    compile_shipped,
    derive_keywords,
)
from diagnoser.rules.regexcheck import catastrophic
from diagnoser.vllm.stages import STAGES

if TYPE_CHECKING:
    from jinja2 import nodes

    from diagnoser.rules.sandbox import RuleSandbox


RULE_KEYS = {
    "id", "title", "severity", "stage", "fine_stage", "match", "extract", "facts", "derive", "when",
    "aggregate", "advice", "fixes", "explanation", "references", "cases", "fallback", "wrapper", "context", "catalog",
    "overrides", "keep_when", "explains",
}
PATTERN_KEYS = {"phrase", "regex", "series", "threshold", "keywords", "generic", "stages", "catalog", "when",
                "components"}
FIX_KEYS = {"flag", "value", "reason", "when", "env", "diagnostic"}
CASE_KEYS = {"match", "near_miss"}
MATCH_CASE_KEYS = {"name", "text", "facts", "stage", "context", "advice_contains", "line", "finding_stage",
                   "wins_over"}
NEAR_MISS_KEYS = {"name", "text", "stage"}

#: Names every template may use besides the rule's facts.
TEMPLATE_GLOBALS = {"ctx", "mem", "fn", "facts", "severity", "rule_id", "ranks", "command", "stage", "level",
                    "none", "true", "false", "loop", "range", "min", "max", "round", "int", "float", "abs",
                    "len", "sorted", "namespace", "dict", "list"}

#: Facts the engine fills for a rule that declares them (no regex group needed): `cause` and `cause_line`, the
#: exception printed before a message that only reports a death; `last_stats`, the stats line before a hit.
FILLED_FACTS = {"cause", "cause_line", "last_stats"}

def _expr_names(env: RuleSandbox, source: Any, path: str, key: str, expression: bool = True) -> set[str]:
    """The names an expression (derive, when) or, with `expression=False`, a template (advice, fixes) reads,
    after the sandbox's and the helper checks."""
    from diagnoser.rules.sandbox import parse_checked

    if not isinstance(source, str):
        raise RuleError(path, key, f"must be {'an expression in a string' if expression else 'a template string'}, "
                                   f"not {type(source).__name__}")
    try:
        ast = parse_checked(env, source, expression=expression)
    except ValueError as exc:
        raise RuleError(path, key, str(exc)) from None
    _check_helpers(env, ast, path, key)
    return _free_names(ast)


#: Other spellings of "has a value" than `x is known` (one spelling, so a reader knows what none means).
OTHER_HAS_A_VALUE = {"defined", "undefined", "default", "d"}

#: Template names that stand for a module of helpers: `mem.max_len_that_fits(...)`, `fn.corrected_args(...)`.
HELPER_MODULES = {"mem": "diagnoser.vllm.memory", "fn": "diagnoser.rules.functions"}


def _check_helpers(env: RuleSandbox, ast: nodes.Template, path: str, key: str) -> None:
    """Every mem.X / fn.X names a public function of its module, every filter and test exists: a typo is
    caught at load, not as a silently empty value on the one log that needs it."""
    from importlib import import_module

    from jinja2 import nodes

    for node in ast.find_all(nodes.Getattr):
        if isinstance(node.node, nodes.Name) and node.node.name in HELPER_MODULES:
            module = import_module(HELPER_MODULES[node.node.name])
            value = getattr(module, node.attr, None)
            if node.attr.startswith("_") or value is None or isinstance(value, ModuleType):
                public = sorted(n for n in dir(module) if not n.startswith("_")
                                and not isinstance(getattr(module, n), ModuleType))
                close = [n for n in public if n.startswith(node.attr[:4])][:3]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise RuleError(path, key, f"{node.node.name}.{node.attr} is not a function or constant of "
                                           f"{HELPER_MODULES[node.node.name]}{hint}")
    for node in ast.find_all(nodes.Filter):
        if node.name in OTHER_HAS_A_VALUE:
            raise RuleError(path, key, f"|{node.name}(...) is not the house spelling of \"has a value\": write "
                                       "`(x if x is known else fallback)`")
        if node.name not in env.filters:
            raise RuleError(path, key, f"unknown filter |{node.name}; the filters are tokens, gib and jinja2's")
    for node in ast.find_all(nodes.Test):
        if node.name in OTHER_HAS_A_VALUE:
            known = "x is not known" if node.name == "undefined" else "x is known"
            raise RuleError(path, key, f"`is {node.name}` is not the house spelling of \"has a value\": write "
                                       f"`{known}` (also false for none)")
        if node.name not in env.tests:
            raise RuleError(path, key, f"unknown test `is {node.name}`; use `is known` for \"has a value\"")


def _free_names(ast: nodes.Template) -> set[str]:
    """Names a template reads that it does not bind itself (set, for, macro arguments).

    A plain walk over the tree: jinja2.meta.find_undeclared_variables runs the code generator's scope
    analysis, which made loading the rules several times slower.
    """
    from jinja2 import nodes

    loads, stores = set(), set()
    for node in ast.find_all(nodes.Name):
        (loads if node.ctx == "load" else stores).add(node.name)
    return loads - stores


def _template_names(env: RuleSandbox, source: Any, path: str, key: str) -> set[str]:
    return _expr_names(env, source, path, key, expression=False)


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


def _compile(source: Any, path: str, key: str, trusted: bool = False) -> Any:
    if not isinstance(source, str):
        raise RuleError(path, key, f"a regex is a string, not {type(source).__name__}")
    try:
        compiled = compile_shipped(source) if trusted else compile_pack(source)
    except (re.error, regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise RuleError(path, key, f"regex does not compile: {exc}") from None
    problem = catastrophic(source)
    if problem:
        raise RuleError(path, key, f"{problem}: it can take exponential time on some lines; rewrite it "
                                   "(e.g. (a+)+ as a+, (\\w+\\s?)+ as [\\w\\s]+)")
    return compiled if trusted else TimedPattern(compiled, path, key)


#: The YAML type each top-level key must have (checked before anything reads them).
RULE_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "title": (str,), "severity": (str,), "stage": (str, list), "fine_stage": (str,), "match": (list,),
    "extract": (list,), "facts": (dict,), "derive": (dict,), "when": (str,), "aggregate": (dict,), "advice": (str,),
    "fixes": (list,), "explanation": (str,), "references": (list,), "cases": (dict,), "fallback": (bool,),
    "wrapper": (bool,), "catalog": (list,), "overrides": (list,), "keep_when": (str,), "explains": (list,),
}
PATTERN_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "phrase": (str,), "regex": (str,), "threshold": (int, float), "keywords": (list,), "generic": (bool,),
    "stages": (list,), "catalog": (list,), "when": (str,), "components": (list,),
}
FIX_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "flag": (str,), "value": (str, int, float, bool), "reason": (str,), "when": (str,), "env": (str,),
    "diagnostic": (bool,),
}
#: A match case's keys (`facts` and `context` are mappings of any values, checked apart).
CASE_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "text": (str,), "stage": (str,), "advice_contains": (list,), "line": (int,),
    "finding_stage": (str,), "wins_over": (list,),
}
_TYPE_NAMES = {str: "a string", list: "a list", dict: "a mapping", bool: "true or false", int: "a number",
               float: "a number"}


def _check_types(item: dict[str, Any], types: dict[str, tuple[type, ...]], path: str, prefix: str) -> None:
    """Each present, non-null key has its YAML type: `threshold: abc` or `keywords: 5` is named, not crashed on."""
    for key, kinds in types.items():
        value = item.get(key)
        if value is None:
            continue
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            want = " or ".join(dict.fromkeys(_TYPE_NAMES[k] for k in kinds))
            raise RuleError(path, f"{prefix}{key}", f"must be {want}, not {type(value).__name__} {value!r:.40}")
        if isinstance(value, list) and key in ("keywords", "stages", "references", "catalog", "overrides",
                                               "advice_contains", "wins_over", "components"):
            bad = next((v for v in value if not isinstance(v, str) and not (key == "stages" and v is None)), "")
            if bad != "":
                raise RuleError(path, f"{prefix}{key}", f"must be a list of strings, not holding {bad!r:.40}")
        if isinstance(value, dict) and key in ("facts", "derive", "aggregate"):
            bad = next((k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)), None)
            if bad is not None:
                raise RuleError(path, f"{prefix}{key}.{bad}", "must map a fact name to a string")


def parse_rule(data: Any, path: str, trusted: bool = False) -> Rule:
    """Validate one rule document and build the Rule (`trusted`: a built-in rule, its regexes not timed).

    Each part is checked by its own function, in the order a reader meets them in the file: the header
    (id, severity, stage), the match patterns, the extract regexes and fact types, the templates against
    the facts the rule can produce, the fixes, the cases.
    """
    from diagnoser.rules.sandbox import template_env

    env = template_env()
    rid, severity, stage_list = _header(data, path)
    patterns = [_pattern(item, env, path, f"match[{i}]", trusted)
                for i, item in enumerate(_require(data, "match", list, path))]
    extractors = _extractors(data, path, trusted)
    facts, aggregate = _fact_types(data, path)
    rule = Rule(
        id=rid, title=_require(data, "title", str, path), severity=severity,
        stage=stage_list[0] if stage_list else None, stage_choices=tuple(stage_list),
        fine_stage=data.get("fine_stage"), patterns=patterns, extractors=extractors, facts=facts,
        derive=dict(data.get("derive") or {}), when=data.get("when"), aggregate=aggregate,
        advice=_require(data, "advice", str, path), fixes=[],
        explanation=_require(data, "explanation", str, path), references=list(data.get("references") or []),
        cases={}, fallback=bool(data.get("fallback")), path=path, catalog=list(data.get("catalog") or []),
        overrides=tuple(data.get("overrides") or ()),
        explains=tuple(data.get("explains") or ()),
        keep_when=data.get("keep_when"), context=bool(data.get("context")), wrapper=bool(data.get("wrapper")),
    )
    produced = _check_templates(rule, env)
    rule.fixes = [_fix(item, env, path, f"fixes[{i}]", produced) for i, item in enumerate(data.get("fixes") or [])]
    rule.cases = _cases(data, path)
    return rule


def _header(data: Any, path: str) -> tuple[str, str, list[str]]:
    """The document is a mapping of known, well-typed keys; its id, severity and stage(s)."""
    _check_mapping(data, RULE_KEYS, path, "(top)", "a rule file holds one mapping (id, title, severity, match, ...)")
    _check_types(data, RULE_KEY_TYPES, path, "")
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
    return rid, severity, stage_list


def _pattern(item: Any, env: RuleSandbox, path: str, key: str, trusted: bool) -> Pattern:
    """One `match:` entry: exactly one of phrase, regex or series, with its keywords, stages and `when`."""
    _check_mapping(item, PATTERN_KEYS, path, key, "each match entry is a mapping with phrase: or regex:")
    _check_types(item, PATTERN_KEY_TYPES, path, f"{key}.")
    threshold = item.get("threshold")
    threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)
    if not 0 <= threshold <= 100:
        raise RuleError(path, f"{key}.threshold", "a score from 0 to 100")
    phrase, rx, series = item.get("phrase"), item.get("regex"), item.get("series")
    if sum(bool(x) for x in (phrase, rx, series)) != 1:
        raise RuleError(path, key, "give exactly one of phrase:, regex: or series:")
    if series and series not in SERIES_FACTS:
        raise RuleError(path, f"{key}.series", f"{series!r}; one of {', '.join(SERIES_FACTS)}")
    compiled = _compile(rx, path, f"{key}.regex", trusted) if rx else None
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
    return Pattern(phrase=phrase, source=rx or None, compiled=compiled, threshold=threshold,
                   keywords=[str(k) for k in keywords],
                   generic=bool(item.get("generic")), stages=stages, when=when,
                   catalog=list(item.get("catalog") or []), series=series,
                   components=_components(item.get("components"), path, key))


def _components(components: list[str] | None, path: str, key: str) -> tuple[str, ...] | None:
    """A pattern's `components:`: names of data/places.yaml's components (the traceback's place gates it)."""
    if components is None:
        return None
    from diagnoser import datafiles

    known = [c["name"] for c in datafiles.load("places.yaml")["components"]]
    bad = [c for c in components if c not in known]
    if bad:
        raise RuleError(path, f"{key}.components", f"{bad[0]!r}; one of {', '.join(known)}")
    return tuple(components)


def _extractors(data: dict[str, Any], path: str, trusted: bool) -> list[Extractor]:
    """The `extract:` regexes; each needs named groups (they become the facts)."""
    extractors = []
    for i, item in enumerate(data.get("extract") or []):
        key = f"extract[{i}]"
        source = item.get("regex") if isinstance(item, dict) else item
        if not isinstance(source, str):
            raise RuleError(path, key, "each extract entry is a regex (string or {regex: ...})")
        compiled = _compile(source, path, key, trusted)
        if not compiled.groupindex:
            raise RuleError(path, key, "an extract regex needs named groups (?P<name>...)")
        extractors.append(Extractor(source, compiled))
    return extractors


def _fact_types(data: dict[str, Any], path: str) -> tuple[dict[str, str], dict[str, str]]:
    """`facts:` (name -> type) and `aggregate:` (name -> how hits combine), each value one the engine knows."""
    facts = dict(data.get("facts") or {})
    for name, kind in facts.items():
        if kind not in FACT_TYPES:
            raise RuleError(path, f"facts.{name}", f"type {kind!r}; one of {', '.join(FACT_TYPES)}")
    aggregate = dict(data.get("aggregate") or {})
    for name, how in aggregate.items():
        if how not in AGGREGATES:
            raise RuleError(path, f"aggregate.{name}", f"{how!r}; one of {', '.join(AGGREGATES)}")
    return facts, aggregate


def _check_templates(rule: Rule, env: RuleSandbox) -> set[str]:
    """Every derive, when, keep_when and the advice names only facts the rule produces; returns those names.

    A pattern's `when` that reads no derived fact is marked early (tested before deriving anything)."""
    path = rule.path
    groups: set[str] = set()
    for ex in rule.extractors:
        groups |= set(ex.pattern.groupindex)
    for p in rule.patterns:
        if p.regex is not None:
            groups |= set(p.regex.groupindex)
        if p.series:
            groups |= set(SERIES_FACTS[p.series])
    produced = rule.produces() | groups
    for name in rule.facts:
        if name not in groups and name not in rule.derive and name not in FILLED_FACTS:
            raise RuleError(path, f"facts.{name}", "declared but no extract regex has a group of that name")
    for name, expr in rule.derive.items():
        _check_names(_expr_names(env, expr, path, f"derive.{name}"), produced, path, f"derive.{name}")
    if rule.when:
        _check_names(_expr_names(env, rule.when, path, "when"), produced, path, "when")
    if rule.keep_when:
        _check_names(_expr_names(env, rule.keep_when, path, "keep_when"), produced | {"line", "fine_stage"}, path,
                     "keep_when")
    for p in rule.patterns:
        if p.when:
            used = _expr_names(env, p.when, path, "match.when")
            _check_names(used, produced, path, "match.when")
            p.when_early = not used & set(rule.derive)
    _check_names(_template_names(env, rule.advice, path, "advice"), produced, path, "advice")
    return produced


def _fix(item: Any, env: RuleSandbox, path: str, key: str, produced: set[str]) -> Fix:
    """One `fixes:` entry: a flag or an env variable, its templates naming only facts the rule produces."""
    _check_mapping(item, FIX_KEYS, path, key, "each fix is a mapping: flag, value, reason[, when]")
    _check_types(item, FIX_KEY_TYPES, path, f"{key}.")
    fix = Fix(flag=item.get("flag"), value=str(item.get("value", "")), reason=str(item.get("reason", "")),
              when=item.get("when"), env=item.get("env"), diagnostic=bool(item.get("diagnostic", False)))
    if not fix.flag and not fix.env:
        raise RuleError(path, f"{key}.flag", "a fix names a flag (--max-model-len) or an env variable")
    for part, source in (("flag", fix.flag or ""), ("value", fix.value), ("reason", fix.reason)):
        _check_names(_template_names(env, source, path, f"{key}.{part}"), produced, path, f"{key}.{part}")
    if fix.when:
        _check_names(_expr_names(env, fix.when, path, f"{key}.when"), produced, path, f"{key}.when")
    return fix


def _cases(data: dict[str, Any], path: str) -> dict[str, list[Any]]:
    """`cases:` holds match cases (each a mapping with text) and at least one near-miss."""
    cases = data.get("cases")
    if not isinstance(cases, dict) or not cases.get("match"):
        raise RuleError(path, "cases", "every rule needs cases.match (lines it must match) and cases.near_miss")
    _check_mapping(cases, CASE_KEYS, path, "cases", "cases is a mapping: match, near_miss")
    for part in ("match", "near_miss"):
        if not isinstance(cases.get(part), list):
            raise RuleError(path, f"cases.{part}", "must be a list")
    if not cases.get("near_miss"):
        raise RuleError(path, "cases.near_miss", "at least one near-miss line that must not match")
    for i, case in enumerate(cases["match"]):
        _check_mapping(case, MATCH_CASE_KEYS, path, f"cases.match[{i}]", "each case is a mapping: text, facts")
        if "text" not in case:
            raise RuleError(path, f"cases.match[{i}].text", "missing: the line(s) the rule must match")
        _check_types(case, CASE_KEY_TYPES, path, f"cases.match[{i}].")
        for key in ("facts", "context"):  # `rules --test` reads them as mappings
            if not isinstance(case.get(key) or {}, dict):
                raise RuleError(path, f"cases.match[{i}].{key}", f"must be a mapping, not {case[key]!r:.40}")
    for i, case in enumerate(cases["near_miss"]):
        where = f"cases.near_miss[{i}]"
        if not isinstance(case, dict):
            if not isinstance(case, str):
                raise RuleError(path, where, f"must be a line of text or a mapping with text, not {case!r:.40}")
            continue
        _check_mapping(case, NEAR_MISS_KEYS, path, where, "a near-miss is a line or a mapping: name, text, stage")
        if "text" not in case:
            raise RuleError(path, f"{where}.text", "missing: the line(s) the rule must not match")
        _check_types(case, {"name": (str,), "text": (str,), "stage": (str,)}, path, f"{where}.")
    return {"match": list(cases["match"]), "near_miss": list(cases["near_miss"])}
