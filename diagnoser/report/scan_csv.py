"""`scan --format csv`: the flat rows of report/rows.py (one per finding, one per clean or bad log).

A text cell that a spreadsheet would take for a formula (it starts with `=`, `+`, `-`, `@`, a tab or a CR, also
after spaces, also in their full-width forms) gets a leading `'`, as OWASP advises: a file name, a model name or a
rule title from someone else never runs `=HYPERLINK(...)` when the CSV is opened. Numbers stay numbers.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any, TextIO

from diagnoser.report.rows import COLUMNS, rows

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(value: Any) -> Any:
    """A cell as written: None empty, a text that a spreadsheet would evaluate quoted with `'`.

    >>> csv_cell("=HYPERLINK(1)"), csv_cell(" +1"), csv_cell("-2.5"), csv_cell(-2.5), csv_cell(None)
    ("'=HYPERLINK(1)", "' +1", "'-2.5", -2.5, '')
    """
    if value is None:
        return ""
    if isinstance(value, str) and value.lstrip(" ").startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for doc in docs:
        for row in rows(doc):
            writer.writerow({k: csv_cell(v) for k, v in row.items()})
