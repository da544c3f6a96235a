"""KV-cache arithmetic: bytes per token, per request, and the tokens and lengths a KV pool holds.

Attention layers store a K and a V vector (or MLA's latent) per token per layer; sliding-window layers keep
only their window; recurrent-state layers of hybrid models (Mamba-1, Mamba-2, Gated DeltaNet) keep one state
per sequence, which vLLM fits into a unified page with the attention blocks and groups into KV cache groups.
From these come what vLLM logs: 'GPU KV cache size: N tokens', 'Maximum concurrency', the unified block
size, and the longest --max-model-len whose one request fits. Pure functions over an ArchSpec and numbers.
"""

from __future__ import annotations

import math
from typing import Any

from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.memory import (
    BLOCK_SIZE,
    GIB,  # noqa: F401 (the docstring examples count in GiB)
    blocks_for,
    kv_heads_per_rank,
    layers_per_stage,
)


def kv_bytes_per_token_layer(arch: ArchSpec, tp: int, kv_bytes: float) -> float:
    """KV bytes one layer stores per token on one rank (vLLM's page size / block size)."""
    if arch.is_mla:
        return (arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)) * kv_bytes
    return 2 * kv_heads_per_rank(arch.num_key_value_heads, tp) * arch.head_size * kv_bytes


def stage_kinds(arch: ArchSpec, pp: int = 1) -> list[str]:
    """Layer kinds of the largest pipeline stage."""
    kinds = arch.kinds()
    n = layers_per_stage(len(kinds), pp)
    # the first stage: same length as the largest; sliding patterns repeat, so any stage is representative
    return kinds[:n]


def model_kv_bytes_per_token(arch: ArchSpec, tp: int = 1, pp: int = 1, kv_bytes: float = 2) -> int:
    """KV bytes per token on one rank over all its attention layers (the basis of vLLM's logged token count);
    recurrent-state layers keep a state per sequence instead (state_bytes_per_layer), MLP-only layers nothing."""
    n = sum(1 for k in stage_kinds(arch, pp) if k in ("full", "sliding"))
    return int(n * kv_bytes_per_token_layer(arch, tp, kv_bytes))


# --- recurrent state of hybrid models (vLLM's MambaStateShapeCalculator, one sequence, one layer, one rank) -----

def mamba1_state_elements(d_inner: int, d_state: int, conv_kernel: int = 4, tp: int = 1) -> tuple[int, int]:
    """(conv, ssm) elements of a Mamba-1 layer: the convolution keeps the last kernel - 1 inputs of every
    inner channel, the selective scan a d_state vector per inner channel; channels split over TP.

    >>> mamba1_state_elements(8192, 16, 4)  # Jamba-v0.1: expand 2 x hidden 4096
    (24576, 131072)
    """
    channels = d_inner // max(1, tp)
    return channels * (conv_kernel - 1), channels * d_state


def mamba2_extra_groups(n_groups: int, tp: int) -> int:
    """B/C groups vLLM adds so every TP rank holds whole groups (n_groups 1 is replicated to every rank).

    >>> mamba2_extra_groups(8, 4), mamba2_extra_groups(1, 4)
    (0, 3)
    """
    return 0 if n_groups % max(1, tp) == 0 else max(1, tp) - n_groups


def mamba2_state_elements(d_inner: int, d_state: int, n_groups: int, heads: int, head_dim: int,
                          conv_kernel: int = 4, tp: int = 1) -> tuple[int, int]:
    """(conv, ssm) elements of a Mamba-2 layer: the convolution runs over x, B and C (d_inner + 2 x groups x
    d_state channels, last kernel - 1 inputs each), the scan keeps a head_dim x d_state matrix per head.

    >>> mamba2_state_elements(8192, 128, 8, 128, 64, 4)  # Nemotron-H-8B
    (30720, 1048576)
    >>> mamba2_state_elements(8192, 128, 8, 128, 64, 4, tp=2)
    (15360, 524288)
    """
    tp = max(1, tp)
    groups = n_groups + mamba2_extra_groups(n_groups, tp)
    conv_dim = d_inner + 2 * groups * d_state
    return conv_dim // tp * (conv_kernel - 1), heads // tp * head_dim * d_state


def gated_delta_net_state_elements(key_heads: int, value_heads: int, key_dim: int, value_dim: int,
                                   conv_kernel: int = 4, tp: int = 1) -> tuple[int, int]:
    """(conv, ssm) elements of a Gated DeltaNet layer: the short convolution over q, k and v, and a key_dim x
    value_dim state per value head.

    >>> gated_delta_net_state_elements(16, 32, 128, 128, 4)  # Qwen3-Next, Qwen3.5-35B-A3B
    (24576, 524288)
    """
    tp = max(1, tp)
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    return conv_dim // tp * (conv_kernel - 1), value_heads // tp * key_dim * value_dim


def state_elements(arch: ArchSpec, tp: int = 1) -> tuple[int, int]:
    """(conv, ssm) elements one recurrent-state layer of `arch` keeps per sequence on one rank."""
    la = {k: int(v or 0) for k, v in (arch.linear_attention or {}).items()}
    kernel = la.get("conv_kernel") or 4
    if arch.state_kind == "mamba1":
        return mamba1_state_elements(la.get("d_inner", 0), la.get("d_state", 0), kernel, tp)
    if arch.state_kind == "mamba2":
        return mamba2_state_elements(la.get("d_inner", 0), la.get("d_state", 0), la.get("n_groups") or 1,
                                     la.get("heads", 0), la.get("head_dim", 0), kernel, tp)
    return gated_delta_net_state_elements(la.get("key_heads", 0), la.get("value_heads", 0), la.get("key_dim", 0),
                                          la.get("value_dim", 0), kernel, tp)


def state_bytes_per_layer(arch: ArchSpec, tp: int = 1, conv_bytes: float = 2, ssm_bytes: float | None = None) -> int:
    """Bytes of one recurrent-state layer per sequence on one rank (vLLM's MambaSpec page before padding): the
    convolution state in `conv_bytes` (the model dtype), the SSM state in `ssm_bytes` (default: the same)."""
    conv, ssm = state_elements(arch, tp)
    return int(conv * conv_bytes + ssm * (conv_bytes if ssm_bytes is None else ssm_bytes))


def hybrid_block_size(arch: ArchSpec, tp: int = 1, kv_bytes: float = 2, conv_bytes: float = 2,
                      ssm_bytes: float | None = None, align: int = BLOCK_SIZE) -> int:
    """vLLM's unified page for attention + state models: the attention block grows in steps of `align` tokens
    until one attention page holds a state page ('Setting attention block size to N tokens to ensure that
    attention page size is >= mamba page size'); the state page is then padded to match."""
    return unified_block_size(kv_bytes_per_token_layer(arch, tp, kv_bytes),
                              state_bytes_per_layer(arch, tp, conv_bytes, ssm_bytes), align)


def unified_block_size(kv_bytes_per_token: float, state_page_bytes: float, align: int = BLOCK_SIZE) -> int:
    """Attention block size (tokens) whose page is the smallest multiple of `align` tokens holding a state page.

    >>> unified_block_size(4096, 2146304)  # Qwen3.5-4B, bf16 KV, fp32 SSM state: 'block size to 528 tokens'
    528
    >>> unified_block_size(1024, 2146304)  # Qwen3.5-35B-A3B, fp8 KV: 2096
    2096
    """
    if kv_bytes_per_token <= 0 or state_page_bytes <= 0:
        return align
    return align * math.ceil(state_page_bytes / (align * kv_bytes_per_token))


def hybrid_groups(attention_layers: int, state_layers: int) -> tuple[int, int, int]:
    """(group size, attention groups, state groups) of vLLM's KV cache groups for a hybrid model: every group
    holds as many layers as the rarer kind has, the last group of the other kind padded ('Add 3 padding
    layers, may waste at most 6.25% KV cache memory'); all groups share group-size tensors of one page each.

    >>> hybrid_groups(8, 24), hybrid_groups(17, 48)
    ((8, 1, 3), (17, 1, 3))
    """
    if attention_layers <= 0 or state_layers <= 0:
        n = max(attention_layers, state_layers, 1)
        return n, int(attention_layers > 0), int(state_layers > 0)
    size = min(attention_layers, state_layers)
    return size, math.ceil(attention_layers / size), math.ceil(state_layers / size)


def mamba_cache_mode(prefix_caching: bool) -> str:
    """vLLM's Mamba cache mode for a hybrid model's state: 'align' with prefix caching, 'none' without
    (vllm/model_executor/models/config.py MambaModelConfig.verify_and_update_config; from 0.28.0
    vllm-project/vllm#50991 makes 'align' the default mode prefix caching selects, and Gated DeltaNet models
    never support 'all'). Releases before 0.28.0 give an explicit --enable-prefix-caching on a Mamba-1/2 model
    that declares SupportsMambaPrefixCaching mode 'all' instead, which the planner does not model.

    >>> mamba_cache_mode(True), mamba_cache_mode(False)
    ('align', 'none')
    """
    return "align" if prefix_caching else "none"


def state_pages_per_request(mode: str, max_model_len: int = 0, block_size: int = BLOCK_SIZE,
                            speculative_blocks: int = 0) -> int:
    """Pages one request of max_model_len holds in a state (Mamba / Gated DeltaNet) layer, as vLLM's
    MambaSpec.max_memory_usage_bytes counts them for the concurrency and the token count
    (vllm/v1/kv_cache_interface.py): 'none' 1 + speculative blocks (the running state); 'align' 2 +
    speculative blocks (the running state and the block-aligned copy prefix caching keeps); 'all'
    ceil(max_model_len / block) (a state at every block boundary).

    >>> state_pages_per_request("none"), state_pages_per_request("align")
    (1, 2)
    >>> state_pages_per_request("all", 8192, 784)
    11
    """
    if mode == "all":
        return blocks_for(max_model_len, block_size)
    return (2 if mode == "align" else 1) + speculative_blocks


def hybrid_concurrency(kv_cache_bytes: float, page_bytes: float, group_size: int, attention_groups: int,
                       state_groups: int, max_model_len: int, block_size: int, state_pages: int = 1) -> float:
    """Requests of max_model_len that fit (vLLM's 'Maximum concurrency'): whole blocks of group_size pages,
    over the blocks one request takes: ceil(len / block) per attention group, `state_pages` per state group
    (state_pages_per_request: 1; 2 in the 'align' cache mode prefix caching turns on).

    >>> round(hybrid_concurrency(12.85 * GIB, 528 * 4096, 8, 1, 3, 1024, 528), 2)  # Qwen3.5-4B, 0.22.0
    159.4

    Qwen3.8-27B bf16 on an RTX PRO 6000, vLLM 0.29.0, 8,192 tokens: 16 attention + 48 Gated DeltaNet layers,
    a 784-token block of 4,096 B a token and layer; prefix caching on by default ('align'): 11 + 3 x 2 = 17
    blocks of 16 pages a request, the printed 38.35x from 31.24 GiB (14 blocks, one state page, would say 46.6x):

    >>> round(hybrid_concurrency(31.24 * GIB, 784 * 4096, 16, 1, 3, 8192, 784, state_pages=2), 2)
    38.35
    >>> round(hybrid_concurrency(31.24 * GIB, 784 * 4096, 16, 1, 3, 8192, 784, state_pages=1), 2)
    46.57
    """
    if kv_cache_bytes <= 0 or page_bytes <= 0 or group_size <= 0:
        return 0.0
    blocks = int(kv_cache_bytes // (page_bytes * group_size))
    per_request = attention_groups * blocks_for(max_model_len, block_size) + state_groups * state_pages
    return blocks / per_request if per_request else 0.0


def hybrid_kv_tokens(kv_cache_bytes: float, page_bytes: float, group_size: int, groups: int, block_size: int,
                     concurrency_: float, max_model_len: int, by_concurrency: bool) -> int:
    """vLLM's 'GPU KV cache size' for a hybrid model: max_concurrency x max_model_len in releases that print
    it so (by_concurrency), else whole blocks divided among the groups, times the block size.

    >>> hybrid_kv_tokens(6.9 * GIB, 1056 * 2048, 10, 4, 1056, 1.357, 262144, False)  # 0.19.1 blocks formula
    89760
    """
    if by_concurrency:
        return int(concurrency_ * max_model_len)
    if kv_cache_bytes <= 0 or page_bytes <= 0 or group_size <= 0:
        return 0
    blocks = int(kv_cache_bytes // (page_bytes * group_size))
    return blocks // max(1, groups) * block_size


def tokens_by_concurrency(max_concurrency: float, max_model_len: int) -> int:
    """'GPU KV cache size' as releases from 0.22 print it for every model: int(max_concurrency x max_model_len)
    (vllm/v1/core/kv_cache_utils.py 0.30.0 get_kv_cache_capacity), so a sliding-window layer counts only its
    window: gpt-oss-20b on a GB10 at 32,768 tokens, 60.08x -> 1,968,672 tokens where whole blocks of all layers
    would give about half.

    >>> tokens_by_concurrency(60.08, 32768)
    1968701
    """
    return int(max_concurrency * max_model_len)


def sliding_tokens_needed(window: int, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Tokens a sliding-window layer keeps for one request (V1 SlidingWindowSpec, before block rounding)."""
    return min(window - 1 + max_num_batched_tokens, max_model_len)


def request_kv_bytes(arch: ArchSpec, max_model_len: int, tp: int = 1, pp: int = 1, kv_bytes: float = 2,
                     max_num_batched_tokens: int = 2048, block_size: int = BLOCK_SIZE,
                     window_aware: bool = True, state_pages: int = 1) -> int:
    """KV memory one request of max_model_len needs on one rank: vLLM's max_memory_usage_bytes summed over
    layers. Full layers: ceil(len / block) pages; sliding layers: ceil(min(window - 1 + batched, len) /
    block) + 1 pages (V1); state layers: `state_pages` pages whatever the length; window_aware=False counts
    every attention layer as full. A hybrid model's `block_size` is its unified block (hybrid_block_size)."""
    page = block_size * kv_bytes_per_token_layer(arch, tp, kv_bytes)
    total = 0.0
    for kind in stage_kinds(arch, pp):
        if kind == "none":
            continue
        if kind == "linear":
            pages = state_pages  # one (padded) state page per sequence, whatever its length
        elif kind == "sliding" and window_aware and arch.sliding_window:
            need = sliding_tokens_needed(arch.sliding_window, max_model_len, max_num_batched_tokens)
            pages = blocks_for(need, block_size) + 1
        else:
            pages = blocks_for(max_model_len, block_size)
        total += pages * page
    return int(total)


def kv_cache_tokens(kv_cache_bytes: float, bytes_per_token: float, block_size: int = BLOCK_SIZE) -> int:
    """Tokens vLLM reports for a KV pool: whole blocks over all layers, times the block size."""
    if kv_cache_bytes <= 0 or bytes_per_token <= 0:
        return 0
    return int(kv_cache_bytes // (bytes_per_token * block_size)) * block_size


def max_model_len_for(arch: ArchSpec, kv_cache_bytes: float, limit: int, **kw: Any) -> int:
    """Largest max_model_len (any integer up to `limit`) whose one request fits: vLLM's binary search."""
    if kv_cache_bytes <= 0:
        return 0
    lo, hi = 0, int(limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if request_kv_bytes(arch, mid, **kw) <= kv_cache_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo
