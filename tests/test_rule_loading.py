"""A bad rule file is refused at load time with the file and the key named."""

from __future__ import annotations

import pytest

from diagnoser.rules.loader import load_rule_file, load_rules
from diagnoser.rules.model import RuleError
from tests.rulepack import demo_rule
from tests.rulepack import write_rule as write

GOOD = demo_rule()


def test_good_rule_loads(tmp_path):
    rule = load_rule_file(write(tmp_path, GOOD))
    assert rule.id == "demo-rule" and rule.facts == {"count": "int"}


@pytest.mark.parametrize("mutate, key", [
    (lambda s: s.replace("severity: error", "severity: fatal"), "severity"),
    (lambda s: s + "colour: red\n", "colour"),
    (lambda s: s.replace("(?P<count>\\d+)", "(?P<count>\\d+"), "extract[0]"),
    (lambda s: s.replace("{{ count | tokens }}", "{{ sparkles }}"), "advice"),
    (lambda s: s.split("cases:")[0], "cases"),
    (lambda s: s.replace("id: demo-rule", "id: Demo_Rule"), "id"),
    (lambda s: s.replace("stage: startup", "stage: launch"), "stage"),
    (lambda s: s.replace("  near_miss:\n    - name: a quiet engine\n      text: \"the demo engine is fine\"\n",
                       "  near_miss: []\n"), "cases.near_miss"),
])
def test_bad_rule_names_file_and_key(tmp_path, mutate, key):
    path = write(tmp_path, mutate(GOOD))
    with pytest.raises(RuleError) as err:
        load_rule_file(path)
    assert err.value.key.startswith(key)
    assert str(path) in str(err.value)


def test_invalid_yaml_names_line(tmp_path):
    path = write(tmp_path, "id: demo-rule\ntitle: [unclosed\n")
    with pytest.raises(RuleError) as err:
        load_rule_file(path)
    assert "invalid YAML" in str(err.value) and str(path) in str(err.value)


def test_extra_rule_joins_builtin(tmp_path):
    rules = load_rules((write(tmp_path, GOOD),))
    assert "demo-rule" in {r.id for r in rules} and "kv-cache-too-small" in {r.id for r in rules}


def test_duplicate_id_is_refused(tmp_path):
    dup = GOOD.replace("demo-rule", "kv-cache-too-small")
    with pytest.raises(RuleError, match="already defined"):
        load_rules((write(tmp_path, dup, "kv-cache-too-small.yaml"),))


def test_an_absent_fact_is_none_in_expressions_without_ceremony(tmp_path):
    """A fact the rule can extract but this line did not hold is `none` to `derive:`: passed on as an argument,
    picked by `fn.first_known`, or failing arithmetic to none, with no `x if x is known else none`."""
    from diagnoser.analysis.pipeline import diagnose_text

    text = GOOD.replace("advice:", 'derive:\n  shown: "fn.first_known(count, 0)"\n  doubled: "count * 2"\nadvice:')
    rules = load_rules((write(tmp_path, text),))

    def facts(line: str) -> dict:
        return next(f.facts for f in diagnose_text(line, rules).findings if f.rule.id == "demo-rule")

    with_count = facts("the demo engine exploded loudly with 7 sparks")
    assert (with_count["shown"], with_count["doubled"]) == (7, 14)
    without = facts("the demo engine exploded loudly")
    assert (without["shown"], without["doubled"]) == (0, None) and "count" not in without
