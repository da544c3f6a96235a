"""`--format jsonl`: one JSON object per finding per line, for log pipelines.

Each object is the finding as the JSON contract names it (`rule`, `severity`, `line`, `facts`, `fixes`, ...),
plus `schema_version`, `tool` and `input` (path, lines, bytes) so a line makes sense on its own. A clean log
writes nothing; an input with no vLLM line at all writes one record with a `note` instead.
"""

from __future__ import annotations

import json
from typing import Any

from diagnoser.analysis.contract import report_dict
from diagnoser.analysis.pipeline import Report


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    lines = []
    for r in reports:
        doc = report_dict(r)
        head = {"schema_version": doc["schema_version"], "tool": doc["tool"], "input": doc["input"]}
        if doc.get("notes") and not doc["findings"]:
            lines.append(json.dumps({**head, "note": doc["notes"][0]}, ensure_ascii=False, separators=(",", ":")))
        for fd in doc["findings"]:
            lines.append(json.dumps({**head, **fd}, ensure_ascii=False, default=str, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)
