"""Memory arithmetic shared by the log advice and the planner.

vLLM sizes the KV cache as: budget = GPU memory x utilization; KV room = budget - weights - overhead;
tokens = room / bytes per token. Every number the doctor recommends comes from these functions, so the
advice printed for a log and the figures `plan` predicts can never disagree.
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
