"""Filling the figures a start did not print: derived from the printed ones first (the activation peak is
what the budget, weights, graphs and KV cache leave), then the planner's estimate for that release, each
marked with where it came from (model.Figure.source).
"""

from __future__ import annotations

from diagnoser.analysis.tracker import Context
from diagnoser.compare.model import BUDGET, Figure, Start
from diagnoser.compare.starts import settings_for
from diagnoser.vllm import memory as mem
from diagnoser.vllm import profiling, sizing


def plan_input(s: Start) -> sizing.PlanInput | None:
    """The planner's input for a start: its model, GPU and settings (None without a known model or GPU total)."""
    total = s.get("gpu_total_gib")
    if s.arch is None or not total:
        return None
    ctx = s.context
    fixed = _fixed_kv_bytes(ctx)
    seqs = s.settings["max_num_seqs"]["value"]
    batched = s.settings["max_num_batched_tokens"]["value"]
    return sizing.PlanInput(
        arch=s.arch, gpu_bytes=total * mem.GIB, gpu_name=s.gpu_name,
        gpu_memory_utilization=s.get("gpu_memory_utilization"),
        max_model_len=int(s.get("max_model_len") or 0) or None,
        kv_cache_dtype=str((ctx.kv_cache_dtype if ctx else None) or "auto"),
        dtype=str((ctx.dtype if ctx else None) or "auto"),
        quantization=(ctx.quantization if ctx and str(ctx.quantization) != "None" else None),
        tensor_parallel_size=int((ctx.tensor_parallel_size if ctx else None) or 1),
        pipeline_parallel_size=int((ctx.pipeline_parallel_size if ctx else None) or 1),
        max_num_seqs=int(seqs), max_num_batched_tokens=int(batched),
        enforce_eager=bool(ctx.enforce_eager) if ctx else False, version=s.version, engine=s.engine,
        kv_cache_bytes=fixed, kv_cache_fixed=fixed is not None)


def _fixed_kv_bytes(ctx: Context | None) -> float | None:
    """--kv-cache-memory-bytes as the start's args print it (an integer of bytes), else None."""
    value = ctx.args.get("kv_cache_memory_bytes") if ctx is not None else None
    text = str(value).strip() if value is not None else ""
    return float(text) if text.isdigit() and int(text) > 0 else None


def complete(s: Start, peer: Start | None = None) -> None:
    """Fill the figures a start did not print: derived from printed ones first, then the planner's estimate."""
    b = s.budget
    if "gpu_total_gib" not in b and peer is not None and peer.budget.get("gpu_total_gib") and \
            peer.budget["gpu_total_gib"].source == "log":
        b["gpu_total_gib"] = Figure(peer.get("gpu_total_gib"), "other log")
    if not s.settings:
        s.settings = settings_for(s)
    total, util = s.get("gpu_total_gib"), s.get("gpu_memory_utilization")
    if total and util:
        b.setdefault("budget_gib", Figure(total * util, "derived"))
    inp = plan_input(s)
    res = sizing.plan_memory(inp) if inp is not None else None
    _graph_budget(s, res)
    bpt = _kv_bytes_per_token(s, res, peer)
    _kv_size_or_tokens(s, bpt)
    max_len = s.get("max_model_len")
    _request_kv(s, res, bpt)
    if "weights_gib" not in b and res is not None:
        b["weights_gib"] = Figure(res.weights_bytes / mem.GIB, "estimated")
    _split_overhead(s, res)
    if "max_concurrency" not in b and s.get("kv_cache_tokens") is not None and max_len:
        b["max_concurrency"] = Figure(s.get("kv_cache_tokens") / max_len, "derived")
    s.budget = {k: b[k] for k, _, _ in BUDGET if k in b}


def _graph_budget(s: Start, res: sizing.PlanResult | None) -> None:
    """The CUDA graphs' share inside the budget: none before the release that counts them there; else the
    utilization vLLM printed without them, the memory they took at capture, or the planner's estimate."""
    b = s.budget
    if not s.settings["cuda_graphs_in_budget"]["value"]:
        b["cuda_graph_budget_gib"] = Figure(0.0, "derived")
        return
    total, util = s.get("gpu_total_gib"), s.get("gpu_memory_utilization")
    ctx = s.context
    if ctx is not None and ctx.utilization_without_graphs is not None and total and util:
        b["cuda_graph_budget_gib"] = Figure(max(0.0, util - ctx.utilization_without_graphs) * total, "derived")
    elif s.get("cuda_graph_gib") is not None:
        b["cuda_graph_budget_gib"] = Figure(s.get("cuda_graph_gib"), "derived")
    elif res is not None:
        b["cuda_graph_budget_gib"] = Figure(res.cuda_graph_bytes / mem.GIB, "estimated")


def _kv_bytes_per_token(s: Start, res: sizing.PlanResult | None, peer: Start | None) -> float | None:
    """Bytes per KV token: the start's printed pairs first, the planner, then the other start (same model and
    dtype)."""
    return _bytes_per_token(s) or (res.kv_bytes_per_token if res is not None else None) \
        or (_bytes_per_token(peer) if peer is not None and peer.model == s.model else None)


def _request_kv(s: Start, res: sizing.PlanResult | None, bpt: float | None) -> None:
    """The KV cache one request of max_model_len needs, when the log did not print it."""
    max_len = s.get("max_model_len")
    if "request_kv_gib" not in s.budget and max_len and bpt:
        need = res.request_kv_bytes if res is not None else bpt * max_len
        s.budget["request_kv_gib"] = Figure(need / mem.GIB, "derived" if res is None else "estimated")


def _kv_size_or_tokens(s: Start, bpt: float | None) -> None:
    """The KV cache's size from its tokens, or its tokens (whole blocks) from its size, at `bpt` bytes a token."""
    b = s.budget
    kv, tokens = s.get("kv_cache_gib"), s.get("kv_cache_tokens")
    if kv is None and tokens is not None and bpt:
        b["kv_cache_gib"] = Figure(tokens * bpt / mem.GIB, "derived")
    elif tokens is None and kv is not None and bpt:
        block = int(s.get("block_size") or mem.BLOCK_SIZE)
        b["kv_cache_tokens"] = Figure(int(max(0.0, kv) * mem.GIB // bpt) // block * block, "derived")

def _bytes_per_token(s: Start | None) -> float | None:
    if s is None:
        return None
    kv, tokens = s.budget.get("kv_cache_gib"), s.budget.get("kv_cache_tokens")
    if kv and tokens and kv.source == "log" and tokens.source == "log" and tokens.value:
        return kv.value * mem.GIB / tokens.value
    need, max_len = s.get("request_kv_gib"), s.get("max_model_len")
    if need and max_len:
        return need * mem.GIB / max_len
    return None


def _split_overhead(s: Start, res: sizing.PlanResult | None) -> None:
    """Activations and non-torch memory: printed, or what the budget leaves after weights, graphs and KV."""
    b = s.budget
    if "activation_peak_gib" in b and "non_torch_gib" in b:
        return
    budget, weights, kv = s.get("budget_gib"), s.get("weights_gib"), s.get("kv_cache_gib")
    graphs = s.get("cuda_graph_budget_gib") or 0.0
    tp = int((s.context.tensor_parallel_size if s.context else None) or 1)
    non_torch = b["non_torch_gib"].value if "non_torch_gib" in b else (
        res.non_torch_bytes / mem.GIB if res is not None else profiling.non_torch_bytes(tp, 1, s.gpu_name) / mem.GIB)
    if budget is not None and weights is not None and kv is not None:
        rest = budget - weights - kv - graphs
        if "activation_peak_gib" in b:
            b["non_torch_gib"] = Figure(max(0.0, rest - b["activation_peak_gib"].value), "derived")
            return
        b.setdefault("non_torch_gib", Figure(min(non_torch, max(0.0, rest)), "estimated"))
        b["activation_peak_gib"] = Figure(max(0.0, rest - b["non_torch_gib"].value), "estimated")
        return
    if res is not None:
        b.setdefault("non_torch_gib", Figure(non_torch, "estimated"))
        b.setdefault("activation_peak_gib", Figure(res.activation_bytes / mem.GIB, "estimated"))
