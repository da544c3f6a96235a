"""Compare start-ups across releases: each start's budget, what moved, and the flags that get the old KV back.

A start is one log (healthy or failed) or one planned release. Its budget holds the figures vLLM printed;
what a release or a failed start did not print is derived from the printed ones (the activation peak is
what the budget, weights and KV cache leave) or taken from the planner's estimate for that release, and
marked estimated. The diff and the fix are arithmetic on two budgets plus the release defaults
(data/releases.yaml); rendering lives in report/compare_*.py.

Budget figures use GiB names (`weights_gib`, like the log context), token counts and a utilization
fraction; the JSON contract is in docs/compare.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from diagnoser.analysis.advise import Finding, build_command
from diagnoser.analysis.pipeline import Report
from diagnoser.analysis.tracker import Context
from diagnoser.errors import DoctorError
from diagnoser.vllm import memory as mem
from diagnoser.vllm import profiling, sizing, weights
from diagnoser.vllm import releases as rel

SCHEMA_VERSION = 1
#: a KV change smaller than both of these is not worth reporting
QUIET_GIB = 0.1
QUIET_FRACTION = 0.05
#: the highest --gpu-memory-utilization a fix proposes
UTILIZATION_CEILING = 0.98
#: the last release with the V0 engine (stands in for a V0 log that printed no version)
LAST_V0 = (0, 10, 2)

#: (key, label, unit) in display order
BUDGET = (
    ("gpu_total_gib", "GPU memory", "GiB"),
    ("gpu_memory_utilization", "gpu_memory_utilization", ""),
    ("budget_gib", "budget (GPU x utilization)", "GiB"),
    ("weights_gib", "weights", "GiB"),
    ("activation_peak_gib", "activation peak", "GiB"),
    ("non_torch_gib", "non-torch memory", "GiB"),
    ("cuda_graph_budget_gib", "CUDA graphs, inside the budget", "GiB"),
    ("cuda_graph_gib", "CUDA graphs, taken at capture", "GiB"),
    ("kv_cache_gib", "KV cache", "GiB"),
    ("kv_cache_tokens", "KV cache tokens", "tokens"),
    ("block_size", "block size", "tokens"),
    ("max_model_len", "max_model_len", "tokens"),
    ("request_kv_gib", "KV for one max_model_len request", "GiB"),
    ("max_concurrency", "concurrency at max_model_len", "x"),
)
LABELS = {k: label for k, label, _ in BUDGET}
UNITS = {k: unit for k, _, unit in BUDGET}
#: the parts of the budget that take memory from the KV cache, and their names in a sentence
COMPONENTS = {"weights_gib": "weights", "activation_peak_gib": "activations", "non_torch_gib": "non-torch memory",
              "cuda_graph_budget_gib": "CUDA graphs"}


@dataclass
class Figure:
    """One budget figure and where it came from: 'log', 'derived' (arithmetic on printed figures),
    'estimated' (the planner) or 'other log' (the same GPU as the other start)."""

    value: float | None
    source: str = "log"

    @property
    def estimated(self) -> bool:
        return self.source in ("estimated", "other log")


@dataclass
class Start:
    """One start-up: from a log, or planned for a release."""

    input: str
    version: rel.Version
    engine: str
    failed: bool
    failure: str | None
    budget: dict[str, Figure]
    settings: dict[str, dict[str, Any]]
    context: Context | None = None
    model: str | None = None
    gpu_name: str = ""
    arch: Any = None
    #: the log printed no version: `version` is a stand-in and its defaults are not evidence
    assumed_version: bool = False

    @property
    def label(self) -> str:
        """The input as sentences and headers name it ('-' is stdin)."""
        return "stdin" if self.input == "-" else self.input

    def get(self, key: str) -> float | None:
        fig = self.budget.get(key)
        return None if fig is None else fig.value

    def as_json(self) -> dict[str, Any]:
        ctx = self.context.as_dict() if self.context is not None else {}
        ctx.pop("args", None)
        return {
            "input": self.input, "context": ctx,
            "budget": {k: _rounded(f.value) for k, f in self.budget.items()},
            "estimated": sorted(k for k, f in self.budget.items() if f.estimated and f.value is not None),
            "derived": sorted(k for k, f in self.budget.items() if f.source == "derived" and f.value is not None),
            "settings": self.settings, "failed": self.failed, "failure": self.failure,
            "vllm_version": None if self.assumed_version else rel.version_str(self.version), "engine": self.engine,
        }


@dataclass
class Change:
    name: str
    before: Any
    after: Any
    delta: float | None
    unit: str
    estimated: bool
    why: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = {"name": self.name, "before": _rounded(self.before), "after": _rounded(self.after),
               "delta": _rounded(self.delta), "unit": self.unit, "estimated": self.estimated}
        if self.why:
            out["why"] = self.why
        return out


@dataclass
class Fix:
    flag: str
    value: str | None
    returns_gib: float
    reason: str
    env: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "returns_gib": round(self.returns_gib, 2),
                "reason": self.reason}


@dataclass
class Comparison:
    """Each start against the first: changes, the sentence, fixes, the corrected command."""

    starts: list[Start]
    pairs: list[Pair] = field(default_factory=list)

    @property
    def primary(self) -> Pair:
        return self.pairs[-1]

    def as_json(self) -> dict[str, Any]:
        last = self.primary
        out = {
            "schema_version": SCHEMA_VERSION,
            "logs": [s.as_json() for s in self.starts],
            "changes": [c.as_json() for c in last.changes],
            "summary": last.summary,
            "fixes": [f.as_json() for f in last.fixes],
            "command": last.command,
            "alternatives": [f.as_json() for f in last.alternatives],
            "kv_tokens_lost_fraction": _rounded(last.kv_loss),
            "gate": {"failed": last.gate_failed, "reason": last.gate_reason},
        }
        if len(self.pairs) > 1:
            out["series"] = [p.as_json() for p in self.pairs]
        return out


@dataclass
class Pair:
    before: Start
    after: Start
    changes: list[Change]
    summary: str
    fixes: list[Fix]
    alternatives: list[Fix]
    command: str | None
    kv_loss: float | None
    gate_failed: bool
    gate_reason: str | None
    max_kv_loss: float = 0.2

    def as_json(self) -> dict[str, Any]:
        return {"before": self.before.input, "after": self.after.input,
                "changes": [c.as_json() for c in self.changes], "summary": self.summary,
                "fixes": [f.as_json() for f in self.fixes], "command": self.command,
                "alternatives": [f.as_json() for f in self.alternatives],
                "kv_tokens_lost_fraction": _rounded(self.kv_loss), "gate": {"failed": self.gate_failed,
                                                                            "reason": self.gate_reason}}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    return value


# --- a start from a log ---------------------------------------------------------------------------------------

def _failure(findings: list[Finding]) -> tuple[bool, str | None, dict[str, Any]]:
    errors = [f for f in findings if f.severity == "error"]
    if not errors:
        return False, None, {}
    return True, errors[0].rule.id, errors[0].facts


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
    engine = rel.engine_for(version, ctx.engine)
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
                 settings={}, context=ctx, model=ctx.model, gpu_name=ctx.gpu_name or gpu_name,
                 arch=_arch_for(ctx.model), assumed_version=assumed)


def _settings_for(s: Start) -> dict[str, dict[str, Any]]:
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


# --- filling what a start did not print -------------------------------------------------------------------------

def _plan_input(s: Start) -> sizing.PlanInput | None:
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
        s.settings = _settings_for(s)
    total, util = s.get("gpu_total_gib"), s.get("gpu_memory_utilization")
    if total and util:
        b.setdefault("budget_gib", Figure(total * util, "derived"))
    inp = _plan_input(s)
    res = sizing.plan_memory(inp) if inp is not None else None
    in_budget = bool(s.settings["cuda_graphs_in_budget"]["value"])
    ctx = s.context
    if in_budget:
        if ctx is not None and ctx.utilization_without_graphs is not None and total and util:
            b["cuda_graph_budget_gib"] = Figure(max(0.0, util - ctx.utilization_without_graphs) * total, "derived")
        elif s.get("cuda_graph_gib") is not None:
            b["cuda_graph_budget_gib"] = Figure(s.get("cuda_graph_gib"), "derived")
        elif res is not None:
            b["cuda_graph_budget_gib"] = Figure(res.cuda_graph_bytes / mem.GIB, "estimated")
    else:
        b["cuda_graph_budget_gib"] = Figure(0.0, "derived")
    # bytes per KV token: printed pairs first, the planner, then the other start (same model and dtype)
    bpt = _bytes_per_token(s) or (res.kv_bytes_per_token if res is not None else None) \
        or (_bytes_per_token(peer) if peer is not None and peer.model == s.model else None)
    kv, tokens = s.get("kv_cache_gib"), s.get("kv_cache_tokens")
    if kv is None and tokens is not None and bpt:
        b["kv_cache_gib"] = Figure(tokens * bpt / mem.GIB, "derived")
    elif tokens is None and kv is not None and bpt:
        block = int(s.get("block_size") or mem.BLOCK_SIZE)
        b["kv_cache_tokens"] = Figure(int(max(0.0, kv) * mem.GIB // bpt) // block * block, "derived")
    max_len = s.get("max_model_len")
    if "request_kv_gib" not in b and max_len and bpt:
        need = res.request_kv_bytes if res is not None else bpt * max_len
        b["request_kv_gib"] = Figure(need / mem.GIB, "derived" if res is None else "estimated")
    if "weights_gib" not in b and res is not None:
        b["weights_gib"] = Figure(res.weights_bytes / mem.GIB, "estimated")
    _split_overhead(s, res)
    if "max_concurrency" not in b and s.get("kv_cache_tokens") is not None and max_len:
        b["max_concurrency"] = Figure(s.get("kv_cache_tokens") / max_len, "derived")
    s.budget = {k: b[k] for k, _, _ in BUDGET if k in b}


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


# --- the diff -------------------------------------------------------------------------------------------------

def diff(before: Start, after: Start) -> list[Change]:
    """Every figure side by side with its delta, then the settings that changed and why."""
    out = []
    for key, _, unit in BUDGET:
        fb, fa = before.budget.get(key), after.budget.get(key)
        if fb is None and fa is None:
            continue
        vb, va = (fb.value if fb else None), (fa.value if fa else None)
        delta = va - vb if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        out.append(Change(key, vb, va, delta, unit, bool((fb and fb.estimated) or (fa and fa.estimated))))
    if before.assumed_version or after.assumed_version:
        out.insert(0, Change("vllm_version", None if before.assumed_version else rel.version_str(before.version),
                             None if after.assumed_version else rel.version_str(after.version), None, "", False))
        return out  # without both releases the defaults prove nothing: only the printed budget is compared
    if before.version != after.version:
        out.insert(0, Change("vllm_version", rel.version_str(before.version), rel.version_str(after.version),
                             None, "", False))
    if before.engine != after.engine:
        out.insert(1, Change("engine", before.engine, after.engine, None, "", False,
                             _why(after, "engine", before)))
    for name in rel.load().shown:
        if name == "engine":
            continue
        sb, sa = before.settings.get(name), after.settings.get(name)
        if sb is None or sa is None or sb["value"] == sa["value"]:
            continue
        if name == "gpu_memory_utilization" and any(c.name == name for c in out) and \
                before.get(name) != after.get(name):
            next(c for c in out if c.name == name).why = _why(after, name, before)
            continue
        delta = sa["value"] - sb["value"] if _is_number(sa["value"]) and _is_number(sb["value"]) else None
        out.append(Change(name, sb["value"], sa["value"], delta, "", False, _why(after, name, before)))
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _why(s: Start, name: str, before: Start | None = None) -> str:
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


def _gib(x: float) -> str:
    return f"{x:.2f} GiB" if abs(x) < 10 else f"{x:.1f} GiB"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + _gib(abs(x))


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
    tail = ""
    if after.failed:
        tail = f"; {after.label} failed to start ({after.failure})"
    gb, ga = before.get("cuda_graph_gib"), after.get("cuda_graph_gib")
    if gb is not None and ga is not None and ga - gb >= 0.25 and not after.settings["cuda_graphs_in_budget"]["value"]:
        tail += (f"; CUDA graphs took {_signed(ga - gb)} more at capture, outside the budget (that much more must be "
                 "free above --gpu-memory-utilization, or the warmup runs out of memory)")
    for st in (before, after):
        if st.assumed_version:
            tail += f"; {st.label} printed no vLLM version, so release defaults are not compared"
    if before.model and after.model and before.model != after.model:
        tail += f" (different models: {before.model} and {after.model})"
    if kb is None or ka is None:
        return "The KV cache of one start is unknown (no KV figure in the log and no planner estimate)" + tail + "."
    lost = kb - ka
    if quiet(kb, ka):
        same = f"the KV cache is within {QUIET_FRACTION:.0%} ({_gib(kb)} → {_gib(ka)}" + \
               (f", {tokens}" if tokens else "") + ")"
        if tail:
            return f"{same[0].upper()}{same[1:]}{tail}."
        return f"Nothing worth reporting: {same}."
    if lost < 0:
        return f"The KV cache grew by {_gib(-lost)}" + (f": {tokens}" if tokens else "") + tail + "."
    named = [(label, d) for label, d in moved(before, after) if d >= max(QUIET_GIB, 0.1 * lost)][:3]
    if after.settings["cuda_graphs_in_budget"]["value"] and not before.settings["cuda_graphs_in_budget"]["value"]:
        named = [("CUDA graphs (now counted inside the budget)" if label == "CUDA graphs" else label, d)
                 for label, d in named]
    parts = [f"{label} -{_gib(d)}" if label == "the budget" else f"{label} {_signed(d)}" for label, d in named]
    who = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 2 else parts) or "Unattributed memory"
    who = who[0].upper() + who[1:]
    return f"{who} took {_gib(lost)} from the KV cache" + (f": {tokens}" if tokens else "") + tail + "."


# --- the fix --------------------------------------------------------------------------------------------------

def _activation_return(after: Start, seqs: int | None, batched: int | None) -> float | None:
    """GiB the activation peak drops by with these batch settings on the after release (planner arithmetic)."""
    inp = _plan_input(after)
    if inp is None:
        return None
    base = profiling.activation_bytes(after.arch, inp.max_num_batched_tokens, inp.max_num_seqs,
                                inp.tensor_parallel_size, weights.resolve_dtype_bytes(after.arch, inp.dtype))
    new = profiling.activation_bytes(after.arch, batched or inp.max_num_batched_tokens, seqs or inp.max_num_seqs,
                               inp.tensor_parallel_size, weights.resolve_dtype_bytes(after.arch, inp.dtype))
    return max(0.0, (base - new) / mem.GIB)


def fixes_for(before: Start, after: Start, max_kv_loss: float) -> tuple[list[Fix], list[Fix]]:
    """The flags that restore the before start's KV budget on the after release (in the command), and
    alternatives (not in it)."""
    kb, ka = before.get("kv_cache_gib"), after.get("kv_cache_gib")
    if kb is None or ka is None:
        return [], []
    lost = kb - ka
    if (lost <= 0 or quiet(kb, ka)) and not after.failed:
        return [], []
    known = not (before.assumed_version or after.assumed_version)
    fixes = _default_fixes(before, after, known)
    util_fix, new_util = _utilization_fix(before, after, known, lost)
    fixes += util_fix + _capture_size_fix(before, after, known)
    alts = _alternatives(after, known, kb, lost)
    fixes = _top_up(fixes, after, kb * (1 - max_kv_loss) - (ka + sum(f.returns_gib for f in fixes)), new_util)
    return fixes + _length_fix(after, ka + sum(f.returns_gib for f in fixes)), alts


def _default_fixes(before: Start, after: Start, known: bool) -> list[Fix]:
    """--max-num-seqs / --max-num-batched-tokens back to the before release's defaults, when a new default
    (not the user) raised them."""
    sb, sa = before.settings, after.settings
    act_delta = max(0.0, (after.get("activation_peak_gib") or 0.0) - (before.get("activation_peak_gib") or 0.0))
    seqs_b, seqs_a = int(sb["max_num_seqs"]["value"]), int(sa["max_num_seqs"]["value"])
    bt_b, bt_a = int(sb["max_num_batched_tokens"]["value"]), int(sa["max_num_batched_tokens"]["value"])
    seqs_fix = known and seqs_a > seqs_b and sa["max_num_seqs"]["source"] == "default"
    bt_fix = known and bt_a > bt_b and sa["max_num_batched_tokens"]["source"] == "default" and \
        bool(sa["enable_chunked_prefill"]["value"])
    r_seqs = _activation_return(after, seqs_b, None) if seqs_fix else None
    r_both = _activation_return(after, seqs_b if seqs_fix else None, bt_b if bt_fix else None)
    fixes: list[Fix] = []
    if seqs_fix:
        returns = r_seqs if r_seqs is not None else act_delta
        why = f"vLLM {rel.version_str(after.version)} runs up to {seqs_a} sequences at once " \
              f"({_why(after, 'max_num_seqs', before)}) and sizes its profiling run and sampler warmup for " \
              f"them; {seqs_b} is what {before.label} ran"
        fixes.append(Fix("--max-num-seqs", str(seqs_b), returns, why))
    if bt_fix:
        returns = (r_both - (r_seqs or 0.0)) if r_both is not None else (0.0 if seqs_fix else act_delta)
        fixes.append(Fix("--max-num-batched-tokens", str(bt_b), max(0.0, returns),
                         f"the token budget per step rose {bt_b} → {bt_a} "
                         f"({_why(after, 'max_num_batched_tokens', before)}); the profiling forward pass runs "
                         "that many tokens"))
    return fixes


def _utilization_fix(before: Start, after: Start, known: bool, lost: float) -> tuple[list[Fix], float]:
    """--gpu-memory-utilization raised by the share CUDA graphs now take inside the budget, or back to the
    before start's share; with the utilization the command then has."""
    sb, sa = before.settings, after.settings
    total = after.get("gpu_total_gib") or 0.0
    util_a = after.get("gpu_memory_utilization") or 0.0
    util_b = before.get("gpu_memory_utilization") or 0.0
    graphs_now = after.get("cuda_graph_budget_gib") or 0.0
    graphs_moved = known and sa["cuda_graphs_in_budget"]["value"] and not sb["cuda_graphs_in_budget"]["value"]
    if graphs_moved and graphs_now > 0 and total:
        new_util = math.ceil((util_a + graphs_now / total) * 1000) / 1000  # vLLM suggests 4 decimals
        if new_util > UTILIZATION_CEILING:
            return [], util_a
        since = sa["cuda_graphs_in_budget"].get("since", "this release")
        return [Fix("--gpu-memory-utilization", f"{new_util:g}", (new_util - util_a) * total,
                    f"since vLLM {since} the budget also holds the CUDA graphs ({_gib(graphs_now)}), "
                    "which before were captured outside it; raising the share by as much uses the same "
                    "GPU memory as before")], new_util
    if graphs_moved and util_a and after.context is not None and \
            after.context.utilization_without_graphs is not None:
        # no GPU total in either log: vLLM's own suggestion, the utilization plus the share the graphs took
        new_util = math.ceil((2 * util_a - after.context.utilization_without_graphs) * 1000) / 1000
        if new_util > UTILIZATION_CEILING:
            return [], new_util  # what the top-up then starts from (as the budget vLLM suggested)
        return [Fix("--gpu-memory-utilization", f"{new_util:g}", max(0.0, lost),
                    f"since vLLM {sa['cuda_graphs_in_budget'].get('since')} the budget also holds the CUDA "
                    f"graphs ({util_a:g} is now worth {after.context.utilization_without_graphs:g} without "
                    "them, as vLLM printed); raising the share by as much uses the same GPU memory as "
                    "before (pass --gpu for the GiB figures)")], new_util
    if util_b > util_a and total:
        return [Fix("--gpu-memory-utilization", f"{util_b:g}", (util_b - util_a) * total,
                    f"the budget share fell {util_b:g} → {util_a:g} "
                    f"({_why(after, 'gpu_memory_utilization', before)})")], util_b
    return [], util_a


def _capture_size_fix(before: Start, after: Start, known: bool) -> list[Fix]:
    """The capture-size flag back to the before start's largest batch, when graphs grew inside the budget."""
    graphs_now = after.get("cuda_graph_budget_gib") or 0.0
    graphs_then = before.get("cuda_graph_budget_gib") or 0.0
    if not (known and graphs_now - graphs_then >= QUIET_GIB and before.settings["cuda_graphs_in_budget"]["value"]):
        return []
    flag = rel.default("capture_size_flag", after.version, engine=after.engine)
    sizes_b = before.settings["cudagraph_capture_sizes"]["value"] or []
    if not (flag and sizes_b and flag != "--compilation-config"):
        return []
    value = str(max(sizes_b))
    return [Fix(flag, value, graphs_now - graphs_then,
                f"CUDA graphs grew {_gib(graphs_then)} → {_gib(graphs_now)}; capturing up to batch "
                f"{value} again, as the before start did")]


def _alternatives(after: Start, known: bool, kb: float, lost: float) -> list[Fix]:
    """Flags that also return memory but change more than the budget (not put in the command)."""
    alts: list[Fix] = []
    graphs_now = after.get("cuda_graph_budget_gib") or 0.0
    if graphs_now > 0:
        alts.append(Fix("--enforce-eager", None, graphs_now,
                        "no CUDA graphs at all: returns their whole budget share, but decoding runs eagerly "
                        "(expect noticeably lower throughput, most at small batch sizes)"))
    if known and rel.default("kv_cache_memory_bytes_flag", after.version) and kb > 0:
        alts.append(Fix("--kv-cache-memory-bytes", str(int(kb * mem.GIB)), max(0.0, lost),
                        "fixes the KV cache at the before start's size and skips the utilization budget; only "
                        "safe when that much GPU memory is really free"))
    return alts


def _top_up(fixes: list[Fix], after: Start, short: float, new_util: float) -> list[Fix]:
    """What the fixes still leave short of the allowed loss, taken from a higher utilization if the GPU has it."""
    total = after.get("gpu_total_gib") or 0.0
    if short <= QUIET_GIB or not total:
        return fixes
    util_a = after.get("gpu_memory_utilization") or 0.0
    extra = mem.utilization_for(short, total, new_util, UTILIZATION_CEILING)
    if extra is None:
        return fixes
    return [f for f in fixes if f.flag != "--gpu-memory-utilization"] + [
        Fix("--gpu-memory-utilization", f"{extra:g}", (extra - util_a) * total,
            f"the rest of the loss: {_gib(short)} more budget ({util_a:g} → {extra:g} of "
            f"{_gib(total)}), if that much of the GPU is free")]


def _length_fix(after: Start, kv_then: float) -> list[Fix]:
    """The --max-model-len that fits when the restored KV cache still cannot hold one request."""
    need_request = after.get("request_kv_gib") or 0.0
    if not (need_request and kv_then < need_request and after.get("max_model_len")):
        return []
    max_len = int(after.get("max_model_len") or 0)
    fit = mem.max_len_that_fits(kv_then, need_request, max_len)
    if not fit:
        return []
    return [Fix("--max-model-len", str(fit), 0.0,
                f"{_gib(kv_then)} of KV cache holds one request of {mem.human_tokens(fit)} tokens; "
                f"{mem.human_tokens(max_len)} needs {_gib(need_request)}, more than this release leaves")]


def _gate(before: Start, after: Start, max_kv_loss: float) -> tuple[bool, str | None, float | None]:
    tb, ta = before.get("kv_cache_tokens"), after.get("kv_cache_tokens")
    loss = None
    if tb and ta is not None and tb > 0:
        loss = max(0.0, 1 - ta / tb)
    if after.failed:
        return True, f"{after.label} failed to start ({after.failure})", loss
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


def start_from_plan(planned: Any, label: str) -> Start:
    """A planned release as a start (`plan --vllm-version A,B`): every figure is the planner's."""
    res: sizing.PlanResult = planned.res
    inp = res.inp
    total = inp.gpu_bytes / mem.GIB
    version = inp.version
    engine = rel.engine_for(version, inp.engine)
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
                                      max_model_len=res.max_model_len, explicit=explicit)
    if inp.enforce_eager:
        settings["cudagraph_capture_sizes"] = {"value": [], "source": "explicit"}
    return Start(input=label, version=version, engine=engine, failed=not planned.verdict.starts,
                 failure=planned.verdict.stage if not planned.verdict.starts else None, budget=b, settings=settings,
                 model=inp.arch.name, gpu_name=inp.gpu_name, arch=inp.arch)


# --- plan --vllm-version A,B: the planner's budget per release, the same diff and fix ---------------------------

def compare_plans(planned: list[Any], max_kv_loss: float = 0.2) -> Comparison:
    """Planned releases side by side, each against the first."""
    starts = [start_from_plan(p, f"vLLM {p.data['vllm_version']}") for p in planned]
    return Comparison(starts, [pair(starts[0], s, max_kv_loss) for s in starts[1:]])
