"""A Report as the JSON contract (schema_version 1): `Report.to_dict()`, `--format json`, and the document
every machine-readable format (jsonl, sarif, otel, scan's) is built from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diagnoser import __version__

if TYPE_CHECKING:
    from diagnoser.analysis.advise import Finding
    from diagnoser.analysis.pipeline import Report

SCHEMA_VERSION = 1
TOOL = {"name": "vllm-doctor", "version": __version__}

#: how every format's note on an input with no vLLM line begins (no_vllm_note)
NO_VLLM = "no vLLM log found"


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as the contract names it."""
    out: dict[str, Any] = {
        "rule": f.rule.id,
        "title": f.rule.title,
        "severity": f.severity,
        "stage": f.stage,
        "fine_stage": f.fine_stage,
        "line": f.line,
        "end_line": f.end_line,
        "evidence": [{"line": ln.number, "text": ln.raw} for ln in f.evidence],
        "facts": {k: v for k, v in f.facts.items() if not k.startswith("_") and v is not None},
        "advice": f.advice,
        "fixes": f.fixes,
        "command": f.command,
        "python": f.python,
        "command_notes": f.command_notes,
        "ranks": f.ranks,
        "occurrences": f.occurrences,
    }
    return out


def report_dict(r: Report, series: bool = False) -> dict[str, Any]:
    """One input's report: the whole JSON contract (`series`: add the downsampled serving series)."""
    out = {
        "schema_version": SCHEMA_VERSION,
        "tool": dict(TOOL),
        "input": {"path": r.path, "lines": r.lines, "bytes": r.bytes},
        "context": r.context.as_dict(),
        "findings": [finding_dict(f) for f in r.findings],
        "summary": r.counts(),
        "redactions": {"total": sum(r.redactions.values()), "by_kind": dict(r.redactions)},
    }
    if not getattr(r, "vllm_seen", True):
        out["notes"] = [no_vllm_note(r)]
    if series:
        out["series"] = r.series.to_dict() if r.series is not None else None
    return out


def no_vllm_note(r: Report) -> str:
    """What every format says about an input that holds no vLLM line at all (empty, binary, another log)."""
    return f"{NO_VLLM} in {'stdin' if r.path == '-' else r.path}"
