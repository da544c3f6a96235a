"""Model and GPU specs for the planner: from a config.json, a folder, a repo id, or a bundled preset.

Presets live in data/models.yaml and data/gpus.yaml (package data, architecture numbers only). Nothing is
fetched: a repo id that is not bundled is an error that lists the closest names, like a typo in a flag.
A repo id of a quantized re-upload ('…-AWQ', '…-FP8', '…-quantized.w8a8') resolves to its base model when the
rest of the name is a preset, and the quantization is taken from the name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from diagnoser import datafiles
from diagnoser.errors import UsageError
from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.memory import GIB
from diagnoser.vllm.weights import GGUF_BITS, gguf_bits


class SpecError(UsageError):
    """An unknown model or GPU (exit code 2), with the names that do exist."""


def _key(name: str) -> str:
    """Matching key: lower case, without '-', '_', '.', ' ' (so 'Llama 3.1 8B' == 'llama-3.1-8b')."""
    return re.sub(r"[-_.\s]", "", name.lower())


@lru_cache(maxsize=1)
def load_models() -> list[dict[str, Any]]:
    """The bundled model presets (data/models.yaml)."""
    return list(datafiles.load("models.yaml")["models"])


@lru_cache(maxsize=1)
def load_gpus() -> list[dict[str, Any]]:
    """The bundled GPU presets (data/gpus.yaml)."""
    return list(datafiles.load("gpus.yaml")["gpus"])


def _names(entry: dict[str, Any], *fields: str) -> list[str]:
    out: list[str] = []
    for f in fields:
        value = entry.get(f)
        if isinstance(value, str | int | float):
            out.append(str(value))
        elif value:
            out.extend(str(v) for v in value)
    return out


@lru_cache(maxsize=1)
def _model_index() -> dict[str, dict[str, Any]]:
    index: dict[str, dict[str, Any]] = {}
    for entry in load_models():
        for name in _names(entry, "id", "ids", "aliases"):
            index.setdefault(_key(name), entry)
            if "/" in name:
                index.setdefault(_key(name.split("/", 1)[1]), entry)
    return index


def model_names() -> list[str]:
    """Every short name and repo id a preset answers to (for matching typos)."""
    return [n for e in load_models() for n in _names(e, "aliases", "id", "ids")]


def model_short_names() -> list[str]:
    """One short name per preset (for help and error messages)."""
    return [(_names(e, "aliases") or [e["id"]])[0] for e in load_models()]


#: Name parts that mark a re-upload of a base model: quantization, chat tuning, packaging.
QUANT_HINTS: tuple[tuple[str, str, float], ...] = (
    (r"mxfp4", "mxfp4", 4),
    (r"nvfp4|fp4", "nvfp4", 4),
    (r"w4a16|int4|4bit|4-bit|awq|gptq|q4", "awq", 4),
    (r"w8a8|int8|8bit|8-bit", "compressed-tensors", 8),
    (r"fp8|w8a8-fp8|dynamic", "fp8", 8),
    (r"bnb", "bitsandbytes", 4),
)
STRIP_WORDS = (
    "quantized", "w8a8", "w4a16", "w8a16", "fp8", "dynamic", "awq", "gptq", "int4", "int8", "4bit", "8bit",
    "bnb", "mxfp4", "nvfp4", "fp4", "gguf", "marlin", "instruct", "chat", "it", "hf", "thinking", "2507",
    "base", "pt", "sft", "latest", "autoround",
)


def _strip_name(name: str) -> str:
    """'neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8' -> 'llama-3.1-70b'."""
    base = name.split("/", 1)[-1].lower()
    # GGUF: 'Qwen3-8B-GGUF:Q8_0', 'Qwen3-8B-Q4_K_M.gguf' -> 'qwen3-8b'
    base = re.sub(r"\.gguf$", "", base.split(":", 1)[0])
    base = re.sub(r"[-_.](i?q\d\w*|bf16|f16|f32)$", "", base)
    base = re.sub(r"^meta-", "", base)
    parts = re.split(r"[-_]", base)
    kept: list[str] = []
    for part in parts:
        sub = [p for p in part.split(".") if p not in STRIP_WORDS] if not re.match(r"^v?\d", part) else [part]
        piece = ".".join(sub)
        if piece and piece not in STRIP_WORDS:
            kept.append(piece)
    return "-".join(kept)


def quant_from_name(name: str) -> tuple[str, float] | None:
    """The quantization a re-upload's name announces ('…-AWQ' -> ('awq', 4)), or None."""
    low = name.lower().split("/", 1)[-1]
    if "gguf" in low:
        return "gguf", gguf_bits(name) or GGUF_BITS["q4_k_m"]
    for pattern, method, bits in QUANT_HINTS:
        if re.search(rf"(?:^|[-_.]){pattern}(?:$|[-_.])", low):
            return method, bits
    return None


@dataclass
class ModelSpec:
    """A resolved model: its architecture, where it came from, and notes for the assumptions list."""

    arch: ArchSpec
    source: str
    notes: list[str]


def arch_from_preset(entry: dict[str, Any]) -> ArchSpec:
    """A models.yaml entry -> ArchSpec."""
    layers = int(entry["layers"])
    pattern = entry.get("sliding_pattern")
    layer_types = [pattern[i % len(pattern)] for i in range(layers)] if pattern else None
    if entry.get("layer_pattern"):  # hybrids: one letter a layer, M state / * attention / - MLP only
        layer_types = list(str(entry["layer_pattern"]))
    return ArchSpec(
        name=entry["id"], layers=layers, hidden_size=int(entry["hidden_size"]),
        num_attention_heads=int(entry["num_attention_heads"]),
        num_key_value_heads=int(entry.get("num_key_value_heads") or entry["num_attention_heads"]),
        intermediate_size=int(entry["intermediate_size"]), vocab_size=int(entry["vocab_size"]),
        head_dim=entry.get("head_dim"), tie_word_embeddings=bool(entry.get("tie_word_embeddings", False)),
        max_position_embeddings=entry.get("max_position_embeddings"),
        torch_dtype=entry.get("torch_dtype", "bfloat16"),
        num_experts=int(entry.get("num_experts") or 0), experts_per_token=int(entry.get("experts_per_token") or 0),
        moe_intermediate_size=entry.get("moe_intermediate_size"),
        shared_expert_intermediate_size=int(entry.get("shared_expert_intermediate_size") or 0),
        num_shared_experts=int(entry.get("num_shared_experts") or 0),
        first_k_dense_layers=int(entry.get("first_k_dense_layers") or 0),
        moe_layer_freq=int(entry.get("moe_layer_freq") or 1),
        sliding_window=entry.get("sliding_window"), layer_types=layer_types,
        kv_lora_rank=entry.get("kv_lora_rank"), q_lora_rank=entry.get("q_lora_rank"),
        qk_rope_head_dim=entry.get("qk_rope_head_dim"), qk_nope_head_dim=entry.get("qk_nope_head_dim"),
        v_head_dim=entry.get("v_head_dim"), quantization=entry.get("quantization"),
        quant_bits=entry.get("quant_bits"), extra_params=int(float(entry.get("extra_params_b") or 0) * 1e9),
        params_b=entry.get("params_b"),
        vision={k: int(v) for k, v in entry["vision"].items()} if entry.get("vision") else None,
        linear_attention={k: int(v) for k, v in entry["linear_attention"].items()}
        if entry.get("linear_attention") else None,
        state_kind=str(entry.get("state_kind") or "gated_delta_net"), ssm_dtype=entry.get("ssm_dtype"),
        mlp_matrices=int(entry.get("mlp_matrices") or 3),
    )


def arch_from_config(config: dict[str, Any], name: str) -> ArchSpec:
    """A Hugging Face config.json dict -> ArchSpec (text_config of multimodal models is used)."""
    cfg = _text_config(config)

    def get(*keys: str, default: Any = None) -> Any:
        for k in keys:
            if cfg.get(k) is not None:
                return cfg[k]
        return default

    layers = int(get("num_hidden_layers", "n_layer", "num_layers"))
    heads = int(get("num_attention_heads", "n_head"))
    window, layer_types = _sliding_pattern(cfg, get, layers)
    state_kind, linear, mlp_matrices = _state_layers(get, layers)
    window, layer_types = _layer_types(get, window, layer_types, linear)
    max_pos = get("max_position_embeddings", "n_positions", "seq_length")
    if window and max_pos and window >= max_pos and not layer_types:
        window = None
    method, bits = _checkpoint_quantization(cfg)
    return ArchSpec(
        name=name, layers=layers, hidden_size=int(get("hidden_size", "n_embd", "d_model")),
        num_attention_heads=heads,
        num_key_value_heads=int(get("num_key_value_heads", "num_kv_heads", "multi_query_group_num",
                                    default=heads)),
        intermediate_size=int(get("intermediate_size", "ffn_hidden_size", "n_inner", default=0) or 0),
        vocab_size=int(get("vocab_size", "padded_vocab_size")), head_dim=get("head_dim"),
        tie_word_embeddings=bool(get("tie_word_embeddings", default=False)), max_position_embeddings=max_pos,
        torch_dtype=str(get("torch_dtype", "dtype", default="bfloat16")).replace("torch.", ""),
        **_moe_numbers(get),
        sliding_window=window, layer_types=layer_types,
        kv_lora_rank=get("kv_lora_rank"), q_lora_rank=get("q_lora_rank"),
        qk_rope_head_dim=get("qk_rope_head_dim"), qk_nope_head_dim=get("qk_nope_head_dim"),
        v_head_dim=get("v_head_dim"), quantization=method, quant_bits=bits, linear_attention=linear,
        state_kind=state_kind, ssm_dtype=get("mamba_ssm_dtype"), mlp_matrices=mlp_matrices,
    )


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The text model's part of a config.json: a multimodal model's nested text config (text_config,
    llm_config, language_config), with the top level's quantization, dtype and tied embeddings when it has none."""
    cfg = dict(config)
    for nested in ("text_config", "llm_config", "language_config"):
        if isinstance(cfg.get(nested), dict):
            inner = dict(cfg[nested])
            for k in ("quantization_config", "torch_dtype", "tie_word_embeddings"):
                if k in cfg and k not in inner:
                    inner[k] = cfg[k]
            return inner
    return cfg


def _sliding_pattern(cfg: dict[str, Any], get: Any, layers: int) -> tuple[Any, Any]:
    """(sliding window, layer types) as config.json gives them; a window without layer types gets Gemma-2's
    alternation or the `sliding_window_pattern`, and `use_sliding_window: false` turns the window off."""
    window = get("sliding_window")
    layer_types = get("layer_types")
    if window and not layer_types:
        model_type = str(cfg.get("model_type", ""))
        pattern = get("sliding_window_pattern")
        if model_type.startswith("gemma2"):
            layer_types = ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
        elif pattern:
            layer_types = ["full" if (i + 1) % int(pattern) == 0 else "sliding" for i in range(layers)]
        elif cfg.get("use_sliding_window") is False:
            window = None
    return window, layer_types


def _layer_types(get: Any, window: Any, layer_types: Any, linear: dict[str, int] | None) -> tuple[Any, Any]:
    """(sliding window, layer types) for ArchSpec: a hybrid pattern letter per layer, a hybrid's own types, or
    'sliding'/'full' per layer (no window and no types when no layer slides)."""
    if get("hybrid_override_pattern"):
        layer_types = list(str(get("hybrid_override_pattern")))
    elif layer_types and linear:
        layer_types = [str(t) for t in layer_types]
    elif layer_types:
        layer_types = ["sliding" if "sliding" in str(t) or "local" in str(t) else "full" for t in layer_types]
        if "sliding" not in layer_types:
            window, layer_types = None, None
    return window, layer_types


def _checkpoint_quantization(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """(quant_method, bits) of a config.json's quantization_config; compressed-tensors gives its bits in the
    first weight group that names them."""
    quant = cfg.get("quantization_config") or {}
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    bits = quant.get("bits") if isinstance(quant, dict) else None
    if method == "compressed-tensors" and not bits:
        groups = quant.get("config_groups") or {}
        for group in groups.values():
            w = (group or {}).get("weights") or {}
            if w.get("num_bits"):
                bits = w["num_bits"]
                break
    return method, bits


def _moe_numbers(get: Any) -> dict[str, int | None]:
    """The mixture-of-experts fields of ArchSpec (zeros for a dense model), under their config.json spellings."""
    return {
        "num_experts": int(get("num_local_experts", "num_experts", "n_routed_experts", default=0) or 0),
        "experts_per_token": int(get("num_experts_per_tok", "experts_per_token", "moe_topk", default=0) or 0),
        "moe_intermediate_size": get("moe_intermediate_size"),
        "shared_expert_intermediate_size": int(get("shared_expert_intermediate_size", default=0) or 0),
        "num_shared_experts": int(get("n_shared_experts", "num_shared_experts", default=0) or 0),
        "first_k_dense_layers": int(get("first_k_dense_replace", default=0) or 0),
        "moe_layer_freq": int(get("moe_layer_freq", "decoder_sparse_step", default=1) or 1),
    }


def _state_layers(get: Any, layers: int) -> tuple[str, dict[str, int] | None, int]:
    """(state kind, state numbers, MLP matrices) of a hybrid config.json: Gated DeltaNet (Qwen3-Next, Qwen3.5),
    Mamba-1 (Jamba), Mamba-2 (Nemotron-H, Granite-4.0-H, Bamba); (kind, None, 3) for other models."""
    if get("linear_num_value_heads"):
        raw_types = get("layer_types") or []
        full = [i for i, t in enumerate(raw_types) if "full" in str(t)]
        interval = get("full_attention_interval") or (full[0] + 1 if full else 4)
        return "gated_delta_net", {
            "interval": int(interval), "key_heads": int(get("linear_num_key_heads")),
            "value_heads": int(get("linear_num_value_heads")), "key_dim": int(get("linear_key_head_dim")),
            "value_dim": int(get("linear_value_head_dim")),
            "conv_kernel": int(get("linear_conv_kernel_dim", default=4))}, 3
    hidden = int(get("hidden_size", default=0) or 0)
    expand = int(get("mamba_expand", "expand", default=2) or 2)
    heads = get("mamba_num_heads", "mamba_n_heads")
    if heads:  # Mamba-2
        head_dim = int(get("mamba_head_dim", "mamba_d_head", default=64))
        return "mamba2", {
            "d_inner": int(heads) * head_dim, "d_state": int(get("ssm_state_size", "mamba_d_state", default=128)),
            "n_groups": int(get("n_groups", "mamba_n_groups", default=1)), "heads": int(heads), "head_dim": head_dim,
            "conv_kernel": int(get("conv_kernel", "mamba_d_conv", default=4))}, \
            2 if str(get("mlp_hidden_act", default="")).startswith("relu2") else 3
    if get("mamba_d_state") and get("attn_layer_period"):  # Mamba-1 (Jamba)
        return "mamba1", {
            "d_inner": expand * hidden, "d_state": int(get("mamba_d_state")),
            "conv_kernel": int(get("mamba_d_conv", default=4)), "interval": int(get("attn_layer_period")),
            "offset": int(get("attn_layer_offset", default=0))}, 3
    return "gated_delta_net", None, 3


#: config.json numbers the arithmetic uses: (smallest, largest) accepted. A hostile or broken config
#: (`num_attention_heads: 0`, `1e308`, `Infinity`, `"32"`) is refused by name, not divided by or looped over.
CONFIG_BOUNDS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), (1, 10_000)),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads",
                     "multi_query_group_num"), (1, 100_000)),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "head_dim", "kv_lora_rank", "q_lora_rank",
                     "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), (1, 10_000_000)),
    **dict.fromkeys(("intermediate_size", "ffn_hidden_size", "n_inner", "moe_intermediate_size",
                     "shared_expert_intermediate_size"), (0, 100_000_000)),
    **dict.fromkeys(("vocab_size", "padded_vocab_size"), (1, 100_000_000)),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "seq_length"), (1, 1_000_000_000)),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
                     "experts_per_token", "moe_topk", "n_shared_experts", "num_shared_experts",
                     "first_k_dense_replace"), (0, 100_000)),
    **dict.fromkeys(("moe_layer_freq", "decoder_sparse_step", "sliding_window_pattern"), (1, 10_000)),
    **dict.fromkeys(("mamba_num_heads", "mamba_n_heads", "mamba_head_dim", "mamba_d_head", "ssm_state_size",
                     "mamba_d_state", "n_groups", "mamba_n_groups", "conv_kernel", "mamba_d_conv", "mamba_expand",
                     "attn_layer_period", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                     "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval"), (1, 1 << 20)),
    "sliding_window": (0, 1_000_000_000),
}
MAX_CONFIG_BYTES = 16 << 20


def read_config(path: Path, ref: str) -> dict[str, Any]:
    """A config.json as a dict, its numbers checked against CONFIG_BOUNDS; SpecError names file and key."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise SpecError(f"{ref}: the file is over {MAX_CONFIG_BYTES >> 20} MiB; not a Hugging Face config.json")

    def no_constant(name: str) -> Any:
        raise SpecError(f"{ref}: {name} is not a number a config.json may hold; write the value out")

    try:
        config = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constant)
    except RecursionError:
        raise SpecError(f"{ref}: the JSON nests too deeply; not a Hugging Face config.json") from None
    if not isinstance(config, dict):
        raise SpecError(f"{ref}: not a Hugging Face config.json (the top level is not an object)")
    sections = [("", config)] + [(f"{k}.", config[k]) for k in ("text_config", "llm_config", "language_config")
                                 if isinstance(config.get(k), dict)]
    for prefix, section in sections:
        for key, (low, high) in CONFIG_BOUNDS.items():
            value = section.get(key)
            if value is None:
                continue
            number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
            if number is None or isinstance(number, float) and not number.is_integer() or not low <= number <= high:
                raise SpecError(f"{ref}: {prefix}{key}: {json.dumps(value)[:40]} is not a whole number from "
                                f"{low:,} to {high:,}; fix the config")
        layer_types = section.get("layer_types")
        if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) > 10_000):
            raise SpecError(f"{ref}: {prefix}layer_types: must be a list of at most 10,000 layer kinds")
        pattern = section.get("hybrid_override_pattern")
        layers = section.get("num_hidden_layers")
        if pattern is not None and (not isinstance(pattern, str) or len(pattern) != layers):
            raise SpecError(f"{ref}: {prefix}hybrid_override_pattern: must be a string of one letter per layer "
                            f"(num_hidden_layers = {layers})")
    return config


def load_model(ref: str) -> ModelSpec:
    """Resolve --model: a config.json path, a folder holding one, a bundled repo id or short name."""
    path = Path(ref).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.is_file():
        try:
            config = read_config(path, ref)
            arch = arch_from_config(config, path.parent.name if path.name == "config.json" else path.stem)
        except (OSError, ValueError, KeyError, TypeError, OverflowError, ZeroDivisionError) as exc:
            raise SpecError(f"{ref}: not a readable Hugging Face config.json ({exc})") from None
        return ModelSpec(arch, f"config.json at {path}", [f"architecture read from {path}"])
    if path.is_dir():
        raise SpecError(f"{ref}: the folder has no config.json")
    index = _model_index()
    entry = index.get(_key(ref)) or index.get(_key(ref.split("/", 1)[-1])) or index.get(_key(path.name))
    notes: list[str] = []
    if entry is None:
        stripped = _strip_name(ref)
        entry = index.get(_key(stripped)) if stripped else None
        if entry is not None:
            notes.append(f"{ref} is read as a re-upload of {entry['id']} (bundled architecture)")
    if entry is None:
        raise SpecError(unknown_message("model", ref, model_names(), shown=model_short_names()) +
                        " Pass a path to its config.json for other models.")
    arch = arch_from_preset(entry)
    # a re-upload's name, or a listed id that names its own quantization (meta-llama/Llama-3.1-405B-Instruct-FP8)
    hint = quant_from_name(ref) if _key(ref) not in {_key(n) for n in _names(entry, "id", "aliases")} \
        and not entry.get("quantization") else None
    if hint:
        arch.quantization, arch.quant_bits = hint
        notes.append(f"quantization taken from the name: {hint[0]} ({hint[1]:g}-bit)")
    return ModelSpec(arch, f"bundled preset {entry['id']}", notes)


@dataclass
class GpuSpec:
    """A GPU preset or a size given by hand."""

    name: str
    memory_bytes: float
    compute_capability: str | None = None
    basis: str = ""
    platform: str = "cuda"
    sm_count: int = 0  # multiprocessors (0: unknown)


def gpu_names() -> list[str]:
    """Preset names (for help and error messages)."""
    return [g["name"] for g in load_gpus()]


def load_gpu(name: str) -> GpuSpec:
    """A preset by name or alias, case-insensitively; unknown -> SpecError listing close names."""
    want = _key(name)
    for g in load_gpus():
        if want in {_key(n) for n in _names(g, "name", "aliases")}:
            return GpuSpec(g["name"], float(g["memory_gib"]) * GIB, str(g.get("compute_capability") or ""),
                           g.get("basis", ""), g.get("platform", "cuda"), int(g.get("sm_count") or 0))
    all_names = [n for g in load_gpus() for n in _names(g, "name", "aliases")]
    raise SpecError(unknown_message("GPU", name, all_names, shown=gpu_names()) +
                    " Or give the size with --gpu-memory (e.g. 24GiB).")


#: Compute capability of GPU families a log names but the presets lack (NVIDIA's CUDA GPUs table): what decides
#: V1's fallback to V0 (below 8.0) and bfloat16 (8.0+).
_FAMILY_CC = ((r"\bT4\b|RTX ?20[6-8]0|TITAN RTX|Quadro RTX|GTX 16[56]0", 7.5), (r"V100|TITAN V\b", 7.0),
              (r"P100", 6.0), (r"P40|P4\b|GTX 10[5-8]0|TITAN X", 6.1), (r"A100|A30\b", 8.0),
              (r"RTX 30[5-9]0|A10G?\b|A40\b|A[2-6]000\b|A16\b", 8.6), (r"L4\b|L40|RTX 40[5-9]0|Ada", 8.9),
              (r"H100|H200|H20\b|GH200", 9.0), (r"B200|GB200|B300", 10.0), (r"RTX 50[5-9]0|PRO 6000|Blackwell", 12.0))


def compute_capability_of(name: str | None) -> float | None:
    """A GPU's compute capability from its name as a preset or a log prints it; None when unknown.

    >>> [compute_capability_of(n) for n in ("Tesla T4", "NVIDIA GeForce RTX 2080 Ti", "x")]
    [7.5, 7.5, None]
    """
    if not name:
        return None
    try:
        cc = load_gpu(name).compute_capability
        if cc:
            return float(cc)
    except SpecError:
        pass
    for pattern, cc_value in _FAMILY_CC:
        if re.search(pattern, name, re.IGNORECASE):
            return cc_value
    return None


def sm_count_of(name: str | None) -> int:
    """A GPU preset's multiprocessor count (gpus.yaml sm_count); 0 when the name is no preset.

    >>> sm_count_of("H100"), sm_count_of("RTX PRO 6000"), sm_count_of("x"), sm_count_of(None)
    (132, 188, 0, 0)
    """
    if not name:
        return 0
    try:
        return load_gpu(name).sm_count
    except SpecError:
        return 0


def unknown_message(kind: str, name: str, candidates: list[str], shown: list[str] | None = None) -> str:
    """'unknown model 'x'. Closest: a, b, c. Known: ...'."""
    from rapidfuzz import fuzz, process

    close = process.extract(name, candidates, scorer=fuzz.WRatio, limit=5, processor=lambda s: s.lower())
    picks: list[str] = []
    for cand, score, _ in close:
        if score >= 50 and cand not in picks:
            picks.append(cand)
    msg = f"unknown {kind} {name!r}."
    if picks:
        msg += " Closest: " + ", ".join(picks[:3]) + "."
    listing = shown if shown is not None else sorted({c for c in candidates if "/" not in c})
    msg += f" Known {kind}s: " + ", ".join(listing) + "."
    return msg
