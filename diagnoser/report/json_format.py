"""`--format json`: the versioned contract. One input -> one object; several -> a list of objects."""

from __future__ import annotations

import json
from typing import Any

from diagnoser.analysis.contract import report_dict
from diagnoser.analysis.pipeline import Report


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    docs = [report_dict(r, series=bool((opts or {}).get("series"))) for r in reports]
    return json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, ensure_ascii=False, default=str) + "\n"
