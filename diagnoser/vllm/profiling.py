"""Start-up memory outside the weights and the KV cache: activations, encoder, non-torch memory, CUDA graphs.

vLLM's profiling run measures the PyTorch peak of one forward pass over max_num_batched_tokens and of the
sampler over max_num_seqs rows (activation_bytes), and of a multimodal encoder over its largest images
(encoder_bytes); memory outside PyTorch's allocator grows during start-up (non_torch_bytes), and captured
CUDA graphs keep a pool (cuda_graph_bytes). The default coefficients are here; a release's own come in as
arguments (sizing.py looks them up). Pure functions over an ArchSpec and numbers.
"""

from __future__ import annotations

import re

from diagnoser.lazyre import lazy
from diagnoser.vllm.archspec import ArchSpec
from diagnoser.vllm.memory import (
    GIB,
    SAMPLER_BYTES_PER_LOGIT,
    layers_per_stage,
    sampler_hidden_bytes,
    topk_topp_buffer_bytes,
)

#: Non-torch memory (CUDA context growth, cuBLAS/NCCL workspaces) at one GPU, and the extra when several GPUs
#: talk: NCCL plus vLLM's custom all-reduce buffers on data-centre GPUs; GeForce cards lack GPU peer-to-peer
#: access, vLLM disables its custom all-reduce there and only NCCL's buffers remain (catalog D5 'non-torch').
NON_TORCH_SINGLE = 0.10 * GIB
NON_TORCH_MULTI_GPU = 1.40 * GIB
NON_TORCH_MULTI_GPU_NO_P2P = 0.15 * GIB
NO_P2P_GPUS = lazy(r"geforce|rtx ?[2-5]0[5-9]0|titan", re.IGNORECASE)
#: CUDA-graph pool: a fixed part plus a part per layer (graphs are captured per batch size, and the piecewise
#: graphs keep per-layer buffers). Observed 'Graph capturing finished ... took' figures are 0.2-0.5 GiB.
CUDA_GRAPH_BASE = 0.10 * GIB
CUDA_GRAPH_PER_LAYER = 0.006 * GIB


def activation_bytes(arch: ArchSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1,
                     act_bytes: float = 2, sampler: bool = True,
                     bytes_per_logit: float = SAMPLER_BYTES_PER_LOGIT, sampler_extra: float = 0) -> int:
    """PyTorch peak of vLLM's profiling run: the larger of the forward pass over max_num_batched_tokens
    tokens (MLP gate/up output and activation, `mlp_matrices` x intermediate per rank, plus three hidden-size
    buffers: residual, normed input and the layer output) and the sampler over max_num_seqs rows of the
    vocabulary (`bytes_per_logit` each; V0 samples profiled_sequences of them) plus `sampler_extra` bytes alive
    beside it (sampler_extra_bytes). `sampler=False` leaves the sampler out.

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
    sampled = max_num_seqs * arch.vocab_size * bytes_per_logit + sampler_extra if sampler else 0
    return int(max(forward, sampled))


def sampler_extra_bytes(arch: ArchSpec, rows: int, max_num_batched_tokens: int, act_bytes: float = 2,
                        per_row: int = 0, whole_batch: bool = False, sm_count: int = 0,
                        triton_buffer: bool = False) -> int:
    """What V1's dummy sampler run holds besides the logits and their copies: the hidden states alive then
    (memory.sampler_hidden_bytes, `per_row` vectors a row and the forward's whole output when `whole_batch`) and,
    with the Triton top-k/top-p kernel (`triton_buffer`, 0.17+), its cached fp32 scratch rows
    (memory.topk_topp_buffer_bytes over the GPU's `sm_count`).

    >>> a = ArchSpec("t", layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    ...              intermediate_size=14336, vocab_size=128256)
    >>> sampler_extra_bytes(a, 1024, 8192, per_row=2, whole_batch=True, sm_count=132, triton_buffer=True) \\
    ...     == (8192 + 2 * 1024) * 4096 * 2 + 132 * 128256 * 4
    True
    >>> sampler_extra_bytes(a, 1024, 8192)
    0
    """
    hidden = sampler_hidden_bytes(arch.hidden_size, rows, max_num_batched_tokens, act_bytes, per_row, whole_batch)
    return hidden + (topk_topp_buffer_bytes(sm_count, rows, arch.vocab_size) if triton_buffer else 0)


def logits_bytes(arch: ArchSpec, rows: int, tp: int = 1, act_bytes: float = 2) -> int:
    """Peak of V1's compute_logits over `rows` hidden vectors when profile_run runs no sampler (0.6.5-0.7.3,
    settings.v1_profile_logits): the rows' hidden states and their logits, both in the model dtype (the
    LogitsProcessor returns lm_head's output unconverted; vllm/model_executor/layers/logits_processor.py 0.7.1).
    With tensor parallelism V1 all-gathers the logits (use_all_gather under VLLM_USE_V1), and
    GroupCoordinator.all_gather holds the rank's vocabulary shard, the gathered buffer and the copy its
    movedim + reshape returns at once (vllm/distributed/parallel_state.py 0.7.1).

    >>> a = ArchSpec("t", layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
    ...              intermediate_size=28672, vocab_size=128256)
    >>> logits_bytes(a, 8192) == 8192 * (8192 + 128256) * 2
    True
    >>> logits_bytes(a, 8192, tp=2) == 8192 * (8192 + 128256 // 2 + 2 * 128256) * 2
    True
    """
    vocab = arch.vocab_size if tp <= 1 else arch.vocab_size * (2 + 1 / tp)
    return int(rows * (arch.hidden_size + vocab) * act_bytes)


def profile_logit_rows(mode: str, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Rows V1's profile_run computes logits for without sampling them (settings.v1_profile_logits): every
    token of the dummy batch (`batched_tokens`, 0.6.5-0.7.2), the last token of each of max_num_seqs dummy
    requests (`max_num_seqs`, 0.7.3), none (`none`, 0.6.4: forward pass only); 0 too for `sampler`, whose rows
    profiled_sequences counts.

    >>> [profile_logit_rows(m, 1024, 8192) for m in ("batched_tokens", "max_num_seqs", "none", "sampler")]
    [8192, 1024, 0, 0]
    """
    return {"batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs}.get(mode, 0)


def profiled_sequences(engine: str, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Rows of vocabulary the profiling run samples. V1 samples max_num_seqs dummy rows (_dummy_sampler_run, from
    0.8.0; before, profile_run samples nothing: settings.v1_profile_logits, profile_logit_rows). V0
    splits max_num_batched_tokens over max_num_seqs dummy sequence groups, at least one token each, and samples
    every group (vllm/worker/model_runner.py profile_run), chunked prefill or not: with max_model_len 105,088
    (chunked, 512 tokens) a GTX 1080's Llama-3.2-1B peaked at 1.17 GiB = 256 x 128,256 logits x 39 bytes
    (0.6.4.post1), and Qwen3-30B-A3B at TP 4 with 4,096 chunked tokens at 1.40 GiB = 256 x 151,936 x 39 (0.8.5).

    >>> profiled_sequences("V1", 1024, 512), profiled_sequences("V0", 256, 512), profiled_sequences("V0", 256, 100)
    (1024, 256, 100)
    """
    if engine == "V0":
        return max(1, min(max_num_seqs, max_num_batched_tokens))
    return max_num_seqs


def non_torch_bytes(tp: int = 1, pp: int = 1, gpu_name: str = "", single: float = NON_TORCH_SINGLE,
                    multi: float = NON_TORCH_MULTI_GPU, custom_all_reduce: bool | None = None) -> int:
    """Memory outside PyTorch's allocator that grows during start-up, per rank: `single` bytes, plus `multi`
    bytes of all-reduce buffers when tensor parallelism is on (NCCL's alone on GPUs without peer-to-peer
    access). Pipeline-only ranks exchange activations point to point and keep the single-rank figure.

    >>> non_torch_bytes(1) == int(NON_TORCH_SINGLE), non_torch_bytes(2, gpu_name="RTX 4090") == int(0.25 * GIB)
    (True, True)
    >>> non_torch_bytes(2, gpu_name="RTX 4090", multi=0) == non_torch_bytes(2, multi=0) == int(NON_TORCH_SINGLE)
    True
    """
    if tp <= 1:
        return int(single)
    no_p2p = custom_all_reduce is False or (custom_all_reduce is None and NO_P2P_GPUS.search(gpu_name or ""))
    # NCCL's buffers alone are part of all of them: none counted when the release counts none (multi = 0)
    return int(single + (min(NON_TORCH_MULTI_GPU_NO_P2P, multi) if no_p2p else multi))


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


def full_graph_count(capture_sizes: list[int], max_num_seqs: int, mode: str, decode_query_len: int = 1) -> int:
    """FULL decode graphs Model Runner V2 captures: with FULL_AND_PIECEWISE one per capture size up to
    max_num_seqs x decode_query_len tokens (vllm/v1/worker/gpu/cudagraph_utils.py 0.29.0-0.31.0
    CudaGraphManager._init_candidates: a decode descriptor is skipped when rounded_num_tokens > max_decode_tokens),
    with FULL one per size, with PIECEWISE none.

    >>> sizes = [1, 2, 4, *range(8, 249, 8), *range(256, 513, 16)]
    >>> full_graph_count(sizes, 1024, "FULL_AND_PIECEWISE"), full_graph_count(sizes, 256, "FULL_AND_PIECEWISE")
    (51, 35)
    >>> full_graph_count(sizes, 256, "PIECEWISE"), full_graph_count([1, 2, 4, 8], 4, "FULL")
    (0, 4)
    """
    if mode == "FULL":
        return len(capture_sizes)
    if mode != "FULL_AND_PIECEWISE":
        return 0
    return len([s for s in capture_sizes if s <= max_num_seqs * decode_query_len])


def cuda_graph_bytes(arch: ArchSpec, pp: int = 1, enforce_eager: bool = False, base: float = CUDA_GRAPH_BASE,
                     per_layer: float = CUDA_GRAPH_PER_LAYER, full_graphs: int = 0,
                     per_full_graph_layer_hidden: float = 0.0) -> int:
    """CUDA-graph pool estimate: a fixed part, a part per layer of the rank, and from Model Runner V2's own
    estimate (vLLM 0.29) a part per FULL graph beyond the first; none with --enforce-eager.

    Model Runner V2 0.29.0-0.31.0 (vllm/v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory, called by
    v1/worker/gpu_worker.py determine_available_memory before the KV cache exists) captures every PIECEWISE
    graph in full but only the two largest FULL graphs, and counts the FULL ones as first + (n - 1) x second
    (_extrapolate_full_graph_memory, the second at least 1 MiB); that second capture's bytes are modelled as
    `per_full_graph_layer_hidden` per layer of the rank and unit of hidden size, times `full_graphs` - 1.

    >>> a = ArchSpec("t", layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    ...              intermediate_size=14336, vocab_size=128256)
    >>> round(cuda_graph_bytes(a, base=0.25 * GIB, per_layer=0.018 * GIB) / GIB, 3), cuda_graph_bytes(a, 1, True)
    (0.826, 0)
    >>> round(cuda_graph_bytes(a, base=0.5 * GIB, per_layer=0.006 * GIB, full_graphs=35,
    ...                        per_full_graph_layer_hidden=128) / GIB, 3)
    1.223
    """
    if enforce_eager:
        return 0
    layers = layers_per_stage(arch.layers, pp)
    extrapolated = per_full_graph_layer_hidden * max(full_graphs - 1, 0) * layers * arch.hidden_size
    return int(base + per_layer * layers + extrapolated)
