"""Every fixture log diagnoses to its expected primary rule, stage and numbers (fixtures/expected.yaml)."""

from __future__ import annotations

import pytest
import yaml

from diagnoser.analysis.pipeline import diagnose
from diagnoser.analysis.selftest import close_enough

from .conftest import FIXTURES

#: contract fact name -> the Context field that holds the same number
ALIASES = {"available_gib": "available_kv_cache_gib"}
CASES = yaml.safe_load((FIXTURES / "expected.yaml").read_text())


def run(case):
    with open(FIXTURES / case["file"], "rb") as fh:
        return diagnose(fh, case["file"])


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_fixture_primary_rule_and_stage(case):
    report = run(case)
    serious = [f for f in report.findings if f.severity in ("error", "warning")]
    if case["rule"] == "healthy":
        assert serious == [], [f.rule.id for f in serious]
        return
    assert report.findings, "no finding"
    primary = report.findings[0]
    assert primary.rule.id == case["rule"], [f.rule.id for f in report.findings]
    assert primary.stage == case["stage"]


@pytest.mark.parametrize("case", [c for c in CASES if c.get("facts") or c.get("context")],
                         ids=[c["file"] for c in CASES if c.get("facts") or c.get("context")])
def test_fixture_numbers(case):
    report = run(case)
    facts = dict(report.findings[0].facts) if report.findings and case["rule"] != "healthy" else {}
    ctx = report.context.as_dict()
    missing = []
    for name, want in (case.get("facts") or {}).items():
        got = facts.get(name, ctx.get(name))
        if not close_enough(want, got):
            missing.append(f"{name}: want {want!r}, got {got!r}")
    for name, want in (case.get("context") or {}).items():
        got = ctx.get(ALIASES.get(name, name), ctx.get(name, facts.get(name)))
        if not close_enough(want, got):
            missing.append(f"context {name}: want {want!r}, got {got!r}")
    assert missing == []


@pytest.mark.parametrize("case", [c for c in CASES if c.get("root_cause")],
                         ids=[c["file"] for c in CASES if c.get("root_cause")])
def test_fixture_first_finding_shows_the_root_cause_line(case):
    """The primary finding's evidence holds the original exception, not a wrapper that reports it."""
    report = run(case)
    evidence = " ".join(line.text for line in report.findings[0].evidence)
    assert case["root_cause"] in evidence, evidence[:400]


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_fixture_a_dead_server_has_an_error_and_a_serving_one_has_none(case):
    report = run(case)
    errors = [f.rule.id for f in report.findings if f.severity == "error"]
    if case["rule"] == "healthy":
        assert errors == []
    elif report.findings[0].severity == "error":
        assert errors and errors[0] == case["rule"]
