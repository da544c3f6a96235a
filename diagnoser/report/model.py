"""What the formats share of a finding: the numbers a person reads (`shown_numbers`), and the JSON contract
(analysis/contract.py: `report_dict`, `finding_dict`), which every machine-readable format is built from."""

from __future__ import annotations

from typing import Any

from diagnoser.analysis.advise import Finding
from diagnoser.analysis.contract import SCHEMA_VERSION, TOOL, finding_dict, no_vllm_note, report_dict

__all__ = ["SCHEMA_VERSION", "TOOL", "UNITS", "finding_dict", "no_vllm_note", "report_dict", "shown_numbers"]


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
