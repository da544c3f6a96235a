"""Rule fields of the wrong type give one RuleError naming the file and the key, never an internal error."""

from __future__ import annotations

import contextlib
import copy

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnoser.rules.checks import parse_rule
from diagnoser.rules.model import RuleError

from .conftest import rule_text

BASE = yaml.safe_load(rule_text("{{ count }} sparks"))
BASE["fixes"] = [{"flag": "--max-model-len", "value": "{{ count }}", "reason": "r"}]
BASE["derive"] = {"double": "count * 2"}
BASE["aggregate"] = {}
WRONG = [5, 1.5, "abc", ["a", "b"], {"x": 1}, True, None, [{"x": [1]}], "", [5]]
PATHS = [("id",), ("title",), ("severity",), ("stage",), ("match",), ("match", 0), ("match", 0, "phrase"),
         ("match", 0, "threshold"), ("match", 0, "keywords"), ("match", 0, "stages"), ("match", 0, "generic"),
         ("match", 0, "when"), ("extract",), ("extract", 0), ("facts",), ("facts", "count"), ("derive",),
         ("derive", "double"), ("when",), ("aggregate",), ("advice",), ("fixes",), ("fixes", 0),
         ("fixes", 0, "flag"), ("fixes", 0, "value"), ("fixes", 0, "when"), ("explanation",), ("references",),
         ("cases",), ("cases", "match"), ("cases", "match", 0), ("cases", "near_miss"), ("fallback",),
         ("catalog",), ("overrides",), ("keep_when",), ("fine_stage",)]


def _set(doc, path, value):
    doc = copy.deepcopy(doc)
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize("path", PATHS, ids=[".".join(map(str, p)) for p in PATHS])
def test_wrong_type_is_a_rule_error(path):
    for value in WRONG:
        try:
            parse_rule(_set(BASE, path, value), "<rule>")
        except RuleError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("<rule>: ")


def test_the_issue_examples_name_the_key():
    cases = {("match", 0, "threshold"): "abc", ("match", 0, "keywords"): 5, ("facts",): ["a", "b"],
             ("derive",): "s"}
    for path, value in cases.items():
        with pytest.raises(RuleError, match=r"<rule>: \S*" + str(path[-1])):
            parse_rule(_set(BASE, path, value), "<rule>")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=2000)
@given(st.sampled_from(PATHS), json_values)
def test_any_value_anywhere_is_loaded_or_a_rule_error(path, value):
    with contextlib.suppress(RuleError):
        parse_rule(_set(BASE, path, value), "<rule>")


CASE_PATHS = [("cases", "match", 0, key) for key in ("name", "text", "facts", "stage", "context", "advice_contains",
                                                       "line", "finding_stage", "wins_over")]
CASE_PATHS += [("cases", "near_miss", 0), ("cases", "near_miss", 0, "text")]


@pytest.mark.parametrize("path", CASE_PATHS, ids=[".".join(map(str, p)) for p in CASE_PATHS])
def test_wrong_typed_case_fields_are_rule_errors_not_crashes_of_rules_test(path):
    """A rule pack's cases run under `rules --test`: `facts: [1]` or `stage: [x]` there crashed it."""
    from diagnoser.analysis.selftest import run_cases

    base = copy.deepcopy(BASE)
    base["cases"]["near_miss"][0] = {"text": base["cases"]["near_miss"][0]["text"]} \
        if isinstance(base["cases"]["near_miss"][0], dict) else {"text": base["cases"]["near_miss"][0]}
    for value in WRONG:
        try:
            rule = parse_rule(_set(base, path, value), "<rule>")
        except RuleError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("<rule>: cases.")
            continue
        assert isinstance(run_cases(rule), list)
