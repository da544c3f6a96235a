"""Compare start-ups across releases: each start's budget, what moved, and the flags that get the old KV back.

A start is one log (healthy or failed) or one planned release. Its budget holds the figures vLLM printed;
what a release or a failed start did not print is derived from the printed ones (the activation peak is
what the budget, weights and KV cache leave) or taken from the planner's estimate for that release, and
marked estimated. The diff and the fix are arithmetic on two budgets plus the release defaults
(data/releases.yaml); rendering lives in report/compare/.

This module pairs completed starts and gates on the pair; the parts are model.py (what a comparison is),
starts.py, budget.py, moved.py and fix.py.
"""

from __future__ import annotations

from typing import Any

from diagnoser.analysis.advise import build_command
from diagnoser.analysis.pipeline import Report
from diagnoser.compare.budget import complete
from diagnoser.compare.fix import fixes_for
from diagnoser.compare.model import Comparison, Pair, Start
from diagnoser.compare.moved import diff, summary
from diagnoser.compare.starts import start_from_plan, start_from_report
from diagnoser.errors import DoctorError


def _gate(before: Start, after: Start, max_kv_loss: float) -> tuple[bool, str | None, float | None]:
    tb, ta = before.get("kv_cache_tokens"), after.get("kv_cache_tokens")
    loss = None
    if tb and ta is not None and tb > 0:
        loss = max(0.0, 1 - ta / tb)
    if after.failed:
        return True, f"{after.label} {after.outcome}", loss
    if loss is not None and loss > max_kv_loss:
        return True, f"{after.label} lost {loss:.0%} of the KV tokens (more than --max-kv-loss {max_kv_loss:.0%})", loss
    return False, None, loss


def pair(before: Start, after: Start, max_kv_loss: float = 0.2) -> Pair:
    """Compare two completed starts."""
    changes = diff(before, after)
    fixes, alts = fixes_for(before, after, max_kv_loss)
    command = None
    if fixes and after.context is not None:
        command = build_command(after.context, [{"flag": f.flag, "value": f.value} for f in fixes])[0]
    failed, reason, loss = _gate(before, after, max_kv_loss)
    return Pair(before, after, changes, summary(before, after), fixes, alts, command, loss, failed, reason,
                max_kv_loss)


def compare_reports(reports: list[Report], max_kv_loss: float = 0.2, gpu_total_gib: float | None = None,
                    gpu_name: str = "") -> Comparison:
    """Each log against the first."""
    if len(reports) < 2:
        raise DoctorError("compare needs two logs or more: BEFORE AFTER [MORE...]")
    starts = [start_from_report(r, gpu_total_gib, gpu_name) for r in reports]
    printed = next((s for s in starts if s.budget.get("gpu_total_gib") and s.budget["gpu_total_gib"].source == "log"),
                   None)
    for s in starts:
        complete(s, printed)
    first = starts[0]
    return Comparison(starts, [pair(first, s, max_kv_loss) for s in starts[1:]])


def compare_plans(planned: list[Any], max_kv_loss: float = 0.2) -> Comparison:
    """Planned releases side by side, each against the first."""
    starts = [start_from_plan(p, f"vLLM {p.data['vllm_version']}") for p in planned]
    return Comparison(starts, [pair(starts[0], s, max_kv_loss) for s in starts[1:]])
