"""Run a rule's inline cases: the lines it must match (with their facts) and the near-misses it must not.

The test suite runs every shipped rule through this, and rule authors run it on their own files with
`vllm-doctor rules --test FILE_OR_DIR`. Like semgrep's rule tests, every match pattern must be exercised:
some named case's finding has to come through it (not through a sibling pattern of the same rule).
"""

from __future__ import annotations

import io
import math
from dataclasses import replace
from typing import Any

from diagnoser.analysis.hits import Hit, drop_shadowed
from diagnoser.analysis.pipeline import Report, diagnose, diagnose_text
from diagnoser.rules.loader import builtin_rules
from diagnoser.rules.model import Pattern, Rule

#: A landmark line that puts the log in a stage before a case's text (cases may say `stage: loading`).
STAGE_LEAD = {
    "cli": "INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'org/model'}",
    "config": "INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.10.0) with config: model='org/model'",
    "loading": "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model org/model...",
    "startup": "INFO 01-01 00:00:00 [gpu_worker.py:1] Memory profiling takes 3.20 seconds",
    "warmup": "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Capturing cudagraphs for decoding.",
    "serving": "INFO 01-01 00:00:00 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000",
}


def close_enough(want: Any, got: Any) -> bool:
    """Numbers within 1.1% (vLLM rounds what it prints), anything else equal."""
    if isinstance(want, (int, float)) and isinstance(got, (int, float)) and not isinstance(want, bool):
        return math.isclose(float(want), float(got), rel_tol=0.011, abs_tol=0.011)
    return want == got


def case_text(case: dict[str, Any]) -> str:
    lead = STAGE_LEAD.get(case.get("stage") or "", "")
    return (lead + "\n" if lead else "") + str(case["text"]).rstrip("\n") + "\n"


def case_name(case: Any, kind: str, i: int) -> str:
    """A case's name for messages: its `name:`, else its place (cases.match[3])."""
    name = case.get("name") if isinstance(case, dict) else None
    return f"{name} (cases.{kind}[{i}])" if name else f"cases.{kind}[{i}]"


def run_cases(rule: Rule, rules: tuple[Rule, ...] | list[Rule] | None = None) -> list[str]:
    """Failures of one rule's cases, as readable lines (empty: all pass)."""
    return [msg for _, msg in case_results(rule, rules) if msg]


def case_results(rule: Rule, rules: tuple[Rule, ...] | list[Rule] | None = None) -> list[tuple[str, str]]:
    """(case name, failure or "") for every case of a rule, in order, then one entry per match pattern that
    no named case exercises (semgrep's rule coverage: a pattern without a case is a pattern nobody tested).

    A match case may also assert `line` (the finding's line, counted in the case's own text),
    `finding_stage` (the finding's stage) and `wins_over` (rule ids that must not rank above it).
    """
    rules = _with_rule(rule, rules)
    results: list[tuple[str, str]] = []
    used: list[tuple[dict[str, Any], set[int]]] = []
    for i, case in enumerate(rule.cases.get("match", [])):
        name, failure, through = match_case(rule, i, rules)
        results.append((name, failure))
        used.append((case, through))
    results.extend(near_miss_case(rule, i, rules) for i in range(len(rule.cases.get("near_miss", []))))
    results.extend(coverage(rule, used, rules))
    return results


def match_case(rule: Rule, i: int, rules: tuple[Rule, ...] | list[Rule] | None = None) -> tuple[str, str, set[int]]:
    """Match case `i` of a rule: its name, its failure ("" when it passes) and the indexes of the match
    patterns its finding came through."""
    rules = _with_rule(rule, rules)
    case = rule.cases["match"][i]
    name = case_name(case, "match", i)
    report, used = _diagnose_case(rule, case, rules)
    return name, _match_failures(rule, case, name, report), used


def near_miss_case(rule: Rule, i: int, rules: tuple[Rule, ...] | list[Rule] | None = None) -> tuple[str, str]:
    """Near-miss `i` of a rule: its name, and its failure ("" when the rule does not match it)."""
    text = rule.cases["near_miss"][i]
    case = text if isinstance(text, dict) else {"text": text}
    name = case_name(case, "near_miss", i)
    report = diagnose_text(case_text(case), _with_rule(rule, rules))
    bad = any(f.rule.id == rule.id for f in report.findings)
    return name, f"{rule.id}: {name} matched but must not: {str(case['text'])[:120]}" if bad else ""


def coverage(rule: Rule, used: list[tuple[dict[str, Any], set[int]]],
             rules: tuple[Rule, ...] | list[Rule] | None = None) -> list[tuple[str, str]]:
    """A ("match[i] coverage", failure) for each match pattern no named case exercises, given each match case
    and the patterns its finding came through (match_case's third value)."""
    through: dict[int, list[tuple[str, bool]]] = {}
    for i, (case, indexes) in enumerate(used):
        for index in indexes:
            through.setdefault(index, []).append((case_name(case, "match", i), bool(case.get("name"))))
    return _coverage(rule, _with_rule(rule, rules), through)


def _with_rule(rule: Rule, rules: tuple[Rule, ...] | list[Rule] | None) -> tuple[Rule, ...]:
    """The rule set a case runs against: the shipped rules (or `rules`), with this rule in its own place."""
    rules = tuple(rules) if rules is not None else builtin_rules()
    return rules if rule in rules else (*[r for r in rules if r.id != rule.id], rule)


def _diagnose_case(rule: Rule, case: dict[str, Any], rules: tuple[Rule, ...]) -> tuple[Report, set[int]]:
    """The case's report, and the indexes of the rule's match patterns whose hits survived on their line."""
    hits: list[Hit] = []
    report = diagnose(io.BytesIO(case_text(case).encode("utf-8")), "-", rules, on_hit=hits.append)
    used = {next(i for i, p in enumerate(rule.patterns) if p is h.pattern)
            for h in drop_shadowed(hits) if h.rule is rule}
    return report, used if any(f.rule.id == rule.id for f in report.findings) else set()


def _match_failures(rule: Rule, case: dict[str, Any], name: str, report: Report) -> str:
    """What a match case asserts and its report does not show, one line each ("" when it passes)."""
    where = f"{rule.id}: {name}"
    mine = [f for f in report.findings if f.rule.id == rule.id]
    if not mine:
        got = [f.rule.id for f in report.findings]
        return f"{where}: no finding (got {got}) for: {str(case['text'])[:120]}"
    problems: list[str] = []
    finding = mine[0]
    for fact, want in (case.get("facts") or {}).items():
        if fact not in finding.facts:
            problems.append(f"{where}: fact {fact} missing (have {sorted(finding.facts)})")
        elif not close_enough(want, finding.facts[fact]):
            problems.append(f"{where}: fact {fact} = {finding.facts[fact]!r}, want {want!r}")
    for needle in case.get("advice_contains") or []:
        if needle not in finding.advice and needle not in (finding.command or ""):
            problems.append(f"{where}: advice lacks {needle!r}")
    if "line" in case:
        got_line = finding.line - (1 if STAGE_LEAD.get(case.get("stage") or "") else 0)
        if got_line != case["line"]:
            problems.append(f"{where}: finding on line {got_line}, want {case['line']}")
    if "finding_stage" in case and finding.stage != case["finding_stage"]:
        problems.append(f"{where}: finding stage {finding.stage!r}, want {case['finding_stage']!r}")
    order = [f.rule.id for f in report.findings]
    for other in case.get("wins_over") or []:
        if other in order and order.index(other) < order.index(rule.id):
            problems.append(f"{where}: {other} ranks above it, want {rule.id} to win")
    return "\n".join(problems)


def describe(pattern: Pattern) -> str:
    """A pattern as its file spells it, shortened: phrase 'CUDA out of memory', regex '...', series kv_ramp."""
    if pattern.series:
        return f"series {pattern.series}"
    text = pattern.phrase if pattern.phrase is not None else pattern.source or ""
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{'phrase' if pattern.phrase is not None else 'regex'} {text!r}"


def _coverage(rule: Rule, rules: tuple[Rule, ...], through: dict[int, list[tuple[str, bool]]]) -> list[tuple[str, str]]:
    """A failure for each match pattern no named case's finding came through, saying what to add."""
    out = []
    for i, pattern in enumerate(rule.patterns):
        names = through.get(i, [])
        if any(named for _, named in names):
            continue
        where = f"{rule.path}: match[{i}] ({describe(pattern)})"
        taken = [] if names else _taken_by_sibling(rule, i, rules)
        if names:
            fix = f"only unnamed cases exercise it: give one of them a name: {', '.join(n for n, _ in names[:3])}"
        elif taken:
            fix = (f"{', '.join(taken[:3])} match it alone, but a sibling pattern wins on their lines: add a "
                   "named case only this pattern matches, or remove the pattern")
        else:
            fix = "no case hits through it: add a named cases.match entry with a line this pattern matches"
        out.append((f"match[{i}] coverage", f"{where}: {fix}"))
    return out


def _taken_by_sibling(rule: Rule, index: int, rules: tuple[Rule, ...]) -> list[str]:
    """The cases pattern `index` matches on its own although the full rule credits another pattern."""
    alone = replace(rule, patterns=[rule.patterns[index]])
    others = (*(r for r in rules if r.id != rule.id), alone)
    return [f"{case_name(case, 'match', i)} (credited to match[{min(used_full)}])"
            for i, case in enumerate(rule.cases.get("match", []))
            if _diagnose_case(alone, case, others)[1] and (used_full := _diagnose_case(rule, case, rules)[1])]
