"""Fuzzing (hypothesis) the rule sandbox: templates composed of every way an allowed operation can grow a
value (repeats, `+`, `~`, joins, `%`, filters with size arguments, methods, lists of shared references),
nested, always end in text of at most MAX_OUTPUT characters or the sandbox's refusal, within its time bound.

Each example runs with the process's address space capped about 1 GiB above what it uses, so a route that
still builds gigabytes fails the test with MemoryError instead of exhausting the machine.
"""

from __future__ import annotations

import contextlib
import resource

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnoser.rules.sandbox import MAX_OUTPUT, render, template, template_env

ENV = template_env()
ATOMS = ["'A'", "'ab cd'", "('x' * 1000)", "[1, 'a']", "range(100)", "fn.divisors(720)", "ctx", "count",
         "{'k': 'v'}", "10**4"]
COUNTS = ["0", "3", "1000", "100000", "10**6"]


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    n = st.sampled_from(COUNTS)
    return st.one_of(
        st.tuples(inner, n).map(lambda t: f"({t[0]} * {t[1]})"),
        st.tuples(inner, n).map(lambda t: f"([{t[0]}] * {t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]} ~ {t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]} + {t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]}|join({t[1]}))"),
        st.tuples(inner, n).map(lambda t: f"({t[0]}|batch({t[1]})|list)"),
        st.tuples(inner, n).map(lambda t: f"({t[0]}|slice({t[1]})|list)"),
        st.tuples(inner, st.sampled_from(["2", "8", "1000"])).map(lambda t: f"({t[0]}|tojson({t[1]}))"),
        inner.map(lambda e: f"({e}|string)"),
        inner.map(lambda e: f"({e}|list)"),
        inner.map(lambda e: f"({e}|map('string')|list)"),
        st.tuples(inner, n).map(lambda t: f"(('%' ~ {t[1]} ~ 's') % {t[0]})"),
        st.tuples(inner, n).map(lambda t: f"({t[0]}|string).split()"),
        st.tuples(inner, n).map(lambda t: f"(({t[0]}|string)['ljust']({t[1]}))"),
    )


expressions = st.recursive(st.sampled_from(ATOMS), _grow, max_leaves=6)


@contextlib.contextmanager
def _address_space_cap(extra: int = 1 << 30):
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + extra if hard == resource.RLIM_INFINITY else min(hard, used + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@settings(max_examples=150, deadline=15_000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(expr=expressions, loop=st.booleans())
def test_any_composition_is_bounded(expr, loop):
    source = ("{% for i in range(50) %}{{ " + expr + " }}{% endfor %}") if loop else "{{ " + expr + " }}"
    tpl = template(ENV, source)
    with _address_space_cap():
        try:
            out = render(tpl, {"ctx": {"model": "m", "args": {"a": 1}}, "count": 3,
                               "fn": __import__("diagnoser.rules.sandbox", fromlist=["FN"]).FN})
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - refused, or an ordinary error over odd operands (slice(0), 'a' + 1):
            return  # the advice says it could not be computed, as advise does for every exception
    assert len(out) <= MAX_OUTPUT
