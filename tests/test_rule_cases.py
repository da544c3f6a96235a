"""Every shipped rule runs its own inline cases, each its own test named `rule-id::case-name`: catalog wordings
must match with their facts, near-misses not, and every match pattern must be exercised by a named case."""

from __future__ import annotations

import pytest

from diagnoser.analysis.selftest import coverage, match_case, near_miss_case
from diagnoser.rules.loader import checked_builtin_rules

RULES = checked_builtin_rules()  # every check a rule pack gets: a run trusts these
BY_ID = {r.id: r for r in RULES}


def _label(case: object, kind: str, i: int) -> str:
    name = case.get("name") if isinstance(case, dict) else None
    return name or f"cases.{kind}[{i}]"


MATCH = [pytest.param(r.id, i, id=f"{r.id}::{_label(c, 'match', i)}") for r in RULES
         for i, c in enumerate(r.cases["match"])]
NEAR_MISS = [pytest.param(r.id, i, id=f"{r.id}::{_label(c, 'near_miss', i)}") for r in RULES
             for i, c in enumerate(r.cases["near_miss"])]

#: (rule id, case index) -> the patterns its finding came through, for the coverage test run in this process
_THROUGH: dict[tuple[str, int], set[int]] = {}


def _match(rule_id: str, i: int) -> tuple[str, str, set[int]]:
    name, failure, through = match_case(BY_ID[rule_id], i, RULES)
    _THROUGH[rule_id, i] = through
    return name, failure, through


@pytest.mark.parametrize("rule_id, i", MATCH)
def test_match_case(rule_id, i):
    _name, failure, _ = _match(rule_id, i)
    assert failure == ""


@pytest.mark.parametrize("rule_id, i", NEAR_MISS)
def test_near_miss(rule_id, i):
    _name, failure = near_miss_case(BY_ID[rule_id], i, RULES)
    assert failure == ""


@pytest.mark.parametrize("rule_id", [r.id for r in RULES], ids=[f"{r.id}::coverage" for r in RULES])
def test_every_match_pattern_is_exercised_by_a_named_case(rule_id):
    rule = BY_ID[rule_id]
    used = [(case, _THROUGH[rule_id, i] if (rule_id, i) in _THROUGH else _match(rule_id, i)[2])
            for i, case in enumerate(rule.cases["match"])]
    assert [msg for _, msg in coverage(rule, used, RULES) if msg] == []


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_has_positive_and_near_miss_cases(rule):
    assert rule.cases["match"], rule.id
    assert rule.cases["near_miss"], rule.id


def test_a_failing_case_is_named_by_its_test_id():
    ids = {p.id for p in MATCH} | {p.id for p in NEAR_MISS}
    named = [(r.id, c["name"]) for r in RULES for c in r.cases["match"] if isinstance(c, dict) and c.get("name")]
    assert named and all(f"{rid}::{name}" in ids for rid, name in named)


def test_seed_ids_are_present():
    ids = {r.id for r in RULES}
    assert {"weights-oom", "no-cache-blocks", "kv-cache-too-small", "warmup-oom", "preemption"} <= ids
