"""Does it start? The first check vLLM would fail, in start-up order, the message the planned release prints
there (each release's wording), and the flag changes that make it start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diagnoser.vllm import kvcache, sizing
from diagnoser.vllm import memory as mem
from diagnoser.vllm.modelspec import GpuSpec
from diagnoser.vllm.releases import Version, default, parse_version
from diagnoser.vllm.what_if import len_for_concurrency


@dataclass
class Verdict:
    """Whether vLLM starts; if not, the stage it fails in, what it prints and why, in words."""

    starts: bool
    stage: str | None
    message: str | None
    why: str


#: The documentation link vLLM appends to its memory errors from 0.13.
DOCS = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def no_memory_message(v: Version) -> str:
    """What vLLM prints when nothing is left for the KV cache, in the wording of release `v`."""
    text = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` " \
           "when initializing the engine"
    if default("memory_error_cpu_backend_note", v):
        text += " (this flag also controls CPU memory reservation on the CPU backend, despite its name)"
    return text + "." + (DOCS if default("memory_error_docs_link", v) else "")


def kv_message(res: sizing.PlanResult, v: Version) -> str:
    """What vLLM prints when one request of max_model_len does not fit, in the wording of release `v`
    (V0's token count; V1's GiB figures, with the estimated length from 0.9.1)."""
    ml, need, avail = res.max_model_len, res.request_kv_bytes, res.kv_cache_bytes
    if avail <= 0:
        return no_memory_message(v)
    est = kvcache.max_model_len_for(res.inp.arch, avail, ml, tp=res.inp.tensor_parallel_size,
                                pp=res.inp.pipeline_parallel_size, kv_bytes=res.kv_value_bytes,
                                max_num_batched_tokens=res.max_num_batched_tokens)
    if res.engine == "V0":
        return (f"ValueError: The model's max seq len ({ml}) is larger than the maximum number of tokens that "
                f"can be stored in KV cache ({res.kv_cache_tokens}). Try increasing `gpu_memory_utilization` "
                f"or decreasing `max_model_len` when initializing the engine.")
    docs = DOCS if default("memory_error_docs_link", v) else ""
    if not default("kv_message_format_gib", v):
        unit = default("kv_message_unit", v)
        est_msg = (f" Based on the available memory, the estimated maximum model length is {est}."
                   if est >= 1 and default("kv_message_estimate", v) else "")
        return (f"ValueError: To serve at least one request with the models's max seq len ({ml}), "
                f"({need / mem.GIB:.2f} {unit} KV cache is needed, which is larger than the available KV cache "
                f"memory ({avail / mem.GIB:.2f} {unit}).{est_msg} Try increasing `gpu_memory_utilization` or "
                f"decreasing `max_model_len` when initializing the engine." + docs)
    est_msg = f"Based on the available memory, the estimated maximum model length is {est}. " if est >= 1 else ""
    whose, cpu = (("model's", " (which also controls CPU memory on the CPU backend)")
                  if default("memory_error_cpu_backend_note", v) else ("models's", ""))
    return (f"ValueError: To serve at least one request with the {whose} max seq len ({ml}), "
            f"({mem.format_gib(need)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({mem.format_gib(avail)} GiB). {est_msg}Try increasing `gpu_memory_utilization`{cpu} or "
            f"decreasing `max_model_len` when initializing the engine." + docs)


def verdict_for(res: sizing.PlanResult, gpu: GpuSpec, v: Version, dtype: str,
                max_len_given: bool) -> Verdict:
    """Does it start? The first check vLLM would fail, in start-up order."""
    arch = res.inp.arch
    tp = res.inp.tensor_parallel_size
    limit = arch.max_position_embeddings
    if max_len_given and limit and res.max_model_len > limit:
        return Verdict(False, "config", (
            f"ValueError: User-specified max_model_len ({res.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={limit} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. ..."),
            f"--max-model-len {res.max_model_len} is above the model's {limit} positions")
    if arch.num_attention_heads % tp:
        return Verdict(False, "config", (
            f"ValueError: Total number of attention heads ({arch.num_attention_heads}) must be divisible by "
            f"tensor parallel size ({tp})."), f"{arch.num_attention_heads} heads do not split over {tp} GPUs")
    cc = gpu.compute_capability
    bf16_checkpoint = mem.dtype_bytes(arch.torch_dtype) == 2 and "bf" in arch.torch_dtype
    bf16 = dtype == "bfloat16" or (dtype == "auto" and bf16_checkpoint and not default("auto_dtype_bf16_fallback", v))
    if gpu.platform == "cuda" and cc and bf16 and parse_version(cc) < (8, 0, 0):
        return Verdict(False, "worker_init", (
            f"ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
            f"{gpu.name} GPU has compute capability {cc}. You can use float16 instead by explicitly setting "
            "the `dtype` flag in CLI, for example: --dtype=half."), f"{gpu.name} (sm {cc}) has no bfloat16")
    if res.weights_bytes > gpu.memory_bytes:
        return Verdict(False, "weight_loading", (
            "torch.OutOfMemoryError: CUDA out of memory. (while loading weights: "
            f"{res.weights_bytes / mem.GIB:.2f} GiB of weights on a {gpu.memory_bytes / mem.GIB:.2f} GiB GPU)"),
            "the weights alone are larger than the GPU")
    need = sizing.device_need_bytes(res)
    if res.inp.kv_cache_fixed and need > gpu.memory_bytes:
        return Verdict(False, "kv_cache_allocation", (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {res.kv_cache_bytes / mem.GIB:.2f} GiB. "
            f"GPU 0 has a total capacity of {gpu.memory_bytes / mem.GIB:.2f} GiB (allocating the KV cache of "
            "--kv-cache-memory-bytes)"),
            f"--kv-cache-memory-bytes {res.kv_cache_bytes / mem.GIB:.2f} GiB on top of the weights, activations and "
            f"CUDA graphs needs {need / mem.GIB:.2f} GiB of a {gpu.memory_bytes / mem.GIB:.2f} GiB GPU; the KV size "
            "is not capped by --gpu-memory-utilization")
    if not res.fits:
        why = ("weights and overhead use the whole share, nothing is left for the KV cache"
               if res.kv_cache_bytes <= 0 else
               f"one request of {res.max_model_len:,} tokens needs {res.request_kv_bytes / mem.GIB:.2f} GiB of KV "
               f"cache; only {res.kv_cache_bytes / mem.GIB:.2f} GiB is left")
        return Verdict(False, "kv_cache_allocation", kv_message(res, v), why)
    return Verdict(True, None, None, f"{res.max_concurrency:.2f} requests of {res.max_model_len:,} tokens fit at once")


#: A quantization fix is another checkpoint, never a flag on this one (vLLM reads the method from its config).
QUANTIZED_CHECKPOINT_NOTE = ("load a 4-bit checkpoint of this model instead (on the Hub usually ORG/NAME-AWQ, "
                             "NAME-GPTQ-Int4 or NAME-AWQ-INT4); vLLM reads the method from its config, so no "
                             "--quantization flag is added to this one")


Suggestion = tuple[dict[str, str | None], str]


def suggest_changes(res: sizing.PlanResult, verdict: Verdict, rows: list[dict[str, Any]],
                    min_conc: float | None) -> Suggestion:
    """Flag changes that make the configuration start (and reach --min-concurrency)."""
    want = min_conc or 1.0
    if verdict.starts and res.max_concurrency >= want:
        return {}, "no change needed"
    if verdict.stage in ("config", "worker_init"):
        return _refused_config_fix(res, verdict)
    suggestion = _whole_gpu_kv_cache(res, verdict, want) or _shorter_length(res, verdict, want) \
        or _what_if_fix(rows, want)
    return suggestion or ({}, "no single change in the what-if table is enough: see the table")


def _refused_config_fix(res: sizing.PlanResult, verdict: Verdict) -> Suggestion:
    """A configuration vLLM refuses before loading: the model's own maximum length, a dividing TP size, or
    float16 where the GPU has no bfloat16."""
    if verdict.stage == "worker_init":
        return {"--dtype": "half"}, "float16 instead of bfloat16 on this GPU"
    if "max_model_len" in (verdict.message or "") and res.inp.arch.max_position_embeddings:
        return {"--max-model-len": str(res.inp.arch.max_position_embeddings)}, "the model's own maximum length"
    return {}, "pick a --tensor-parallel-size that divides the attention heads"


def _whole_gpu_kv_cache(res: sizing.PlanResult, verdict: Verdict, want: float) -> Suggestion | None:
    """With --kv-cache-memory-bytes too large for the GPU: the largest KV cache it holds, when enough."""
    if res.inp.kv_cache_fixed and verdict.stage == "kv_cache_allocation" and res.request_kv_bytes > 0:
        room = sizing.whole_gpu_kv_bytes(res)
        if room >= res.request_kv_bytes * want:
            return {"--kv-cache-memory-bytes": str(int(room))}, (
                "the largest KV cache the GPU holds beside the weights, peaks and CUDA graphs (2% spare)")
    return None


def _shorter_length(res: sizing.PlanResult, verdict: Verdict, want: float) -> Suggestion | None:
    """The largest --max-model-len (a multiple of 1024) at which `want` requests fit in the KV cache there is."""
    if res.kv_cache_bytes > 0 and verdict.stage != "weight_loading":
        length = len_for_concurrency(res, want)
        if length >= mem.LEN_STEP:
            auto = ("; or --max-model-len auto, which this release fits to the KV memory itself"
                    if want <= 1 and default("max_model_len_auto", res.inp.version) else "")
            return {"--max-model-len": str(length)}, (
                f"largest --max-model-len (multiple of 1024) with {want:g} request(s) at once{auto}")
    return None


def _what_if_fix(rows: list[dict[str, Any]], want: float) -> Suggestion | None:
    """The smallest change the what-if table shows starting with `want` requests: a flag first (the rows'
    change_size order), the note on a 4-bit checkpoint only when no flag is enough."""
    working = sorted((r for r in rows[1:] if r["fits"] and r["max_concurrency"] >= want),
                     key=lambda r: r.get("change_size", 0))
    for row in working:
        if row.get("flags"):
            return dict(row["flags"]), f"what-if '{row['label']}', the smallest change in the table that starts"
    if any(r["label"].startswith("4-bit") for r in working):
        return {}, QUANTIZED_CHECKPOINT_NOTE
    return None
