"""The rows every human-readable compare format prints: one per budget figure or setting, a cell per start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ... import compare as cmp
from ... import releases as rel

#: marks a figure the log did not print (derived by arithmetic, estimated by the planner, or the other log's)
ESTIMATED_MARK = "~"


@dataclass
class Row:
    label: str
    cells: list[str]
    deltas: list[str]   # one per start after the first
    estimated: bool
    section: str        # "budget" or "settings"


def value(v: Any, unit: str) -> str:
    """One figure as printed in a table."""
    if v is None:
        return "-"
    if unit == "GiB":
        return f"{v:.2f} GiB"
    if unit == "tokens":
        return f"{int(v):,}"
    if unit == "x":
        return f"{v:.2f}x"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def delta(d: float | None, unit: str) -> str:
    if d is None:
        return ""
    if abs(d) < (0.005 if unit in ("GiB", "x", "") else 0.5):
        return "="
    sign = "+" if d > 0 else "-"
    if unit == "GiB":
        return f"{sign}{abs(d):.2f} GiB"
    if unit == "tokens":
        return f"{sign}{abs(int(round(d))):,}"
    if unit == "x":
        return f"{sign}{abs(d):.2f}x"
    return f"{sign}{abs(d):g}"


def budget_rows(comp: cmp.Comparison) -> list[Row]:
    out = []
    for key, label, unit in cmp.BUDGET:
        figs = [s.budget.get(key) for s in comp.starts]
        if all(f is None or f.value is None for f in figs):
            continue
        cells = [value(f.value if f else None, unit) + (ESTIMATED_MARK if f is not None and f.value is not None
                                                         and f.source != "log" else "") for f in figs]
        first = figs[0].value if figs[0] else None
        deltas = []
        for f in figs[1:]:
            v = f.value if f else None
            deltas.append(delta(v - first, unit) if isinstance(v, (int, float)) and isinstance(first, (int, float))
                          else "")
        out.append(Row(label, cells, deltas, any(f is not None and f.estimated for f in figs), "budget"))
    return out


def settings_rows(comp: cmp.Comparison) -> list[Row]:
    out = [Row("vLLM", ["? (not in the log)" if s.assumed_version else rel.version_str(s.version)
                        for s in comp.starts], [""] * (len(comp.starts) - 1), False, "settings")]
    for name in rel.load().shown:
        vals = [s.settings.get(name, {}) for s in comp.starts]
        cells = [rel.describe(name, v.get("value")) + {"explicit": "", "log": " (printed)",
                                                        "assumed": " (assumed)"}.get(v.get("source", ""), " (default)")
                 for v in vals]
        changed = ["changed" if v.get("value") != vals[0].get("value") else "" for v in vals[1:]]
        out.append(Row(name, cells, changed, False, "settings"))
    return out


def columns(comp: cmp.Comparison) -> list[str]:
    """Column headers: the input's file name and whether it started."""
    return [f"{PurePath(s.input).name} ({'failed' if s.failed else 'started'})" for s in comp.starts]


def fix_parts(f: cmp.Fix) -> tuple[str, str, str]:
    """A fix as every format words it: the flag with its value, what it returns, and why."""
    flag = f.flag if f.value is None else f"{f.flag} {f.value}"
    gives = f"returns ~{f.returns_gib:.2f} GiB" if f.returns_gib else "fits what is left"
    return flag, gives, f.reason


def capital(text: str) -> str:
    """A reason as a sentence; 'vLLM' keeps its spelling."""
    return text if text.startswith("vLLM") else text[:1].upper() + text[1:]


def plain(v: Any) -> str:
    """A setting's value in a sentence: capture lists as 'N sizes up to M', booleans as on/off."""
    if isinstance(v, list):
        return rel.describe("cudagraph_capture_sizes", v)
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
