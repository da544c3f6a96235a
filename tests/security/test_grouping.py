"""advise._group: the indexed grouping gives exactly the groups of the plain scan it replaced (which was
quadratic in the number of distinct exceptions), on arbitrary hits."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from diagnoser.analysis.advise import _group
from diagnoser.ingest.line import Line


def _reference(hits):
    """The original algorithm, kept as the oracle."""
    def merged(group):
        facts = {}
        for h in sorted(group, key=lambda h: (h.line.rank if h.line.rank is not None else -1, h.line.number)):
            for k, v in h.facts.items():
                facts.setdefault(k, v)
        return facts

    def other_rank(group, hit):
        ranks = {h.line.rank for h in group}
        return hit.line.rank is not None and None not in ranks and hit.line.rank not in ranks

    groups = []
    for hit in hits:
        for group in groups:
            if group[0].rule.id != hit.rule.id:
                continue
            m = merged(group)
            if hit.rule.aggregate or all(m[k] == hit.facts[k] for k in m.keys() & hit.facts.keys()) \
                    or other_rank(group, hit):
                group.append(hit)
                break
        else:
            groups.append([hit])
    return groups


RULES = [SimpleNamespace(id="a", aggregate={}), SimpleNamespace(id="b", aggregate={}),
         SimpleNamespace(id="agg", aggregate={"n": "count"})]

hit_st = st.builds(
    lambda rule, facts, rank, number: SimpleNamespace(rule=rule, facts=facts,
                                                      line=Line(number=number, text="x", raw="x", rank=rank)),
    st.sampled_from(RULES),
    st.dictionaries(st.sampled_from(["x", "y", "z"]), st.one_of(st.integers(0, 2), st.lists(st.integers(0, 1),
                                                                                             max_size=2)),
                    max_size=3),
    st.one_of(st.none(), st.integers(0, 3)),
    st.integers(1, 6),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(hit_st, max_size=25))
def test_indexed_grouping_equals_the_scan(hits):
    ids = {id(h): i for i, h in enumerate(hits)}
    got = [[ids[id(h)] for h in g] for g in _group(hits)]
    want = [[ids[id(h)] for h in g] for g in _reference(hits)]
    assert got == want


def test_many_distinct_exceptions_each_its_own_group():
    rule = SimpleNamespace(id="unrecognized-failure", aggregate={})
    hits = [SimpleNamespace(rule=rule, facts={"exception": f"E{i}", "message": f"m{i % 7}"},
                            line=Line(number=i, text="x", raw="x", rank=0 if i % 2 else None))
            for i in range(20_000)]
    groups = _group(hits)
    assert len(groups) == 20_000


def _calls(fn, *args) -> int:
    """Python and C function calls made by fn(*args): a count of work that does not depend on the machine."""
    import sys

    count = 0

    def tally(_frame, event, _arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(tally)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count


def _distinct(n: int):
    rule = SimpleNamespace(id="unrecognized-failure", aggregate={})
    return [SimpleNamespace(rule=rule, facts={"exception": f"E{i}", "message": f"message {i}"},
                            line=Line(number=i, text="x", raw="x", rank=i % 4 if i % 3 else None))
            for i in range(n)]


def test_grouping_work_grows_linearly_with_distinct_exceptions():
    # issue 16 item 11: the scan made 2,000 distinct exceptions cost 4x what 1,000 did; the index about 2x
    small, large = _calls(_group, _distinct(1000)), _calls(_group, _distinct(4000))
    assert large < 4 * small * 1.25, (small, large)
    assert _calls(_reference, _distinct(1000)) > 20 * small  # the measure tells quadratic from linear
