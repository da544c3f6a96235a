"""Hostile rule packs (`--rules FILE`): no code runs, no file is read or written, nothing hangs.

Each attack is one that worked before the sandbox: templates and expressions saw the `fn` and `mem` modules
and, through them, everything those modules imported.
"""

from __future__ import annotations

import json
import time

import pytest

from diagnoser.rules.loader import load_rule_file
from diagnoser.rules.model import RuleError

from .conftest import TRIGGER, rule_text

CODE_ATTACKS = {
    "yaml-unsafe-load": "{{ fn.flags.yaml.unsafe_load('!!python/object/apply:os.system [\"touch PWNED\"]') }}",
    "resources-read": "{{ fn.flags.resources.files('diagnoser').joinpath('/etc/hostname').read_text() }}",
    "module-attr": "{{ mem.re.compile('x') }}",
    "getitem-module": "{{ fn['flags'] }}",
    "dunder-globals": "{{ fn.divisors.__globals__['os'].system('touch PWNED') }}",
    "function-attribute": "{{ fn.divisors.anything }}",
    "bare-namespace": "{{ fn | attr('flags') }}",
    "class-walk": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler-globals": "{{ cycler.__init__.__globals__.os.system('touch PWNED') }}",
    "lipsum": "{{ lipsum(1000000) }}",
    "import": "{% import 'os' as os %}{{ os }}",
    "include": "{% include '/etc/passwd' %}",
    "macro-bomb": "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "nested-loops": "{% for i in range(9999) %}{% for j in range(9999) %}x{% endfor %}{% endfor %}",
    "mutate-ctx": "{{ ctx.clear() }}",
    "replace-bomb": "{{ ('a' * 1000).replace('a', 'a' * 100000) }}",
    "center": "{{ 'x' | center(10000000000) }}",
}


@pytest.mark.parametrize("name", sorted(CODE_ATTACKS))
def test_code_attack_is_refused_at_load(name, doctor, rule_file, tmp_path):
    path = rule_file(rule_text(CODE_ATTACKS[name]))
    res = doctor("--rules", str(path), "--exit-zero", stdin=TRIGGER, cwd=tmp_path)
    assert res.returncode == 2, res
    line = res.stderr.strip()
    assert line.count("\n") == 0 and f"{path}: advice:" in line, line
    assert "internal error" not in line
    assert not (tmp_path / "PWNED").exists()
    assert res.stdout == ""


@pytest.mark.parametrize("key", ["derive", "when"])
def test_expressions_are_checked_like_templates(key, rule_file, tmp_path):
    if key == "derive":
        extra = {"derive": "{x: \"fn.flags.yaml.unsafe_load('a')\"}"}
    else:
        extra = {"when": "\"fn.flags.resources.files('diagnoser')\""}
    path = rule_file(rule_text("ok", **extra))
    with pytest.raises(RuleError, match=rf"{key}(\.x)?: fn\.flags is not available to rules"):
        load_rule_file(path)


def test_whitelisted_helpers_still_work(doctor, rule_file, tmp_path):
    advice = "{{ fn.divisors(count * 4) | join(',') }} / {{ mem.GIB // 2**20 }} / {{ '%.1f' | format(1.25) }}"
    path = rule_file(rule_text(advice))
    res = doctor("--rules", str(path), "--format", "json", stdin=TRIGGER, cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "1,2,3,4,6,12 / 1024 / 1.2" in res.stdout


SIZE_ATTACKS = {
    "string-repeat": "{{ 'A' * 10**10 }}",
    "list-repeat": "{{ [1] * 10**9 }}",
    "power": "{{ 10**(10**10) }}",
    "range": "{% for i in range(10**8) %}{% endfor %}",
    "percent-width": "{{ '%999999999d' % 1 }}",
    "format-width": "{{ '%999999999d' | format(1) }}",
    "output": "{% for i in range(9999) %}{{ 'A' * 90000 }}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(SIZE_ATTACKS))
def test_size_attack_is_contained(name, doctor, rule_file, tmp_path):
    """The template is legal, its result is not: the advice says so, the report goes on, within seconds."""
    path = rule_file(rule_text(SIZE_ATTACKS[name]))
    start = time.monotonic()
    res = doctor("--rules", str(path), "--format", "json", stdin=TRIGGER, cwd=tmp_path, timeout=60)
    assert time.monotonic() - start < 30
    assert res.returncode == 1, res.stderr
    assert "Advice could not be computed" in res.stdout
    assert len(res.stdout) < 200_000


def test_alias_bomb_in_keywords_is_refused(doctor, rule_file, tmp_path):
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    text = rule_text("ok").replace('  - phrase: "the demo engine exploded loudly"',
                                   '  - phrase: "the demo engine exploded loudly"\n    keywords: *a9')
    path = rule_file("\n".join(levels) + "\n" + text)  # anchors first: YAML defines them before use
    start = time.monotonic()
    res = doctor("--rules", str(path), stdin=TRIGGER, cwd=tmp_path)
    assert time.monotonic() - start < 20
    assert res.returncode == 2
    assert "alias bomb" in res.stderr and str(path) in res.stderr


CATASTROPHIC = ["(a|a)+$", "(a+)+$", "(\\w+\\s?)+$", "(.*)*x", "(.|\\s)*$"]


@pytest.mark.parametrize("source", CATASTROPHIC)
def test_catastrophic_regex_is_refused_at_load(source, rule_file):
    text = rule_text("ok").replace('  - phrase: "the demo engine exploded loudly"',
                                   f"  - regex: {json.dumps(source)}\n    keywords: [demo]")
    with pytest.raises(RuleError, match=r"match\[0\]\.regex: .*exponential time"):
        load_rule_file(rule_file(text))


def test_slow_regex_the_checker_cannot_see_times_out(doctor, rule_file, tmp_path):
    """regex-module syntax the static check cannot parse: the run-time timeout stops it with exit 2."""
    text = rule_text("ok").replace('  - phrase: "the demo engine exploded loudly"',
                                   "  - regex: '(?:x|x)+\\p{Lu}$'\n    keywords: [xxxx]")
    path = rule_file(text)
    start = time.monotonic()
    res = doctor("--rules", str(path), stdin="xxxx" + "x" * 40 + "!\n", cwd=tmp_path)
    assert time.monotonic() - start < 20
    assert res.returncode == 2
    assert f"{path}: match[0].regex: the regex ran longer than" in res.stderr
