"""Memory arithmetic shared by the log advice and the planner: pure functions over numbers.

vLLM sizes the KV cache as: budget = GPU memory x utilization; KV room = budget - weights - overhead;
tokens = room / bytes per token. Every number the doctor recommends comes from these functions, so the
advice printed for a log and the figures `plan` predicts can never disagree. Nothing here reads a file, a
release default or a flag: the coefficients a release sets come in as arguments (sizing.py looks them up in
releases.py), and reading sizes out of log text is units.py's job.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

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


# ---------------------------------------------------------------------------------------------------------
# Model arithmetic for the planner (`vllm-doctor plan`). Everything below is pure arithmetic on numbers from a
# model's config.json and vLLM's flags; the catalog section D formulas (KV cache) and D5 (available memory)
# are the source. Nothing here reads files.
# ---------------------------------------------------------------------------------------------------------


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
#: Non-torch memory (CUDA context growth, cuBLAS/NCCL workspaces) at one GPU, and the extra when several GPUs
#: talk: NCCL plus vLLM's custom all-reduce buffers on data-centre GPUs; GeForce cards lack GPU peer-to-peer
#: access, vLLM disables its custom all-reduce there and only NCCL's buffers remain (catalog D5 'non-torch').
NON_TORCH_SINGLE = 0.10 * GIB
NON_TORCH_MULTI_GPU = 1.40 * GIB
NON_TORCH_MULTI_GPU_NO_P2P = 0.15 * GIB
NO_P2P_GPUS = re.compile(r"geforce|rtx ?[2-5]0[5-9]0|titan", re.IGNORECASE)
#: CUDA-graph pool: a fixed part plus a part per layer (graphs are captured per batch size, and the piecewise
#: graphs keep per-layer buffers). Observed 'Graph capturing finished ... took' figures are 0.2-0.5 GiB.
CUDA_GRAPH_BASE = 0.10 * GIB
CUDA_GRAPH_PER_LAYER = 0.006 * GIB
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


def layer_kind(name: str) -> str:
    """A config.json layer type or a Nemotron-H pattern letter -> 'full', 'sliding', 'linear' or 'none'.

    >>> [layer_kind(t) for t in ("linear_attention", "sliding_attention", "M", "*", "-", "E", "mamba")]
    ['linear', 'sliding', 'linear', 'full', 'none', 'none', 'linear']
    """
    t = name.lower()
    if t in ("m", "mamba") or "linear" in t or t == "ssm":
        return "linear"
    if t in ("-", "e", "mlp", "moe", "none"):
        return "none"
    if "sliding" in t or "local" in t:
        return "sliding"
    return "full"


@dataclass
class ArchSpec:
    """The numbers of a model's config.json that the memory arithmetic needs (text model only)."""

    name: str
    layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None
    torch_dtype: str = "bfloat16"
    # mixture of experts
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_k_dense_layers: int = 0
    moe_layer_freq: int = 1
    # sliding window: `layer_types` gives 'sliding'/'full' per layer; None with a window = every layer
    sliding_window: int | None = None
    layer_types: list[str] | None = None
    # multi-head latent attention (DeepSeek-V2/V3)
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # what the checkpoint ships
    quantization: str | None = None
    quant_bits: float | None = None
    extra_params: int = 0  # parameters outside the text model (a vision tower), loaded with the weights
    # recurrent-state layers (hybrid models): `state_kind` 'gated_delta_net' (key_heads, value_heads, key_dim,
    # value_dim, conv_kernel), 'mamba1' (d_inner, d_state, conv_kernel) or 'mamba2' (d_inner, d_state, n_groups,
    # heads, head_dim, conv_kernel); the layout is `layer_types` ('linear' / 'full' / 'none' per layer) or every
    # `interval`-th layer, from `offset` (default interval - 1), is full attention
    linear_attention: dict[str, int] | None = None
    state_kind: str = "gated_delta_net"
    ssm_dtype: str | None = None  # the recurrent state's dtype when the model fixes it (Qwen3.5: float32)
    mlp_matrices: int = 3  # gate, up and down (SwiGLU); 2 for a plain up/down MLP (Nemotron-H's relu2)
    vision: dict[str, int] | None = None  # vision encoder: hidden_size, intermediate_size, tokens_per_item,
    #                                       patches_per_item, patch_pixels (models.yaml `vision`)
    params_b: float | None = None  # published total, for cross-checks only

    @property
    def head_size(self) -> int:
        """head_dim when given, else hidden_size / num_attention_heads."""
        return int(self.head_dim or self.hidden_size // self.num_attention_heads)

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_hybrid(self) -> bool:
        """Linear-attention (state) layers mixed with attention layers."""
        return bool(self.linear_attention)

    def kinds(self) -> list[str]:
        """'full', 'sliding', 'linear' (a recurrent-state layer: Gated DeltaNet or Mamba) or 'none' (an
        MLP-only layer, no cache) for every layer."""
        if self.layer_types:
            return [layer_kind(t) for t in self.layer_types]
        if self.linear_attention:
            every = max(1, int(self.linear_attention.get("interval") or 4))
            offset = int(self.linear_attention.get("offset", every - 1))
            return ["full" if i % every == offset else "linear" for i in range(self.layers)]
        if self.sliding_window:
            return ["sliding"] * self.layers
        return ["full"] * self.layers


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


def hybrid_concurrency(kv_cache_bytes: float, page_bytes: float, group_size: int, attention_groups: int,
                       state_groups: int, max_model_len: int, block_size: int, state_pages: int = 1) -> float:
    """Requests of max_model_len that fit (vLLM's 'Maximum concurrency'): whole blocks of group_size pages,
    over the blocks one request takes: ceil(len / block) per attention group, `state_pages` per state group
    (1; 2 in the 'align' cache mode prefix caching turns on).

    >>> round(hybrid_concurrency(12.85 * GIB, 528 * 4096, 8, 1, 3, 1024, 528), 2)  # Qwen3.5-4B, 0.22.0
    159.4
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


# --- parameters and weights -------------------------------------------------------------------------------

def param_breakdown(arch: ArchSpec) -> dict[str, int]:
    """Parameter count by part: embeddings, lm_head, attention, dense MLP, experts, router, norms."""
    h, L = arch.hidden_size, arch.layers
    embed = arch.vocab_size * h
    lm_head = 0 if arch.tie_word_embeddings else arch.vocab_size * h
    if arch.is_mla:
        heads = arch.num_attention_heads
        qk = (arch.qk_nope_head_dim or 0) + (arch.qk_rope_head_dim or 0)
        q = (h * arch.q_lora_rank + arch.q_lora_rank * heads * qk) if arch.q_lora_rank else h * heads * qk
        kv_a = h * (arch.kv_lora_rank + (arch.qk_rope_head_dim or 0))
        kv_b = arch.kv_lora_rank * heads * ((arch.qk_nope_head_dim or 0) + (arch.v_head_dim or 0))
        o = heads * (arch.v_head_dim or 0) * h
        attn_layer = q + kv_a + kv_b + o
    else:
        d = arch.head_size
        attn_layer = h * arch.num_attention_heads * d * 2 + h * arch.num_key_value_heads * d * 2
    kinds = arch.kinds()
    n_state, n_mlp_only = kinds.count("linear"), kinds.count("none")
    attention_total = (L - n_state - n_mlp_only) * attn_layer + n_state * state_layer_params(arch)
    # pattern models (Nemotron-H) put the MLP in layers of its own; the others have one in every layer
    mlp_layers = n_mlp_only if n_mlp_only else L
    dense_layer = arch.mlp_matrices * h * arch.intermediate_size
    if arch.is_moe:
        moe_i = arch.moe_intermediate_size or arch.intermediate_size
        n_moe = sum(1 for i in range(arch.first_k_dense_layers, L) if (i + 1) % max(1, arch.moe_layer_freq) == 0)
        n_dense = mlp_layers - n_moe
        experts = n_moe * arch.num_experts * 3 * h * moe_i
        shared = n_moe * 3 * h * (arch.shared_expert_intermediate_size or arch.num_shared_experts * moe_i)
        router = n_moe * h * arch.num_experts
    else:
        n_dense, experts, shared, router = mlp_layers, 0, 0, 0
    return {
        "embeddings": embed,
        "lm_head": lm_head,
        "attention": attention_total,
        "mlp": n_dense * dense_layer + shared,
        "experts": experts,
        "router": router,
        "norms": L * 2 * h + h,
        "other": arch.extra_params,
    }


def state_layer_params(arch: ArchSpec) -> int:
    """Parameters of one recurrent-state layer's mixer: input projection, short convolution, output projection
    (and, for Mamba, the dt/A/D vectors and Mamba-1's x/dt projections)."""
    la = {k: int(v or 0) for k, v in (arch.linear_attention or {}).items()}
    h, kernel = arch.hidden_size, la.get("conv_kernel") or 4
    if arch.state_kind == "mamba1":
        d, n = la.get("d_inner", 0), la.get("d_state", 0)
        dt_rank = math.ceil(h / 16)
        return h * 2 * d + d * kernel + d * (dt_rank + 2 * n) + dt_rank * d + d * n + 2 * d + d * h
    if arch.state_kind == "mamba2":
        d, n, g, heads = la.get("d_inner", 0), la.get("d_state", 0), la.get("n_groups") or 1, la.get("heads", 0)
        return h * (2 * d + 2 * g * n + heads) + (d + 2 * g * n) * kernel + d * h + 3 * heads + d
    kh, vh, kd, vd = (la.get(k, 0) for k in ("key_heads", "value_heads", "key_dim", "value_dim"))
    # in_proj (q, k, v, gate z, and the b/a decay heads), the short conv, and out_proj
    return h * (2 * kh * kd + 2 * vh * vd + 2 * vh) + (2 * kh * kd + vh * vd) * kernel + vh * vd * h


def param_count(arch: ArchSpec) -> int:
    """Total parameters the checkpoint loads (text model plus any vision tower)."""
    return sum(param_breakdown(arch).values())


#: Quantization method -> (bytes per quantized weight, which parts it quantizes). Group-quantized 4-bit
#: formats carry an fp16 scale and a 4-bit zero point per 128 weights: 0.5 + (2 + 0.5) / 128 bytes.
QUANT_FORMATS: dict[str, tuple[float, str]] = {
    "int4": (0.5 + 2.5 / 128, "linear"),
    "int8": (1.0 + 4 / 4096, "linear"),
    "fp8": (1.0 + 4 / 16384, "linear"),
    "mxfp4": (0.5 + 1 / 32, "experts"),
    "nvfp4": (0.5 + 1 / 16, "linear"),
    "nf4": (0.5 + 4 / 64, "linear"),
    "gguf": (4.85 / 8, "linear"),
}
#: --quantization names (and checkpoint quant_method values) -> format.
QUANT_ALIASES = {
    "awq": "int4", "awq_marlin": "int4", "gptq": "int4", "gptq_marlin": "int4", "marlin": "int4",
    "gptq_marlin_24": "int4", "hqq": "int4", "quark": "fp8", "moe_wna16": "int4",
    "fp8": "fp8", "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8", "modelopt": "fp8", "fp8_e4m3": "fp8",
    "experts_int8": "int8", "int8": "int8", "w8a8": "int8", "smoothquant": "int8",
    "mxfp4": "mxfp4", "modelopt_fp4": "nvfp4", "nvfp4": "nvfp4",
    "bitsandbytes": "nf4", "gguf": "gguf",
}


#: Bits per weight of llama.cpp's GGUF types (block scales included; K-quant mixes: the average of the file,
#: whose attention-V, FFN-down and output tensors use the next larger type).
GGUF_BITS = {
    "f32": 32.0, "f16": 16.0, "bf16": 16.0, "q8_0": 8.5, "q6_k": 6.5625, "q5_k_m": 5.69, "q5_k_s": 5.54,
    "q5_0": 5.5, "q5_1": 6.0, "q4_k_m": 4.85, "q4_k_s": 4.58, "q4_0": 4.5, "q4_1": 5.0, "iq4_xs": 4.25,
    "iq4_nl": 4.5, "q3_k_l": 4.27, "q3_k_m": 3.91, "q3_k_s": 3.5, "iq3_m": 3.66, "iq3_xxs": 3.06,
    "q2_k": 2.63, "iq2_m": 2.7, "iq2_xs": 2.31, "iq2_xxs": 2.06, "iq1_m": 1.75, "iq1_s": 1.56,
}
_GGUF_TYPE = re.compile(r"(?:^|[-_.:/])(" + "|".join(sorted(GGUF_BITS, key=len, reverse=True)) + r")(?=$|[-_.:/])",
                        re.IGNORECASE)
#: MXFP4 MoE kernels pad the expert hidden and per-rank intermediate dimensions to this multiple.
MXFP4_PAD = 256


def quantized_weight_bytes(fmt: str, bits: float | None = None) -> float:
    """Bytes per quantized weight of a storage format (GGUF: its type's bits per weight)."""
    if fmt == "gguf":
        return (bits if bits and bits > 1 else GGUF_BITS["q4_k_m"]) / 8
    return QUANT_FORMATS[fmt][0]


def gguf_bits(name: str) -> float | None:
    """Bits per weight of the GGUF type a file or repo name carries ('Qwen3-8B-Q4_K_M.gguf' -> 4.85)."""
    m = _GGUF_TYPE.search(name or "")
    return GGUF_BITS[m.group(1).lower()] if m else None


def quant_format(quantization: str | None, bits: float | None = None) -> str | None:
    """The storage format of a --quantization value; compressed-tensors and GPTQ follow `bits`."""
    if not quantization:
        return None
    q = quantization.lower().replace("-", "_")
    if q in ("compressed_tensors", "gptq", "gptq_marlin", "auto_round", "awq", "awq_marlin") and bits:
        return "int4" if bits <= 4 else ("fp8" if q == "compressed_tensors" and bits == 8 else "int8")
    if q == "compressed_tensors":
        return "int8"
    return QUANT_ALIASES.get(q, "int4" if "4" in q else None)


def weight_bytes(arch: ArchSpec, dtype_bytes_: float = 2, quantization: str | None = None,
                 bits: float | None = None, tp: int = 1, pp: int = 1) -> int:
    """Weight memory on one GPU: parameters x bytes for the dtype or quantization, split by TP and PP.

    Quantized formats store the linear layers (or only the experts, for MXFP4) packed; embeddings, the
    untied lm_head, routers and norms stay in the model dtype.
    """
    parts = param_breakdown(arch)
    fmt = quant_format(quantization, bits)
    total = 0.0
    for part, n in parts.items():
        b = dtype_bytes_
        if fmt == "gguf":
            # GGUF files quantize every matrix, embeddings and output included; norms and routers stay f32/f16
            if part in ("embeddings", "lm_head", "attention", "mlp", "experts"):
                b = quantized_weight_bytes(fmt, bits)
        elif fmt:
            per, scope = QUANT_FORMATS[fmt]
            if part == "experts" or (scope == "linear" and part in ("attention", "mlp", "other")):
                b = per if part != "other" else dtype_bytes_
            if fmt == "mxfp4" and part == "experts":
                b *= mxfp4_pad_factor(arch, tp)
        total += n * b
    return int(total / max(1, tp) / max(1, pp))


def mxfp4_pad_factor(arch: ArchSpec, tp: int = 1) -> float:
    """How much MXFP4 expert weights grow when the kernels pad the hidden size and each rank's intermediate
    size up to a multiple of MXFP4_PAD (vLLM's mxfp4 MoE method)."""
    h = arch.hidden_size
    i = (arch.moe_intermediate_size or arch.intermediate_size) / max(1, tp)
    if not h or not i:
        return 1.0
    return (math.ceil(h / MXFP4_PAD) * MXFP4_PAD / h) * (math.ceil(i / MXFP4_PAD) * MXFP4_PAD / i)


# --- activations, non-torch memory, CUDA graphs -------------------------------------------------------------

def activation_bytes(arch: ArchSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1,
                     act_bytes: float = 2, sampler: bool = True,
                     bytes_per_logit: float = SAMPLER_BYTES_PER_LOGIT) -> int:
    """PyTorch peak of vLLM's profiling run: the larger of the forward pass over max_num_batched_tokens
    tokens (MLP gate/up output and activation, `mlp_matrices` x intermediate per rank, plus three hidden-size
    buffers: residual, normed input and the layer output) and the sampler over max_num_seqs rows of the
    vocabulary (`bytes_per_logit` each). `sampler=False` leaves the sampler out: V0's chunked-prefill
    profiling run shows no sampler peak in published logs.

    >>> a = ArchSpec("t", layers=2, hidden_size=1024, num_attention_heads=8, num_key_value_heads=8,
    ...              intermediate_size=4096, vocab_size=1000)
    >>> activation_bytes(a, 2048, 1, sampler=False) == 2048 * (3 * 4096 + 3 * 1024) * 2
    True
    """
    h = arch.hidden_size
    if arch.is_moe:
        moe_i = arch.moe_intermediate_size or arch.intermediate_size
        per_token = arch.experts_per_token * (3 * moe_i / tp + h) + 3 * h
        if arch.shared_expert_intermediate_size or arch.num_shared_experts:
            per_token += 3 * (arch.shared_expert_intermediate_size or arch.num_shared_experts * moe_i) / tp
    else:
        per_token = arch.mlp_matrices * arch.intermediate_size / tp + 3 * h
    forward = max_num_batched_tokens * per_token * act_bytes
    sampled = max_num_seqs * arch.vocab_size * bytes_per_logit if sampler else 0
    return int(max(forward, sampled))


def non_torch_bytes(tp: int = 1, pp: int = 1, gpu_name: str = "", single: float = NON_TORCH_SINGLE,
                    multi: float = NON_TORCH_MULTI_GPU, custom_all_reduce: bool | None = None) -> int:
    """Memory outside PyTorch's allocator that grows during start-up, per rank: `single` bytes, plus `multi`
    bytes of all-reduce buffers when tensor parallelism is on (NCCL's alone on GPUs without peer-to-peer
    access). Pipeline-only ranks exchange activations point to point and keep the single-rank figure.

    >>> non_torch_bytes(1) == int(NON_TORCH_SINGLE), non_torch_bytes(2, gpu_name="RTX 4090") == int(0.25 * GIB)
    (True, True)
    """
    if tp <= 1:
        return int(single)
    no_p2p = custom_all_reduce is False or (custom_all_reduce is None and NO_P2P_GPUS.search(gpu_name or ""))
    return int(single + (NON_TORCH_MULTI_GPU_NO_P2P if no_p2p else multi))


def encoder_items(arch: ArchSpec, max_num_batched_tokens: int) -> int:
    """Largest images V1 profiles the encoder with: as many as its budget, max(max_num_batched_tokens, one
    image's tokens), holds ('Encoder cache will be initialized with a budget of N tokens, and profiled with K
    image items of the maximum feature size')."""
    v = arch.vision or {}
    per = int(v.get("tokens_per_item") or 0)
    if per <= 0:
        return 0
    return max(1, max(max_num_batched_tokens, per) // per)


def encoder_bytes(arch: ArchSpec, max_num_batched_tokens: int, act_bytes: float = 2) -> int:
    """Peak of V1's multimodal encoder profiling run: for every patch of the profiled images, the MLP's two
    intermediate tensors (fc1 output and its activation) and four hidden-size buffers (residual, norm,
    attention output, projection) in the model dtype, plus the fp32 pixel values of the patch."""
    v = arch.vision or {}
    patches = encoder_items(arch, max_num_batched_tokens) * int(v.get("patches_per_item") or 0)
    per_patch = (2 * int(v.get("intermediate_size") or 0) + 4 * int(v.get("hidden_size") or 0)) * act_bytes \
        + int(v.get("patch_pixels") or 0) * 4
    return int(patches * per_patch)


def cuda_graph_bytes(arch: ArchSpec, pp: int = 1, enforce_eager: bool = False, base: float = CUDA_GRAPH_BASE,
                     per_layer: float = CUDA_GRAPH_PER_LAYER) -> int:
    """CUDA-graph pool estimate: a fixed part plus a part per layer of the rank; none with --enforce-eager.

    >>> a = ArchSpec("t", layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    ...              intermediate_size=14336, vocab_size=128256)
    >>> round(cuda_graph_bytes(a, base=0.25 * GIB, per_layer=0.018 * GIB) / GIB, 3), cuda_graph_bytes(a, 1, True)
    (0.826, 0)
    """
    if enforce_eager:
        return 0
    return int(base + per_layer * layers_per_stage(arch.layers, pp))


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


def resolve_dtype_bytes(arch: ArchSpec, dtype: str | None) -> float:
    """--dtype auto keeps a 16-bit checkpoint's dtype and loads fp32 checkpoints as 16-bit: 2 bytes either way.

    >>> resolve_dtype_bytes(None, "auto"), resolve_dtype_bytes(None, "float32")
    (2, 4)
    """
    if not dtype or dtype == "auto":
        return 2
    return dtype_bytes(dtype)
