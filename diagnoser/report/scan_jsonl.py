"""`scan --format jsonl`: one JSON document per log per line, for pipelines.

Each line is exactly what `vllm-doctor --format json LOG` prints for that log (the schema_version 1
contract, compact); a log cut from a multi-pod file adds `input.stream` and `input.labels`; a file that
could not be read is a line with `error: {type, message}` instead of findings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    for doc in docs:
        out.write(json.dumps(doc, ensure_ascii=False, default=str, separators=(",", ":")) + "\n")
