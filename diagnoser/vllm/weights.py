"""Weight arithmetic: a model's parameters by part, and the bytes they take on one GPU.

Parameters are counted from an ArchSpec (embeddings, lm_head, attention or recurrent-state mixers, dense MLP,
experts, router, norms, a vision tower); their bytes follow the dtype or the quantization format
(--quantization names, GGUF types read from a file name, MXFP4's padded expert matrices), split by tensor
and pipeline parallelism. Pure functions over an ArchSpec and numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from diagnoser.lazyre import lazy
from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.memory import dtype_bytes


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
#: bitsandbytes NF4 as vLLM quantizes it (model_loader/loader.py 0.7.1 BitsAndBytesModelLoader: quantize_4bit(...,
#: compress_statistics=True, quant_type="nf4")): blocks of 64 weights whose absmax bitsandbytes stores as one uint8
#: (quantize_blockwise of the absmax values, blocks of 256, each with an fp32 absmax: bitsandbytes/functional.py
#: quantize_4bit), the double quantization pre-quantized bnb-4bit checkpoints carry too (bnb_4bit_use_double_quant).
BNB_NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
QUANT_FORMATS: dict[str, tuple[float, str]] = {
    "int4": (0.5 + 2.5 / 128, "linear"),
    "int8": (1.0 + 4 / 4096, "linear"),
    "fp8": (1.0 + 4 / 16384, "linear"),
    "mxfp4": (0.5 + 1 / 32, "experts"),
    "nvfp4": (0.5 + 1 / 16, "linear"),
    "nf4": (BNB_NF4_BYTES, "linear"),
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
_GGUF_TYPE = lazy(r"(?:^|[-_.:/])(" + "|".join(sorted(GGUF_BITS, key=len, reverse=True)) + r")(?=$|[-_.:/])",
                  re.IGNORECASE)
#: The Marlin MXFP4 MoE kernel wants n % 256 == 0 and k % 128 == 0, so vLLM pads the expert hidden size to a multiple
#: of 256 and each rank's intermediate size to one of 128 (vllm/model_executor/layers/quantization/mxfp4.py
#: Mxfp4MoEMethod.create_weights, 0.10.1 and 0.11.0; fused_moe/oracle/mxfp4.py
#: mxfp4_round_up_hidden_size_and_intermediate_size, 0.19.0). Which backend a release picks on which GPU, and the
#: layout each keeps, is data: releases.yaml `mxfp4_moe` (mxfp4_moe_choice, mxfp4_expert_bytes).
MXFP4_PAD_HIDDEN = 256
MXFP4_PAD_INTERMEDIATE = 128
#: The Marlin layout, what the planner assumes when the GPU is not known.
MARLIN_LAYOUT = {"backend": "marlin", "pad_hidden": MXFP4_PAD_HIDDEN, "pad_intermediate": MXFP4_PAD_INTERMEDIATE,
                 "bias_bytes": 2}


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
                 bits: float | None = None, tp: int = 1, pp: int = 1, *, version: tuple[int, int, int] | None = None,
                 compute_capability: float | None = None, flashinfer: bool | None = None) -> int:
    """Weight memory on one GPU: parameters x bytes for the dtype or quantization, split by TP and PP.

    Quantized formats store the linear layers (or only the experts, for MXFP4) packed; embeddings, the
    untied lm_head, routers and norms stay in the model dtype. MXFP4 experts take the layout of the MoE backend the
    release picks on the GPU (mxfp4_moe_choice; Marlin when the GPU is not known), per rank.
    """
    parts = param_breakdown(arch)
    fmt = quant_format(quantization, bits)
    total, rank_experts = 0.0, 0.0
    for part, n in parts.items():
        b = dtype_bytes_
        if fmt == "mxfp4" and part == "experts" and n:
            layout = mxfp4_moe_choice(version, compute_capability, flashinfer).layout
            h, i = arch.hidden_size, arch.moe_intermediate_size or arch.intermediate_size
            n_moe_layers = n // (arch.num_experts * 3 * h * i)
            rank_experts = n_moe_layers * arch.num_experts * mxfp4_expert_bytes(h, i // max(1, tp), layout)
            continue
        if fmt == "gguf":
            # GGUF files quantize every matrix, embeddings and output included; norms and routers stay f32/f16
            if part in ("embeddings", "lm_head", "attention", "mlp", "experts"):
                b = quantized_weight_bytes(fmt, bits)
        elif fmt:
            per, scope = QUANT_FORMATS[fmt]
            if part == "experts" or (scope == "linear" and part in ("attention", "mlp", "other")):
                b = per if part != "other" else dtype_bytes_
        total += n * b
    return int(total / max(1, tp) / max(1, pp) + rank_experts / max(1, pp))


def _round_up(x: int, multiple: int) -> int:
    return -(-x // max(1, multiple)) * max(1, multiple)


def mxfp4_expert_bytes(hidden: int, intermediate: int, layout: dict) -> int:
    """Bytes one MXFP4 expert of one layer keeps on a rank after vLLM's process_weights_after_loading, for a
    backend layout of releases.yaml `mxfp4_moe` (`intermediate` is the rank's share).

    The checkpoint stores w13 (gate and up, 2I x H) and w2 (H x I) as e2m1 nibbles, 2 per byte, one e8m0 byte of
    scale per 32 weights, and a bias per output row (vllm quantization/mxfp4.py Mxfp4MoEMethod.create_weights, which
    first rounds H and I up to the backend's multiples: pad_hidden, pad_intermediate). Marlin and FlashInfer keep
    those sizes (marlin_utils_fp4.prepare_moe_fp4_layer_for_marlin repacks in place of the loaded tensors). The
    Triton backend on Hopper swizzles with triton_kernels (quantization/utils/mxfp4_utils.py _swizzle_mxfp4):
    HopperMXValueLayout.swizzle_data pads the packed weight (out rows x in/2 bytes) to value_align on both
    dimensions, then rows to 16 and bytes to 32; HopperMXScaleLayout(num_warps=8) pads the scales' rows to 256
    and their 32-wide groups to 2 (scale_groups_align 4: vLLM's pad of the groups to 4 first); releases that keep
    the loaded scales beside the swizzled ones (keeps_loaded_scales) hold both.

    gpt-oss (hidden 2880, intermediate 2880): Marlin pads to 3072 x 2944; Triton at 0.12-0.16 keeps the weights
    unpadded and the scales twice; at 0.27+ the scales once; at TP 2 (1440 a rank) Triton pads I to 1472:

    >>> marlin = {"pad_hidden": 256, "pad_intermediate": 128, "bias_bytes": 2}
    >>> triton = {"backend": "triton", "pad_intermediate": 64, "bias_bytes": 4, "value_align": 1,
    ...           "scale_rows_align": 256, "scale_groups_align": 2, "keeps_loaded_scales": True}
    >>> mxfp4_expert_bytes(2880, 2880, marlin)  # 3 x 2944 x 3072 / 2 + / 32 + (2 x 2944 + 3072) x 2
    14431744
    >>> mxfp4_expert_bytes(2880, 2880, triton)  # 12,441,600 + swizzled 806,400 + loaded 777,600 + 34,560
    14060160
    >>> mxfp4_expert_bytes(2880, 2880, {**triton, "keeps_loaded_scales": False, "scale_groups_align": 4})
    13300480
    >>> mxfp4_expert_bytes(2880, 1440, {**triton, "value_align": 64})  # 0.17-0.19 at TP 2
    7383936
    """
    h = _round_up(hidden, int(layout.get("pad_hidden") or 1))
    i = _round_up(intermediate, int(layout.get("pad_intermediate") or 1))
    bias = (2 * i + h) * int(layout.get("bias_bytes", 2))
    if layout.get("backend") != "triton" or not layout.get("scale_rows_align"):
        return (2 * i * h + h * i) // 2 + (2 * i * h + h * i) // 32 + bias
    a = int(layout.get("value_align") or 1)
    rows_a, groups_a = int(layout["scale_rows_align"]), int(layout.get("scale_groups_align") or 1)
    total = bias
    for rows, cols in ((2 * i, h), (h, i)):  # w13, w2: output rows x input columns
        total += _round_up(_round_up(rows, a), 16) * _round_up(_round_up(cols // 2, a), 32)
        total += _round_up(rows, rows_a) * _round_up(_round_up(cols // 32, groups_a), 2)
        if layout.get("keeps_loaded_scales"):
            total += rows * (cols // 32)
    return total


@dataclass(frozen=True)
class Mxfp4Choice:
    """The MXFP4 MoE backend a start-up is planned with, its layout, and why (for the assumptions list)."""

    backend: str
    layout: dict
    gpu_class: str | None
    why: str


def mxfp4_gpu_class(compute_capability: float | None) -> str | None:
    """The GPU class releases.yaml `mxfp4_moe` names, by compute capability (None: unknown).

    >>> [mxfp4_gpu_class(c) for c in (8.0, 8.9, 9.0, 10.0, 12.1, None)]
    ['sm80', 'sm80', 'sm90', 'sm100', 'sm120', None]
    """
    if compute_capability is None:
        return None
    if compute_capability < 9:
        return "sm80"
    if compute_capability < 10:
        return "sm90"
    return "sm100" if compute_capability < 11 else "sm120"


def mxfp4_moe_choice(version: tuple[int, int, int] | None, compute_capability: float | None,
                     flashinfer: bool | None = None) -> Mxfp4Choice:
    """The MXFP4 MoE backend vLLM picks by default for a release and GPU (releases.yaml `mxfp4_moe`: the newest
    entry naming the GPU's class whose `since` is not after the release); Marlin when the GPU is not known, or when
    the entry needs FlashInfer and it is not installed (`flashinfer`: None, as the release's wheel ships it).

    >>> [mxfp4_moe_choice(v, 9.0).backend for v in ((0, 11, 0), (0, 12, 0), (0, 29, 0))]
    ['marlin', 'triton', 'triton']
    >>> mxfp4_moe_choice((0, 19, 0), 8.0).backend, mxfp4_moe_choice((0, 30, 0), 12.1).backend
    ('marlin', 'marlin')
    >>> mxfp4_moe_choice((0, 29, 0), None).backend
    'marlin'
    """
    from diagnoser import datafiles
    from diagnoser.vllm import releases

    v = version or releases.latest()
    gpu = mxfp4_gpu_class(compute_capability)
    if gpu is None:
        return Mxfp4Choice("marlin", MARLIN_LAYOUT, None,
                           "the GPU's compute capability is not known: assumed Marlin (what every GPU from 8.0 "
                           "can run; Hopper from vLLM 0.12 picks Triton and Blackwell FlashInfer, smaller)")
    entries = [e for e in datafiles.load("releases.yaml").get("mxfp4_moe", ())
               if gpu in e["gpus"] and releases.parse_version(str(e["since"])) <= v]
    if not entries:
        return Mxfp4Choice("marlin", MARLIN_LAYOUT, gpu, f"no {gpu} entry for this release: assumed Marlin")
    entry = max(entries, key=lambda e: releases.parse_version(str(e["since"])))
    since = f"vLLM {entry['since']}+ on {gpu}"
    if entry.get("needs") == "flashinfer":
        installed = flashinfer if flashinfer is not None else releases.default("flashinfer_installed", v)
        if not installed:
            return Mxfp4Choice("marlin", MARLIN_LAYOUT, gpu,
                               f"{since} picks {entry['backend']} when FlashInfer is installed (not in this release's "
                               "wheel; the vllm/vllm-openai image has it): assumed without, Marlin")
    why = since + (f"; unless {entry['unless']}" if entry.get("unless") else "")
    return Mxfp4Choice(entry["backend"], entry, gpu, why)


def resolve_dtype_bytes(arch: ArchSpec, dtype: str | None) -> float:
    """--dtype auto keeps a 16-bit checkpoint's dtype and loads fp32 checkpoints as 16-bit: 2 bytes either way.

    >>> resolve_dtype_bytes(None, "auto"), resolve_dtype_bytes(None, "float32")
    (2, 4)
    """
    if not dtype or dtype == "auto":
        return 2
    return dtype_bytes(dtype)
