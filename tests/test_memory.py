"""Memory arithmetic of the planner, each against figures computed by hand in the test."""

from __future__ import annotations

import math

import pytest

from diagnoser.vllm import archspec, coefficients, kvcache, profiling, releases, sizing, weights
from diagnoser.vllm import memory as mem
from diagnoser.vllm.modelspec import arch_from_config, arch_from_preset, load_model, load_models
from diagnoser.vllm.what_if import what_if

GIB = 1 << 30


def arch(name: str) -> archspec.ArchSpec:
    return load_model(name).arch


# --- the worked example of the issue ---------------------------------------------------------------------------

def test_worked_example_llama_8b_on_24gb():
    # Llama 3.1 8B: 2 x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131,072 bytes (128 KiB) per token
    assert mem.kv_bytes_per_token(32, 8, 128, 2) == 131072
    a = arch("llama-3.1-8b")
    assert kvcache.model_kv_bytes_per_token(a, 1, 1, 2) == 131072
    inp = sizing.PlanInput(arch=a, gpu_bytes=24e9, gpu_memory_utilization=0.92, weights=16e9, overhead=1.5e9)
    res = sizing.plan_memory(inp)
    assert res.budget_bytes == pytest.approx(22.08e9)          # "about 22.1 GB share"
    assert res.kv_cache_bytes == pytest.approx(4.58e9)         # "about 4.6 GB for the KV cache"
    assert res.kv_bytes_per_token == 131072
    assert mem.tokens_in(4.58e9, 131072) == 34942              # "about 35,000 tokens"
    assert res.kv_cache_tokens == 34928                        # whole 16-token blocks, as vLLM counts them
    assert res.max_model_len == 131072                         # the default: the model's maximum
    assert res.request_kv_bytes == 16 * GIB                    # 131,072 tokens need 16 GiB ...
    assert not res.fits                                        # ... so vLLM refuses to start
    short = sizing.plan_memory(sizing.with_changes(inp, max_model_len=16384))
    assert short.request_kv_bytes == 2 * GIB                   # 16,384 tokens need 2 GiB
    assert short.fits
    assert math.floor(short.max_concurrency) == 2              # two run at once
    assert short.max_concurrency == pytest.approx(4.58e9 / (2 * GIB))
    assert res.max_model_len_that_fits == 34816                # 34,928 rounded down to a multiple of 1024


# --- KV bytes per token -------------------------------------------------------------------------------------------

def test_mla_deepseek_v3_latent_not_split_by_tp():
    a = arch("deepseek-v3")
    # 61 layers x (512 kv_lora_rank + 64 rope dim) x 2 bytes = 70,272 bytes per token
    assert kvcache.model_kv_bytes_per_token(a, tp=1, kv_bytes=2) == 61 * 576 * 2 == 70272
    assert kvcache.model_kv_bytes_per_token(a, tp=8, kv_bytes=2) == 70272       # replicated, not sharded
    assert kvcache.model_kv_bytes_per_token(a, tp=8, kv_bytes=1) == 35136       # fp8 latent


def test_fp8_kv_cache_is_one_byte():
    assert mem.kv_value_bytes("fp8") == mem.kv_value_bytes("fp8_e4m3") == mem.kv_value_bytes("fp8_e5m2") == 1
    assert mem.kv_value_bytes("auto", 2) == 2
    a = arch("llama-3.1-8b")
    assert kvcache.model_kv_bytes_per_token(a, kv_bytes=1) == 2 * 32 * 8 * 128 * 1 == 65536


def test_tp_with_fewer_kv_heads_than_ranks_replicates():
    a = arch("qwen2.5-7b")  # 28 layers, 4 KV heads, head dim 3584 / 28 = 128
    assert a.head_size == 128
    assert kvcache.model_kv_bytes_per_token(a, tp=1) == 2 * 28 * 4 * 128 * 2 == 57344
    assert kvcache.model_kv_bytes_per_token(a, tp=2) == 2 * 28 * 2 * 128 * 2 == 28672
    # 8 ranks, 4 KV heads: every rank keeps one head (max(1, 4 // 8)), so TP=8 saves nothing over TP=4
    assert mem.kv_heads_per_rank(4, 8) == 1
    assert kvcache.model_kv_bytes_per_token(a, tp=8) == kvcache.model_kv_bytes_per_token(a, tp=4) == 14336


def test_pipeline_parallel_keeps_its_stage_layers():
    a = arch("llama-3.1-70b")  # 80 layers
    assert mem.layers_per_stage(80, 3) == 27
    assert kvcache.model_kv_bytes_per_token(a, tp=1, pp=2) == 2 * 40 * 8 * 128 * 2


# --- sliding windows --------------------------------------------------------------------------------------------------

def test_gpt_oss_alternating_window_matches_vllms_need():
    a = arch("gpt-oss-120b")  # 36 layers, 18 sliding (window 128), 8 KV heads x 64 head dim
    page = 16 * 2 * 8 * 64 * 2  # one 16-token block of one layer: 32,768 bytes
    full = 18 * (131072 // 16) * page
    sliding = 18 * (math.ceil((128 - 1 + 1024) / 16) + 1) * page  # 73 pages per sliding layer
    assert full + sliding == 4874895360
    need = kvcache.request_kv_bytes(a, 131072, kv_bytes=2, max_num_batched_tokens=1024)
    assert need == 4874895360
    assert round(need / GIB, 2) == 4.54  # the figure vLLM printed for gpt-oss-120b at 131072 tokens
    # the logged token count counts every layer in full
    assert kvcache.model_kv_bytes_per_token(a) == 36 * 2 * 8 * 64 * 2 == 73728


def test_gemma2_every_other_layer_slides():
    a = arch("gemma-2-9b")  # 42 layers, window 4096, 8 KV heads x 256 head dim
    assert a.kinds()[:4] == ["sliding", "full", "sliding", "full"]
    page = 16 * 2 * 8 * 256 * 2  # 131,072 bytes
    full = 21 * (8192 // 16) * page                                   # 1,409,286,144
    sliding = 21 * (math.ceil((4096 - 1 + 2048) / 16) + 1) * page    # 21 x 385 pages = 1,059,717,120
    assert kvcache.request_kv_bytes(a, 8192, max_num_batched_tokens=2048) == full + sliding == 2469003264


def test_mistral_v01_uniform_window_caps_the_request():
    a = arch("mistral-7b-v0.1")  # every layer slides over 4096 tokens
    per_layer = (math.ceil((4096 - 1 + 2048) / 16) + 1) * 16 * 2 * 8 * 128 * 2  # 385 pages of 65,536 bytes
    assert kvcache.request_kv_bytes(a, 32768, max_num_batched_tokens=2048) == 32 * per_layer == 807403520
    # without the window (v0.3) the same length needs 32 layers x 2048 pages x 65,536 bytes = 4 GiB
    assert kvcache.request_kv_bytes(arch("mistral-7b"), 32768, max_num_batched_tokens=2048) == 4 * GIB


def test_max_model_len_for_is_vllms_binary_search():
    a = arch("llava-1.5-7b")  # 32 layers x 32 KV heads x 128 x 2 x 2 = 524,288 bytes per token
    assert kvcache.model_kv_bytes_per_token(a) == 524288
    assert kvcache.request_kv_bytes(a, 2048) == 1 * GIB
    # 0.258 GiB holds 33 blocks of 16 tokens (33 x 16 x 524,288 = 276,824,064 bytes)
    assert kvcache.max_model_len_for(a, 0.258 * GIB, 2048, kv_bytes=2) == 528


# --- weights ----------------------------------------------------------------------------------------------------------

def test_llama_8b_bf16_and_fp8_weights():
    a = arch("llama-3.1-8b")
    parts = weights.param_breakdown(a)
    assert parts["embeddings"] == parts["lm_head"] == 128256 * 4096 == 525336576
    assert parts["attention"] == 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2) == 1342177280
    assert parts["mlp"] == 32 * 3 * 4096 * 14336 == 5637144576
    assert weights.param_count(a) == 8030261248
    assert weights.weight_bytes(a, 2) == 2 * 8030261248
    # fp8: linear layers 1 byte (+ a 4-byte scale per 16,384 weights), embeddings, head and norms 2 bytes
    linear = 1342177280 + 5637144576
    assert weights.weight_bytes(a, 2, "fp8") == int(linear * (1 + 4 / 16384) + 2 * (525336576 * 2 + 266240))
    assert weights.weight_bytes(a, 2, tp=2) == 8030261248  # half of the 16-bit bytes on each of 2 GPUs


def test_awq_4bit_moe_weights():
    a = arch("qwen3-30b-a3b")
    # attention 48 x (2048 x 4096 x 2 + 2048 x 512 x 2) and experts 48 x 128 x 3 x 2048 x 768 are 4-bit with an
    # fp16 scale and 4-bit zero per 128 weights (0.51953125 bytes); embeddings, head, router, norms 2 bytes
    quantized = (905969664 + 28991029248) * (0.5 + 2.5 / 128)
    rest = (311164928 * 2 + 12582912 + 198656) * 2
    assert weights.weight_bytes(a, 2, "awq", 4) == int(quantized + rest) == 16802648064
    assert weights.weight_bytes(a, 2, "awq", 4) / GIB == pytest.approx(15.61, rel=0.01)  # vLLM measured 15.61 GiB


def test_mxfp4_quantizes_only_experts():
    a = arch("gpt-oss-20b")
    parts = weights.param_breakdown(a)
    # Marlin (the GPU unknown): w13 and w2 padded to 3072 x 2944, one e8m0 scale per 32 weights, bf16 biases
    per_expert = 3 * 2944 * 3072 // 2 + 3 * 2944 * 3072 // 32 + (2 * 2944 + 3072) * 2
    expected = 24 * 32 * per_expert + (sum(parts.values()) - parts["experts"]) * 2
    assert weights.weight_bytes(a, 2, "mxfp4") == pytest.approx(expected, rel=1e-9)
    # vLLM 0.19 measured 13.72 GiB on an A100 (Marlin, below Hopper)
    assert weights.weight_bytes(a, 2, "mxfp4", version=(0, 19, 0), compute_capability=8.0) / GIB == \
        pytest.approx(13.72, rel=0.01)
    # TP 2 on an H100 at 0.19: Triton, each rank's intermediate 1440 padded to 1472; vLLM measured 7.01 GiB a rank
    assert weights.weight_bytes(a, 2, "mxfp4", tp=2, version=(0, 19, 0), compute_capability=9.0) / GIB == \
        pytest.approx(7.01, rel=0.01)


def test_mxfp4_backend_by_release_and_gpu_from_vllm_source():
    # releases.yaml mxfp4_moe, read from each release's sdist/wheel: Marlin below Hopper and on 12.x (GB10) always;
    # Hopper: Marlin at 0.10.1-0.11.0 (no triton_kernels shipped), Triton from 0.12.0 (vendored triton_kernels)
    choice = weights.mxfp4_moe_choice
    assert [choice(v, 9.0).backend for v in ((0, 10, 1), (0, 11, 0), (0, 12, 0), (0, 19, 0), (0, 29, 0))] == \
        ["marlin", "marlin", "triton", "triton", "triton"]
    assert {choice(v, cc).backend for v in ((0, 10, 1), (0, 19, 0), (0, 30, 0)) for cc in (8.0, 8.6, 8.9, 12.0, 12.1)} \
        == {"marlin"}
    # Blackwell (10.x): FlashInfer TRT-LLM when FlashInfer is installed (an extra before 0.11.1, a dependency after)
    assert choice((0, 10, 1), 10.0).backend == "marlin" and "FlashInfer" in choice((0, 10, 1), 10.0).why
    assert choice((0, 10, 1), 10.0, flashinfer=True).backend == "flashinfer-trtllm"
    assert choice((0, 12, 0), 10.0).backend == "flashinfer-trtllm"
    # what the planner cannot see is said, not silently picked
    assert "triton_kernels" in choice((0, 11, 0), 9.0).why
    assert "VLLM_MXFP4_USE_MARLIN" in choice((0, 29, 0), 9.0).why
    assert choice((0, 29, 0), None).gpu_class is None and "not known" in choice((0, 29, 0), None).why


@pytest.mark.parametrize(("version", "cc", "tp", "model", "gib", "measured"), [
    # Marlin, 0.10.1 on an H100: 'Model loading took 65.9651 GiB' (vllm-project/vllm#23278)
    ((0, 10, 1), 9.0, 1, "gpt-oss-120b", 65.90, 65.97),
    # Triton 0.12-0.16 (scales swizzled, loaded scales kept): 0.14.1 on an H100 'Using Triton backend ... Model
    # loading took 64.38 GiB' (vllm-project/vllm#33155)
    ((0, 14, 0), 9.0, 1, "gpt-oss-120b", 64.30, 64.38),
    ((0, 14, 0), 9.0, 1, "gpt-oss-20b", 13.40, None),
    # Triton 0.17-0.19 (weights pre-padded to 64) at TP 2: the llm-d sweep's 7.01 GiB a rank
    ((0, 19, 0), 9.0, 2, "gpt-oss-20b", 6.96, 7.01),
    # Triton 0.27+ (loaded scales dropped, scale groups to 4): the arvaken harness's 61.43 GiB
    ((0, 29, 0), 9.0, 1, "gpt-oss-120b", 61.04, 61.43),
    # Marlin on GB10 (12.1) at 0.30: 13.8 GiB measured
    ((0, 30, 0), 12.1, 1, "gpt-oss-20b", 13.67, 13.80),
])
def test_mxfp4_weights_per_backend(version, cc, tp, model, gib, measured):
    a = arch(model)
    got = weights.weight_bytes(a, 2, "mxfp4", tp=tp, version=version, compute_capability=cc) / GIB
    assert got == pytest.approx(gib, abs=0.01)
    if measured:
        assert got == pytest.approx(measured, rel=0.01)


def test_plan_names_the_mxfp4_backend():
    inp = sizing.PlanInput(arch=arch("gpt-oss-120b"), gpu_bytes=80 * GIB, gpu_name="H100-80GB",
                           version=(0, 29, 0), max_model_len=8192)
    res = sizing.plan_memory(inp)
    line = next(a for a in sizing.physics_assumptions(res) if a.startswith("MXFP4 experts"))
    assert "triton" in line and "VLLM_MXFP4_USE_MARLIN" in line
    unknown = sizing.plan_memory(sizing.with_changes(inp, gpu_name="", version=(0, 11, 0)))
    assert any("not known: assumed Marlin" in a for a in sizing.physics_assumptions(unknown))


def test_gguf_bits_per_type():
    assert weights.gguf_bits("Qwen3-8B-Q4_K_M.gguf") == 4.85
    assert weights.gguf_bits("unsloth/Qwen3-8B-GGUF:Q8_0") == 8.5
    assert weights.gguf_bits("model.IQ1_S.gguf") == 1.56
    assert weights.gguf_bits("Qwen3-8B") is None
    a = arch("qwen3-8b")
    # file sizes of unsloth/Qwen3-8B-GGUF: Q8_0 8.71 GB, Q4_K_M 5.03 GB (every matrix quantized, norms not)
    assert weights.weight_bytes(a, 2, "gguf", 8.5) / 1e9 == pytest.approx(8.71, rel=0.02)
    assert weights.weight_bytes(a, 2, "gguf", 4.85) / 1e9 == pytest.approx(5.03, rel=0.02)


@pytest.mark.parametrize("entry", load_models(), ids=lambda e: e["id"])
def test_parameter_estimate_within_5_percent_of_published(entry):
    a = arch_from_preset(entry)
    assert weights.param_count(a) / 1e9 == pytest.approx(entry["params_b"], rel=0.05)


def test_presets_cover_the_required_models():
    names = {n.lower() for e in load_models() for n in [e["id"], *e.get("aliases", [])]}
    required = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b",
                "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
                "qwen3-235b-a22b", "mistral-7b-v0.1", "mistral-7b-v0.3", "mixtral-8x7b", "gemma-2-9b",
                "gemma-2-27b", "gemma-3-12b", "gemma-3-27b", "phi-3-mini", "phi-3-medium", "phi-4", "deepseek-v3",
                "deepseek-r1", "gpt-oss-20b", "gpt-oss-120b"]
    assert not [r for r in required if r not in names]
    assert len(load_models()) >= 20


# --- overhead and defaults ------------------------------------------------------------------------------------------------

def test_activations_grow_with_batched_tokens_and_graphs_vanish_when_eager():
    a = arch("llama-3.1-8b")
    small = profiling.activation_bytes(a, 2048, 1, sampler=False)
    big = profiling.activation_bytes(a, 8192, 1, sampler=False)
    # three hidden-size buffers: vLLM 0.6.4 measured 2.07 and 2.99 GiB at 20,000 and 29,000 tokens
    assert big == 4 * small == 8192 * (3 * 14336 + 3 * 4096) * 2
    assert profiling.activation_bytes(a, 20000, 1, sampler=False) / GIB == pytest.approx(2.07, rel=0.01)
    assert profiling.activation_bytes(a, 29000, 1, sampler=False) / GIB == pytest.approx(2.99, rel=0.01)
    assert profiling.cuda_graph_bytes(a, enforce_eager=True) == 0
    assert profiling.cuda_graph_bytes(a) > 0
    # the sampler term: 256 rows x 128,256 vocabulary x 39 bytes
    assert profiling.activation_bytes(a, 1, 256) == 256 * 128256 * 39


def test_release_defaults():
    v = releases.parse_version
    d = releases.default
    assert d("gpu_memory_utilization", v("0.19.1")) == 0.9
    assert d("gpu_memory_utilization", v("0.20.0")) == 0.92
    assert d("max_num_seqs", v("0.10.0"), gpu_gib=79.2, gpu_name="H100-80GB") == 1024
    assert d("max_num_seqs", v("0.10.0"), gpu_gib=79.2, gpu_name="A100-80GB") == 256
    assert d("max_num_batched_tokens", v("0.7.3"), max_model_len=8192, gpu_gib=39.4) == 8192     # V0: max(len, 2048)
    assert d("max_num_batched_tokens", v("0.7.3"), max_model_len=131072, gpu_gib=39.4) == 2048   # V0 chunked prefill
    assert d("max_num_batched_tokens", v("0.10.0"), max_model_len=2048, gpu_gib=23.7, gpu_name="RTX 3090") == 2048
    assert coefficients.graphs_budgeted(v("0.20.0")) and not coefficients.graphs_budgeted(v("0.19.1"))


def test_what_if_rows_and_given_numbers():
    a = arch("llama-3.1-8b")
    inp = sizing.PlanInput(arch=a, gpu_bytes=24e9, gpu_memory_utilization=0.92, weights=16e9, overhead=1.5e9,
                        max_model_len=16384)
    res = sizing.plan_memory(inp)
    rows = {r["label"]: r for r in what_if(inp, res)}
    assert abs(rows["fp8 KV cache"]["kv_cache_tokens"] - 2 * res.kv_cache_tokens) <= 16  # block rounding
    assert rows["--gpu-memory-utilization 0.95"]["kv_cache_bytes"] == pytest.approx(4.58e9 + 0.03 * 24e9, rel=1e-6)
    # a given weight size scales with the estimate: 4-bit linear layers + 16-bit embeddings = 36% of 16-bit here
    ratio = weights.weight_bytes(a, 2, "awq", 4) / weights.weight_bytes(a, 2)
    assert 0.3 < ratio < 0.4
    assert rows["4-bit weights (an AWQ/GPTQ checkpoint)"]["weights_bytes"] == pytest.approx(16e9 * ratio, rel=1e-6)
    assert rows["TP=2 (2 GPUs)"]["weights_bytes"] == pytest.approx(8e9, rel=1e-6)


def test_config_json_fields():
    config = {"model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 1024, "num_attention_heads": 8,
              "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 4096, "vocab_size": 1000,
              "sliding_window": 512, "sliding_window_pattern": 6, "max_position_embeddings": 32768,
              "torch_dtype": "bfloat16", "tie_word_embeddings": True}
    a = arch_from_config(config, "tiny")
    assert a.kinds().count("full") == 2 and a.kinds()[5] == "full"
    assert kvcache.model_kv_bytes_per_token(a) == 12 * 2 * 4 * 256 * 2
    nested = {"text_config": {**config, "sliding_window": None}, "torch_dtype": "float16"}
    assert arch_from_config(nested, "vl").sliding_window is None


# --- issue 15: rules for classes of releases and models ----------------------------------------------------

def _inp(name: str, **kw) -> sizing.PlanInput:
    base = {"arch": arch(name), "gpu_bytes": 79.19 * GIB, "gpu_name": "H100-80GB"}
    return sizing.PlanInput(**{**base, **kw})


def test_sampler_coefficient_by_release_and_flashinfer():
    assert coefficients.sampler_bytes_per_logit((0, 7, 3)) == 39
    # 0.17+: Triton's in-place top-k/top-p: 16-bit logits, fp32 copy, softmax, exponential noise (2 + 4 + 4 + 4)
    assert coefficients.sampler_bytes_per_logit((0, 17, 0)) == 14
    assert coefficients.sampler_bytes_per_logit((0, 16, 0)) == 39  # the sort path until 0.16
    # FlashInfer's kernel where the release turns it on and FlashInfer is installed, or the env var opts in
    assert coefficients.sampler_bytes_per_logit((0, 10, 1), flashinfer=True) == 12
    assert coefficients.sampler_bytes_per_logit((0, 10, 1), flashinfer=False) == 39
    assert coefficients.sampler_bytes_per_logit((0, 19, 0), flashinfer=True) == 14  # off by default
    assert coefficients.sampler_bytes_per_logit((0, 19, 0), flashinfer=True, opt_in=True) == 12


def test_flashinfer_installed_by_the_wheel_from_0_11_1():
    # vllm wheel METADATA: flashinfer-python is the extra `vllm[flashinfer]` in 0.10.1-0.11.0, a dependency from 0.11.1
    assert releases.default("flashinfer_installed", (0, 11, 0)) is False
    assert releases.default("flashinfer_installed", (0, 11, 1)) is True
    # 0.11.0 samples with FlashInfer when it is importable (VLLM_USE_FLASHINFER_SAMPLER unset): not on a plain install
    assert coefficients.sampler_bytes_per_logit((0, 11, 0)) == 39
    assert coefficients.sampler_bytes_per_logit((0, 11, 0), flashinfer=True) == 12


def test_non_torch_by_release_tp_and_custom_all_reduce():
    v = (0, 19, 0)
    assert coefficients.non_torch_bytes(1, 1, "H100", v) / GIB == pytest.approx(0.25)
    assert coefficients.non_torch_bytes(2, 1, "H100", v) / GIB == pytest.approx(2.10)
    assert coefficients.non_torch_bytes(1, 2, "H100", v) / GIB == pytest.approx(0.25)  # pipeline-only: no all-reduce
    assert coefficients.non_torch_bytes(2, 1, "H100", v, custom_all_reduce=False) / GIB == pytest.approx(0.40)
    assert coefficients.non_torch_bytes(2, 1, "H100", (0, 7, 2)) / GIB == pytest.approx(1.50)


def test_v0_without_chunked_prefill_profiles_the_whole_length():
    # V0 below 32K: max_num_batched_tokens = max(max_model_len, 2048), so a longer length leaves less KV
    short = sizing.plan_memory(_inp("llama-3.1-8b", max_model_len=20000, version=(0, 6, 4)))
    long = sizing.plan_memory(_inp("llama-3.1-8b", max_model_len=29000, version=(0, 6, 4)))
    assert short.max_num_batched_tokens == 20000 and long.max_num_batched_tokens == 29000
    assert long.activation_bytes > short.activation_bytes and long.kv_cache_bytes < short.kv_cache_bytes
    # above 32K chunked prefill turns on: the peak falls again (not monotonic across the switch)
    chunked = sizing.plan_memory(_inp("llama-3.1-8b", max_model_len=40000, version=(0, 6, 4)))
    assert chunked.activation_bytes < short.activation_bytes
    assert any("max(max_model_len, 2048)" in line for line in sizing.physics_assumptions(long))


def test_multimodal_encoder_profiling_peak():
    a = arch("qwen2-vl-2b")
    assert profiling.encoder_items(a, 2048) == 1          # budget max(2048, 16384) holds one largest image
    assert profiling.encoder_bytes(a, 2048) / GIB == pytest.approx(2.16, rel=0.01)
    res = sizing.plan_memory(_inp("qwen2-vl-2b", version=(0, 10, 2), max_model_len=4096, gpu_bytes=15.99 * GIB))
    assert res.activation_bytes == profiling.encoder_bytes(a, res.max_num_batched_tokens)
    skipped = sizing.plan_memory(_inp("qwen2-vl-2b", version=(0, 10, 2), max_model_len=4096, gpu_bytes=15.99 * GIB,
                                   skip_mm_profiling=True))
    assert skipped.activation_bytes < res.activation_bytes
    # Gemma 3's 256-token images: 32 of them in an 8192-token budget
    assert profiling.encoder_items(arch("gemma-3-12b"), 8192) == 32


def test_max_model_len_auto_picks_the_longest_length_that_fits():
    res = sizing.plan_memory(_inp("llama-3.1-8b", gpu_bytes=22.05 * GIB, gpu_name="L4", max_model_len_auto=True))
    assert 0 < res.max_model_len < 131072
    assert res.request_kv_bytes <= res.kv_cache_bytes
    fits = sizing.plan_memory(_inp("llama-3.1-8b", max_model_len_auto=True))   # 80 GB: the model's maximum fits
    assert fits.max_model_len == 131072


def test_serve_extras_from_flags_and_env():
    extras = sizing.serve_extras({"--disable-custom-all-reduce": True, "--skip-mm-profiling": True},
                              {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, auto_len=True)
    assert extras == {"max_model_len_auto": True, "custom_all_reduce": False, "skip_mm_profiling": True,
                      "flashinfer_sampler": True, "flashinfer": True}


def test_cuda_graph_estimate_by_release():
    a = arch("llama-3.1-8b")
    old = coefficients.cuda_graph_bytes(a, 1, False, (0, 7, 3), None) / GIB
    new = coefficients.cuda_graph_bytes(a, 1, False, (0, 19, 0), None) / GIB
    assert old == pytest.approx(0.10 + 0.006 * 32)
    assert new == pytest.approx(0.84, abs=0.05)  # 'Estimated CUDA graph memory: 0.84 GiB' (0.19, H100)
    assert coefficients.cuda_graph_bytes(a, 1, True, (0, 19, 0), None) == 0
    res = sizing.plan_memory(sizing.PlanInput(arch=a, gpu_bytes=79.19 * GIB, version=(0, 21, 0), max_model_len=8192))
    assert res.graphs_in_budget and res.overhead_bytes >= res.cuda_graph_bytes


def test_mrv2_extrapolates_full_graphs_from_0_29():
    # vllm/v1/worker/gpu/model_runner.py 0.25.0-0.28.0 profile_cudagraph_memory returns 0; from 0.29.0
    # cudagraph_utils.profile_cudagraph_memory counts FULL graphs as first + (n - 1) x second
    assert profiling.full_graph_count(releases.capture_sizes(
        {"seqs_times": 2, "max_size": 512, "step8_upto": 248, "step16_from": 256, "cut_at_batched_tokens": True},
        1024, 8192), 1024, "FULL_AND_PIECEWISE") == 51
    assert coefficients.full_graph_count((0, 29, 0), "V1", 256, 2048) == 35      # 1, 2, 4, 8..248, 256
    assert coefficients.full_graph_count((0, 29, 0), "V1", 1024, 1024) == 51     # 512-token cap kept
    assert releases.default("cuda_graph_full_graph_bytes", (0, 28, 0), engine="V1", runner="MRV2") == 0
    assert releases.default("cuda_graph_full_graph_bytes", (0, 29, 0), engine="V1", runner="MRV2") == 142
    assert releases.default("cuda_graph_full_graph_bytes", (0, 29, 0), engine="V1", runner="MRV1") == 0
    a = arch("llama-3.1-8b")
    kw = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    before = coefficients.cuda_graph_bytes(a, 1, False, (0, 28, 0), "V1", "MRV2", **kw)
    after = coefficients.cuda_graph_bytes(a, 1, False, (0, 29, 0), "V1", "MRV2", **kw)
    assert before / GIB == pytest.approx(0.5 + 0.006 * 32)
    assert (after - before) == pytest.approx(142 * 34 * 32 * 4096)               # 0.59 GiB over 34 more graphs
    assert coefficients.cuda_graph_bytes(a, 1, True, (0, 29, 0), "V1", "MRV2", **kw) == 0
    # --kv-cache-memory-bytes skips the estimate (gpu_worker.py determine_available_memory returns after profile_run)
    inp = sizing.PlanInput(arch=a, gpu_bytes=79.25 * GIB, gpu_name="A100-80GB", version=(0, 31, 0),
                           max_model_len=8192)
    res = sizing.plan_memory(inp)
    fixed = sizing.plan_memory(sizing.with_changes(inp, kv_cache_bytes=40 * GIB, kv_cache_fixed=True))
    assert res.max_num_seqs == 256 and res.graph_extrapolation_bytes == pytest.approx(142 * 34 * 32 * 4096, rel=1e-6)
    assert fixed.graph_extrapolation_bytes == 0
    assert res.cuda_graph_bytes - fixed.cuda_graph_bytes == pytest.approx(res.graph_extrapolation_bytes, rel=1e-6)
    # the plan says what that term is, how sure it is and what changes it; a release that subtracts none says nothing
    said = [a for a in sizing.physics_assumptions(res) if a.startswith("CUDA graphs:")]
    assert len(said) == 1 and "max_num_seqs=256" in said[0] and f"{res.graph_extrapolation_bytes / GIB:.2f} GiB" in said[0]
    assert "--max-num-seqs" in said[0] and "least certain" in said[0]
    old = sizing.plan_memory(sizing.with_changes(inp, version=(0, 28, 0)))
    assert not any(a.startswith("CUDA graphs:") for a in sizing.physics_assumptions(old))
    assert not any(a.startswith("CUDA graphs:") for a in sizing.physics_assumptions(fixed))


def test_hybrid_linear_attention_state_and_page_unification():
    a = arch("qwen3-next-80b")
    assert a.kinds().count("full") == 12 and a.kinds()[:4] == ["linear", "linear", "linear", "full"]
    # conv state (2 x 16 x 128 + 32 x 128) x 3 + state matrix 32 x 128 x 128, 2 bytes each
    assert kvcache.state_bytes_per_layer(a, 1) == ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 2
    # attention page per token and layer: 2 KV heads x 256 x 2 x 2 = 2048 B -> block of 544 tokens holds a state
    assert kvcache.hybrid_block_size(a, 1) == 544
    assert kvcache.hybrid_block_size(a, 4) == 272  # TP 4: the state splits by heads, the KV head is replicated
    assert kvcache.model_kv_bytes_per_token(a) == 12 * 2048  # only the full-attention layers cache tokens
    short = kvcache.request_kv_bytes(a, 1024, block_size=544)
    assert short == (12 * 2 + 36) * 544 * 2048  # 2 blocks for each attention layer, one state page per other
    assert kvcache.request_kv_bytes(a, 1024, block_size=544, state_pages=2) == short + 36 * 544 * 2048
    res = sizing.plan_memory(sizing.PlanInput(arch=a, gpu_bytes=79.19 * GIB, tensor_parallel_size=4,
                                              max_model_len=32768, version=(0, 24, 0)))
    assert res.block_size == 272 and res.state_pages == 1
    naive = kvcache.kv_cache_tokens(res.kv_cache_bytes, res.kv_bytes_per_token)
    assert 0 < res.kv_cache_tokens < naive  # state pages count: fewer tokens than attention alone suggests
    assert res.kv_cache_tokens == int(res.max_concurrency * 32768)  # 0.22+: concurrency x length
    assert any("hybrid Gated DeltaNet" in line for line in sizing.physics_assumptions(res))


def test_hybrid_token_count_by_release_and_prefix_caching():
    # Qwen3.5-35B-A3B (10 attention + 30 Gated DeltaNet layers, fp32 SSM state) as three real start-ups printed
    a = arch("qwen3.5-35b-a3b")
    assert a.ssm_dtype == "float32"
    # 0.19.1 (vllm-project/vllm#39559, GGUF, bf16 KV): block 1056, 6.9 GiB -> 342 blocks // 4 groups x 1056
    gguf = sizing.plan_memory(_inp("qwen3.5-35b-a3b", version=(0, 19, 1), kv_cache_bytes=6.9 * GIB,
                                   max_model_len=262144))
    assert gguf.block_size == 1056 and gguf.kv_cache_tokens == 89760
    assert gguf.max_concurrency == pytest.approx(1.36, abs=0.005)
    # 0.24.0 (noonghunna/club-3090#612, fp8 KV, prefix caching: 'align', two state pages a sequence)
    nv = sizing.plan_memory(_inp("qwen3.5-35b-a3b", version=(0, 24, 0), kv_cache_bytes=5.98 * GIB,
                                 max_model_len=131072, kv_cache_dtype="fp8", enable_prefix_caching=True))
    assert nv.block_size == 2096 and nv.state_pages == 2
    assert nv.max_concurrency == pytest.approx(4.33, abs=0.005)
    assert nv.kv_cache_tokens == pytest.approx(567978, abs=16)
    off = sizing.plan_memory(_inp("qwen3.5-35b-a3b", version=(0, 24, 0), kv_cache_bytes=5.98 * GIB,
                                  max_model_len=131072, kv_cache_dtype="fp8"))
    assert off.max_concurrency > nv.max_concurrency  # one state page a sequence without prefix caching
    # --mamba-ssm-cache-dtype float16 halves the SSM state: (24,576 x 2 + 524,288 x 2) / 1,024 B -> 1072 tokens
    half = sizing.plan_memory(_inp("qwen3.5-35b-a3b", version=(0, 24, 0), kv_cache_bytes=5.98 * GIB,
                                   max_model_len=131072, kv_cache_dtype="fp8", mamba_ssm_cache_dtype="float16"))
    assert half.block_size == 1072


def test_mamba_state_and_layouts():
    jamba, nemo = arch("jamba-v0.1"), arch("nemotron-h-8b")
    assert jamba.state_kind == "mamba1" and jamba.kinds().count("full") == 4 and jamba.kinds()[4] == "full"
    assert nemo.state_kind == "mamba2" and nemo.kinds().count("full") == 4 and nemo.kinds().count("linear") == 24
    assert nemo.kinds().count("none") == 24  # MLP-only layers cache nothing
    # Jamba: (8192 x 3 conv + 8192 x 16 state) x 2 bytes; Nemotron-H: (10240 x 3 + 128 x 64 x 128) x 2
    assert kvcache.state_bytes_per_layer(jamba) == (8192 * 3 + 8192 * 16) * 2
    assert kvcache.state_bytes_per_layer(nemo) == (10240 * 3 + 128 * 64 * 128) * 2
    assert kvcache.state_bytes_per_layer(nemo, tp=2) == (5120 * 3 + 64 * 64 * 128) * 2
    assert kvcache.model_kv_bytes_per_token(nemo) == 4 * 2 * 8 * 128 * 2
    # the parameter estimates of the hybrid layouts land on the published totals
    for name in ("jamba-v0.1", "nemotron-h-8b", "qwen3.5-35b-a3b"):
        spec = load_model(name)
        assert weights.param_count(spec.arch) / 1e9 == pytest.approx(spec.arch.params_b, rel=0.05), name
    # V0 (0.6.x) keeps Jamba's state outside the cache: 256 sequences x 28 layers of state in the activations
    v0 = sizing.plan_memory(_inp("jamba-v0.1", version=(0, 6, 4), max_model_len=8192))
    assert v0.state_pages == 0 and v0.block_size == 16
    assert v0.kv_cache_tokens == kvcache.kv_cache_tokens(v0.kv_cache_bytes, v0.kv_bytes_per_token)
    assert v0.activation_bytes >= 256 * 28 * kvcache.state_bytes_per_layer(jamba)
    v1 = sizing.plan_memory(_inp("nemotron-h-8b", version=(0, 24, 0), max_model_len=8192))
    assert v1.state_pages == 1 and v1.block_size == kvcache.hybrid_block_size(nemo)
    assert v1.kv_cache_tokens == int(v1.max_concurrency * 8192)
    assert any(line.startswith("hybrid Mamba-2: 4 of 52 layers") for line in sizing.physics_assumptions(v1))
    assert any("outside the KV cache" in line for line in sizing.physics_assumptions(v0))


def test_hybrid_from_config_json():
    cfg = {"num_hidden_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2,
           "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936, "full_attention_interval": 4,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
           "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]}
    a = arch_from_config(cfg, "tiny-next")
    assert a.is_hybrid and a.kinds().count("full") == 2


def test_kv_cache_memory_bytes_what_if_when_the_share_is_too_small():
    inp = sizing.PlanInput(arch=arch("llama-3.1-8b"), gpu_bytes=22.05 * GIB, gpu_name="L4", gpu_memory_utilization=0.8,
                        max_model_len=40000, version=(0, 19, 0))
    res = sizing.plan_memory(inp)
    assert not res.fits
    rows = {r["label"]: r for r in what_if(inp, res)}
    row = rows["--kv-cache-memory-bytes (whole GPU)"]
    assert row["kv_cache_bytes"] == int(sizing.whole_gpu_kv_bytes(res)) > res.kv_cache_bytes
    assert row["flags"]["--gpu-memory-utilization"] is None and row["fits"]
    old = sizing.PlanInput(**{**inp.__dict__, "version": (0, 9, 2)})  # before 0.10.2 the flag does not exist
    assert "--kv-cache-memory-bytes (whole GPU)" not in {r["label"] for r in what_if(old, sizing.plan_memory(old))}


def test_hybrid_startups_after_0_19_reproduce_vllms_tokens():
    # tests/data/startup_measurements.yaml token_pairs: real hybrid start-ups (one GGUF), their printed KV memory
    # in, vLLM's printed token count and concurrency out, within 1%; the attention-only count over-promises
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("planner_accuracy_t", root / "bench" / "planner_accuracy.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["planner_accuracy_t"] = bench
    spec.loader.exec_module(bench)
    data = bench.load()
    pairs = data["token_pairs"]
    assert len(pairs) >= 3 and any(p["config"].get("quantization") == "gguf" for p in pairs)
    assert all(releases.parse_version(str(p["config"]["vllm_version"])) > (0, 19, 0) for p in pairs)
    for (pid, _est, _printed, err, naive), pair in zip(bench.token_errors(data), pairs, strict=True):
        assert abs(err) <= 0.01, pid
        assert naive > 0, pid  # attention layers alone promise more tokens than vLLM gives
        inp = sizing.with_changes(bench.plan_input(pair["config"]), kv_cache_bytes=pair["measured"]["kv_cache_gib"] * GIB)
        assert sizing.plan_memory(inp).max_concurrency == pytest.approx(pair["measured"]["max_concurrency"], abs=0.006)


def test_docstring_examples_of_the_arithmetic_hold():
    import doctest

    from diagnoser.vllm import units
    from diagnoser.vllm import what_if as what_if_rows

    for module in (mem, archspec, kvcache, weights, profiling, coefficients, sizing, what_if_rows, units):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_memory_keeps_only_arithmetic():
    # the split of issue 14: no release lookups, no log parsing, no plan orchestration defined in memory.py
    import inspect

    from diagnoser.vllm import units

    source = inspect.getsource(mem)
    assert "import releases" not in source and "from . import releases" not in source
    assert "def log_size_gib" not in source and "def plan_memory" not in source
    # the moved names live only in their new homes
    for name in ("plan_memory", "version_tuple", "log_size_gib", "mla_kv_bytes_per_token"):
        assert not hasattr(mem, name), name
    assert callable(sizing.plan_memory) and callable(releases.parse_version) and callable(units.log_size_gib)


def test_mamba_hybrids_from_config_json():
    # nvidia/Nemotron-H-8B-Base-8K and ai21labs/Jamba-v0.1 config.json fields (trimmed)
    nemo = arch_from_config({
        "model_type": "nemotron_h", "num_hidden_layers": 52, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 21504, "vocab_size": 131072,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", "mamba_num_heads": 128,
        "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "expand": 2,
        "mlp_hidden_act": "relu2", "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}, "nemo")
    assert nemo.state_kind == "mamba2" and nemo.mlp_matrices == 2
    assert kvcache.state_bytes_per_layer(nemo) == kvcache.state_bytes_per_layer(arch("nemotron-h-8b"))
    assert nemo.kinds() == arch("nemotron-h-8b").kinds()
    jamba = arch_from_config({
        "model_type": "jamba", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 65536, "attn_layer_offset": 4,
        "attn_layer_period": 8, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2,
        "num_experts": 16, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}, "jamba")
    assert jamba.state_kind == "mamba1" and jamba.kinds() == arch("jamba-v0.1").kinds()
    assert kvcache.state_bytes_per_layer(jamba) == (8192 * 3 + 8192 * 16) * 2
    # a Qwen3.5 config fixes its SSM state dtype
    qwen = arch_from_config({
        "model_type": "qwen3_5_text", "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 3584, "vocab_size": 248320,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32"}, "q")
    assert qwen.ssm_dtype == "float32" and qwen.kinds().count("full") == 2


def test_hostile_hybrid_configs_are_refused_by_name(tmp_path):
    from diagnoser.vllm.modelspec import SpecError

    base = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
            "intermediate_size": 128}
    for extra, key in (({"hybrid_override_pattern": "M*" * 5000}, "hybrid_override_pattern"),
                       ({"mamba_num_heads": 0}, "mamba_num_heads"), ({"ssm_state_size": 1e300}, "ssm_state_size")):
        path = tmp_path / "config.json"
        path.write_text(__import__("json").dumps({**base, **extra}))
        with pytest.raises(SpecError, match=key):
            load_model(str(path))


def test_mxfp4_marlin_padding_from_vllm_source():
    # vLLM's Marlin MXFP4 MoE (mxfp4.py 0.11.0, oracle/mxfp4.py 0.19.0): hidden to a multiple of 256, each rank's
    # intermediate to a multiple of 128; gpt-oss (2880 x 2880): 3072 x 2944 at TP 1, 3072 x 1536 at TP 2
    a = load_model("openai/gpt-oss-120b").arch
    h, i = a.hidden_size, a.moe_intermediate_size or a.intermediate_size

    def marlin(hp: int, ip: int) -> int:  # w13 (2I x H) and w2 (H x I): nibbles, a scale per 32, bf16 biases
        return 3 * ip * hp // 2 + 3 * ip * hp // 32 + (2 * ip + hp) * 2

    assert weights.mxfp4_expert_bytes(h, i, weights.MARLIN_LAYOUT) == marlin(3072, 2944)
    assert weights.mxfp4_expert_bytes(h, i // 2, weights.MARLIN_LAYOUT) == marlin(3072, 1536)
    # 4.25 bits a weight: an e2m1 nibble and one e8m0 scale per 32 weights
    assert weights.quantized_weight_bytes("mxfp4") == 0.5 + 1 / 32


def test_token_count_by_concurrency_counts_sliding_windows_once():
    # vLLM 0.30 prints int(max_concurrency x max_model_len) for every model (kv_cache_utils.get_kv_cache_capacity);
    # 0.19 printed whole blocks of all layers (_report_kv_cache_config): a sliding-window model counts far more
    a = load_model("openai/gpt-oss-20b").arch
    kv = 30 * GIB
    new = sizing.plan_memory(_inp("gpt-oss-20b", max_model_len=32768, kv_cache_bytes=kv, version=(0, 30, 0)))
    old = sizing.plan_memory(_inp("gpt-oss-20b", max_model_len=32768, kv_cache_bytes=kv, version=(0, 19, 0)))
    assert new.kv_cache_tokens == pytest.approx(new.max_concurrency * 32768, rel=1e-3)
    assert old.kv_cache_tokens == kvcache.kv_cache_tokens(kv, kvcache.model_kv_bytes_per_token(a))
    assert new.kv_cache_tokens > 1.5 * old.kv_cache_tokens


def test_sampler_run_holds_hidden_states_and_the_triton_buffer():
    # vLLM 0.17-0.19 (gpu_model_runner.py profile_run, topk_topp_triton.py): while the dummy sampler runs, the forward's
    # output over max_num_batched_tokens, the sampled rows and their rand_like copy are alive, and the Triton
    # top-k/top-p kernel caches min(next_pow2(min(SMs, rows)), SMs) fp32 rows of the vocabulary
    assert mem.sampler_hidden_bytes(8192, 1024, 8192) == (8192 + 2 * 1024) * 8192 * 2
    assert mem.topk_topp_buffer_bytes(132, 1024, 152064) == 132 * 152064 * 4
    assert mem.topk_topp_buffer_bytes(188, 100, 1000) == 128 * 1000 * 4     # 100 programs -> 128 rows
    assert mem.topk_topp_buffer_bytes(132, 7, 1000) == 0                    # below 8 rows: the PyTorch path
    # Qwen2.5-72B at TP 2 on an H100, 1,024 rows and 8,192 tokens (0.19.0): 14 bytes a logit plus both
    a = load_model("Qwen/Qwen2.5-72B-Instruct").arch
    base = dict(gpu_bytes=79.19 * GIB, gpu_name="H100-80GB", tensor_parallel_size=2, max_model_len=8192)
    res = sizing.plan_memory(sizing.PlanInput(arch=a, version=(0, 19, 0), **base))
    want = 1024 * a.vocab_size * 14 + (8192 + 2 * 1024) * a.hidden_size * 2 + 132 * a.vocab_size * 4
    assert res.activation_bytes == want
    # the GPU's SM count comes from its preset; an unknown GPU adds no buffer
    bare = sizing.plan_memory(sizing.PlanInput(arch=a, version=(0, 19, 0), **{**base, "gpu_name": ""}))
    assert res.activation_bytes - bare.activation_bytes == 132 * a.vocab_size * 4
    # before 0.17 the sort path's 39 bytes a logit were checked against measured peaks: nothing is added
    old = sizing.plan_memory(sizing.PlanInput(arch=a, version=(0, 11, 0), **base))
    assert old.activation_bytes == 1024 * a.vocab_size * 39


def test_tp_buffers_made_before_the_baseline_snapshot_are_not_counted_from_0_11():
    # vLLM 0.11.0 (v1/worker/gpu_worker.py init_device) initialises NCCL and the custom all-reduce before taking the
    # memory snapshot non-torch growth is measured from; 0.10.2 and V0 took it first, so those buffers counted
    assert releases.default("non_torch_multi_gpu_gib", (0, 10, 2)) == 1.40
    assert releases.default("non_torch_multi_gpu_gib", (0, 11, 0)) == 0.0
    single = releases.default("non_torch_single_gib", (0, 11, 0)) * GIB
    for gpu in ("H100-80GB", "RTX 4090"):  # with or without peer access: nothing beyond the single-rank figure
        assert coefficients.non_torch_bytes(2, 1, gpu, (0, 11, 0)) == int(single)
    assert coefficients.non_torch_bytes(2, 1, "H100-80GB", (0, 10, 1)) == int((0.10 + 1.40) * GIB)


def test_releases_that_count_the_cuda_context_as_non_torch_memory():
    # vLLM 0.6.4's V0 worker and V1's gpu_worker until 0.9.1 add everything on the device that torch has not
    # allocated (non_torch_allocations = total - free - torch allocated); 0.5.3 and V0 0.6.5+ count the growth since
    # a snapshot taken once the CUDA context exists, and so does V1 once it took memory_profiling (0.9.1)
    assert coefficients.non_torch_counts_context((0, 6, 4), "V0") is True
    assert coefficients.non_torch_counts_context((0, 6, 4), "V1") is False
    assert coefficients.non_torch_counts_context((0, 6, 5), "V0") is False
    assert coefficients.non_torch_counts_context((0, 7, 1), "V1") is True
    assert coefficients.non_torch_counts_context((0, 9, 0), "V1") is True
    assert coefficients.non_torch_counts_context((0, 9, 1), "V1") is False
    assert coefficients.non_torch_counts_context((0, 5, 3), "V0") is False
    assert coefficients.non_torch_counts_context((0, 19, 0), "V1") is False
    # the plan says so where it applies, and only there
    a = archspec.ArchSpec("t", layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                          intermediate_size=14336, vocab_size=128256)
    said = [line for line in sizing.physics_assumptions(sizing.plan_memory(
        sizing.PlanInput(arch=a, gpu_bytes=80 * GIB, version=(0, 7, 1), engine="V1"))) if "CUDA context" in line]
    assert len(said) == 1
    assert not [line for line in sizing.physics_assumptions(sizing.plan_memory(
        sizing.PlanInput(arch=a, gpu_bytes=80 * GIB, version=(0, 7, 3)))) if "CUDA context" in line]


def test_bitsandbytes_nf4_double_quantised_absmax():
    # vLLM quantizes with bitsandbytes quantize_4bit(compress_statistics=True, quant_type="nf4"): 4-bit weights, a
    # uint8 absmax per 64 weights and an fp32 absmax per 256 of those (bitsandbytes/functional.py quantize_4bit)
    assert weights.quantized_weight_bytes("nf4") == pytest.approx(0.5 + 1 / 64 + 4 / (64 * 256))
    a = arch("llama-3.1-8b")
    parts = weights.param_breakdown(a)
    linear = parts["attention"] + parts["mlp"]
    rest = sum(parts.values()) - linear
    assert weights.weight_bytes(a, 2, "bitsandbytes") == int(linear * weights.BNB_NF4_BYTES + rest * 2)


def test_early_v1_profile_run_computes_logits_but_samples_nothing():
    # vLLM V1's gpu_model_runner.py profile_run: 0.6.4 runs the forward pass alone; 0.6.5-0.7.2 add compute_logits
    # over every token of the dummy batch (16-bit, the hidden states alive beside them, '# TODO(woosuk): Consider the
    # memory usage of the sampler.'); 0.7.3 over the last token of each of max_num_seqs requests; 0.8.0 adds
    # _dummy_sampler_run (top-k/top-p over max_num_seqs rows)
    assert [releases.default("v1_profile_logits", v, engine="V1")
            for v in ((0, 6, 4), (0, 6, 5), (0, 7, 1), (0, 7, 2), (0, 7, 3), (0, 8, 0), (0, 9, 2))] == \
        ["none", "batched_tokens", "batched_tokens", "batched_tokens", "max_num_seqs", "sampler", "sampler"]
    assert releases.default("v1_profile_logits", (0, 7, 1), engine="V0") == "sampler"
    a = arch("llama-3.1-8b")
    forward = profiling.activation_bytes(a, 2048, 1024, sampler=False)
    # 0.7.1 `vllm serve` on an A10 (not H100/H200): 2,048 tokens, 1,024 seqs; 2,048 x (4,096 + 128,256) x 2 bytes
    res = sizing.plan_memory(_inp("llama-3.1-8b", version=(0, 7, 1), engine="V1", gpu_name="A10",
                                  gpu_bytes=22.07 * GIB, max_model_len=8192))
    assert (res.max_num_seqs, res.max_num_batched_tokens) == (1024, 2048)
    assert res.activation_bytes == 2048 * (4096 + 128256) * 2 > forward
    assert any("samples nothing" in line and "2,048 rows" in line for line in sizing.physics_assumptions(res))
    # 0.7.0+ on an H100 (vllm-project/vllm#12369, device-name check in arg_utils.py 0.7.0): 8,192 tokens
    h100 = sizing.plan_memory(_inp("llama-3.1-8b", version=(0, 7, 1), engine="V1", max_model_len=8192))
    assert h100.max_num_batched_tokens == 8192
    assert h100.activation_bytes == 8192 * (4096 + 128256) * 2
    old = sizing.plan_memory(_inp("llama-3.1-8b", version=(0, 6, 6), engine="V1", max_model_len=8192))
    assert old.max_num_batched_tokens == 2048                    # 0.6.6: no H100 tier yet
    # with TP the V1 all-gather holds the rank's shard, the gathered logits and the reshaped copy
    assert profiling.logits_bytes(a, 2048, tp=2) == int(2048 * (4096 + 128256 * 2.5) * 2)
    # 0.7.3: 1,024 rows of logits, below the forward pass over 8,192 tokens
    r073 = sizing.plan_memory(_inp("llama-3.1-8b", version=(0, 7, 3), engine="V1", max_model_len=8192))
    assert r073.activation_bytes == max(profiling.activation_bytes(a, 8192, 1024, sampler=False),
                                        1024 * (4096 + 128256) * 2)
    # 0.6.4: the forward pass only
    r064 = sizing.plan_memory(_inp("llama-3.1-8b", version=(0, 6, 4), engine="V1", max_model_len=8192))
    assert r064.activation_bytes == profiling.activation_bytes(a, r064.max_num_batched_tokens, 1024, sampler=False)
    # 0.8.0: the dummy sampler over max_num_seqs rows (39 bytes a logit on the sort path)
    r080 = sizing.plan_memory(_inp("llama-3.1-8b", version=(0, 8, 0), max_model_len=8192))
    assert r080.activation_bytes == 1024 * 128256 * 39


def test_mrv2_graph_base_before_0_29_is_its_own_fitted_entry():
    """Model Runner V2 0.25.0-0.28.0 subtracts no graph estimate (gpu/model_runner.py profile_cudagraph_memory:
    'return 0'), 0.29.0 does (cudagraph_utils.py): their fixed parts are separate entries, fitted apart."""
    for setting in ("cuda_graph_base_gib", "cuda_graph_per_layer_gib"):
        for version, since in (((0, 25, 0), (0, 25, 0)), ((0, 28, 0), (0, 25, 0)), ((0, 29, 0), (0, 29, 0)),
                               ((0, 31, 0), (0, 29, 0))):
            assert releases.default_entry(setting, version, engine="V1", runner="MRV2").since == since
        assert releases.default_entry(setting, (0, 28, 0), engine="V1", runner="MRV1").since == (0, 11, 0)
    assert releases.default("cuda_graph_base_gib", (0, 27, 1), engine="V1", runner="MRV2") == 0.5
    assert releases.default("cuda_graph_base_gib", (0, 29, 0), engine="V1", runner="MRV2") == 0.5
    assert releases.default("cuda_graph_per_layer_gib", (0, 27, 1), engine="V1", runner="MRV2") == 0.006
    assert "start-ups" in releases.default_entry("cuda_graph_base_gib", (0, 29, 0), engine="V1",
                                                 runner="MRV2").source
