"""Run a rule's inline cases: the lines it must match (with their facts) and the near-misses it must not.

The test suite runs every shipped rule through this, and rule authors run it on their own files with
`vllm-doctor rules --test FILE`.
"""

from __future__ import annotations

import math
from typing import Any

from .engine import diagnose_text
from .rules import Rule, builtin_rules

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
    """(case name, failure or "") for every case of a rule, in order.

    A match case may also assert `line` (the finding's line, counted in the case's own text),
    `finding_stage` (the finding's stage) and `wins_over` (rule ids that must not rank above it).
    """
    rules = tuple(rules) if rules is not None else builtin_rules()
    if rule not in rules:
        rules = (*[r for r in rules if r.id != rule.id], rule)
    results: list[tuple[str, str]] = []
    for i, case in enumerate(rule.cases.get("match", [])):
        name = case_name(case, "match", i)
        where = f"{rule.id}: {name}"
        report = diagnose_text(case_text(case), rules)
        mine = [f for f in report.findings if f.rule.id == rule.id]
        if not mine:
            got = [f.rule.id for f in report.findings]
            results.append((name, f"{where}: no finding (got {got}) for: {str(case['text'])[:120]}"))
            continue
        problems: list[str] = []
        facts = mine[0].facts
        for fact, want in (case.get("facts") or {}).items():
            if fact not in facts:
                problems.append(f"{where}: fact {fact} missing (have {sorted(facts)})")
            elif not close_enough(want, facts[fact]):
                problems.append(f"{where}: fact {fact} = {facts[fact]!r}, want {want!r}")
        for needle in case.get("advice_contains") or []:
            if needle not in mine[0].advice and needle not in (mine[0].command or ""):
                problems.append(f"{where}: advice lacks {needle!r}")
        if "line" in case:
            got_line = mine[0].line - (1 if STAGE_LEAD.get(case.get("stage") or "") else 0)
            if got_line != case["line"]:
                problems.append(f"{where}: finding on line {got_line}, want {case['line']}")
        if "finding_stage" in case and mine[0].stage != case["finding_stage"]:
            problems.append(f"{where}: finding stage {mine[0].stage!r}, want {case['finding_stage']!r}")
        order = [f.rule.id for f in report.findings]
        for other in case.get("wins_over") or []:
            if other in order and order.index(other) < order.index(rule.id):
                problems.append(f"{where}: {other} ranks above it, want {rule.id} to win")
        results.append((name, "\n".join(problems)))
    for i, text in enumerate(rule.cases.get("near_miss", [])):
        body = text["text"] if isinstance(text, dict) else text
        case = text if isinstance(text, dict) else {"text": body}
        name = case_name(case, "near_miss", i)
        report = diagnose_text(case_text(case), rules)
        bad = any(f.rule.id == rule.id for f in report.findings)
        results.append((name, f"{rule.id}: {name} matched but must not: {str(body)[:120]}" if bad else ""))
    return results
