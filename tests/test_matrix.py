"""The sampled cross-products still try every fixture and every shape or paste transform."""

from __future__ import annotations

import doctest

from . import matrix
from .test_paste import ALL_LOGS, PASTE_PAIRS, TRANSFORMS
from .test_shapes import CASES, SHAPE_PAIRS, SHAPES


def test_doctests() -> None:
    assert doctest.testmod(matrix).failed == 0


def test_sample_meets_every_row_and_every_column() -> None:
    for rows, cols, k in [(range(7), "abcde", 1), (range(3), "abcdefg", 3), (range(40), "ab", 2)]:
        got = matrix.sample(list(rows), list(cols), per_row=k, full=False)
        assert {r for r, _ in got} == set(rows)
        assert {c for _, c in got} == set(cols)
        assert len(got) == len(rows) * min(k, len(cols))


def test_shape_and_paste_matrices_cover_every_fixture_and_every_shape() -> None:
    assert {c["file"] for c, _ in SHAPE_PAIRS} == {c["file"] for c in CASES}
    assert {s for _, s in SHAPE_PAIRS} == set(SHAPES)
    assert {n for n, _ in PASTE_PAIRS} == set(ALL_LOGS)
    assert {t for _, t in PASTE_PAIRS} == set(TRANSFORMS)
