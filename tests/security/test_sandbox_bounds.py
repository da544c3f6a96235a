"""Rule templates and expressions cannot build huge values or run long by routes around the operators.

Each attack passed the load-time check and, before the run-time bounds covered every route, built gigabytes
or hung: a method reached by `x['name']` (`center`, `ljust`, `format` with a width), a filter named by a
string (`map('indent', ...)`), `~` concatenation doubling a string, a join of shared references, filter
arguments (`tojson` indent, `slice`/`batch` counts, `sum` of lists), `%` widths adding up, and a loop that
prints nothing. The run is capped at 1.5 GiB of address space: an unbounded build fails with an empty
MemoryError there, which the assertions tell apart from the sandbox's own refusal.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from .conftest import TRIGGER, rule_text, run_doctor

#: The refusal the sandbox gives (not a MemoryError, a timeout or a function's repr).
REFUSED = re.compile(r"Advice could not be computed from these numbers: .*?(limit|may call|No filter|longer than"
                     r"|not a value|adds numbers|indent must)")

ROUTES = {
    "getitem-method": "{{ ''['center'](10**9) }}",
    "getitem-ljust": "{{ ('x'['ljust'](4 * 10**9))|length }}",
    "getitem-format-width": "{{ ('{0:>3999999999}'['format'](1))|length }}",
    "map-filter-by-name": "{{ ['x\\ny']|map('indent', 10**9)|list|length }}",
    "concat-doubling": "{% set a = 'A' * 100000 %}" + "{% set a = a ~ a %}" * 14 + "{{ a|length }}",
    "namespace-doubling": "{% set ns = namespace(a='A') %}{% for i in range(40) %}{% set ns.a = ns.a ~ ns.a %}"
                          "{% endfor %}{{ ns.a|length }}",
    "shared-references": "{% set a = 'A' * 100000 %}{{ ([a] * 100000)|join|length }}",
    "join-separator": "{{ range(10000)|join('A' * 100000 + 'A' * 100000 + 'A' * 100000 + 'A' * 100000)|length }}",
    "tojson-indent": "{{ [1, 2, 3]|tojson(10**9)|length }}",
    "slice-count": "{{ [1]|slice(10**9)|list|length }}",
    "sum-of-lists": "{{ ([[0] * 10] * 30000)|sum(start=[])|length }}",
    "percent-widths": "{{ (('%1000d' * 1000) % ((1,) * 1000))|length }}",
    "silent-loop": "{% for i in range(10000) %}{% if fn.divisors(999999999989) %}{% endif %}{% endfor %}done",
    "function-address": "{{ fn.divisors }}",
}


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_every_route_to_a_huge_or_slow_value_is_refused(name, rule_file, tmp_path):
    path = rule_file(rule_text(ROUTES[name]))
    start = time.monotonic()
    res = run_doctor("--rules", str(path), "--format", "json", stdin=TRIGGER, cwd=tmp_path, max_gib=1.5)
    assert time.monotonic() - start < 40
    assert res.returncode == 1, res.stderr
    advice = [f["advice"] for f in json.loads(res.stdout)["findings"] if f["rule"] == "demo-attack"]
    assert advice and REFUSED.search(advice[0]), advice
    assert list(tmp_path.iterdir()) == [path]


def test_a_derived_fact_is_bounded_in_size(rule_file, tmp_path):
    """A derive expression's value is kept with every hit: one over the fact limit has no value."""
    derive = "{big: \"('A' * 100000) ~ ('A' * 100000)\", small: \"'A' * 100\"}"
    path = rule_file(rule_text("{{ big is known }} {{ small|length }}", derive=derive))
    res = run_doctor("--rules", str(path), "--format", "json", stdin=TRIGGER, cwd=tmp_path, max_gib=1.5)
    assert res.returncode == 1, res.stderr
    assert "False 100" in res.stdout
    assert len(res.stdout) < 20_000


def test_the_allowed_routes_still_work(rule_file, tmp_path):
    advice = ("{{ ('a ' * 50000).split()|length }} {{ ([1] * 100000)|length }} {{ [1, 2]|tojson(2)|length }} "
              "{{ ['a', 'b']|join('-') }} {{ range(4)|sum }} {{ 'x'.upper() ~ 'y' }} {{ {'a': 1}.get('a') }} "
              "{{ range(5)|batch(2)|list|length }} {{ ['ab']|map('upper')|join }}")
    path = rule_file(rule_text(advice))
    res = run_doctor("--rules", str(path), "--format", "json", stdin=TRIGGER, cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "50000 100000 12 a-b 6 Xy 1 3 AB" in res.stdout
