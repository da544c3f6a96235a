"""A start-up to compare, from a log (its printed budget, effective settings, whether it failed) or from the
planner's prediction for a release (`plan --vllm-version A,B`).

A start's settings are the explicit ones, the values the log printed as resolved, else the release's
defaults (data/releases.yaml); a log that printed no version stands in the newest release of its engine and
marks its defaults assumed.
"""

from __future__ import annotations

from typing import Any

from diagnoser.analysis.advise import Finding
from diagnoser.analysis.pipeline import Report
from diagnoser.analysis.tracker import Context
from diagnoser.compare.model import Figure, Start
from diagnoser.vllm import memory as mem
from diagnoser.vllm import releases as rel
from diagnoser.vllm import sizing

#: the last release with the V0 engine (stands in for a V0 log that printed no version)
LAST_V0 = (0, 10, 2)


def _failure(findings: list[Finding]) -> tuple[bool, str | None, dict[str, Any]]:
    errors = [f for f in findings if f.severity == "error"]
    if not errors:
        return False, None, {}
    return True, errors[0].rule.id, errors[0].facts


def _serving_failure(findings: list[Finding]) -> str:
    """Where the first error happened when it was while serving ('10-20 22:27:44, line 59'); '' otherwise."""
    first = next((f for f in findings if f.severity == "error"), None)
    if first is None or first.stage != "serving":
        return ""
    when = first.facts.get("first_time")
    return f"{when}, line {first.line}" if when else f"line {first.line}"


def _arch_for(model: str | None) -> Any:
    """The model's architecture when the planner knows it (a bundled preset or a config.json); else None."""
    if not model:
        return None
    from diagnoser.vllm.modelspec import load_model

    try:
        return load_model(str(model)).arch
    except Exception:  # noqa: BLE001 - an unknown model only means no estimates, never an error
        return None


def start_from_report(report: Report, gpu_total_gib: float | None = None, gpu_name: str = "") -> Start:
    """A log's start: its printed budget, effective settings and whether it failed."""
    ctx = report.context
    assumed = not ctx.version
    # a fragment without the version banner: the newest release of the engine it shows stands in for the
    # defaults, and nothing is concluded from them
    stand_in = LAST_V0 if ctx.engine == "V0" else rel.latest()
    version = stand_in if assumed else rel.parse_version(ctx.version)
    engine = rel.engine_choice(version, explicit=ctx.engine).engine
    failed, failure, facts = _failure(report.findings)
    b: dict[str, Figure] = {}

    def put(key: str, value: Any, source: str = "log") -> None:
        if value is not None and key not in b:
            b[key] = Figure(float(value) if not isinstance(value, int) else value, source)

    put("gpu_total_gib", ctx.gpu_total_gib)
    if gpu_total_gib:
        put("gpu_total_gib", gpu_total_gib, "estimated")
    put("gpu_memory_utilization", ctx.gpu_memory_utilization
        if ctx.gpu_memory_utilization is not None else None)
    if "gpu_memory_utilization" not in b:
        put("gpu_memory_utilization", rel.default("gpu_memory_utilization", version), "derived")
    put("budget_gib", ctx.requested_gib)
    put("weights_gib", ctx.weights_gib)
    put("activation_peak_gib", ctx.activation_peak_gib)
    put("non_torch_gib", ctx.non_torch_gib)
    put("cuda_graph_gib", ctx.cuda_graph_gib)
    put("kv_cache_gib", ctx.available_kv_cache_gib)
    put("kv_cache_gib", facts.get("available_gib"))
    block = ctx.block_size or mem.BLOCK_SIZE
    put("block_size", int(block), "log" if ctx.block_size else "derived")
    tokens = ctx.kv_cache_tokens or ((ctx.num_gpu_blocks or 0) * block) or facts.get("kv_cache_tokens")
    put("kv_cache_tokens", int(tokens) if tokens else None)
    put("max_model_len", ctx.max_model_len or facts.get("max_model_len"))
    put("request_kv_gib", facts.get("required_gib"))
    put("max_concurrency", ctx.max_concurrency)
    return Start(input=report.path, version=version, engine=engine, failed=failed, failure=failure, budget=b,
                 failed_serving=_serving_failure(report.findings),
                 settings={}, context=ctx, model=ctx.model, gpu_name=ctx.gpu_name or gpu_name,
                 arch=_arch_for(ctx.model), assumed_version=assumed)


def settings_for(s: Start) -> dict[str, dict[str, Any]]:
    """Effective settings: explicit ones, the values the log printed as resolved, else the release defaults.

    The GPU class decides V1's batch defaults; when the log printed the resolved max_num_batched_tokens
    ('Chunked prefill is enabled with ...') and the GPU's name is unknown, the class that gives that value wins
    (an 80 GiB A100 is in the small class from 0.9.0, which the total alone cannot tell).
    """
    ctx = s.context
    explicit = _explicit_settings(ctx) if ctx is not None else {}
    total = s.get("gpu_total_gib") or 0.0
    max_len = int(s.get("max_model_len") or 0)
    if ctx is not None and ctx.args_source == "namespace":
        # a full argparse dump lists defaults too: a value equal to the release default is not a choice
        plain = rel.effective_settings(s.version, engine=s.engine, gpu_gib=total, gpu_name=s.gpu_name,
                                       max_model_len=max_len)
        explicit = {k: v for k, v in explicit.items() if plain.get(k, {}).get("value") != v}
    kw = {"engine": s.engine, "max_model_len": max_len, "explicit": explicit}
    out = rel.effective_settings(s.version, gpu_gib=total, gpu_name=s.gpu_name, **kw)
    printed = ctx.max_num_batched_tokens if ctx is not None else None
    if printed and "max_num_batched_tokens" not in explicit and out["max_num_batched_tokens"]["value"] != printed:
        for gib in (0.0, 80.0, 200.0):
            alt = rel.effective_settings(s.version, gpu_gib=gib, gpu_name="", **kw)
            if alt["max_num_batched_tokens"]["value"] == printed:
                out = alt
                break
        out["max_num_batched_tokens"] = {**out["max_num_batched_tokens"], "value": printed, "source": "log"}
    if s.assumed_version:
        for entry in out.values():
            if entry["source"] == "default":
                entry["source"] = "assumed"
    return out


def _explicit_settings(ctx: Context) -> dict[str, Any]:
    """What the user set, as far as the log shows: the non-default args (V1) or the Namespace fields not None."""
    args = ctx.args
    out: dict[str, Any] = {}
    for key in ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
                "enable_prefix_caching", "kv_cache_memory_bytes"):
        if args.get(key) is not None:
            out[key] = args[key]
    if ctx.enforce_eager:
        out["cudagraph_capture_sizes"] = []
    return out


def start_from_plan(planned: Any, label: str) -> Start:
    """A planned release as a start (`plan --vllm-version A,B`): every figure is the planner's."""
    res: sizing.PlanResult = planned.res
    inp = res.inp
    total = inp.gpu_bytes / mem.GIB
    version = inp.version
    engine = res.engine
    src = "estimated"
    b = {
        "gpu_total_gib": Figure(total, "log"),
        "gpu_memory_utilization": Figure(res.gpu_memory_utilization, "log"),
        "budget_gib": Figure(res.budget_bytes / mem.GIB, "derived"),
        "weights_gib": Figure(res.weights_bytes / mem.GIB, src),
        "activation_peak_gib": Figure(res.activation_bytes / mem.GIB, src),
        "non_torch_gib": Figure(res.non_torch_bytes / mem.GIB, src),
        "cuda_graph_budget_gib": Figure(res.cuda_graph_bytes / mem.GIB if res.graphs_in_budget else 0.0, src),
        "cuda_graph_gib": Figure(res.cuda_graph_bytes / mem.GIB, src),
        "kv_cache_gib": Figure(res.kv_cache_bytes / mem.GIB, src),
        "kv_cache_tokens": Figure(res.kv_cache_tokens, src),
        "block_size": Figure(inp.block_size, "log"),
        "max_model_len": Figure(res.max_model_len, "log"),
        "request_kv_gib": Figure(res.request_kv_bytes / mem.GIB, src),
        "max_concurrency": Figure(res.max_concurrency, src),
    }
    explicit = {"gpu_memory_utilization": inp.gpu_memory_utilization, "max_num_seqs": inp.max_num_seqs,
                "max_num_batched_tokens": inp.max_num_batched_tokens}
    settings = rel.effective_settings(version, engine=engine, gpu_gib=total, gpu_name=inp.gpu_name,
                                      max_model_len=res.max_model_len, explicit=explicit, entry_point=inp.entry)
    if inp.enforce_eager:
        settings["cudagraph_capture_sizes"] = {"value": [], "source": "explicit"}
    return Start(input=label, version=version, engine=engine, failed=not planned.verdict.starts,
                 failure=planned.verdict.stage if not planned.verdict.starts else None, budget=b, settings=settings,
                 model=inp.arch.name, gpu_name=inp.gpu_name, arch=inp.arch)
