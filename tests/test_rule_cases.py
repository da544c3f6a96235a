"""Every shipped rule runs its own inline cases: catalog wordings must match with their facts, near-misses not."""

from __future__ import annotations

import pytest

from diagnoser.analysis.selftest import run_cases
from diagnoser.rules.loader import checked_builtin_rules

RULES = checked_builtin_rules()  # every check a rule pack gets: a run trusts these


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_cases(rule):
    """Its cases pass, and every match pattern is exercised by a named case (selftest's coverage check)."""
    assert run_cases(rule, RULES) == []


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_has_positive_and_near_miss_cases(rule):
    assert rule.cases["match"], rule.id
    assert rule.cases["near_miss"], rule.id


def test_seed_ids_are_present():
    ids = {r.id for r in RULES}
    assert {"weights-oom", "no-cache-blocks", "kv-cache-too-small", "warmup-oom", "preemption"} <= ids
