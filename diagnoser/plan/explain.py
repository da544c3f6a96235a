"""The plan in words: the KV bytes-per-token product spelled out, every assumption behind the figures, and
the text report (templates/plan.txt.j2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from diagnoser.plan.resolve import COMMAND, LOG, OPTION, SIZE_NOTE, Resolved
from diagnoser.plan.verdict import Verdict
from diagnoser.vllm import coefficients, kvcache, sizing, weights
from diagnoser.vllm import memory as mem
from diagnoser.vllm.modelspec import GpuSpec, ModelSpec
from diagnoser.vllm.releases import Version, version_str


def _template() -> jinja2.Template:
    """The text report's template, with the size and token filters it uses."""
    path = Path(__file__).resolve().parents[1] / "templates" / "plan.txt.j2"
    if path.is_file():  # (importlib.resources, and the zipfile it imports, only for a zipped install)
        text = path.read_text(encoding="utf-8")
    else:
        from importlib import resources

        text = resources.files("diagnoser").joinpath("templates/plan.txt.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True, optimized=False)  # (no constant folding: a fifth of the compile)
    env.filters["gb"] = lambda b: f"{b / mem.GB:,.2f}"
    env.filters["gib"] = lambda b: f"{b / mem.GIB:,.2f}"
    env.filters["tokens"] = mem.human_tokens
    return env.from_string(text)


def kv_formula(res: sizing.PlanResult, inp: sizing.PlanInput) -> str:
    """The bytes-per-token product, spelled out."""
    a = inp.arch
    tp, pp = inp.tensor_parallel_size, inp.pipeline_parallel_size
    layers = sum(1 for k in kvcache.stage_kinds(a, pp) if k in ("full", "sliding"))  # MLP-only and state layers: no KV
    vb = f"{res.kv_value_bytes:g} byte{'s' if res.kv_value_bytes != 1 else ''}"
    if a.is_mla:
        return (f"MLA: {layers} layers x ({a.kv_lora_rank} kv_lora_rank + {a.qk_rope_head_dim} rope dim) x {vb}"
                f"; one latent per layer, the same on every TP rank")
    heads = mem.kv_heads_per_rank(a.num_key_value_heads, tp)
    split = ""
    if tp > 1:
        split = (f" ({a.num_key_value_heads} KV heads / TP {tp}" +
                 (", replicated: fewer KV heads than ranks)" if a.num_key_value_heads < tp else ")"))
    return f"2 x {layers} layers x {heads} KV heads{split} x {a.head_size} head dim x {vb}"


def _weights_line(res: sizing.PlanResult, inp: sizing.PlanInput, source: str) -> str:
    """Where the weight figure comes from: the log, --weights, or parameters x bytes (split over TP/PP)."""
    if source == LOG:
        return "weights: measured in the log"
    if source == OPTION:
        return "weights: given with --weights"
    a, fmt = inp.arch, res.quant_format
    if fmt:
        per = weights.quantized_weight_bytes(fmt, inp.quant_bits or a.quant_bits)
        padded = ""
        if fmt == "mxfp4":
            choice = weights.mxfp4_moe_choice(inp.version, sizing.gpu_compute_capability(inp), inp.flashinfer)
            padded = f", MXFP4 experts in the {choice.backend} MoE backend's layout"
        rest = "norms" if fmt == "gguf" else "embeddings and norms"
        per_weight = (f"{fmt} for the quantized layers ({per:.3f} bytes/weight{padded}), "
                      f"{res.model_dtype_bytes:g} bytes for {rest}")
    else:
        per_weight = f"{res.model_dtype_bytes:g} bytes"
    return (f"weights: {weights.param_count(a) / 1e9:.2f}B parameters x {per_weight}" +
            (f", split over TP {inp.tensor_parallel_size}" if inp.tensor_parallel_size > 1 else "") +
            (f" and PP {inp.pipeline_parallel_size}" if inp.pipeline_parallel_size > 1 else ""))


def _overhead_line(res: sizing.PlanResult, inp: sizing.PlanInput, v: Version, source: str) -> str:
    """Where the overhead comes from: the log, --overhead, or activations + non-torch (+ CUDA graphs)."""
    if source == LOG:
        return ("overhead: measured in the log (activation peak + non-torch memory"
                + (" + CUDA graphs)" if coefficients.graphs_budgeted(v) else ")"))
    if source == OPTION:
        return "overhead: given with --overhead (activations + CUDA graphs + non-torch memory)"
    if res.graphs_in_budget and res.cuda_graph_bytes:
        graphs = f" + CUDA graphs {res.cuda_graph_bytes / mem.GIB:.2f} GiB (budgeted from vLLM 0.20)"
    elif inp.enforce_eager:
        graphs = " (no CUDA graphs: --enforce-eager)"
    else:
        graphs = (f"; CUDA graphs (~{res.cuda_graph_bytes / mem.GIB:.2f} GiB) come after the KV cache in this "
                  "release and must fit outside the share")
    return (f"overhead: activations {res.activation_bytes / mem.GIB:.2f} GiB (the larger of the forward pass over "
            f"max_num_batched_tokens={res.max_num_batched_tokens} and the sampler over max_num_seqs="
            f"{res.max_num_seqs} x {inp.arch.vocab_size:,} vocabulary x {res.sampler_bytes_per_logit:g} bytes, "
            f"the coefficient of vLLM {version_str(v)}) + non-torch {res.non_torch_bytes / mem.GIB:.2f} GiB "
            f"({coefficients.non_torch_rule(inp.tensor_parallel_size, v)})" + graphs)


def _architecture_lines(res: sizing.PlanResult, inp: sizing.PlanInput) -> list[str]:
    """What the model's attention layout and the KV dtype mean for the KV figures."""
    a, out = inp.arch, []
    if a.is_mla:
        out.append("multi-head latent attention: one latent (kv_lora_rank + qk_rope_head_dim) per layer, "
                   "not split by tensor parallelism")
    if a.sliding_window:
        n_slide = a.kinds().count("sliding")
        out.append(f"sliding window {a.sliding_window} tokens on {n_slide} of {a.layers} layers: those layers keep "
                   f"at most window - 1 + max_num_batched_tokens tokens per request; the token count vLLM logs "
                   "counts every layer")
    if res.kv_value_bytes == 1:
        out.append("fp8 KV cache: 1 byte per value")
    if inp.tensor_parallel_size > a.num_key_value_heads and not a.is_mla:
        out.append(f"{a.num_key_value_heads} KV heads on {inp.tensor_parallel_size} ranks: each rank keeps one "
                   "(replicated)")
    return out


def assumptions_for(spec: ModelSpec, gpu: GpuSpec, res: sizing.PlanResult, got: Resolved) -> list[str]:
    """Every assumption behind the figures, in words; each figure's source from the resolve table."""
    inp = res.inp
    v, a = inp.version, inp.arch
    out = [f"model: {spec.source}", f"GPU: {gpu.name}, {gpu.memory_bytes / mem.GIB:.2f} GiB as vLLM sees it"
           + (f" ({gpu.basis})" if gpu.basis else ""),
           f"vLLM {version_str(v)} ({res.engine} engine) defaults and formulas; "
           f"budget = GPU memory x {res.gpu_memory_utilization:g}, KV room = budget - weights - overhead",
           SIZE_NOTE]
    if got["max_model_len"] in (None, -1):
        out.append(f"--max-model-len not given: the model's maximum, {res.max_model_len:,}")
    out.append(_weights_line(res, inp, got.came_from("weights")))
    out.append(_overhead_line(res, inp, v, got.came_from("overhead")))
    if got.came_from("kv_cache") == COMMAND:
        out.append("KV cache size fixed by --kv-cache-memory-bytes: --gpu-memory-utilization is ignored")
    elif got.came_from("kv_cache") == LOG:
        out.append("KV cache memory: measured in the log ('Available KV cache memory' / profiling summary)")
    out.extend(_architecture_lines(res, inp))
    out.append("one vLLM instance alone on the GPU (other processes' memory is not subtracted)")
    if a.extra_params and not a.vision:
        out.append("multimodal: the vision tower's weights are counted; its profiling activations are not")
    out.extend(sizing.physics_assumptions(res))
    return out


def render_text(data: dict[str, Any], res: sizing.PlanResult, spec: ModelSpec, gpu: GpuSpec, verdict: Verdict) -> str:
    """The text report of one plan."""
    return _template().render(d=data, res=res, inp=res.inp, arch=spec.arch, gpu=gpu, verdict=verdict,
                              formula=kv_formula(res, res.inp), mem=mem, device_need=sizing.device_need_bytes(res))
