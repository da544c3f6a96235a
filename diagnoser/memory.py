"""Memory arithmetic shared by the log advice and the planner.

vLLM sizes the KV cache as: budget = GPU memory x utilization; KV room = budget - weights - overhead;
tokens = room / bytes per token. Every number the doctor recommends comes from these functions, so the
advice printed for a log and the figures `plan` predicts can never disagree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from . import releases

GIB = 1 << 30
MIB = 1 << 20
GB = 10**9

#: vLLM rounds nothing, but operators think in powers of two: suggested lengths are multiples of this.
LEN_STEP = 1024


#: Units as vLLM and PyTorch print them in logs. vLLM's "GB" is bytes / 2^30, so GB counts as GiB here
#: (unlike `plan --gpu-memory 24GB`, where a person means 10^9).
LOG_UNIT_GIB = {"b": 1 / GIB, "bytes": 1 / GIB, "kib": 1 / MIB, "kb": 1 / MIB, "mib": 1 / 1024, "mb": 1 / 1024,
                "gib": 1.0, "gb": 1.0, "tib": 1024.0, "tb": 1024.0}
_LOG_SIZE = re.compile(r"(-?[\d.,\s]+)\s*([KMGT]?i?B|bytes)?", re.IGNORECASE)


def log_size_gib(text: str) -> float | None:
    """'896.00 MiB' -> 0.875; '16.00 GiB' -> 16.0; '12345678 bytes' -> GiB; no unit -> GiB. None if not a size."""
    m = _LOG_SIZE.fullmatch(text.strip())
    if not m:
        return None
    try:
        number = float(re.sub(r"[,\s]", "", m.group(1)))
    except ValueError:
        return None
    return number * LOG_UNIT_GIB.get((m.group(2) or "gib").lower(), 1.0)


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
#: The release whose defaults the planner assumes when none is given.
LATEST_VERSION = releases.latest()


def version_tuple(version: str | tuple[int, ...] | None) -> tuple[int, int, int]:
    """'0.7.3' -> (0, 7, 3); 'latest' or None -> LATEST_VERSION (releases.parse_version)."""
    return releases.parse_version(version)


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
    # linear attention (Gated DeltaNet / Mamba-2 style): every `interval`-th layer is full attention, the others
    # keep a fixed recurrent state per sequence: key_heads, value_heads, key_dim, value_dim, conv_kernel
    linear_attention: dict[str, int] | None = None
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
        """'full', 'sliding' or 'linear' (a recurrent-state layer) for every layer."""
        if self.linear_attention:
            every = max(1, int(self.linear_attention.get("interval") or 4))
            return ["full" if (i + 1) % every == 0 else "linear" for i in range(self.layers)]
        if self.layer_types:
            return ["sliding" if "sliding" in t or "local" in t else "full" for t in self.layer_types]
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
    linear-attention layers keep a state per sequence instead (state_bytes_per_layer)."""
    n = sum(1 for k in stage_kinds(arch, pp) if k != "linear")
    return int(n * kv_bytes_per_token_layer(arch, tp, kv_bytes))


def state_bytes_per_layer(arch: ArchSpec, tp: int = 1, state_bytes: float = 2) -> int:
    """Recurrent state one linear-attention layer keeps per sequence on one rank (vLLM's MambaSpec page):
    the short convolution's last (kernel - 1) inputs over q, k and v, plus the value_heads x key_dim x
    value_dim state matrix, heads split over TP, in the model dtype."""
    la = arch.linear_attention or {}
    kh, vh = int(la.get("key_heads") or 0), int(la.get("value_heads") or 0)
    kd, vd = int(la.get("key_dim") or 0), int(la.get("value_dim") or 0)
    kernel = int(la.get("conv_kernel") or 4)
    tp = max(1, tp)
    conv = (2 * kh * kd + vh * vd) / tp * (kernel - 1)
    ssm = vh / tp * kd * vd
    return int((conv + ssm) * state_bytes)


def hybrid_block_size(arch: ArchSpec, tp: int = 1, kv_bytes: float = 2, state_bytes: float = 2) -> int:
    """vLLM's unified page for attention + state models: the attention block grows (in steps of 16 tokens)
    until one attention page holds a state page ('Setting attention block size to N tokens to ensure that
    attention page size is >= mamba page size'); the state page is then padded to match."""
    per_token = kv_bytes_per_token_layer(arch, tp, kv_bytes)
    state = state_bytes_per_layer(arch, tp, state_bytes)
    if per_token <= 0 or state <= 0:
        return BLOCK_SIZE
    return 16 * math.ceil(state / (16 * per_token))


def sliding_tokens_needed(window: int, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Tokens a sliding-window layer keeps for one request (V1 SlidingWindowSpec, before block rounding)."""
    return min(window - 1 + max_num_batched_tokens, max_model_len)


def request_kv_bytes(arch: ArchSpec, max_model_len: int, tp: int = 1, pp: int = 1, kv_bytes: float = 2,
                     max_num_batched_tokens: int = 2048, block_size: int = BLOCK_SIZE,
                     window_aware: bool = True) -> int:
    """KV memory one request of max_model_len needs on one rank: vLLM's max_memory_usage_bytes summed over
    layers. Full layers: ceil(len / block) pages; sliding layers: ceil(min(window - 1 + batched, len) /
    block) + 1 pages (V1); window_aware=False counts every layer as full."""
    if arch.is_hybrid:
        block_size = max(block_size, hybrid_block_size(arch, tp, kv_bytes))
    page = block_size * kv_bytes_per_token_layer(arch, tp, kv_bytes)
    total = 0.0
    for kind in stage_kinds(arch, pp):
        if kind == "linear":
            pages = 1  # one (padded) state page per sequence, whatever its length
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
    if arch.linear_attention:
        la = arch.linear_attention
        kh, vh, kd, vd = (int(la.get(k) or 0) for k in ("key_heads", "value_heads", "key_dim", "value_dim"))
        # in_proj (q, k, v, gate z, and the b/a decay heads), the short conv, and out_proj
        linear_layer = h * (2 * kh * kd + 2 * vh * vd + 2 * vh) + (2 * kh * kd + vh * vd) * int(
            la.get("conv_kernel") or 4) + vh * vd * h
        n_lin = arch.kinds().count("linear")
        attention_total = (L - n_lin) * attn_layer + n_lin * linear_layer
    else:
        attention_total = L * attn_layer
    dense_layer = 3 * h * arch.intermediate_size
    if arch.is_moe:
        moe_i = arch.moe_intermediate_size or arch.intermediate_size
        n_moe = sum(1 for i in range(arch.first_k_dense_layers, L) if (i + 1) % max(1, arch.moe_layer_freq) == 0)
        n_dense = L - n_moe
        experts = n_moe * arch.num_experts * 3 * h * moe_i
        shared = n_moe * 3 * h * (arch.shared_expert_intermediate_size or arch.num_shared_experts * moe_i)
        router = n_moe * h * arch.num_experts
    else:
        n_dense, experts, shared, router = L, 0, 0, 0
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

def sampler_bytes_per_logit(version: tuple[int, int, int], flashinfer: bool | None = None,
                            engine: str | None = None, opt_in: bool | None = None) -> float:
    """Sampler working memory per logit in the profiling peak.

    FlashInfer's kernel samples when VLLM_USE_FLASHINFER_SAMPLER says so (`opt_in`), else when FlashInfer is
    installed (`flashinfer`; None: a dependency of the CUDA wheel from 0.11.0, optional before) and the release
    turns it on by default; otherwise the PyTorch path's coefficient of the release (data/releases.yaml)."""
    if flashinfer is None:
        flashinfer = version >= (0, 11, 0)
    on = opt_in if opt_in is not None else (flashinfer and flashinfer_sampler_default(version, engine))
    if on and engine_for(version, engine) == "V1":
        return float(FLASHINFER_SAMPLER_BYTES_PER_LOGIT)
    return float(releases.default("sampler_bytes_per_logit", version))


def flashinfer_sampler_default(version: tuple[int, int, int], engine: str | None = None) -> bool:
    """Whether the release samples with FlashInfer by default when FlashInfer is installed."""
    return bool(releases.default("flashinfer_sampler", version, engine=engine))


def activation_bytes(arch: ArchSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1,
                     act_bytes: float = 2, sampler: bool = True,
                     bytes_per_logit: float = SAMPLER_BYTES_PER_LOGIT) -> int:
    """PyTorch peak of vLLM's profiling run: the larger of the forward pass over max_num_batched_tokens
    tokens (MLP gate/up output and activation, 3 x intermediate per rank, plus three hidden-size buffers:
    residual, normed input and the layer output) and
    the sampler over max_num_seqs rows of the vocabulary (SAMPLER_BYTES_PER_LOGIT each). `sampler=False`
    leaves the sampler out: V0's chunked-prefill profiling run shows no sampler peak in published logs."""
    h = arch.hidden_size
    if arch.is_moe:
        moe_i = arch.moe_intermediate_size or arch.intermediate_size
        per_token = arch.experts_per_token * (3 * moe_i / tp + h) + 3 * h
        if arch.shared_expert_intermediate_size or arch.num_shared_experts:
            per_token += 3 * (arch.shared_expert_intermediate_size or arch.num_shared_experts * moe_i) / tp
    else:
        per_token = 3 * arch.intermediate_size / tp + 3 * h
    forward = max_num_batched_tokens * per_token * act_bytes
    sampled = max_num_seqs * arch.vocab_size * bytes_per_logit if sampler else 0
    return int(max(forward, sampled))


def non_torch_bytes(tp: int = 1, pp: int = 1, gpu_name: str = "",
                    version: tuple[int, int, int] | None = None, custom_all_reduce: bool | None = None) -> int:
    """Memory outside PyTorch's allocator that grows during start-up, per rank: the release's single-rank figure,
    plus all-reduce buffers when tensor parallelism is on (NCCL only on GPUs without peer-to-peer access).
    Pipeline-only ranks exchange activations point to point and keep the single-rank figure."""
    single, multi = NON_TORCH_SINGLE, NON_TORCH_MULTI_GPU
    if version is not None:
        single = float(releases.default("non_torch_single_gib", version)) * GIB
        multi = float(releases.default("non_torch_multi_gpu_gib", version)) * GIB
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


def non_torch_rule(tp: int, version: tuple[int, int, int]) -> str:
    """The non-torch rule applied, in words, for the assumptions output."""
    single = float(releases.default("non_torch_single_gib", version))
    if tp <= 1:
        return f"{single:g} GiB per rank in this release"
    multi = float(releases.default("non_torch_multi_gpu_gib", version))
    return f"{single:g} GiB per rank + {multi:g} GiB of all-reduce buffers with TP > 1 in this release"


def cuda_graph_bytes(arch: ArchSpec, pp: int = 1, enforce_eager: bool = False,
                     version: tuple[int, int, int] | None = None, engine: str | None = None) -> int:
    """CUDA-graph pool estimate: the release's fixed part plus its part per layer of the rank (FULL and
    PIECEWISE capture passes from 0.11 hold about three times the per-layer buffers); none with
    --enforce-eager."""
    if enforce_eager:
        return 0
    base, per_layer = CUDA_GRAPH_BASE, CUDA_GRAPH_PER_LAYER
    if version is not None:
        base = float(releases.default("cuda_graph_base_gib", version, engine=engine)) * GIB
        per_layer = float(releases.default("cuda_graph_per_layer_gib", version, engine=engine)) * GIB
    return int(base + per_layer * layers_per_stage(arch.layers, pp))


def graphs_budgeted(version: tuple[int, int, int]) -> bool:
    """From 0.20.0 vLLM subtracts its CUDA-graph estimate from the KV budget (D5); before, graphs are
    captured after the KV cache is allocated, from memory outside the budget."""
    return bool(releases.default("cuda_graphs_in_budget", version))


# --- release defaults (data/releases.yaml, through releases.py) ---------------------------------------------

def engine_for(version: tuple[int, int, int], engine: str | None = None) -> str:
    """V0 was the default through 0.7.3 (V1 opt-in with VLLM_USE_V1=1 from 0.6.4), V1 from 0.8.0."""
    return releases.engine_for(version, engine)


def default_gpu_memory_utilization(version: tuple[int, int, int]) -> float:
    """0.9 through 0.19.x, 0.92 from 0.20.0."""
    return float(releases.default("gpu_memory_utilization", version))


def default_max_num_seqs(version: tuple[int, int, int], gpu_gib: float, gpu_name: str = "",
                         engine: str | None = None) -> int:
    """256 for V0; V1: 1024 on large GPUs (>= 70 GiB, not A100, from 0.9.0), else 256."""
    return int(releases.default("max_num_seqs", version, engine=engine, gpu_gib=gpu_gib, gpu_name=gpu_name))


def default_max_num_batched_tokens(version: tuple[int, int, int], max_model_len: int, gpu_gib: float,
                                   gpu_name: str = "", engine: str | None = None) -> int:
    """The API server's default (catalog C). V0: max(max_model_len, 2048) unless chunked prefill is on
    (automatic above 32K tokens: 512 before 0.7.0, 2048 from 0.7.0). V1: 2048, or 8192 on large GPUs,
    16384 on >= 160 GiB from 0.31.0."""
    return int(releases.default("max_num_batched_tokens", version, engine=engine, gpu_gib=gpu_gib,
                                gpu_name=gpu_name, max_model_len=max_model_len))


# --- the whole plan ------------------------------------------------------------------------------------------

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
    version: tuple[int, int, int] = LATEST_VERSION
    engine: str | None = None         # 'V0'/'V1' to override the release's default engine (VLLM_USE_V1)
    block_size: int = BLOCK_SIZE
    flashinfer: bool | None = None          # FlashInfer installed (None: as the release's wheel ships it)
    flashinfer_sampler: bool | None = None  # VLLM_USE_FLASHINFER_SAMPLER=1/0 (None: the release's default)
    custom_all_reduce: bool | None = None   # False: --disable-custom-all-reduce or no peer access between ranks
    skip_mm_profiling: bool = False         # --skip-mm-profiling (0.10.1+): the encoder is not profiled
    max_model_len_auto: bool = False        # --max-model-len auto / -1: vLLM picks the longest length that fits


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
    sources: dict[str, str] = field(default_factory=dict)


def resolve_dtype_bytes(arch: ArchSpec, dtype: str | None) -> float:
    """--dtype auto keeps a 16-bit checkpoint's dtype and loads fp32 checkpoints as 16-bit."""
    if not dtype or dtype == "auto":
        return 2   # a 16-bit checkpoint stays 16-bit; fp32 (and anything narrower listed as dtype) loads as 16-bit
    return dtype_bytes(dtype)


def plan_memory(inp: PlanInput) -> PlanResult:
    """Size one configuration: budget, weights, overhead, KV room, tokens, per-request need, concurrency."""
    arch, v = inp.arch, inp.version
    tp, pp = max(1, inp.tensor_parallel_size), max(1, inp.pipeline_parallel_size)
    util = inp.gpu_memory_utilization if inp.gpu_memory_utilization is not None \
        else default_gpu_memory_utilization(v)
    max_len = int(inp.max_model_len or arch.max_position_embeddings or 4096)
    gpu_gib = inp.gpu_bytes / GIB
    engine = engine_for(v, inp.engine)
    seqs = inp.max_num_seqs or default_max_num_seqs(v, gpu_gib, inp.gpu_name, engine)
    batched = inp.max_num_batched_tokens or default_max_num_batched_tokens(v, max_len, gpu_gib, inp.gpu_name,
                                                                           engine)
    mdb = resolve_dtype_bytes(arch, inp.dtype)
    kvb = kv_value_bytes(inp.kv_cache_dtype, mdb)
    quant = inp.quantization if inp.quantization is not None else arch.quantization
    bits = inp.quant_bits if inp.quant_bits is not None else (arch.quant_bits if quant == arch.quantization
                                                               else None)
    sources: dict[str, str] = {}
    budget = inp.gpu_bytes * util
    if inp.weights is not None:
        weights = float(inp.weights)
        sources["weights"] = "given"
    else:
        weights = float(weight_bytes(arch, mdb, quant, bits, tp, pp))
        sources["weights"] = "estimated"
    weights = max(0.0, weights - inp.cpu_offload_bytes)
    v0_chunked = engine == "V0" and releases.is_chunked_v0(max_len, v)
    act = float(activation_bytes(arch, batched, seqs, tp, mdb, sampler=not v0_chunked,
                                 bytes_per_logit=sampler_bytes_per_logit(v, inp.flashinfer, engine,
                                                                         inp.flashinfer_sampler)))
    if arch.vision and engine == "V1" and not inp.skip_mm_profiling:
        act = max(act, float(encoder_bytes(arch, batched, mdb)))
    ntm = float(non_torch_bytes(tp, pp, inp.gpu_name, v, inp.custom_all_reduce))
    graphs = float(cuda_graph_bytes(arch, pp, inp.enforce_eager, v, engine))
    in_budget = graphs_budgeted(v)
    if inp.overhead is not None:
        overhead = float(inp.overhead)
        sources["overhead"] = "given"
    else:
        overhead = act + ntm + (graphs if in_budget else 0.0)
        sources["overhead"] = "estimated"
    if inp.kv_cache_bytes is not None:
        kv_room = float(inp.kv_cache_bytes)
        sources["kv_cache"] = "measured"
    else:
        kv_room = budget - weights - overhead
        sources["kv_cache"] = "computed"
    per_token = model_kv_bytes_per_token(arch, tp, pp, kvb)
    # V1 (0.8.3+) sizes sliding layers by their window; V0 caps a uniform window but runs interleaved
    # patterns as full attention
    window_aware = bool(releases.default("sliding_window_sized", v, engine=engine)) or not arch.layer_types
    kw = {"tp": tp, "pp": pp, "kv_bytes": kvb, "max_num_batched_tokens": batched,
          "block_size": inp.block_size, "window_aware": window_aware}
    need = request_kv_bytes(arch, max_len, **kw)
    tokens = kv_cache_tokens(kv_room, per_token, inp.block_size)
    conc = kv_room / need if need > 0 and kv_room > 0 else 0.0
    if arch.is_hybrid:
        # the hybrid allocator reports max_concurrency x max_model_len: state pages count, tokens are fewer
        tokens = int(conc * max_len)
    fits = kv_room > 0 and need <= kv_room
    fit_len = max_model_len_for(arch, kv_room, max(max_len, arch.max_position_embeddings or 0, 1), **kw)
    if inp.max_model_len_auto and 0 < fit_len < max_len and not inp.max_model_len:
        # vLLM's 'auto': the model's maximum, cut to the longest length one request's KV cache fits in
        return plan_memory(replace(inp, max_model_len=int(fit_len)))
    return PlanResult(
        inp=inp, max_model_len=max_len, gpu_memory_utilization=util, model_dtype_bytes=mdb,
        kv_value_bytes=kvb, kv_bytes_per_token=per_token, budget_bytes=budget, weights_bytes=weights,
        overhead_bytes=overhead, activation_bytes=act, non_torch_bytes=ntm, cuda_graph_bytes=graphs,
        graphs_in_budget=in_budget, kv_cache_bytes=kv_room, kv_cache_tokens=tokens, request_kv_bytes=need,
        max_concurrency=conc, fits=fits, max_model_len_that_fits=round_down(fit_len) if fit_len >= LEN_STEP
        else fit_len, max_num_seqs=seqs, max_num_batched_tokens=batched,
        quant_format=quant_format(quant, bits), sources=sources,
    )


def with_changes(inp: PlanInput, **changes: Any) -> PlanInput:
    """A copy of a plan input with some fields replaced (for what-if rows)."""
    return replace(inp, **changes)


def lower_utilization(current: float | None, free_gib: float, total_gib: float | None,
                      floor: float = 0.5) -> float:
    """Utilization that leaves `free_gib` more outside vLLM's budget (for warmup, graphs, other tenants).

    Without the GPU total, step down by 0.05, the smallest change that usually clears a warmup OOM.
    """
    now = current if current else 0.9
    wanted = now - free_gib / total_gib if total_gib and total_gib > 0 else now - 0.05
    return max(floor, math.floor(wanted * 100) / 100)


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


def what_if(inp: PlanInput, res: PlanResult) -> list[dict[str, Any]]:
    """The planner's what-if rows: fp8 KV cache, 4-bit weights, TP=2/4, utilization +0.03."""
    rows: list[tuple[str, dict[str, Any], dict[str, str | None]]] = [("as planned", {}, {})]
    if res.kv_value_bytes > 1:
        rows.append(("fp8 KV cache", {"kv_cache_dtype": "fp8"}, {"--kv-cache-dtype": "fp8"}))
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
        })
    return out


def whole_gpu_kv_bytes(res: PlanResult, spare: float = 0.02) -> float:
    """KV memory --kv-cache-memory-bytes can give: the GPU less 2%, the weights, the profiled peaks and the CUDA
    graphs (budgeted or not: with a fixed KV size they all come out of the same device)."""
    graphs = 0.0 if res.graphs_in_budget else res.cuda_graph_bytes
    return res.inp.gpu_bytes * (1 - spare) - res.weights_bytes - res.overhead_bytes - graphs


def len_for_concurrency(res: PlanResult, want: float) -> int:
    """Largest --max-model-len (multiple of 1024, up to the planned one) at which `want` requests fit at once."""
    inp = res.inp
    if res.kv_cache_bytes <= 0 or want <= 0:
        return 0
    fit = max_model_len_for(inp.arch, res.kv_cache_bytes / want, res.max_model_len,
                            tp=inp.tensor_parallel_size, pp=inp.pipeline_parallel_size, kv_bytes=res.kv_value_bytes,
                            max_num_batched_tokens=res.max_num_batched_tokens, block_size=inp.block_size)
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
                                res.kv_value_bytes, res.max_num_batched_tokens, inp.block_size)
        conc = res.kv_cache_bytes / need if need and res.kv_cache_bytes > 0 else 0.0
        out.append({"max_model_len": length, "request_kv_bytes": need, "max_concurrency": round(conc, 4)})
    return out


# --- flags and environment that move the physics, and the rules applied, in words --------------------------

def serve_extras(flags: dict[str, Any], env: dict[str, str], auto_len: bool = False) -> dict[str, Any]:
    """PlanInput fields a `vllm serve` command sets beyond the sizes: --disable-custom-all-reduce,
    --skip-mm-profiling, VLLM_USE_FLASHINFER_SAMPLER, --max-model-len auto."""
    out: dict[str, Any] = {"max_model_len_auto": auto_len}
    if flags.get("--disable-custom-all-reduce"):
        out["custom_all_reduce"] = False
    if flags.get("--skip-mm-profiling"):
        out["skip_mm_profiling"] = True
    fi = (env or {}).get("VLLM_USE_FLASHINFER_SAMPLER")
    if fi in ("0", "1"):
        out["flashinfer_sampler"] = fi == "1"
        if fi == "1":
            out["flashinfer"] = True
    return out


def physics_assumptions(res: PlanResult) -> list[str]:
    """The class rules behind the overhead and weights of this plan (each applies to a class of models or
    releases, never to one case)."""
    inp, a, v = res.inp, res.inp.arch, res.inp.version
    engine = engine_for(v, inp.engine)
    out = []
    if engine == "V0" and not releases.is_chunked_v0(res.max_model_len, v) and not inp.max_num_batched_tokens:
        out.append(f"V0 without chunked prefill profiles one batch of max(max_model_len, 2048) = "
                   f"{res.max_num_batched_tokens:,} tokens: the activation peak grows with --max-model-len")
    if sampler_bytes_per_logit(v, inp.flashinfer, engine, inp.flashinfer_sampler) == \
            FLASHINFER_SAMPLER_BYTES_PER_LOGIT:
        out.append("sampler: FlashInfer's top-p/top-k kernel (no sort), 12 bytes per logit")
    if a.vision and engine == "V1":
        if inp.skip_mm_profiling:
            out.append("multimodal: --skip-mm-profiling, the encoder is not profiled")
        else:
            items = encoder_items(a, res.max_num_batched_tokens)
            out.append(f"multimodal: the encoder is profiled with {items} largest image(s) "
                       f"({a.vision.get('patches_per_item', 0):,} patches each): "
                       f"{encoder_bytes(a, res.max_num_batched_tokens, res.model_dtype_bytes) / GIB:.2f} GiB, "
                       "counted when above the text peak")
    if inp.tensor_parallel_size > 1 and inp.custom_all_reduce is False:
        out.append("custom all-reduce off (--disable-custom-all-reduce or no peer access): NCCL buffers only")
    if res.quant_format == "gguf":
        out.append(f"GGUF: {inp.quant_bits or a.quant_bits or GGUF_BITS['q4_k_m']:g} bits per weight for every "
                   "matrix, embeddings and output included")
    if inp.max_model_len_auto:
        out.append("--max-model-len auto: the model's maximum, or the longest length one request's KV cache fits")
    if a.is_hybrid:
        tp = inp.tensor_parallel_size
        n_lin = a.kinds().count("linear")
        out.append(f"hybrid linear attention: {a.layers - n_lin} of {a.layers} layers cache KV; the other {n_lin} "
                   f"keep a {state_bytes_per_layer(a, tp, res.model_dtype_bytes) / MIB:.2f} MiB state per sequence "
                   f"and layer; vLLM unifies the pages (attention block "
                   f"{hybrid_block_size(a, tp, res.kv_value_bytes, res.model_dtype_bytes)} tokens), so the token "
                   "count is max_concurrency x max_model_len")
    return out
