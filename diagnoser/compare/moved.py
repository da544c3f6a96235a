"""What moved between two starts: every budget figure side by side with its delta, the settings that changed
and why, and the one sentence that names what took the KV cache.
"""

from __future__ import annotations

from typing import Any

from diagnoser.compare.model import BUDGET, Change, Start
from diagnoser.vllm import memory as mem
from diagnoser.vllm import releases as rel

#: a KV change smaller than both of these is not worth reporting
QUIET_GIB = 0.1
QUIET_FRACTION = 0.05
#: the parts of the budget that take memory from the KV cache, and their names in a sentence
COMPONENTS = {"weights_gib": "weights", "activation_peak_gib": "activations", "non_torch_gib": "non-torch memory",
              "cuda_graph_budget_gib": "CUDA graphs"}


def diff(before: Start, after: Start) -> list[Change]:
    """Every figure side by side with its delta, then the settings that changed and why."""
    out = _budget_changes(before, after)
    if before.assumed_version or after.assumed_version:
        out.insert(0, Change("vllm_version", None if before.assumed_version else rel.version_str(before.version),
                             None if after.assumed_version else rel.version_str(after.version), None, "", False))
        return out  # without both releases the defaults prove nothing: only the printed budget is compared
    if before.version != after.version:
        out.insert(0, Change("vllm_version", rel.version_str(before.version), rel.version_str(after.version),
                             None, "", False))
    if before.engine != after.engine:
        out.insert(1, Change("engine", before.engine, after.engine, None, "", False,
                             why(after, "engine", before)))
    _add_setting_changes(out, before, after)
    return out


def _budget_changes(before: Start, after: Start) -> list[Change]:
    """Each budget figure either start has, with its delta when both are numbers."""
    out = []
    for key, _, unit in BUDGET:
        fb, fa = before.budget.get(key), after.budget.get(key)
        if fb is None and fa is None:
            continue
        vb, va = (fb.value if fb else None), (fa.value if fa else None)
        delta = va - vb if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        out.append(Change(key, vb, va, delta, unit, bool((fb and fb.estimated) or (fa and fa.estimated))))
    return out


def _add_setting_changes(out: list[Change], before: Start, after: Start) -> None:
    """The shown settings whose value changed, with why (a utilization already among the figures gets its why)."""
    for name in rel.load().shown:
        if name == "engine":
            continue
        sb, sa = before.settings.get(name), after.settings.get(name)
        if sb is None or sa is None or sb["value"] == sa["value"]:
            continue
        if name == "gpu_memory_utilization" and any(c.name == name for c in out) and \
                before.get(name) != after.get(name):
            next(c for c in out if c.name == name).why = why(after, name, before)
            continue
        delta = sa["value"] - sb["value"] if _is_number(sa["value"]) and _is_number(sb["value"]) else None
        out.append(Change(name, sb["value"], sa["value"], delta, "", False, why(after, name, before)))

def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def why(s: Start, name: str, before: Start | None = None) -> str:
    """Why a setting has its value in start `s`: the user set it, a release changed the default, or the
    engine (or GPU, or length) the default depends on changed."""
    entry = s.settings.get(name, {})
    if entry.get("source") == "explicit":
        return "set explicitly"
    since = entry.get("since")
    if before is not None and before.engine != s.engine and name != "engine":
        return f"the {s.engine} engine's default"
    if before is None or (since and rel.parse_version(since) > before.version):
        return f"new default since vLLM {since}" if since else "default"
    return "default for this GPU and max_model_len"


def gib(x: float) -> str:
    return f"{x:.2f} GiB" if abs(x) < 10 else f"{x:.1f} GiB"


def signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + gib(abs(x))


def moved(before: Start, after: Start) -> list[tuple[str, float]]:
    """Components that took KV memory (positive) in the after start, largest first; a smaller budget counts."""
    out = []
    for key, label in COMPONENTS.items():
        vb, va = before.get(key), after.get(key)
        if vb is not None and va is not None:
            out.append((label, va - vb))
    bb, ba = before.get("budget_gib"), after.get("budget_gib")
    if bb is not None and ba is not None:
        out.append(("the budget", bb - ba))
    return sorted(out, key=lambda t: -t[1])


def quiet(kv_before: float, kv_after: float) -> bool:
    """A KV change too small to report: under QUIET_GIB or under QUIET_FRACTION of the before size."""
    lost = kv_before - kv_after
    return abs(lost) < QUIET_GIB or (kv_before > 0 and abs(lost) / kv_before < QUIET_FRACTION)


def summary(before: Start, after: Start) -> str:
    """The sentence naming what moved: 'CUDA graphs +1.90 GiB and activations +0.80 GiB took 2.70 GiB from the
    KV cache: 35,000 → 12,100 tokens'."""
    kb, ka = before.get("kv_cache_gib"), after.get("kv_cache_gib")
    tb, ta = before.get("kv_cache_tokens"), after.get("kv_cache_tokens")
    tokens = f"{mem.human_tokens(tb)} → {mem.human_tokens(ta)} tokens" if tb is not None and ta is not None else ""
    tail = _summary_tail(before, after)
    if kb is None or ka is None:
        return "The KV cache of one start is unknown (no KV figure in the log and no planner estimate)" + tail + "."
    lost = kb - ka
    if quiet(kb, ka):
        same = f"the KV cache is within {QUIET_FRACTION:.0%} ({gib(kb)} → {gib(ka)}" + \
               (f", {tokens}" if tokens else "") + ")"
        if tail:
            return f"{same[0].upper()}{same[1:]}{tail}."
        return f"Nothing worth reporting: {same}."
    if lost < 0:
        return f"The KV cache grew by {gib(-lost)}" + (f": {tokens}" if tokens else "") + tail + "."
    return f"{_who_took(before, after, lost)} took {gib(lost)} from the KV cache" + \
        (f": {tokens}" if tokens else "") + tail + "."


def _summary_tail(before: Start, after: Start) -> str:
    """What the sentence adds after the KV figures: a failed start, graphs grown outside the budget, a start
    without a version, different models."""
    tail = ""
    if after.failed:
        tail = f"; {after.label} {after.outcome}"
    gb, ga = before.get("cuda_graph_gib"), after.get("cuda_graph_gib")
    if gb is not None and ga is not None and ga - gb >= 0.25 and not after.settings["cuda_graphs_in_budget"]["value"]:
        tail += (f"; CUDA graphs took {signed(ga - gb)} more at capture, outside the budget (that much more must be "
                 "free above --gpu-memory-utilization, or the warmup runs out of memory)")
    for st in (before, after):
        if st.assumed_version:
            tail += f"; {st.label} printed no vLLM version, so release defaults are not compared"
    if before.model and after.model and before.model != after.model:
        tail += f" (different models: {before.model} and {after.model})"
    return tail


def _who_took(before: Start, after: Start, lost: float) -> str:
    """Up to three components that took at least a tenth of the `lost` GiB, with their deltas, as a subject."""
    named = [(label, d) for label, d in moved(before, after) if d >= max(QUIET_GIB, 0.1 * lost)][:3]
    if after.settings["cuda_graphs_in_budget"]["value"] and not before.settings["cuda_graphs_in_budget"]["value"]:
        named = [("CUDA graphs (now counted inside the budget)" if label == "CUDA graphs" else label, d)
                 for label, d in named]
    parts = [f"{label} -{gib(d)}" if label == "the budget" else f"{label} {signed(d)}" for label, d in named]
    who = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 2 else parts) or "Unattributed memory"
    return who[0].upper() + who[1:]
