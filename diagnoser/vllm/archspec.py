"""A model's shape as the memory arithmetic sees it: the numbers of its config.json, one kind per layer.

`ArchSpec` holds what the sizing needs of a checkpoint's text model (layers, heads, MLP and expert sizes,
sliding windows, latent attention, recurrent-state layers, quantization, a vision tower); `layer_kind` reads
a config.json layer type or a hybrid pattern letter as 'full', 'sliding', 'linear' or 'none'. Reading a
config.json or a bundled preset into an ArchSpec is modelspec.py's job; this module only describes one.
"""

from __future__ import annotations

from dataclasses import dataclass


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
