"""What if: one plan re-planned with some flags changed (the planner's what-if rows) or at other lengths.

A what-if row keeps the figures a plan was given or measured (vary); its change_size ranks how big a change
it is, so that the advice offers the smallest one that starts. The length table gives the per-request KV and
concurrency at powers of two up to the planned length; len_for_concurrency the longest length at which a
number of requests fit at once.
"""

from __future__ import annotations

from typing import Any

from diagnoser.vllm import releases
from diagnoser.vllm.kvcache import max_model_len_for, request_kv_bytes
from diagnoser.vllm.memory import round_down
from diagnoser.vllm.sizing import PlanInput, PlanResult, plan_memory, whole_gpu_kv_bytes, with_changes


def _estimate(inp: PlanInput) -> PlanResult:
    """The plan with every figure estimated (no given or measured numbers)."""
    return plan_memory(with_changes(inp, weights=None, overhead=None, kv_cache_bytes=None, kv_cache_fixed=False))


def vary(inp: PlanInput, **changes: Any) -> PlanResult:
    """Re-plan with some flags changed, keeping given or measured figures: a given weight size scales with the
    estimate's ratio, a given overhead and a measured KV size move by the estimate's difference, and a KV
    size fixed by --kv-cache-memory-bytes stays."""
    base, var = _estimate(inp), with_changes(inp, **changes)
    est = _estimate(var)
    weights = overhead = kv = None
    if inp.weights is not None:
        weights = inp.weights * (est.weights_bytes / base.weights_bytes if base.weights_bytes else 1.0)
    if inp.overhead is not None:
        overhead = inp.overhead + (est.overhead_bytes - base.overhead_bytes)
    if inp.kv_cache_bytes is not None:
        kv = inp.kv_cache_bytes if inp.kv_cache_fixed else \
            inp.kv_cache_bytes + (est.kv_cache_bytes - base.kv_cache_bytes)
    return plan_memory(with_changes(var, weights=weights, overhead=overhead, kv_cache_bytes=kv))


#: How big a change each what-if row is, smallest first: the advice offers the smallest one the table shows
#: starting (a flag on this GPU before another checkpoint, before more GPUs).
CHANGE_SIZE = {"utilization": 1, "fp8 KV cache": 2, "kv-cache-memory-bytes": 3, "fp8 weights": 4, "TP=2": 5,
               "TP=4": 6, "4-bit": 7}


def change_size(label: str) -> int:
    """The CHANGE_SIZE rank of a what-if row's label ('as planned' is 0).

    >>> [change_size(x) for x in ("as planned", "fp8 KV cache", "TP=2 (2 GPUs)", "--gpu-memory-utilization 0.93")]
    [0, 2, 5, 1]
    """
    return next((rank for key, rank in CHANGE_SIZE.items() if key in label), 0)


def fp8_weights_possible(inp: PlanInput, res: PlanResult) -> bool:
    """`--quantization fp8` on a 16-bit checkpoint: vLLM quantizes the linear layers to fp8 as it loads them,
    natively on compute capability 8.9+ and weight-only (Marlin) on 8.0+ (vLLM's Fp8Config.get_min_capability,
    80); not on older GPUs, and not on a checkpoint that is already quantized."""
    cc = inp.compute_capability
    return res.quant_format is None and res.model_dtype_bytes >= 2 and (cc is None or cc >= 8.0)


def what_if(inp: PlanInput, res: PlanResult) -> list[dict[str, Any]]:
    """The planner's what-if rows: fp8 KV cache, fp8 weights, 4-bit weights, TP=2/4, utilization +0.03."""
    rows: list[tuple[str, dict[str, Any], dict[str, str | None]]] = [("as planned", {}, {})]
    if res.kv_value_bytes > 1:
        rows.append(("fp8 KV cache", {"kv_cache_dtype": "fp8"}, {"--kv-cache-dtype": "fp8"}))
    if fp8_weights_possible(inp, res):
        rows.append(("fp8 weights (--quantization fp8)", {"quantization": "fp8"}, {"--quantization": "fp8"}))
    if res.quant_format not in ("int4", "mxfp4", "nvfp4", "nf4", "gguf"):
        # no flag: --quantization awq on a checkpoint that is not AWQ fails; the fix is another checkpoint
        rows.append(("4-bit weights (an AWQ/GPTQ checkpoint)", {"quantization": "awq", "quant_bits": 4}, {}))
    for tp in (2, 4):
        if inp.tensor_parallel_size < tp:
            rows.append((f"TP={tp} ({tp} GPUs)", {"tensor_parallel_size": tp}, {"--tensor-parallel-size": str(tp)}))
    util = res.gpu_memory_utilization + 0.03
    if util <= 1.0 and not inp.kv_cache_fixed:
        util = round(util, 2)
        rows.append((f"--gpu-memory-utilization {util:g}", {"gpu_memory_utilization": util},
                     {"--gpu-memory-utilization": f"{util:g}"}))
    full = whole_gpu_kv_bytes(res)
    if not res.fits and not inp.kv_cache_fixed and full > max(res.kv_cache_bytes, 0) and \
            releases.default("kv_cache_memory_bytes_flag", inp.version):
        # vLLM's own hint ('Replace gpu_memory_utilization config with --kv-cache-memory=...'): the KV cache sized
        # to the whole GPU less what profiling and graphs need, instead of a utilization share
        rows.append(("--kv-cache-memory-bytes (whole GPU)",
                     {"kv_cache_bytes": full, "kv_cache_fixed": True},
                     {"--kv-cache-memory-bytes": str(int(full)), "--gpu-memory-utilization": None}))
    out = []
    for label, changes, flags in rows:
        if changes.get("kv_cache_fixed"):
            r = plan_memory(with_changes(inp, **changes))
        else:
            r = vary(inp, **changes) if changes else res
        ok = r.fits and inp.arch.num_attention_heads % r.inp.tensor_parallel_size == 0
        out.append({
            "label": label, "flags": flags, "kv_cache_bytes": int(r.kv_cache_bytes),
            "kv_cache_tokens": r.kv_cache_tokens, "max_concurrency": round(r.max_concurrency, 4), "fits": ok,
            "weights_bytes": int(r.weights_bytes), "max_model_len_that_fits": r.max_model_len_that_fits,
            "change_size": change_size(label),
        })
    return out


def len_for_concurrency(res: PlanResult, want: float) -> int:
    """Largest --max-model-len (multiple of 1024, up to the planned one) at which `want` requests fit at once."""
    inp = res.inp
    if res.kv_cache_bytes <= 0 or want <= 0:
        return 0
    fit = max_model_len_for(inp.arch, res.kv_cache_bytes / want, res.max_model_len,
                            tp=inp.tensor_parallel_size, pp=inp.pipeline_parallel_size, kv_bytes=res.kv_value_bytes,
                            max_num_batched_tokens=res.max_num_batched_tokens, block_size=res.block_size,
                            state_pages=res.state_pages)
    return round_down(fit)


def length_table(inp: PlanInput, res: PlanResult) -> list[dict[str, Any]]:
    """Per-request KV and concurrency at powers of two up to the planned length (and the planned one)."""
    lengths = {res.max_model_len}
    n = 4096
    while n < res.max_model_len:
        lengths.add(n)
        n *= 2
    out = []
    for length in sorted(lengths):
        need = request_kv_bytes(inp.arch, length, inp.tensor_parallel_size, inp.pipeline_parallel_size,
                                res.kv_value_bytes, res.max_num_batched_tokens, res.block_size,
                                state_pages=res.state_pages)
        conc = res.kv_cache_bytes / need if need and res.kv_cache_bytes > 0 else 0.0
        out.append({"max_model_len": length, "request_kv_bytes": need, "max_concurrency": round(conc, 4)})
    return out

