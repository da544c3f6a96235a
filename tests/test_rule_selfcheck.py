"""Rules that check themselves: helper names checked at load, named cases, `vllm-doctor rules --test`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser.analysis.selftest import case_results, run_cases
from diagnoser.rules.loader import builtin_rules, checked_builtin_rules, load_rule_file, load_rules
from diagnoser.rules.model import RuleError
from tests.rulepack import demo_rule
from tests.rulepack import write_rule as write

PACK = demo_rule(derive='\n  gib: "mem.GIB / 2"')


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("typo, key, says", [
    ('gib: "mem.GIBB / 2"', "derive.gib", "mem.GIBB is not available to rules (did you mean GIB"),
    ('gib: "fn.no_such_helper(count)"', "derive.gib", "fn.no_such_helper"),
    ('gib: "fn.flags"', "derive.gib", "fn.flags"),  # a module, not a helper
    ('gib: "count | tokenz"', "derive.gib", "unknown filter |tokenz"),
    ('gib: "count is knwon"', "derive.gib", "unknown test `is knwon`"),
])
def test_a_typo_in_a_helper_filter_or_test_is_refused_at_load(tmp_path, typo, key, says):
    path = write(tmp_path, PACK.replace('gib: "mem.GIB / 2"', typo))
    with pytest.raises(RuleError) as err:
        load_rule_file(path)
    assert err.value.key == key and says in str(err.value) and str(path) in str(err.value)


def test_the_same_typo_in_advice_names_the_advice(tmp_path):
    path = write(tmp_path, PACK.replace("count | tokens", "count | tokns"))
    with pytest.raises(RuleError, match=r"advice: unknown filter \|tokns"):
        load_rule_file(path)


def test_every_shipped_rule_passes_every_check_and_reads_the_same_unchecked():
    """A run trusts the shipped rules (reads them without the checks): here they get every check a rule pack
    gets, and the rules a run builds without them are the same, field by field, cases and regexes included."""
    checked = checked_builtin_rules()
    trusted = builtin_rules()
    assert [r.id for r in trusted] == [r.id for r in checked] and len(checked) > 60
    for fast, full in zip(trusted, checked, strict=True):
        assert fast == full, fast.id
        assert dict(fast.cases) == dict(full.cases), fast.id
        assert [p.when_early for p in fast.patterns] == [p.when_early for p in full.patterns], fast.id
        assert [p.regex.pattern for p in fast.patterns if p.source] == \
            [p.regex.pattern for p in full.patterns if p.source], fast.id
        assert [e.pattern.groupindex for e in fast.extractors] == [e.pattern.groupindex for e in full.extractors]


def test_a_shipped_rule_compiles_its_regexes_and_reads_its_cases_on_first_use():
    from diagnoser.rules.loader import builtin_rules_dir, shipped_rule

    rule = shipped_rule(builtin_rules_dir() / "kv-cache-too-small.yaml")
    assert all(p.compiled is None for p in rule.patterns) and all(e.compiled is None for e in rule.extractors)
    assert rule.cases._parsed is None
    assert rule.extractors[0].pattern.groupindex and rule.extractors[0].compiled is not None
    assert rule.cases["match"] and rule.cases["near_miss"] and rule.cases._parsed is not None


def test_a_shipped_rule_parses_its_long_parts_on_first_read_and_the_parts_make_the_whole():
    import copy
    import pickle

    from diagnoser.datafiles import parse_yaml, yaml_load
    from diagnoser.rules.loader import builtin_rules_dir, shipped_rule, split_rule_text

    for path in sorted(builtin_rules_dir().glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        parts = split_rule_text(text)
        now, derive, later = (yaml_load(part) or {} for part in (parts.now, parts.derive, parts.later))
        whole = parse_yaml(text)
        assert parts.cases is not None and parse_yaml(parts.cases) == {"cases": whole.pop("cases")}, path.name
        assert len(now) + len(derive) + len(later) == len(whole) and {**now, **derive, **later} == whole, path.name
    rule = shipped_rule(builtin_rules_dir() / "kv-cache-too-small.yaml")
    assert "advice" not in vars(rule) and "_deferred" in vars(rule)
    twin = pickle.loads(pickle.dumps(rule))
    assert copy.deepcopy(rule) == rule and "advice" in vars(rule) and "_deferred" not in vars(rule)
    assert twin == rule and rule.advice and rule.extractors and rule.fixes
    with pytest.raises(AttributeError):
        rule.no_such_field  # noqa: B018


def test_a_rule_pack_is_checked_and_its_regexes_compiled_at_load(tmp_path):
    rule = load_rule_file(write(tmp_path, PACK))
    assert all(e.compiled is not None for e in rule.extractors) and isinstance(rule.cases, dict)
    assert len(load_rules((tmp_path,))) == len(builtin_rules()) + 1


def test_failures_carry_the_case_name(tmp_path):
    rule = load_rule_file(write(tmp_path, PACK.replace("facts: {count: 3}", "facts: {count: 4}")
                                .replace("the demo engine is fine", "the demo engine exploded loudly")))
    failures = run_cases(rule)
    assert any("demo-rule: three sparks (cases.match[0]): fact count = 3, want 4" in f for f in failures)
    assert any("a quiet engine (cases.near_miss[0]) matched but must not" in f for f in failures)


def test_cases_assert_line_stage_and_which_rule_wins(tmp_path):
    text = PACK.replace("      line: 1\n", "      line: 2\n      finding_stage: loading\n      wins_over: [port-in-use]\n")
    rule = load_rule_file(write(tmp_path, text))
    (result, _near) = case_results(rule)
    assert result[0] == "three sparks (cases.match[0])"
    assert "finding on line 1, want 2" in result[1]
    assert "finding stage 'startup', want 'loading'" in result[1]
    assert "ranks above" not in result[1]  # port-in-use has no finding here: demo-rule wins


def test_rules_test_runs_a_pack_and_sets_the_exit_code(tmp_path):
    write(tmp_path, PACK)
    ok = doctor("rules", "--test", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "ok    demo-rule: three sparks (cases.match[0])" in ok.stdout
    assert "ok    demo-rule: a quiet engine (cases.near_miss[0])" in ok.stdout
    assert ok.stdout.strip().endswith("2 passed, 0 failed")
    write(tmp_path, PACK.replace("facts: {count: 3}", "facts: {count: 5}"))
    bad = doctor("rules", "--test", str(tmp_path / "demo-rule.yaml"))
    assert bad.returncode == 1
    assert "FAIL  demo-rule: three sparks (cases.match[0])" in bad.stdout and "want 5" in bad.stdout
    assert bad.stdout.strip().endswith("1 passed, 1 failed")


def test_rules_test_on_a_broken_pack_is_a_usage_error(tmp_path):
    write(tmp_path, PACK.replace("mem.GIB", "mem.GIBB"))
    res = doctor("rules", "--test", str(tmp_path))
    assert res.returncode == 2 and "derive.gib" in res.stderr


def test_rules_and_explain_honour_extra_rules(tmp_path):
    path = write(tmp_path, PACK)
    listed = doctor("rules", "--rules", str(path))
    assert listed.returncode == 0 and "demo-rule" in listed.stdout
    page = doctor("explain", "demo-rule", "--rules", str(path))
    assert page.returncode == 0 and page.stdout.startswith("demo-rule  (error, stage: startup)")
    assert doctor("explain", "demo-rule").returncode == 2


def test_the_docs_rules_table_is_generated_from_the_rules():
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, str(root / "scripts" / "gen-rules-table"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = (root / "docs" / "rules.md").read_text(encoding="utf-8")
    for rule in builtin_rules():
        assert f"| `{rule.id}` | {rule.severity} |" in page


def test_every_shipped_rule_validates_against_the_published_schema():
    import json

    import jsonschema
    import yaml

    root = Path(__file__).resolve().parent.parent
    schema = json.loads((root / "docs" / "rule.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((root / "rules").glob("*.yaml")):
        errors = [f"{'.'.join(map(str, e.path))}: {e.message}"
                  for e in validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8")))]
        assert errors == [], f"{path.name}: {errors[:3]}"
    bad = yaml.safe_load(PACK.replace("severity: error", "severity: fatal"))
    assert not validator.is_valid(bad)


def test_a_pattern_no_named_case_exercises_fails_naming_file_index_and_fix(tmp_path):
    text = PACK.replace('  - phrase: "the demo engine exploded loudly"\n',
                        '  - phrase: "the demo engine exploded loudly"\n'
                        "  - regex: 'demo engine melted'\n    keywords: [\"demo engine melted\"]\n")
    path = write(tmp_path, text)
    failures = run_cases(load_rule_file(path))
    assert failures == [f"{path}: match[1] (regex 'demo engine melted'): no case hits through it: add a named "
                        "cases.match entry with a line this pattern matches"]
    unnamed = text.replace("  near_miss:\n", '    - text: "the demo engine melted"\n  near_miss:\n')
    failures = run_cases(load_rule_file(write(tmp_path, unnamed)))
    assert len(failures) == 1 and "match[1]" in failures[0] and "give one of them a name:" in failures[0]
    named = unnamed.replace('    - text: "the demo engine melted"', '    - name: melted\n      text: "the demo engine melted"')
    assert run_cases(load_rule_file(write(tmp_path, named))) == []


def test_a_pattern_a_sibling_always_beats_is_reported_with_the_sibling(tmp_path):
    # both patterns match the only case; the first listed wins the line, so the second is never the reason
    text = PACK.replace('  - phrase: "the demo engine exploded loudly"\n',
                        '  - phrase: "the demo engine exploded loudly"\n'
                        "  - regex: 'exploded loudly'\n    keywords: [\"exploded loudly\"]\n")
    path = write(tmp_path, text)
    (failure,) = run_cases(load_rule_file(path))
    assert failure.startswith(f"{path}: match[1] (regex 'exploded loudly'): three sparks (cases.match[0]) "
                              "(credited to match[0]) match it alone, but a sibling pattern wins")
    assert "or remove the pattern" in failure


def test_rules_test_prints_an_unexercised_pattern(tmp_path):
    write(tmp_path, PACK.replace('  - phrase: "the demo engine exploded loudly"\n',
                                 '  - phrase: "the demo engine exploded loudly"\n'
                                 "  - regex: 'demo engine melted'\n    keywords: [\"demo engine melted\"]\n"))
    res = doctor("rules", "--test", str(tmp_path))
    assert res.returncode == 1
    assert "FAIL  demo-rule: match[1] coverage" in res.stdout and "demo-rule.yaml: match[1]" in res.stdout
    assert res.stdout.strip().endswith("2 passed, 1 failed")



@pytest.mark.parametrize("spelling, says", [
    ('gib: "count if count is defined else 0"', "`is defined` is not the house spelling"),
    ('gib: "count if count is not undefined else 0"', "`is undefined` is not the house spelling"),
    ('gib: "ctx.max_model_len|default(0)"', "|default(...) is not the house spelling"),
    ('gib: "ctx.max_model_len | d(0)"', "|d(...) is not the house spelling"),
])
def test_only_is_known_spells_has_a_value(tmp_path, spelling, says):
    path = write(tmp_path, PACK.replace('gib: "mem.GIB / 2"', spelling))
    with pytest.raises(RuleError) as err:
        load_rule_file(path)
    assert str(err.value).startswith(f"{path}: derive.gib: ") and says in str(err.value)
    assert "known" in str(err.value)
