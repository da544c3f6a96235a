"""Cross-products of test inputs, sampled so the suite stays short.

A sample keeps every row and every column: row ``i`` meets columns ``i*k .. i*k+k-1`` (wrapping round), so
each fixture is tried in ``k`` shapes and, with at least as many rows as columns over ``k``, each shape on
some fixture; consecutive rows meet different columns. ``VLLM_DOCTOR_FULL_MATRIX=1`` runs every pair (CI does).

>>> [(r, c) for r, c in sample(["a", "b", "c"], ["x", "y"], per_row=1, full=False)]
[('a', 'x'), ('b', 'y'), ('c', 'x')]
>>> len(sample(["a", "b"], ["x", "y", "z"], per_row=1, full=True))
6
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

R = TypeVar("R")
C = TypeVar("C")

FULL = os.environ.get("VLLM_DOCTOR_FULL_MATRIX") == "1"


def sample(rows: Sequence[R], cols: Sequence[C], per_row: int = 2, full: bool = FULL) -> list[tuple[R, C]]:
    """Every pair when ``full``; else ``per_row`` columns for each row, every column met at least once."""
    if full:
        return [(r, c) for r in rows for c in cols]
    n = len(cols)
    k = min(per_row, n)
    return [(r, cols[(i * k + j) % n]) for i, r in enumerate(rows) for j in range(k)]
