"""The planner's coefficients and switches by release (data/releases.yaml), applied to the arithmetic.

What a start-up's profiling costs besides the model's own tensors depends on the release and its model runner:
the sampler's working memory per logit, the non-torch memory (CUDA context, all-reduce buffers), the CUDA
graphs and whether their estimate comes out of the KV budget. Each function here reads the release's figure
(or one `given` by name, as bench/planner_accuracy.py does) and feeds it to profiling.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diagnoser.vllm import memory as m
from diagnoser.vllm import profiling, releases
from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.memory import GIB
from diagnoser.vllm.releases import Version


def coefficient(name: str, version: Version, given: Mapping[str, float] | None = None, **where: Any) -> float:
    """A planner coefficient of data/releases.yaml for a release, unless `given` replaces it by name (what
    bench/planner_accuracy.py does to score a start-up with coefficients fitted without its source).

    >>> given = {"non_torch_single_gib": 0.2}
    >>> coefficient("non_torch_single_gib", (0, 7, 3)), coefficient("non_torch_single_gib", (0, 7, 3), given)
    (0.1, 0.2)
    """
    if given and name in given:
        return float(given[name])
    return float(releases.default(name, version, **where))


def graphs_budgeted(version: Version) -> bool:
    """From 0.20.0 vLLM subtracts its CUDA-graph estimate from the KV budget (D5); before, graphs are
    captured after the KV cache is allocated, from memory outside the budget."""
    return bool(releases.default("cuda_graphs_in_budget", version))


def model_runner(arch: ArchSpec, version: Version, engine: str | None = None) -> str:
    """'MRV2' when the release runs this model on Model Runner V2 by default (dense models from 0.25, every
    model from 0.29: settings.model_runner_v2), else 'MRV1'; the planner's coefficients differ by runner.

    >>> a = ArchSpec("t", layers=2, hidden_size=64, num_attention_heads=2, num_key_value_heads=2,
    ...              intermediate_size=128, vocab_size=100)
    >>> model_runner(a, (0, 24, 0)), model_runner(a, (0, 27, 1)), model_runner(a, (0, 27, 1), "V0")
    ('MRV1', 'MRV2', 'MRV1')
    """
    if releases.engine_for(version, engine) != "V1":
        return "MRV1"
    scope = releases.default("model_runner_v2", version, engine="V1")
    dense = not arch.is_moe and not arch.is_hybrid
    return "MRV2" if scope == "all" or (scope == "dense" and dense) else "MRV1"


def sampler_bytes_per_logit(version: Version, flashinfer: bool | None = None, engine: str | None = None,
                            opt_in: bool | None = None, runner: str | None = None,
                            given: Mapping[str, float] | None = None) -> float:
    """Sampler working memory per logit in the profiling peak.

    FlashInfer's kernel samples when VLLM_USE_FLASHINFER_SAMPLER says so (`opt_in`), else when FlashInfer is
    installed (`flashinfer`; None: as the release's wheel installs it, settings.flashinfer_installed: a dependency
    from 0.11.1, the optional extra `vllm[flashinfer]` before) and the release turns it on by default (vLLM 0.10.1
    to 0.11.0: VLLM_USE_FLASHINFER_SAMPLER unset means on when `import flashinfer.sampling` works, v1/sample/ops/
    topk_topp_sampler.py); otherwise the PyTorch path's coefficient of the release and model runner.

    >>> sampler_bytes_per_logit((0, 11, 0)), sampler_bytes_per_logit((0, 11, 0), flashinfer=True)
    (39.0, 12.0)
    """
    if flashinfer is None:
        flashinfer = bool(releases.default("flashinfer_installed", version))
    on = opt_in if opt_in is not None else (
        flashinfer and bool(releases.default("flashinfer_sampler", version, engine=engine)))
    if on and releases.engine_for(version, engine) == "V1":
        return float(m.FLASHINFER_SAMPLER_BYTES_PER_LOGIT)
    return coefficient("sampler_bytes_per_logit", version, given, runner=runner)


def non_torch_bytes(tp: int, pp: int, gpu_name: str, version: Version, custom_all_reduce: bool | None = None,
                    given: Mapping[str, float] | None = None) -> int:
    """profiling.non_torch_bytes with the single-rank and all-reduce figures of the release (or `given`)."""
    return profiling.non_torch_bytes(tp, pp, gpu_name,
                                     single=coefficient("non_torch_single_gib", version, given) * GIB,
                                     multi=coefficient("non_torch_multi_gpu_gib", version, given) * GIB,
                                     custom_all_reduce=custom_all_reduce)


def non_torch_counts_context(version: Version, engine: str | None = None) -> bool:
    """Whether the release's KV budget counts everything on the device that PyTorch has not allocated as
    non-torch memory (the CUDA context, other processes' memory, torch's cached blocks: V0 0.6.4.x, and V1 from
    0.6.5 until it took V0's memory_profiling in 0.9.1), rather than what start-up adds over a snapshot taken
    once the context exists, the quantity the non-torch coefficients model (settings.non_torch_counts_context).

    >>> non_torch_counts_context((0, 6, 4), "V0"), non_torch_counts_context((0, 6, 5), "V0")
    (True, False)
    >>> non_torch_counts_context((0, 7, 1), "V1"), non_torch_counts_context((0, 9, 2), "V1")
    (True, False)
    >>> non_torch_counts_context((0, 5, 3)), non_torch_counts_context((0, 19, 0))
    (False, False)
    """
    return bool(releases.default("non_torch_counts_context", version, engine=engine))


def non_torch_rule(tp: int, version: Version) -> str:
    """The non-torch rule applied, in words, for the assumptions output."""
    single = float(releases.default("non_torch_single_gib", version))
    if tp <= 1:
        return f"{single:g} GiB per rank in this release"
    multi = float(releases.default("non_torch_multi_gpu_gib", version))
    if not multi:
        return (f"{single:g} GiB per rank; this release allocates the all-reduce buffers before its baseline "
                "snapshot, so they are not counted")
    return f"{single:g} GiB per rank + {multi:g} GiB of all-reduce buffers with TP > 1 in this release"


def full_graph_count(version: Version, engine: str | None, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """FULL decode graphs the release captures (profiling.full_graph_count) from its capture list
    (settings.cudagraph_capture_sizes, which max_num_seqs and max_num_batched_tokens cut) and CUDA-graph mode.

    >>> full_graph_count((0, 29, 0), "V1", 1024, 8192), full_graph_count((0, 29, 0), "V1", 256, 2048)
    (51, 35)
    """
    sizes = releases.default("cudagraph_capture_sizes", version, engine=engine, max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens)
    mode = str(releases.default("cudagraph_mode", version, engine=engine))
    return profiling.full_graph_count(list(sizes), max_num_seqs, mode)


def cuda_graph_bytes(arch: ArchSpec, pp: int, enforce_eager: bool, version: Version, engine: str | None,
                     runner: str | None = None, given: Mapping[str, float] | None = None, max_num_seqs: int = 0,
                     max_num_batched_tokens: int = 0) -> int:
    """profiling.cuda_graph_bytes with the release's fixed and per-layer parts (FULL and PIECEWISE capture passes
    from 0.11 hold about three times the per-layer buffers; Model Runner V2 adds almost nothing to its peak) and,
    where the release's model runner extrapolates its FULL graphs (settings.cuda_graph_full_graph_bytes: Model
    Runner V2 from 0.29.0), the part per FULL graph beyond the first (given max_num_seqs)."""
    where = {"engine": engine, "runner": runner}
    base = coefficient("cuda_graph_base_gib", version, given, **where) * GIB
    per_layer = coefficient("cuda_graph_per_layer_gib", version, given, **where) * GIB
    per_graph = coefficient("cuda_graph_full_graph_bytes", version, given, **where)
    full = full_graph_count(version, engine, max_num_seqs, max_num_batched_tokens) \
        if per_graph and max_num_seqs and not enforce_eager else 0
    return profiling.cuda_graph_bytes(arch, pp, enforce_eager, base=base, per_layer=per_layer, full_graphs=full,
                                      per_full_graph_layer_hidden=per_graph)
