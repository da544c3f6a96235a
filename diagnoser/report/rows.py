"""Flat rows: one row per finding (one per clean or unreadable log), the same columns everywhere.

The table shape of a scan, for `--format csv` and the Ray Data engine (Parquet, SQL, dataframes): every
row carries its log's identity (source path, pod/container stream, model, GPU, release) next to the
finding's rule, severity, stage, line and main facts, so rows aggregate without joins. A clean log gives
one row with an empty rule and status `ok`, an unreadable file one row with status `error`: nothing a scan
read is missing from the table. `facts` holds every fact as JSON; the contract's main facts have columns.
"""

from __future__ import annotations

import json
from typing import Any

from diagnoser.analysis.contract import NO_VLLM

#: the JSON contract's main facts (README "JSON contract"), each a column (a number or empty)
FACT_COLUMNS = (
    "max_model_len", "required_gib", "available_gib", "estimated_max_model_len", "gpu_total_gib",
    "gpu_free_gib", "gpu_memory_utilization", "requested_gib", "weights_gib", "kv_cache_tokens",
    "max_concurrency", "num_gpu_blocks", "tried_to_allocate_gib", "max_num_seqs", "tensor_parallel_size",
    "preemptions",
)
COLUMNS = (
    "source", "stream", "status", "rule", "severity", "stage", "fine_stage", "line", "title", "occurrences",
    "model", "gpu", "release", "engine", "errors", "warnings", "infos", "lines", "bytes", "error",
    *FACT_COLUMNS, "facts",
)


def gpu_label(ctx: dict[str, Any]) -> str | None:
    """The GPU a log ran on: its name when printed, else its memory ('79.1 GiB GPU'), else None."""
    if ctx.get("gpu_name"):
        return str(ctx["gpu_name"])
    if ctx.get("gpu_total_gib"):
        return f"{float(ctx['gpu_total_gib']):.1f} GiB GPU"
    return None


def source_of(doc: dict[str, Any]) -> str:
    """The file a document came from (a cut log's path carries `#pod/NAME/CONTAINER`)."""
    path = str(doc["input"]["path"])
    stream = doc["input"].get("stream")
    return path[: -len(stream) - 1] if stream and path.endswith("#" + stream) else path


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def is_not_vllm(doc: dict[str, Any]) -> bool:
    """Whether a report document is of an input with no vLLM line at all (its note says so)."""
    return any(str(n).startswith(NO_VLLM) for n in doc.get("notes") or ())


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The flat rows of one scan document (a report, or an error document)."""
    base: dict[str, Any] = dict.fromkeys(COLUMNS)
    base["source"] = source_of(doc)
    base["stream"] = doc["input"].get("stream")
    if "error" in doc:
        return [{**base, "status": "error", "error": doc["error"]["message"]}]
    if is_not_vllm(doc):
        return [{**base, "status": "not-vllm", "lines": doc["input"].get("lines"), "bytes": doc["input"].get("bytes")}]
    ctx = doc.get("context") or {}
    summary = doc.get("summary") or {}
    base.update({
        "model": ctx.get("model"), "gpu": gpu_label(ctx), "release": ctx.get("version"), "engine": ctx.get("engine"),
        "errors": summary.get("error", 0), "warnings": summary.get("warning", 0), "infos": summary.get("info", 0),
        "lines": doc["input"].get("lines"), "bytes": doc["input"].get("bytes"),
    })
    if not doc["findings"]:
        return [{**base, "status": "ok"}]
    out = []
    for f in doc["findings"]:
        facts = f.get("facts") or {}
        row = {**base, "status": "finding", "rule": f["rule"], "severity": f["severity"], "stage": f["stage"],
               "fine_stage": f["fine_stage"], "line": f["line"], "title": f["title"],
               "occurrences": f["occurrences"],
               "facts": json.dumps(facts, sort_keys=True, ensure_ascii=False, default=str)}
        for key in FACT_COLUMNS:
            row[key] = _number(facts.get(key))
        out.append(row)
    return out
