"""`compare --format json`: the versioned contract (docs/comparing.md)."""

from __future__ import annotations

import json
from typing import Any

from diagnoser.compare import model as cmp


def render(comp: cmp.Comparison, opts: dict[str, Any] | None = None) -> str:
    return json.dumps(comp.as_json(), indent=2, ensure_ascii=False, default=str) + "\n"
