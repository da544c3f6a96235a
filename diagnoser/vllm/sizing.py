"""Sizing one `vllm serve` configuration: the planner's model of a start-up, from flags to KV-cache tokens.

The arithmetic is pure functions over numbers (memory.py: the budget; kvcache.py, weights.py, profiling.py:
what a model needs); what a release defaults to or measured comes from releases.py (data/releases.yaml). This
module joins the two: it resolves the defaults a configuration runs with, feeds the coefficients of its
release (coefficients.py) to the arithmetic, and says which rules of the physics applied, in words.
`plan`, `compare` and the advice size configurations only through here; what_if.py re-plans one with flags
changed or at other lengths (the planner's tables).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from diagnoser.vllm import kvcache, releases
from diagnoser.vllm import memory as m
from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.coefficients import (
    cuda_graph_bytes,
    graphs_budgeted,
    model_runner,
    non_torch_bytes,
    non_torch_counts_context,
    sampler_bytes_per_logit,
)
from diagnoser.vllm.kvcache import (
    kv_cache_tokens,
    max_model_len_for,
    model_kv_bytes_per_token,
    request_kv_bytes,
    state_bytes_per_layer,
)
from diagnoser.vllm.memory import GIB, LEN_STEP, MIB, kv_value_bytes, round_down
from diagnoser.vllm.modelspec import compute_capability_of, sm_count_of
from diagnoser.vllm.profiling import (
    activation_bytes,
    encoder_bytes,
    encoder_items,
    logits_bytes,
    profile_logit_rows,
    profiled_sequences,
    sampler_extra_bytes,
)
from diagnoser.vllm.weights import GGUF_BITS, mxfp4_moe_choice, quant_format, resolve_dtype_bytes, weight_bytes

#: The release whose defaults the planner assumes when none is given.
LATEST_VERSION = releases.latest()

Version = tuple[int, int, int]

#: The recurrent-state layer kinds, as the assumptions name them.
STATE_NAMES = {"gated_delta_net": "Gated DeltaNet", "mamba1": "Mamba-1", "mamba2": "Mamba-2"}


def ssm_state_bytes(arch: ArchSpec, mamba_ssm_cache_dtype: str | None, model_dtype_bytes: float) -> float:
    """Bytes per SSM-state element: --mamba-ssm-cache-dtype when given (not 'auto'), else the model's own state
    dtype (models.yaml `ssm_dtype`, config.json `mamba_ssm_dtype`), else the model dtype."""
    if mamba_ssm_cache_dtype and mamba_ssm_cache_dtype != "auto":
        return m.dtype_bytes(mamba_ssm_cache_dtype, model_dtype_bytes)
    return m.dtype_bytes(arch.ssm_dtype, model_dtype_bytes) if arch.ssm_dtype else model_dtype_bytes


@dataclass


class PlanInput:
    """One configuration to size (vLLM's flag names, resolved)."""

    arch: ArchSpec
    gpu_bytes: float
    gpu_name: str = ""
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    quantization: str | None = None
    quant_bits: float | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    weights: float | None = None      # bytes; replaces the estimate
    overhead: float | None = None     # bytes; replaces activations + graphs + non-torch
    kv_cache_bytes: float | None = None  # measured available KV memory; replaces budget - weights - overhead
    kv_cache_fixed: bool = False      # kv_cache_bytes comes from --kv-cache-memory-bytes (utilization ignored)
    cpu_offload_bytes: float = 0.0    # --cpu-offload-gb: weights kept in CPU memory
    version: Version = LATEST_VERSION
    engine: str | None = None         # 'V0'/'V1' to override the release's default engine (VLLM_USE_V1)
    block_size: int = m.BLOCK_SIZE
    flashinfer: bool | None = None          # FlashInfer installed (None: as the release's wheel ships it)
    flashinfer_sampler: bool | None = None  # VLLM_USE_FLASHINFER_SAMPLER=1/0 (None: the release's default)
    custom_all_reduce: bool | None = None   # False: --disable-custom-all-reduce or no peer access between ranks
    skip_mm_profiling: bool = False         # --skip-mm-profiling (0.10.1+): the encoder is not profiled
    language_model_only: bool = False       # --language-model-only / --limit-mm-per-prompt 0 for every modality:
    #                                         the vision tower is neither loaded nor profiled
    max_model_len_auto: bool = False        # --max-model-len auto / -1: vLLM picks the longest length that fits
    enable_prefix_caching: bool | None = None  # hybrids: on puts the state in 'align' mode, two pages a sequence
    #                                           (None: the release's default, on for hybrids from 0.28.0)
    mamba_ssm_cache_dtype: str | None = None   # --mamba-ssm-cache-dtype (None / 'auto': the model's own)
    entry: str = "serve"                    # 'serve' (`vllm serve`) or 'llm' (the Python LLM class): batch defaults
    compute_capability: float | None = None  # the GPU's (7.5 for a T4): V1 falls back to V0 below 8.0 in 0.8-0.10.1
    sm_count: int | None = None             # the GPU's multiprocessors (None: the preset's by gpu_name, else unknown)
    use_v1: str | None = None               # VLLM_USE_V1 as the command sets it ('0' / '1'), read where vLLM reads it
    enable_chunked_prefill: bool | None = None  # --enable-chunked-prefill (None: V0 turns it on above 32K tokens)
    coefficients: dict[str, float] = field(default_factory=dict)  # replaces releases.yaml's fitted coefficients


@dataclass


class PlanResult:
    """Every figure the planner prints, in bytes unless named otherwise."""

    inp: PlanInput
    max_model_len: int
    gpu_memory_utilization: float
    model_dtype_bytes: float
    kv_value_bytes: float
    kv_bytes_per_token: int
    budget_bytes: float
    weights_bytes: float
    overhead_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    graphs_in_budget: bool
    kv_cache_bytes: float
    kv_cache_tokens: int
    request_kv_bytes: int
    max_concurrency: float
    fits: bool
    max_model_len_that_fits: int
    max_num_seqs: int
    max_num_batched_tokens: int
    quant_format: str | None
    block_size: int = m.BLOCK_SIZE  # the unified block of a hybrid model, else --block-size
    state_pages: int = 1  # pages a hybrid model's state layer holds per sequence (0: outside the cache)
    sources: dict[str, str] = field(default_factory=dict)
    model_runner: str = "MRV1"  # the model runner whose coefficients apply (model_runner)
    sampler_bytes_per_logit: float = float(m.SAMPLER_BYTES_PER_LOGIT)  # the coefficient used
    engine: str = "V1"          # the engine this start-up runs (engine_of)
    engine_reason: str = ""     # why, when it is not the release's default engine
    graph_extrapolation_bytes: float = 0.0  # the part of cuda_graph_bytes vLLM's estimate extrapolates over FULL
    #                                         graphs (settings.cuda_graph_full_graph_bytes): not with a fixed KV size


def text_only(arch: ArchSpec) -> ArchSpec:
    """The model as vLLM builds it with --language-model-only (or every modality limited to 0 items): the
    multimodal model skips its vision tower (no weights loaded, no encoder profiling run), the text model stays.

    >>> a = text_only(ArchSpec("m", layers=1, hidden_size=8, num_attention_heads=1, num_key_value_heads=1,
    ...                         intermediate_size=8, vocab_size=8, extra_params=10, vision={"hidden_size": 4}))
    >>> a.extra_params, a.vision
    (0, None)
    """
    return replace(arch, extra_params=0, vision=None)


def engine_of(inp: PlanInput) -> releases.EngineChoice:
    """The engine `inp` runs: its release's, VLLM_USE_V1, the compute-capability and float32 fallbacks."""
    return releases.engine_choice(inp.version, use_v1=inp.use_v1, compute_capability=inp.compute_capability,
                                  dtype=inp.dtype, explicit=inp.engine)


def plan_memory(inp: PlanInput) -> PlanResult:
    """Size one configuration: budget, weights, overhead, KV room, tokens, per-request need, concurrency."""
    if inp.language_model_only and (inp.arch.vision or inp.arch.extra_params):
        inp = replace(inp, arch=text_only(inp.arch))
    arch, v = inp.arch, inp.version
    tp, pp = max(1, inp.tensor_parallel_size), max(1, inp.pipeline_parallel_size)
    util = inp.gpu_memory_utilization if inp.gpu_memory_utilization is not None \
        else float(releases.default("gpu_memory_utilization", v))
    max_len = int(inp.max_model_len or arch.max_position_embeddings or 4096)
    choice = engine_of(inp)
    engine = choice.engine
    seqs, batched = _scheduler_limits(inp, engine, max_len)
    mdb = resolve_dtype_bytes(arch, inp.dtype)
    kvb = kv_value_bytes(inp.kv_cache_dtype, mdb)
    quant, bits = _quantization(inp)
    sources: dict[str, str] = {"weights": "given" if inp.weights is not None else "estimated"}
    budget = inp.gpu_bytes * util
    weights = _weights_on_gpu(inp, mdb, quant, bits)
    runner = model_runner(arch, v, engine)
    per_logit = sampler_bytes_per_logit(v, inp.flashinfer, engine, inp.flashinfer_sampler, runner, inp.coefficients)
    hybrid = hybrid_layout(inp, engine, mdb, kvb)
    act = _activation_peak(inp, engine, seqs, batched, mdb, per_logit, hybrid, runner)
    ntm = float(non_torch_bytes(tp, pp, inp.gpu_name, v, inp.custom_all_reduce, inp.coefficients))
    # the part vLLM extrapolates over its FULL graphs (Model Runner V2 from 0.29) is only an estimate taken before
    # sizing the KV cache from the utilization share; --kv-cache-memory-bytes skips it (v1/worker/gpu_worker.py
    # determine_available_memory returns after profile_run), and the graphs captured later hold the rest
    unextrapolated = float(cuda_graph_bytes(arch, pp, inp.enforce_eager, v, engine, runner, inp.coefficients))
    graphs = unextrapolated if inp.kv_cache_fixed else float(cuda_graph_bytes(
        arch, pp, inp.enforce_eager, v, engine, runner, inp.coefficients, max_num_seqs=seqs,
        max_num_batched_tokens=batched))
    in_budget = graphs_budgeted(v)
    sources["overhead"] = "given" if inp.overhead is not None else "estimated"
    overhead = float(inp.overhead) if inp.overhead is not None else act + ntm + (graphs if in_budget else 0.0)
    sources["kv_cache"] = _kv_cache_source(inp)
    kv_room = float(inp.kv_cache_bytes) if inp.kv_cache_bytes is not None else budget - weights - overhead
    per_token = model_kv_bytes_per_token(arch, tp, pp, kvb)
    kw = {"tp": tp, "pp": pp, "kv_bytes": kvb, "max_num_batched_tokens": batched,
          "block_size": hybrid.block_size, "window_aware": _window_aware(inp, engine),
          "state_pages": hybrid.state_pages}
    need = request_kv_bytes(arch, max_len, **kw)
    tokens, conc = _tokens_and_concurrency(hybrid, kv_room, per_token, need, max_len, v)
    fits = kv_room > 0 and need <= kv_room
    if inp.kv_cache_fixed:
        # --kv-cache-memory-bytes is not capped by the utilization share: the whole device must hold it
        fits = fits and m.device_need(weights, overhead, 0.0 if in_budget else graphs, kv_room) <= inp.gpu_bytes
    fit_len = max_model_len_for(arch, kv_room, max(max_len, arch.max_position_embeddings or 0, 1), **kw)
    if inp.max_model_len_auto and 0 < fit_len < max_len and not inp.max_model_len:
        # vLLM's 'auto': the model's maximum, cut to the longest length one request's KV cache fits in
        return plan_memory(replace(inp, max_model_len=int(fit_len)))
    return PlanResult(
        inp=inp, max_model_len=max_len, gpu_memory_utilization=util, model_dtype_bytes=mdb,
        kv_value_bytes=kvb, kv_bytes_per_token=per_token, budget_bytes=budget, weights_bytes=weights,
        overhead_bytes=overhead, activation_bytes=act, non_torch_bytes=ntm, cuda_graph_bytes=graphs,
        graph_extrapolation_bytes=graphs - unextrapolated, graphs_in_budget=in_budget, kv_cache_bytes=kv_room,
        kv_cache_tokens=tokens, request_kv_bytes=need,
        max_concurrency=conc, fits=fits, max_model_len_that_fits=round_down(fit_len) if fit_len >= LEN_STEP
        else fit_len, max_num_seqs=seqs, max_num_batched_tokens=batched,
        quant_format=quant_format(quant, bits), block_size=hybrid.block_size, state_pages=hybrid.state_pages,
        sources=sources, model_runner=runner, sampler_bytes_per_logit=per_logit, engine=engine,
        engine_reason=choice.reason,
    )


def v0_chunked(inp: PlanInput, engine: str, max_len: int) -> bool:
    """V0's chunked prefill: as --enable-chunked-prefill sets it, else on above 32K tokens (settings.long_context)."""
    if engine != "V0":
        return False
    if inp.enable_chunked_prefill is not None:
        return inp.enable_chunked_prefill
    return releases.is_chunked_v0(max_len, inp.version)


def _scheduler_limits(inp: PlanInput, engine: str, max_len: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens): as given, else the release's defaults for this GPU, length and entry
    point (the LLM class takes larger chunks than `vllm serve`)."""
    where = {"engine": engine, "gpu_gib": inp.gpu_bytes / GIB, "gpu_name": inp.gpu_name, "entry_point": inp.entry}
    seqs = inp.max_num_seqs or int(releases.default("max_num_seqs", inp.version, **where))
    batched = inp.max_num_batched_tokens or int(releases.default(
        "max_num_batched_tokens", inp.version, max_model_len=max_len, chunked=v0_chunked(inp, engine, max_len),
        **where))
    return seqs, batched


def _quantization(inp: PlanInput) -> tuple[str | None, float | None]:
    """The quantization the weights load with, and its bits: --quantization when given, else the checkpoint's
    (whose bits apply only when the method is the checkpoint's own)."""
    arch = inp.arch
    quant = inp.quantization if inp.quantization is not None else arch.quantization
    bits = inp.quant_bits if inp.quant_bits is not None else (arch.quant_bits if quant == arch.quantization
                                                               else None)
    return quant, bits


def _weights_on_gpu(inp: PlanInput, model_dtype_bytes: float, quant: str | None, bits: float | None) -> float:
    """Weight bytes one rank holds: as given, else estimated; less what --cpu-offload-gb keeps in CPU memory."""
    tp, pp = max(1, inp.tensor_parallel_size), max(1, inp.pipeline_parallel_size)
    weights = float(inp.weights) if inp.weights is not None \
        else float(weight_bytes(inp.arch, model_dtype_bytes, quant, bits, tp, pp, version=inp.version,
                                compute_capability=gpu_compute_capability(inp), flashinfer=inp.flashinfer))
    return max(0.0, weights - inp.cpu_offload_bytes)


def gpu_compute_capability(inp: PlanInput) -> float | None:
    """The GPU's compute capability: as given, else its preset's or family's by name (None: not known)."""
    return inp.compute_capability if inp.compute_capability is not None else compute_capability_of(inp.gpu_name)


def _activation_peak(inp: PlanInput, engine: str, seqs: int, batched: int, model_dtype_bytes: float,
                     per_logit: float, hybrid: HybridLayout, runner: str = "MRV1") -> float:
    """The profiling run's PyTorch peak: the forward pass or the sampler over the sequences it samples
    (profiling.profiled_sequences; V1 before 0.8.0 samples nothing, only its logits count: profiling.logits_bytes)
    with what V1's dummy sampler run holds beside the logits (_sampler_extra), the multimodal encoder when V1
    profiles it, and the recurrent state V0 allocates outside the cache."""
    arch = inp.arch
    tp = max(1, inp.tensor_parallel_size)
    mode = str(releases.default("v1_profile_logits", inp.version, engine=engine))
    if mode != "sampler":
        # V1 0.6.4-0.7.3 profile no sampler: the forward pass, then at most the logits of some rows
        forward = activation_bytes(arch, batched, seqs, tp, model_dtype_bytes, sampler=False)
        act = float(max(forward, logits_bytes(arch, profile_logit_rows(mode, seqs, batched), tp, model_dtype_bytes)))
    else:
        rows = profiled_sequences(engine, seqs, batched)
        act = float(activation_bytes(arch, batched, rows, tp, model_dtype_bytes, bytes_per_logit=per_logit,
                                     sampler_extra=_sampler_extra(inp, engine, runner, rows, batched,
                                                                  model_dtype_bytes, per_logit)))
    if arch.vision and engine == "V1" and not inp.skip_mm_profiling:
        act = max(act, float(encoder_bytes(arch, batched, model_dtype_bytes)))
    if arch.is_hybrid and not hybrid.paged:
        # V0 keeps the state of max_num_seqs sequences outside the cache, allocated in the profiling run
        act += seqs * hybrid.state_layers * hybrid.state_bytes
    return act


def _triton_sampler(inp: PlanInput, engine: str, runner: str, per_logit: float) -> bool:
    """Model Runner V1 samples with the Triton top-k/top-p kernel (0.17+, unless FlashInfer's kernel does)."""
    return engine == "V1" and runner == "MRV1" and per_logit != m.FLASHINFER_SAMPLER_BYTES_PER_LOGIT and \
        bool(releases.default("topk_topp_triton_buffer", inp.version, engine=engine))


def _sampler_extra(inp: PlanInput, engine: str, runner: str, rows: int, batched: int, model_dtype_bytes: float,
                   per_logit: float) -> int:
    """Bytes V1's dummy sampler run (Model Runner V1) holds beside the logits when the Triton top-k/top-p kernel
    samples (0.17+, not FlashInfer's): the hidden states alive then (sampler_hidden_per_row,
    sampler_hidden_whole_batch) and the kernel's scratch rows over the GPU's SMs (none when the GPU is unknown).
    Only there: the 14 bytes per logit of that path count the sampler's own tensors from the source, while the
    sort path's 39 and FlashInfer's 12 were checked against measured peaks, which hold the hidden states too."""
    v = inp.version
    if not _triton_sampler(inp, engine, runner, per_logit):
        return 0
    sms = inp.sm_count if inp.sm_count is not None else sm_count_of(inp.gpu_name)
    return sampler_extra_bytes(inp.arch, rows, batched, model_dtype_bytes,
                               per_row=int(releases.default("sampler_hidden_per_row", v, engine=engine)),
                               whole_batch=bool(releases.default("sampler_hidden_whole_batch", v, engine=engine)),
                               sm_count=sms, triton_buffer=True)


def _kv_cache_source(inp: PlanInput) -> str:
    """Where the KV cache size comes from, for the `sources` of a plan."""
    if inp.kv_cache_fixed and inp.kv_cache_bytes is not None:
        return "fixed by --kv-cache-memory-bytes"
    return "measured" if inp.kv_cache_bytes is not None else "computed"


def _window_aware(inp: PlanInput, engine: str) -> bool:
    """Whether sliding layers are sized by their window: V1 (0.8.3+) does; V0 caps a uniform window but runs
    interleaved patterns as full attention."""
    arch = inp.arch
    return bool(releases.default("sliding_window_sized", inp.version, engine=engine)) or not arch.layer_types \
        or arch.is_hybrid


def _tokens_and_concurrency(hybrid: HybridLayout, kv_room: float, per_token: int, need: int, max_len: int,
                            version: Version) -> tuple[int, float]:
    """vLLM's 'GPU KV cache size' in tokens and its 'Maximum concurrency' for a KV pool of `kv_room` bytes: whole
    blocks of the unified page for a paged hybrid model, else whole blocks of all layers."""
    if hybrid.paged:
        conc = kvcache.hybrid_concurrency(kv_room, hybrid.page_bytes, hybrid.group_size, hybrid.attention_groups,
                                          hybrid.state_groups, max_len, hybrid.block_size, hybrid.state_pages)
        tokens = kvcache.hybrid_kv_tokens(kv_room, hybrid.page_bytes, hybrid.group_size,
                                          hybrid.attention_groups + hybrid.state_groups, hybrid.block_size, conc,
                                          max_len, bool(releases.default("hybrid_tokens_by_concurrency", version)))
        return tokens, conc
    conc = kv_room / need if need > 0 and kv_room > 0 else 0.0
    if releases.default("hybrid_tokens_by_concurrency", version):
        # every model, sliding-window ones included (vllm/v1/core/kv_cache_utils.py 0.30.0 get_kv_cache_capacity:
        # int(max_concurrency x max_model_len)); before, whole blocks of all layers (0.19.0 _report_kv_cache_config)
        pool = kv_cache_tokens(kv_room, per_token, hybrid.block_size) * per_token  # whole blocks, as vLLM allocates
        return kvcache.tokens_by_concurrency(pool / need if need > 0 else 0.0, max_len), conc
    tokens = kv_cache_tokens(kv_room, per_token, hybrid.block_size)
    return tokens, conc


@dataclass(frozen=True)


class HybridLayout:
    """How vLLM lays a model's cache out: block size, page, KV-cache groups, and the state pages a sequence
    holds. A model without recurrent-state layers has block = --block-size and no state."""

    paged: bool
    block_size: int
    page_bytes: float = 0.0
    group_size: int = 0
    attention_groups: int = 0
    state_groups: int = 0
    state_layers: int = 0
    state_bytes: int = 0
    state_pages: int = 0


def hybrid_layout(inp: PlanInput, engine: str, model_dtype_bytes: float, kv_bytes: float) -> HybridLayout:
    """The cache layout of `inp`'s model under its release: V1 (0.9.2+) pages the state and unifies the page
    size (the attention block grows to hold one state page); V0 keeps the state outside the cache."""
    arch, tp = inp.arch, max(1, inp.tensor_parallel_size)
    if not arch.is_hybrid:
        return HybridLayout(paged=False, block_size=inp.block_size)
    ssm_b = ssm_state_bytes(arch, inp.mamba_ssm_cache_dtype, model_dtype_bytes)
    state = state_bytes_per_layer(arch, tp, model_dtype_bytes, ssm_b)
    kinds = kvcache.stage_kinds(arch, max(1, inp.pipeline_parallel_size))
    n_state = kinds.count("linear")
    if not releases.default("hybrid_state_paged", inp.version, engine=engine):
        return HybridLayout(paged=False, block_size=inp.block_size, state_layers=n_state, state_bytes=state)
    per_token_layer = kvcache.kv_bytes_per_token_layer(arch, tp, kv_bytes)
    block = max(inp.block_size, kvcache.unified_block_size(per_token_layer, state))
    size, att_groups, state_groups = kvcache.hybrid_groups(sum(1 for k in kinds if k in ("full", "sliding")), n_state)
    return HybridLayout(paged=True, block_size=block, page_bytes=block * per_token_layer,
                        group_size=size, attention_groups=att_groups, state_groups=state_groups,
                        state_layers=n_state, state_bytes=state,
                        state_pages=kvcache.state_pages_per_request(kvcache.mamba_cache_mode(
                            hybrid_prefix_caching(inp, engine))))


def hybrid_prefix_caching(inp: PlanInput, engine: str) -> bool:
    """Whether a hybrid model runs with prefix caching: the command's flag, else the release's default for hybrid
    models (off until 0.27.x, on from 0.28.0: vllm-project/vllm#50991)."""
    if inp.enable_prefix_caching is not None:
        return bool(inp.enable_prefix_caching)
    return bool(releases.default("hybrid_prefix_caching", inp.version, engine=engine))


def with_changes(inp: PlanInput, **changes: Any) -> PlanInput:
    """A copy of a plan input with some fields replaced (for what-if rows)."""
    return replace(inp, **changes)


def device_need_bytes(res: PlanResult) -> float:
    """memory.device_need for a plan: what one rank holds once its KV cache is allocated."""
    return m.device_need(res.weights_bytes, res.overhead_bytes, 0.0 if res.graphs_in_budget else res.cuda_graph_bytes,
                         res.kv_cache_bytes)


def whole_gpu_kv_bytes(res: PlanResult, spare: float = 0.02) -> float:
    """KV memory --kv-cache-memory-bytes can give: the GPU less 2%, the weights, the profiled peaks and the CUDA
    graphs (budgeted or not: with a fixed KV size they all come out of the same device), less the estimate's
    extrapolation over FULL graphs, which a fixed KV size skips."""
    graphs = 0.0 if res.graphs_in_budget else res.cuda_graph_bytes
    extrapolated = res.graph_extrapolation_bytes if res.graphs_in_budget else 0.0
    return res.inp.gpu_bytes * (1 - spare) - res.weights_bytes - res.overhead_bytes - graphs + extrapolated


# --- flags and environment that move the physics, and the rules applied, in words --------------------------

def serve_extras(flags: dict[str, Any], env: dict[str, str], auto_len: bool = False) -> dict[str, Any]:
    """PlanInput fields a `vllm serve` command sets beyond the sizes: --disable-custom-all-reduce,
    --skip-mm-profiling, --enable-prefix-caching, --mamba-ssm-cache-dtype, VLLM_USE_FLASHINFER_SAMPLER,
    --max-model-len auto.

    >>> serve_extras({"--enable-prefix-caching": True, "--mamba-ssm-cache-dtype": "float16"}, {})
    {'max_model_len_auto': False, 'enable_prefix_caching': True, 'mamba_ssm_cache_dtype': 'float16'}
    """
    out: dict[str, Any] = {"max_model_len_auto": auto_len}
    if flags.get("--no-enable-prefix-caching"):
        out["enable_prefix_caching"] = False
    elif flags.get("--enable-prefix-caching") not in (None, False):
        out["enable_prefix_caching"] = str(flags["--enable-prefix-caching"]).lower() not in ("false", "0")
    if flags.get("--mamba-ssm-cache-dtype"):
        out["mamba_ssm_cache_dtype"] = str(flags["--mamba-ssm-cache-dtype"])
    if flags.get("--disable-custom-all-reduce"):
        out["custom_all_reduce"] = False
    if flags.get("--skip-mm-profiling"):
        out["skip_mm_profiling"] = True
    if flags.get("--language-model-only") or _no_mm_items(flags.get("--limit-mm-per-prompt")):
        out["language_model_only"] = True
    if flags.get("--no-enable-chunked-prefill"):
        out["enable_chunked_prefill"] = False
    elif flags.get("--enable-chunked-prefill") not in (None, False):
        out["enable_chunked_prefill"] = str(flags["--enable-chunked-prefill"]).lower() not in ("false", "0")
    fi = (env or {}).get("VLLM_USE_FLASHINFER_SAMPLER")
    if fi in ("0", "1"):
        out["flashinfer_sampler"] = fi == "1"
        if fi == "1":
            out["flashinfer"] = True
    return out


def _no_mm_items(limit: Any) -> bool:
    """--limit-mm-per-prompt with 0 items for every modality (vLLM then builds the text model alone).

    >>> _no_mm_items('{"image": 0, "video": 0}'), _no_mm_items('{"image": 4}'), _no_mm_items(None)
    (True, False, False)
    """
    if limit in (None, False, True, ""):
        return False
    try:
        value = json.loads(limit) if isinstance(limit, str) else limit
    except ValueError:
        return False
    return isinstance(value, dict) and bool(value) and all(
        (v.get("count", 0) if isinstance(v, dict) else v) == 0 for v in value.values())


def physics_assumptions(res: PlanResult) -> list[str]:
    """The class rules behind the overhead and weights of this plan (each applies to a class of models or
    releases, never to one case)."""
    inp, a, v = res.inp, res.inp.arch, res.inp.version
    engine = res.engine
    out = [f"engine {engine}: {res.engine_reason}"] if res.engine_reason else []
    chunked = inp.enable_chunked_prefill if inp.enable_chunked_prefill is not None else \
        releases.is_chunked_v0(res.max_model_len, v)
    if engine == "V0" and not chunked and not inp.max_num_batched_tokens:
        out.append(f"V0 without chunked prefill profiles one batch of max(max_model_len, 2048) = "
                   f"{res.max_num_batched_tokens:,} tokens: the activation peak grows with --max-model-len")
    mode = str(releases.default("v1_profile_logits", v, engine=engine))
    if mode != "sampler":
        rows = profile_logit_rows(mode, res.max_num_seqs, res.max_num_batched_tokens)
        out.append("V1's profiling run in this release samples nothing: the forward pass over "
                   f"{res.max_num_batched_tokens:,} tokens" + (f", then 16-bit logits of {rows:,} rows"
                                                                 if rows else " only"))
    elif res.sampler_bytes_per_logit == m.FLASHINFER_SAMPLER_BYTES_PER_LOGIT:
        out.append("sampler: FlashInfer's top-p/top-k kernel (no sort), 12 bytes per logit")
    elif _triton_sampler(inp, engine, res.model_runner, res.sampler_bytes_per_logit):
        sms = inp.sm_count if inp.sm_count is not None else sm_count_of(inp.gpu_name)
        out.append(f"sampler: the Triton top-k/top-p kernel (0.17+), {res.sampler_bytes_per_logit:g} bytes per logit, "
                   "with the forward's hidden states alive beside it and the kernel's fp32 scratch rows "
                   + (f"({sms} SMs)" if sms else "(not counted: the GPU's SM count is unknown)"))
    if res.model_runner == "MRV2":
        out.append(f"Model Runner V2 (dense models from vLLM 0.25, every model from 0.29): the profiled peak is the "
                   f"forward pass (the sampler keeps {res.sampler_bytes_per_logit:g} bytes per logit) plus "
                   f"{res.cuda_graph_bytes / GIB:.2f} GiB for the graph estimate and a cold compile's workspace")
    if res.graph_extrapolation_bytes > 0 and res.graphs_in_budget:
        out.append(f"CUDA graphs: vLLM subtracts its own estimate of the FULL decode graphs before sizing the KV "
                   f"cache (one per capture size up to max_num_seqs={res.max_num_seqs:,}), here "
                   f"{res.graph_extrapolation_bytes / GIB:.2f} GiB; the planner scales it by layers x hidden size "
                   "from start-ups of 7-32B models on one GPU, so for larger models or TP > 1 it is the least "
                   "certain term. A smaller --max-num-seqs captures fewer graphs; vLLM's log prints the figure "
                   "('equivalent to --gpu-memory-utilization=... without CUDA graph memory profiling')")
    if a.vision and engine == "V1":
        if inp.skip_mm_profiling:
            out.append("multimodal: --skip-mm-profiling, the encoder is not profiled")
        else:
            items = encoder_items(a, res.max_num_batched_tokens)
            out.append(f"multimodal: the encoder is profiled with {items} largest image(s) "
                       f"({a.vision.get('patches_per_item', 0):,} patches each): "
                       f"{encoder_bytes(a, res.max_num_batched_tokens, res.model_dtype_bytes) / GIB:.2f} GiB, "
                       "counted when above the text peak")
    if non_torch_counts_context(v, engine):
        out.append("non-torch memory as this release counts it: everything on the GPU that PyTorch has not allocated "
                   "(the CUDA context, other processes, cached blocks); the planner's figure is only what start-up "
                   "adds, so vLLM's KV cache can come out smaller by the context's size")
    if inp.tensor_parallel_size > 1 and inp.custom_all_reduce is False:
        out.append("custom all-reduce off (--disable-custom-all-reduce or no peer access): NCCL buffers only")
    if res.quant_format == "mxfp4" and inp.weights is None:
        choice = mxfp4_moe_choice(v, gpu_compute_capability(inp), inp.flashinfer)
        out.append(f"MXFP4 experts: the {choice.backend} MoE backend's layout ({choice.why})")
    if res.quant_format == "gguf":
        out.append(f"GGUF: {inp.quant_bits or a.quant_bits or GGUF_BITS['q4_k_m']:g} bits per weight for every "
                   "matrix, embeddings and output included")
    if inp.max_model_len_auto:
        out.append("--max-model-len auto: the model's maximum, or the longest length one request's KV cache fits")
    if a.is_hybrid:
        tp = inp.tensor_parallel_size
        n_state = a.kinds().count("linear")
        n_att = sum(1 for k in a.kinds() if k in ("full", "sliding"))
        ssm_b = ssm_state_bytes(a, inp.mamba_ssm_cache_dtype, res.model_dtype_bytes)
        state = state_bytes_per_layer(a, tp, res.model_dtype_bytes, ssm_b)
        head = (f"hybrid {STATE_NAMES.get(a.state_kind, a.state_kind)}: {n_att} of {a.layers} layers cache KV; "
                f"{n_state} keep a "
                f"{state / MIB:.2f} MiB state per sequence and layer (SSM state {ssm_b:g} bytes per element)")
        if res.state_pages:
            out.append(f"{head}; vLLM unifies the pages (attention block {res.block_size} tokens), "
                       f"{res.state_pages} state page(s) per sequence"
                       + ((" (prefix caching: 'align' mode" + (", on by default for hybrid models from 0.28.0)"
                                                                  if inp.enable_prefix_caching is None else ")"))
                          if res.state_pages > 1 else "")
                       + ("; the token count is max_concurrency x max_model_len"
                          if releases.default("hybrid_tokens_by_concurrency", v) else
                          "; the token count is whole blocks per KV-cache group x the block size"))
        else:
            out.append(f"{head}; this engine keeps the state of max_num_seqs sequences outside the KV cache, "
                       "counted with the activations")
    return out
