"""`scan --format csv`: the flat rows of report/rows.py (one per finding, one per clean or bad log)."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any, TextIO

from diagnoser.report.rows import COLUMNS, rows


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for doc in docs:
        for row in rows(doc):
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
