"""The JSON contract (schema_version 1): every machine-readable format is built from these dicts."""

from __future__ import annotations

from typing import Any

from diagnoser import __version__
from diagnoser.analysis.advise import Finding
from diagnoser.analysis.pipeline import Report
from diagnoser.report.rows import NO_VLLM

SCHEMA_VERSION = 1
TOOL = {"name": "vllm-doctor", "version": __version__}


#: Unit suffixes of fact names, shown as units after the value.
UNITS = (("_gib", "GiB"), ("_pct", "%"))


def shown_numbers(f: Finding) -> list[tuple[str, str, Any]]:
    """(label, unit, value) of the facts a person reads: what the log printed (the rule's `facts`) and the
    aggregated counts, named in words ('tried to allocate', 'GiB'). Derived and internal values (util_now,
    next_tp, hits, first_line, ...) stay in the JSON only; an unknown value is left out, never shown as 0."""
    wanted = set(f.rule.facts) | set(f.rule.aggregate)
    out = []
    for key, value in f.facts.items():
        if key not in wanted or key.startswith("_") or value is None:
            continue
        label, unit = key, ""
        for suffix, name in UNITS:
            if key.endswith(suffix):
                label, unit = key[: -len(suffix)], name
        out.append((label.replace("_", " "), unit, value))
    return out


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
