"""Memory arithmetic of a GPU's budget: pure functions over numbers, and the `mem.` face rule templates see.

vLLM sizes the KV cache as: budget = GPU memory x utilization; KV room = budget - weights - overhead;
tokens = room / bytes per token. This module holds the units (GiB, blocks, dtype bytes), the budget and what
fits in it (tokens, concurrency, the longest length, the utilization that frees or adds memory); every number
the advice recommends comes from here, and the rules reach it as `mem.X`. What a model needs goes in
beside it: archspec.py (the model's shape), kvcache.py (KV bytes per token and per request), weights.py
(parameters and their bytes), overhead.py (activations, non-torch memory, CUDA graphs); sizing.py puts them
together for one start-up, so the advice printed for a log and the figures `plan` predicts never disagree.
Nothing here reads a file, a release default or a flag: the coefficients a release sets come in as
arguments, and reading sizes out of log text is units.py's job.
"""

from __future__ import annotations

import math

GIB = 1 << 30
MIB = 1 << 20
GB = 10**9

#: vLLM rounds nothing, but operators think in powers of two: suggested lengths are multiples of this.
LEN_STEP = 1024



def round_down(value: float, step: int = LEN_STEP) -> int:
    """The largest multiple of `step` not above `value` (0 when value < step)."""
    if value <= 0 or not math.isfinite(value):
        return 0
    return int(value // step) * step


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_value: float) -> int:
    """Standard attention: one K and one V vector per KV head per layer."""
    return int(2 * layers * kv_heads * head_dim * bytes_per_value)


def tokens_in(kv_cache_bytes: float, bytes_per_token: float) -> int:
    """How many tokens of KV cache fit in `kv_cache_bytes`."""
    if bytes_per_token <= 0 or kv_cache_bytes <= 0:
        return 0
    return int(kv_cache_bytes // bytes_per_token)


def concurrency(kv_cache_tokens: float, max_model_len: float) -> float:
    """Requests of full length that fit at once (vLLM's 'Maximum concurrency ... x')."""
    if max_model_len <= 0:
        return 0.0
    return kv_cache_tokens / max_model_len


def bytes_per_token_from_need(required_gib: float, max_model_len: int) -> float:
    """Bytes of KV per token implied by vLLM's 'X GiB KV cache is needed' for max_model_len tokens."""
    if max_model_len <= 0:
        return 0.0
    return required_gib * GIB / max_model_len


def max_len_that_fits(available_gib: float, required_gib: float, max_model_len: int,
                      estimate: int | None = None) -> int:
    """Largest --max-model-len (multiple of 1024) whose one request fits in the available KV cache.

    vLLM's own estimate (a binary search that knows sliding windows) wins when printed; otherwise the
    need scales linearly with the length.
    """
    if estimate:
        fitted = estimate
    elif required_gib > 0 and max_model_len > 0:
        fitted = available_gib / required_gib * max_model_len
    else:
        return 0
    stepped = round_down(fitted)
    return stepped if stepped else int(fitted)


def utilization_for(extra_gib: float, total_gib: float, current_utilization: float,
                    ceiling: float = 0.98) -> float | None:
    """Utilization that adds `extra_gib` to the budget; None when it would pass the ceiling."""
    if total_gib <= 0:
        return None
    wanted = math.ceil((current_utilization + extra_gib / total_gib) * 100) / 100
    return wanted if wanted <= ceiling else None


def utilization_within_free(free_gib: float, total_gib: float, margin: float = 0.02) -> float:
    """The highest utilization whose budget fits in memory that is free now, less a safety margin."""
    if total_gib <= 0:
        return 0.0
    return max(0.0, math.floor((free_gib / total_gib - margin) * 100) / 100)


def budget_gib(total_gib: float, utilization: float) -> float:
    """The share of the GPU vLLM may use."""
    return total_gib * utilization


def human_tokens(tokens: float) -> str:
    """35000 -> '35,000' (what operators read fastest)."""
    return f"{int(tokens):,}"


#: Tokens per KV block on CUDA (vLLM's default --block-size).
BLOCK_SIZE = 16
#: Bytes per element for the dtypes vLLM accepts for --dtype / --kv-cache-dtype.
DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "float16": 2, "half": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1,
}
#: Bytes of sampler working memory per (request row x vocabulary entry) alive at once in the profiling run's
#: top-k/top-p path: 16-bit logits from the LM head (2), their fp32 copy (4), sorted values (4) and int64 sort
#: indices (8), softmax of the sorted values (4), its cumulative sum (4), the top-p mask (1), the int64 inverse
#: permutation (8) and the logits gathered back (4).
SAMPLER_BYTES_PER_LOGIT = 39
#: The same with FlashInfer's top-p/top-k kernel (no sort): fp32 logits, their temperature-scaled copy and the
#: fp32 probabilities.
FLASHINFER_SAMPLER_BYTES_PER_LOGIT = 12


def sampler_hidden_bytes(hidden_size: int, rows: int, batched_tokens: int, act_bytes: float = 2,
                         per_row: int = 2, whole_batch: bool = True) -> int:
    """Hidden states alive in V1's dummy sampler run (v1/worker/gpu_model_runner.py profile_run and
    _dummy_sampler_run): `per_row` hidden vectors for each sampled row (the rows gathered from the forward's
    output, and from 0.9.0 their torch.rand_like copy that compute_logits reads) and, from 0.9.2, the forward's
    whole output over `batched_tokens` tokens, which profile_run holds until the sampler returns.

    >>> sampler_hidden_bytes(4096, 1024, 8192) == (8192 + 2 * 1024) * 4096 * 2
    True
    >>> sampler_hidden_bytes(4096, 1024, 8192, per_row=1, whole_batch=False) == 1024 * 4096 * 2
    True
    """
    vectors = per_row * rows + (batched_tokens if whole_batch else 0)
    return int(vectors * hidden_size * act_bytes)


def topk_topp_buffer_bytes(sm_count: int, rows: int, vocab_size: int) -> int:
    """The fp32 scratch rows of vLLM's Triton top-k/top-p kernel (v1/sample/ops/topk_topp_triton.py 0.17.0-0.19.0
    apply_top_k_top_p_triton: one program per row up to the GPU's SM count, and a cached buffer of
    min(next_power_of_2(programs), SMs) x vocabulary float32 values); none below 8 rows (the PyTorch path) or when
    the SM count is unknown (0).

    >>> topk_topp_buffer_bytes(132, 1024, 128256) == 132 * 128256 * 4  # H100 SXM: 132 SMs
    True
    >>> topk_topp_buffer_bytes(132, 40, 1000), topk_topp_buffer_bytes(132, 4, 1000), topk_topp_buffer_bytes(0, 64, 10)
    (256000, 0, 0)
    """
    if sm_count <= 0 or rows < 8:
        return 0
    programs = min(sm_count, rows)
    return int(min(1 << (programs - 1).bit_length(), sm_count) * vocab_size * 4)


def dtype_bytes(dtype: str | None, default: float = 2) -> float:
    """Bytes per element of a torch dtype name ('bfloat16', 'torch.float16', 'auto' -> default)."""
    if not dtype:
        return default
    name = str(dtype).lower().replace("torch.", "")
    return DTYPE_BYTES.get(name, default)


def kv_value_bytes(kv_cache_dtype: str | None, model_dtype_bytes: float = 2) -> float:
    """Bytes per cached K/V element: 1 for the fp8 variants, the model dtype for 'auto'."""
    if not kv_cache_dtype or kv_cache_dtype == "auto":
        return model_dtype_bytes
    name = kv_cache_dtype.lower()
    if name.startswith("fp8") or name in ("int8", "int8_per_token_head", "fp8_per_token_head"):
        return 1
    if name.startswith(("nvfp4", "int4", "turboquant_4bit", "ultraquant_4bit")):
        return 0.5
    return DTYPE_BYTES.get(name, model_dtype_bytes)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads each tensor-parallel rank holds: split across ranks, replicated when fewer than ranks."""
    return max(1, int(kv_heads) // max(1, int(tp)))


def layers_per_stage(layers: int, pp: int) -> int:
    """Layers on the largest pipeline stage (vLLM gives the remainder to the last stages)."""
    return math.ceil(int(layers) / max(1, int(pp)))


def blocks_for(tokens: float, block_size: int = BLOCK_SIZE) -> int:
    """KV blocks one request of `tokens` tokens occupies."""
    return math.ceil(max(0, tokens) / block_size)


def format_gib(num_bytes: float) -> str:
    """vLLM's format_gib: bytes / 2^30 rounded to 2 decimals, no zero padding ('16.0', '1.5')."""
    return f"{round(num_bytes / GIB, 2)}"


def device_need(weights: float, overhead: float, graphs_outside: float, kv_cache: float) -> float:
    """Device memory one rank holds once its KV cache is allocated: weights, the profiled peaks (overhead), CUDA
    graphs captured outside the budget and the KV cache. With --kv-cache-memory-bytes nothing caps this at the
    utilization share, so it must fit the whole GPU.

    >>> device_need(10.0, 2.0, 1.0, 8.0), device_need(10.0, 2.0, 0.0, -3.0)
    (21.0, 12.0)
    """
    return weights + overhead + graphs_outside + max(0.0, kv_cache)


def lower_utilization(current: float | None, free_gib: float, total_gib: float | None,
                      floor: float = 0.5) -> float:
    """Utilization that leaves `free_gib` more outside vLLM's budget (for warmup, graphs, other tenants).

    Without the GPU total, step down by 0.05, the smallest change that usually clears a warmup OOM.

    >>> lower_utilization(0.9, 2.0, 80.0), lower_utilization(0.9, 2.0, None)
    (0.87, 0.85)
    """
    now = current if current else 0.9
    wanted = now - free_gib / total_gib if total_gib and total_gib > 0 else now - 0.05
    return max(floor, math.floor(wanted * 100) / 100)
