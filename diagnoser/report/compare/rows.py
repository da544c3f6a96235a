"""The rows every human-readable compare format prints: one per budget figure or setting, a cell per start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from diagnoser.compare import model as cmp
from diagnoser.vllm import releases as rel

#: marks a figure the log did not print (derived by arithmetic, estimated by the planner, or the other log's)
ESTIMATED_MARK = "~"


@dataclass
class Row:
    label: str
    cells: list[str]
    deltas: list[str]   # one per start after the first
    estimated: bool
    section: str        # "budget" or "settings"


def value(v: Any, unit: str, sign: str = "") -> str:
    """One figure as printed in a table; with `sign`, a delta's magnitude after its sign."""
    if v is None:
        return "-"
    if unit == "GiB":
        return f"{sign}{v:.2f} GiB"
    if unit == "tokens":
        return f"{sign}{int(v):,}"
    if unit == "x":
        return f"{sign}{v:.2f}x"
    if isinstance(v, float):
        return f"{sign}{v:g}"
    return f"{sign}{v}"


def delta(d: float | None, unit: str) -> str:
    if d is None:
        return ""
    if abs(d) < (0.005 if unit in ("GiB", "x", "") else 0.5):
        return "="
    return value(round(abs(d)) if unit == "tokens" else abs(d), unit, "+" if d > 0 else "-")


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
    gpus = [_gpu(s) for s in comp.starts]
    out = [Row("vLLM", ["? (not in the log)" if s.assumed_version else rel.version_str(s.version)
                        for s in comp.starts], [""] * (len(comp.starts) - 1), False, "settings"),
           Row("GPU", [cell for cell, _ in gpus], ["changed" if key != gpus[0][1] else "" for _, key in gpus[1:]],
               any(s.budget.get("gpu_total_gib") is not None and s.budget["gpu_total_gib"].estimated
                   for s in comp.starts), "settings")]
    for name in rel.load().shown:
        vals = [s.settings.get(name, {}) for s in comp.starts]
        cells = [rel.describe(name, v.get("value")) + {"explicit": "", "log": " (printed)",
                                                        "assumed": " (assumed)"}.get(v.get("source", ""), " (default)")
                 for v in vals]
        changed = ["changed" if v.get("value") != vals[0].get("value") else "" for v in vals[1:]]
        out.append(Row(name, cells, changed, False, "settings"))
    return out


def _gpu(s: cmp.Start) -> tuple[str, tuple[str, float | None]]:
    """The GPU's cell (its name, from the log or `--gpu`, and its total) and what tells two GPUs apart."""
    fig = s.budget.get("gpu_total_gib")
    total = fig.value if fig is not None else None
    gib = "" if total is None else value(total, "GiB") + (ESTIMATED_MARK if fig is not None and fig.source != "log"
                                                          else "")
    named_by_log = s.context is not None and bool(s.context.gpu_name)
    name = s.gpu_name + ("" if named_by_log or not s.gpu_name else " (--gpu)")
    cell = (f"{name}, {gib}" if gib else name) if name else (f"{gib} (name not in the log)" if gib else "-")
    return cell, (s.gpu_name, None if total is None else round(total, 1))


def tables(comp: cmp.Comparison) -> list[tuple[str, list[Row]]]:
    """The two tables every human-readable format prints, with their titles."""
    return [("Start-up budget, per GPU", budget_rows(comp)), ("Effective settings", settings_rows(comp))]


def gate(p: cmp.Pair) -> tuple[str, str]:
    """The upgrade gate as every format words it: the verdict, then why (ending the sentence)."""
    if p.gate_failed:
        return "FAIL", f": {p.gate_reason}."
    if p.kv_loss is None:
        return "pass", " (KV loss unknown)."
    return "pass", f" ({p.kv_loss:.0%} of the KV tokens lost, within --max-kv-loss {p.max_kv_loss:.0%})."


def columns(comp: cmp.Comparison) -> list[str]:
    """Column headers: the input's file name and whether it started."""
    ended = {(True, True): "started, then failed", (True, False): "failed"}
    return [f"{PurePath(s.label).name} ({ended.get((s.failed, bool(s.failed_serving)), 'started')})"
            for s in comp.starts]


@dataclass
class Item:
    """One line of a pair's section: a setting or flag (set as code), a part to stress, and the rest."""

    code: str
    stress: str
    rest: str


def _fix_item(f: cmp.Fix) -> Item:
    """A fix as every format words it: the flag with its value, what it returns, and why."""
    flag = f.flag if f.value is None else f"{f.flag} {f.value}"
    gives = f"returns ~{f.returns_gib:.2f} GiB" if f.returns_gib else "fits what is left"
    return Item(flag, gives, f". {capital(f.reason)}.")


def pair_sections(p: cmp.Pair) -> list[tuple[str, list[Item]]]:
    """What one pair's report lists after its summary, headed as every format heads it: the settings that
    changed (and why), the fix computed for the after release, the other ways with their cost."""
    out = []
    changed = [c for c in p.changes if c.why]
    if changed:
        out.append(("Settings that changed",
                    [Item(c.name, "", f"{plain(c.before)} → {plain(c.after)} ({c.why})") for c in changed]))
    if p.fixes:
        out.append((f"Fix, computed for vLLM {rel.version_str(p.after.version)}", [_fix_item(f) for f in p.fixes]))
    if p.alternatives:
        out.append(("Other ways, with their cost", [_fix_item(f) for f in p.alternatives]))
    return out


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
