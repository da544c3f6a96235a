"""How far the planner's default estimates land from what vLLM measured at real start-ups.

    python bench/planner_accuracy.py [--data tests/data/startup_measurements.yaml]

For every (configuration, measured figures) pair it prints the planner's KV estimate (no measured number is
given to it: weights, overhead and KV room are all estimated) next to vLLM's figure, as tokens where vLLM printed
a token count and as GiB otherwise, then the median, p90 and worst relative error. Two published formulas are
measured on the same pairs, side by side:

- checklist: KV = total x utilization - weights - activations, the seed's sizing checklist (weights as the
  planner computes them, one activation rule for every release: the forward pass over max_num_batched_tokens or
  the sampler at 39 bytes per logit; no non-torch memory, no CUDA graphs, no per-release coefficients);
- llm-d: the llm-d-planner capacity planner (KV = catalog GPU memory x utilization - weights - a per-architecture
  activation constant - non-torch 0.15 GiB at one GPU, 0.6 GiB with TP > 1), constants as its v0.19.0 accuracy
  report lists them:
  https://github.com/llm-d-incubation/llm-d-planner/blob/fbd6851/accuracy/results/v0.19.0/accuracy_report.md
  (the GPU size vLLM printed stands in for its catalog size, which favours it slightly).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from diagnoser.vllm import coefficients, kvcache, profiling, releases, sizing
from diagnoser.vllm import memory as mem
from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.modelspec import load_gpu, load_model

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "startup_measurements.yaml"
Version = tuple[int, int, int]


def load(path: Path = DATA) -> dict[str, Any]:
    """The measurement file."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def plan_input(config: dict[str, Any], coefficients: dict[str, float] | None = None) -> sizing.PlanInput:
    """A pair's configuration -> the planner's input (estimates only); `coefficients` replaces the planner's
    fitted coefficients of releases.yaml by name (leave-one-source-out refits)."""
    spec = load_model(config["model"])
    gpu_bytes, gpu_name = 0.0, ""
    if config.get("gpu") or not config.get("gpu_memory_gib"):
        gpu = load_gpu(config.get("gpu", "H100-80GB"))
        gpu_bytes, gpu_name = gpu.memory_bytes, gpu.name
    if config.get("gpu_memory_gib"):
        gpu_bytes = float(config["gpu_memory_gib"]) * mem.GIB
    extra: dict[str, Any] = {}
    if coefficients:
        extra["coefficients"] = dict(coefficients)
    for key in ("entry", "compute_capability", "enforce_eager", "block_size", "enable_chunked_prefill",
                "language_model_only"):
        if config.get(key) is not None:
            extra[key] = float(config[key]) if key == "compute_capability" else config[key]
    return sizing.PlanInput(
        arch=spec.arch, gpu_bytes=gpu_bytes, gpu_name=gpu_name, **extra,
        max_num_seqs=config.get("max_num_seqs"), max_num_batched_tokens=config.get("max_num_batched_tokens"),
        enable_prefix_caching=config.get("enable_prefix_caching"),
        mamba_ssm_cache_dtype=config.get("mamba_ssm_cache_dtype"),
        gpu_memory_utilization=config.get("gpu_memory_utilization"), max_model_len=config.get("max_model_len"),
        dtype=config.get("dtype", "auto"), tensor_parallel_size=int(config.get("tensor_parallel_size", 1)),
        pipeline_parallel_size=int(config.get("pipeline_parallel_size", 1)),
        kv_cache_dtype=config.get("kv_cache_dtype", "auto"), quantization=config.get("quantization"),
        flashinfer=config.get("flashinfer"), custom_all_reduce=config.get("custom_all_reduce"),
        version=releases.parse_version(str(config.get("vllm_version", "latest"))), engine=config.get("engine"),
    )


# --- leave one source out ----------------------------------------------------------------------------------------
#
# Some coefficients of data/releases.yaml were read off these very start-ups (their `source` says so). Scoring a
# start-up with a coefficient fitted on it is not evidence, so each is refitted here without the start-ups of the
# source being scored: the refit is the median, over the other sources' start-ups in the coefficient's domain
# (its release range and model runner), of the value that start-up implies. Start-ups added in this session
# (`new: true`) never fit anything.

def origin(pair: dict[str, Any]) -> str:
    """The source a start-up is left out with: its `origin`, else its repository (or issue, or searched file)."""
    if pair.get("origin"):
        return str(pair["origin"])
    url = str(pair["source"])
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:blob|tree)/", url)
    return m.group(1) if m else url


def _in_domain(version: Version, since: Version, until: Version | None) -> bool:
    return since <= version and (until is None or version < until)


@dataclass(frozen=True)
class Fitted:
    """One fitted entry of releases.yaml: the setting, the releases (and model runner) it covers, and how a
    start-up's measured figures imply its value."""

    setting: str
    since: Version
    until: Version | None
    runner: str | None
    implied: Callable[[dict[str, Any], sizing.PlanResult], float | None]

    def covers(self, pair: dict[str, Any], res: sizing.PlanResult) -> bool:
        """This entry is the one releases.yaml applies to the start-up (its release, engine and model runner)."""
        applied = releases.default_entry(self.setting, res.inp.version, engine=res.engine, runner=res.model_runner)
        return applied.since == self.since and _in_domain(res.inp.version, self.since, self.until) and \
            (self.runner is None or res.model_runner == self.runner)


def _growth_non_torch(pair: dict[str, Any], res: sizing.PlanResult) -> bool:
    """The start-up printed a non-torch figure of the kind the non-torch coefficients model: what start-up adds
    over a snapshot taken once the CUDA context exists. V0 0.6.4.x and V1 0.6.5-0.9.0 print everything on the
    device PyTorch has not allocated (the context and other processes included: settings.non_torch_counts_context),
    another quantity, which informs no coefficient."""
    return "non_torch_gib" in pair["measured"] and \
        not coefficients.non_torch_counts_context(res.inp.version, res.engine)


def _non_torch_single(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    m = pair["measured"]
    return float(m["non_torch_gib"]) if _growth_non_torch(pair, res) and res.inp.tensor_parallel_size == 1 \
        else None


def _non_torch_multi(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    m, inp = pair["measured"], res.inp
    if not _growth_non_torch(pair, res) or inp.tensor_parallel_size <= 1 or inp.custom_all_reduce is False or \
            profiling.NO_P2P_GPUS.search(inp.gpu_name or ""):
        return None
    return float(m["non_torch_gib"]) - float(releases.default("non_torch_single_gib", inp.version))


def _sampler(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    m, inp = pair["measured"], res.inp
    if "activation_peak_gib" not in m or \
            releases.default("v1_profile_logits", inp.version, engine=res.engine) != "sampler":
        return None
    forward = profiling.activation_bytes(inp.arch, res.max_num_batched_tokens, res.max_num_seqs,
                                   inp.tensor_parallel_size, res.model_dtype_bytes, sampler=False)
    peak = float(m["activation_peak_gib"]) * mem.GIB
    if res.graphs_in_budget:
        # the printed peak is vLLM's peak_activation_memory: the transient peak plus the graph estimate
        # (v1/worker/gpu_worker.py 0.29.0-0.31.0 determine_available_memory)
        peak -= res.cuda_graph_bytes
    rows = res.max_num_seqs * inp.arch.vocab_size
    return peak / rows if peak > forward * 1.05 and rows else None


def _graph_base(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    m = pair["measured"]
    if "cuda_graph_gib" not in m or res.inp.enforce_eager:
        return None
    per_layer = float(releases.default("cuda_graph_per_layer_gib", res.inp.version,
                                       engine=releases.engine_for(res.inp.version, res.inp.engine),
                                       runner=res.model_runner))
    return float(m["cuda_graph_gib"]) - per_layer * mem.layers_per_stage(res.inp.arch.layers,
                                                                         res.inp.pipeline_parallel_size)


#: The first release whose Model Runner V2 extrapolates its FULL graphs (settings.cuda_graph_full_graph_bytes).
FULL_GRAPH_EXTRAPOLATION = (0, 29, 0)


def _full_graph_units(res: sizing.PlanResult) -> float:
    """FULL graphs beyond the first x layers of the rank x hidden size: what the release's per-FULL-graph
    coefficient multiplies (coefficients.cuda_graph_bytes); 0 where the release extrapolates no FULL graphs."""
    inp = res.inp
    engine = releases.engine_for(inp.version, inp.engine)
    full = coefficients.full_graph_count(inp.version, engine, res.max_num_seqs, res.max_num_batched_tokens)
    return max(full - 1, 0) * mem.layers_per_stage(inp.arch.layers, inp.pipeline_parallel_size) * inp.arch.hidden_size


def _graph_per_graph_gib(res: sizing.PlanResult) -> float:
    """The planned per-FULL-graph part of the graph estimate under the release's own coefficient, GiB."""
    inp = res.inp
    per = float(releases.default("cuda_graph_full_graph_bytes", inp.version, engine="V1", runner=res.model_runner))
    return per * _full_graph_units(res) / mem.GIB


def _graph_rest_from_kv(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    """What the KV vLLM measured leaves for the whole graph estimate (and a cold compile's workspace) under the
    planned weights, activations and non-torch memory, GiB."""
    m, inp = pair["measured"], res.inp
    if "kv_cache_gib" not in m or inp.enforce_eager or not res.graphs_in_budget:
        return None
    rest = res.budget_bytes - res.weights_bytes - res.activation_bytes - res.non_torch_bytes
    return rest / mem.GIB - float(m["kv_cache_gib"])


def _graph_base_from_kv(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    """What the KV vLLM measured leaves for the graph estimate's fixed part (and a cold compile's workspace):
    _graph_rest_from_kv less the release's per-layer and per-FULL-graph parts."""
    rest = _graph_rest_from_kv(pair, res)
    if rest is None:
        return None
    inp = res.inp
    per_layer = float(releases.default("cuda_graph_per_layer_gib", inp.version, engine="V1", runner=res.model_runner))
    return rest - per_layer * mem.layers_per_stage(inp.arch.layers, inp.pipeline_parallel_size) \
        - _graph_per_graph_gib(res)


def _graph_full_from_kv(pair: dict[str, Any], res: sizing.PlanResult) -> float | None:
    """Bytes per FULL graph beyond the first, layer and hidden unit that the measured KV implies over the
    release's fixed and per-layer parts (settings.cuda_graph_full_graph_bytes); only where the release
    extrapolates FULL graphs."""
    rest = _graph_rest_from_kv(pair, res)
    inp = res.inp
    applied = releases.default_entry("cuda_graph_full_graph_bytes", inp.version, engine="V1", runner=res.model_runner)
    if rest is None or applied.since < FULL_GRAPH_EXTRAPOLATION:
        return None
    units = _full_graph_units(res)
    if not units:
        return None
    where = {"engine": "V1", "runner": res.model_runner}
    fixed = float(releases.default("cuda_graph_base_gib", inp.version, **where)) + float(
        releases.default("cuda_graph_per_layer_gib", inp.version, **where)) * mem.layers_per_stage(
        inp.arch.layers, inp.pipeline_parallel_size)
    return max(rest - fixed, 0.0) * mem.GIB / units


#: Which measured figure implies each kind of fitted setting.
IMPLIED = {"non_torch_single_gib": _non_torch_single, "non_torch_multi_gpu_gib": _non_torch_multi,
           "sampler_bytes_per_logit": _sampler, "cuda_graph_base_gib": _graph_base,
           "cuda_graph_full_graph_bytes": _graph_full_from_kv}
#: Text in a releases.yaml `source` that marks a coefficient fitted on this truth set.
FITTED_MARKS = ("startup_measurements", "llm-d-planner", "start-ups")


def fitted_entries() -> list[Fitted]:
    """The entries of releases.yaml whose value was read off the truth set."""
    out = []
    for setting, implied in IMPLIED.items():
        entries = releases.load().settings[setting]
        for entry in entries:
            if not any(mark in entry.source for mark in FITTED_MARKS):
                continue
            later = [e.since for e in entries if e.since > entry.since and e.runner == entry.runner]
            fn = _graph_base_from_kv if setting == "cuda_graph_base_gib" and entry.runner == "MRV2" else implied
            out.append(Fitted(setting, entry.since, min(later) if later else None, entry.runner, fn))
    return out


def refits(data: dict[str, Any], leave_out: str | None) -> dict[tuple[str, Version, str | None], float]:
    """Each fitted entry's median implied value over the start-ups not from `leave_out` (new ones never fit);
    an entry no other source informs takes the median over every era of its setting."""
    pairs = [p for p in data["kv_pairs"] if not p.get("new") and origin(p) != leave_out]
    plans = [(p, sizing.plan_memory(plan_input(p["config"]))) for p in pairs]
    out = {}
    for fit in fitted_entries():
        values = [v for p, r in plans if fit.covers(p, r) and (v := fit.implied(p, r)) is not None]
        if not values:
            values = [v for p, r in plans if (v := IMPLIED[fit.setting](p, r)) is not None]
        if not values:
            # nothing else informs it: the value of the entry it follows (the release before modelled nothing)
            earlier = [e for e in releases.load().settings[fit.setting] if e.since < fit.since]
            values = [float(max(earlier, key=lambda e: e.since).value)] if earlier else []
        if values:
            out[(fit.setting, fit.since, fit.runner)] = statistics.median(values)
    return out


def coefficients_for(pair: dict[str, Any], fitted: dict[tuple[str, Version, str | None], float]) -> dict[str, float]:
    """The refitted coefficients that apply to one start-up's release and model runner."""
    res = sizing.plan_memory(plan_input(pair["config"]))
    return {fit.setting: fitted[(fit.setting, fit.since, fit.runner)] for fit in fitted_entries()
            if fit.covers(pair, res) and (fit.setting, fit.since, fit.runner) in fitted}


def loso_errors(data: dict[str, Any]) -> list[dict[str, Any]]:
    """kv_errors for the planner with every fitted coefficient refitted without the scored start-up's source."""
    cache: dict[str, dict[tuple[str, Version, str | None], float]] = {}
    out = []
    for pair in data["kv_pairs"]:
        src = origin(pair)
        if src not in cache:
            cache[src] = refits(data, src)
        coef = coefficients_for(pair, cache[src])
        res = sizing.plan_memory(plan_input(pair["config"], coef))
        out.append(_row(pair, {"planner": res.kv_cache_bytes}, res))
    return out


def rel(estimate: float, measured: float) -> float:
    """Relative error of an estimate."""
    return (estimate - measured) / measured if measured else float("inf")


#: llm-d-planner's activation constants (GiB) by architecture family, and its non-torch constants.
LLMD_ACTIVATION_GIB = {"llama": 4.8, "mistral": 4.8, "qwen": 5.6, "gemma": 5.5, "phi": 5.5, "mixtral": 8.0,
                       "moe": 8.0, "deepseek": 8.0, "gpt-oss": 8.0}
LLMD_NON_TORCH_GIB = (0.15, 0.6)


def llmd_activation_gib(res: sizing.PlanResult) -> float:
    """llm-d-planner's per-architecture activation constant for a planned model."""
    name = res.inp.arch.name.lower()
    if res.inp.arch.is_moe:
        return 8.0 if "mixtral" in name or "qwen3" in name or "gpt-oss" in name or "deepseek" in name else 8.0
    for key, value in LLMD_ACTIVATION_GIB.items():
        if key in name:
            return value
    return 5.5


def seed_activation(arch: ArchSpec, batched: int, seqs: int, tp: int, act_bytes: float) -> float:
    """The seed's activation rule, frozen: a forward pass of batched tokens x (3 x intermediate / TP + 4 x
    hidden) (MoE: the routed experts' share), or the sampler at 39 bytes per logit, whichever is larger."""
    h = arch.hidden_size
    if arch.is_moe:
        moe_i = arch.moe_intermediate_size or arch.intermediate_size
        per_token = arch.experts_per_token * (3 * moe_i / tp + h) + 4 * h
        if arch.shared_expert_intermediate_size or arch.num_shared_experts:
            per_token += 3 * (arch.shared_expert_intermediate_size or arch.num_shared_experts * moe_i) / tp
    else:
        per_token = 3 * arch.intermediate_size / tp + 4 * h
    return max(batched * per_token * act_bytes, seqs * arch.vocab_size * 39.0)


def formulas(res: sizing.PlanResult) -> dict[str, float]:
    """KV bytes by each formula for one plan: the planner's, the checklist's and llm-d-planner's."""
    inp = res.inp
    budget = inp.gpu_bytes * res.gpu_memory_utilization
    # the seed's checklist: one activation rule for every release (forward pass or a 39-byte-per-logit sampler)
    checklist_act = seed_activation(inp.arch, res.max_num_batched_tokens, res.max_num_seqs,
                                    inp.tensor_parallel_size, res.model_dtype_bytes)
    checklist = budget - res.weights_bytes - checklist_act
    non_torch = LLMD_NON_TORCH_GIB[1 if inp.tensor_parallel_size * inp.pipeline_parallel_size > 1 else 0]
    llmd = budget - res.weights_bytes - (llmd_activation_gib(res) + non_torch) * mem.GIB
    return {"planner": res.kv_cache_bytes, "checklist": checklist, "llm-d": llmd}


def _row(pair: dict[str, Any], estimates: dict[str, float], res: sizing.PlanResult) -> dict[str, Any]:
    """One pair's row: each estimate (KV bytes) against vLLM's figure, as tokens where vLLM printed a count."""
    measured = pair["measured"]
    row: dict[str, Any] = {"id": pair["id"], "new": bool(pair.get("new")), "estimates": {}, "errors": {}}
    for name, kv_bytes in estimates.items():
        if "kv_cache_tokens" in measured and name == "planner":
            # the planner's count as the release prints it (from 0.22: max concurrency x max_model_len)
            fixed = sizing.with_changes(res.inp, kv_cache_bytes=kv_bytes)
            est: float = float(sizing.plan_memory(fixed).kv_cache_tokens)
            row["unit"], row["measured"] = "tokens", float(measured["kv_cache_tokens"])
        elif "kv_cache_tokens" in measured:
            est = float(kvcache.kv_cache_tokens(kv_bytes, res.kv_bytes_per_token, res.inp.block_size))
            row["unit"], row["measured"] = "tokens", float(measured["kv_cache_tokens"])
        else:
            est = kv_bytes / mem.GIB
            row["unit"], row["measured"] = "GiB", float(measured["kv_cache_gib"])
        row["estimates"][name] = est
        row["errors"][name] = rel(est, row["measured"])
    return row


def kv_errors(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per KV pair: id, unit ('tokens' or 'GiB'), measured value, and each formula's estimate and error."""
    out = []
    for pair in data["kv_pairs"]:
        res = sizing.plan_memory(plan_input(pair["config"]))
        out.append(_row(pair, formulas(res), res))
    return out


def weight_errors(data: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(id, estimated GiB, measured GiB, relative error) wherever weights were measured."""
    out = []
    for group in ("kv_pairs", "request_pairs", "weight_pairs"):
        for pair in data.get(group, []):
            w = pair["measured"].get("weights_gib")
            if w is None:
                continue
            res = sizing.plan_memory(plan_input({"gpu": "H100-80GB", **pair["config"]}))
            est = res.weights_bytes / mem.GIB
            out.append((pair["id"], est, float(w), rel(est, float(w))))
    return out


def request_errors(data: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(id, estimated GiB, measured GiB, relative error) of one request's KV need."""
    out = []
    for pair in data.get("request_pairs", []):
        res = sizing.plan_memory(plan_input({"gpu": "H100-80GB", **pair["config"]}))
        est = res.request_kv_bytes / mem.GIB
        m = float(pair["measured"]["request_kv_gib"])
        out.append((pair["id"], est, m, rel(est, m)))
    return out


def token_errors(data: dict[str, Any]) -> list[tuple[str, float, float, float, float]]:
    """(id, estimated tokens, printed tokens, relative error, error of the attention-only count) given vLLM's
    own KV memory: the cache layout alone. The attention-only count (KV memory / attention bytes per token, what
    a planner without the state pages, groups and release formula promises) is shown beside it."""
    out = []
    for pair in data.get("token_pairs", []):
        m = pair["measured"]
        inp = sizing.with_changes(plan_input(pair["config"]), kv_cache_bytes=float(m["kv_cache_gib"]) * mem.GIB)
        res = sizing.plan_memory(inp)
        printed = float(m["kv_cache_tokens"])
        naive = kvcache.kv_cache_tokens(res.kv_cache_bytes, res.kv_bytes_per_token)
        out.append((pair["id"], float(res.kv_cache_tokens), printed, rel(res.kv_cache_tokens, printed),
                    rel(naive, printed)))
    return out


def block_errors(data: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(id, planned block, vLLM's block) of the unified attention block of Mamba hybrids."""
    return [(pair["id"], sizing.plan_memory(plan_input(pair["config"])).block_size,
             int(pair["measured"]["block_size"])) for pair in data.get("block_pairs", [])]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, linear between order statistics."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(errors: list[float]) -> tuple[float, float, float]:
    """(median, p90, worst) absolute relative error."""
    absolute = [abs(e) for e in errors]
    return statistics.median(absolute), percentile(absolute, 0.9), max(absolute)


def kv_summary(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float, float]]:
    """Median, p90 and worst KV error of every formula."""
    return {name: summary([r["errors"][name] for r in rows]) for name in rows[0]["errors"]} if rows else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    data = load(args.data)
    rows = kv_errors(data)
    names = list(rows[0]["errors"]) if rows else []
    width = max([44] + [len(r["id"]) + 1 for r in rows])
    print(f"{'pair':{width}s} {'unit':>6s} {'measured':>11s} " + " ".join(f"{n:>18s}" for n in names))
    for r in rows:
        fmt = (lambda v: f"{v:,.0f}") if r["unit"] == "tokens" else (lambda v: f"{v:.2f}")
        cells = " ".join(f"{fmt(r['estimates'][n]):>10s} {r['errors'][n]:>+7.1%}" for n in names)
        print(f"{r['id']:{width}s} {r['unit']:>6s} {fmt(r['measured']):>11s} {cells}")
    for name, (med, p90, worst) in kv_summary(rows).items():
        print(f"KV cache, {name:9s} over {len(rows)} pairs: median error {med:.1%}, p90 {p90:.1%}, worst {worst:.1%}")
    for label, subset in (("pairs the coefficients were read off", [r for r in rows if not r["new"]]),
                          ("pairs added in issue 26", [r for r in rows if r["new"]])):
        if subset:
            med, p90, worst = summary([r["errors"]["planner"] for r in subset])
            print(f"KV cache, planner   in sample over the {len(subset)} {label}: median error {med:.1%}, "
                  f"p90 {p90:.1%}, worst {worst:.1%}")
    loso = loso_errors(data)
    for label, subset in (("every pair", loso), ("pairs added in issue 26 (never fitted on)",
                                                 [r for r in loso if r["new"]])):
        if subset:
            med, p90, worst = summary([r["errors"]["planner"] for r in subset])
            print(f"KV cache, planner   leave-one-source-out over {len(subset)} {label}: median error {med:.1%}, "
                  f"p90 {p90:.1%}, worst {worst:.1%}")
    for r in loso:
        if r["new"] or abs(r["errors"]["planner"]) > 0.15:
            print(f"  out of sample {r['id']:{width - 16}s} {r['errors']['planner']:>+7.1%}")
    # the release coefficients of 0.17+ were read off the llm-d-planner sweep: the other pairs are out of sample
    held = [r for r, p in zip(rows, data["kv_pairs"], strict=True) if "llm-d-planner" not in p["source"]]
    if held:
        med, p90, worst = summary([r["errors"]["planner"] for r in held])
        print(f"KV cache, planner   over the {len(held)} pairs outside the llm-d sweep: median error {med:.1%}, "
              f"p90 {p90:.1%}, worst {worst:.1%}")
    # full-budget start-ups after 0.19 (CUDA graphs inside the budget, Model Runner V2 for dense models from 0.25)
    late = [r for r, p in zip(rows, data["kv_pairs"], strict=True)
            if releases.parse_version(str(p["config"].get("vllm_version", "latest"))) >= (0, 20, 0)]
    if late:
        for name in names:
            med, p90, worst = summary([r["errors"][name] for r in late])
            print(f"KV cache, {name:9s} over the {len(late)} pairs after 0.19: median error {med:.1%}, "
                  f"p90 {p90:.1%}, worst {worst:.1%}")
    print()
    wrows = weight_errors(data)
    for pid, est, measured, err in wrows:
        print(f"{pid:42s} {est:>10.2f} GiB {measured:>8.2f} GiB {err:>+8.1%}")
    med, p90, worst = summary([r[3] for r in wrows])
    print(f"Weights over {len(wrows)} pairs: median error {med:.1%}, p90 {p90:.1%}, worst {worst:.1%}\n")
    trows = token_errors(data)
    for pid, est, measured, err, naive in trows:
        print(f"{pid:42s} {est:>10,.0f} tok {measured:>10,.0f} tok {err:>+8.1%}  attention-only {naive:>+7.1%}"
              "  (tokens from vLLM's KV memory)")
    if trows:
        med, _, worst = summary([r[3] for r in trows])
        nmed, _, nworst = summary([r[4] for r in trows])
        print(f"Tokens from the printed KV memory over {len(trows)} hybrid pairs: median error {med:.1%}, worst "
              f"{worst:.1%} (attention-only count: median {nmed:.1%}, worst {nworst:.1%})\n")
    for pid, est, measured in block_errors(data):
        print(f"{pid:42s} {est:>10,} tok {measured:>10,} tok {'exact' if est == measured else 'differs':>8s}"
              "  (Mamba hybrid: the unified attention block)")
    for pid, est, measured, err in request_errors(data):
        print(f"{pid:42s} {est:>10.2f} GiB {measured:>8.2f} GiB {err:>+8.1%}  (one request's KV need)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
