"""The rules beyond the seed, end to end: the primary finding, its stage, the numbers, the computed advice and
the corrected command, on small logs in the shapes vLLM prints (synthetic, no user's log copied)."""

from __future__ import annotations

import math

import pytest

from diagnoser.analysis.pipeline import diagnose_text
from diagnoser.rules import functions as fn
from diagnoser.rules.loader import builtin_rules

ARGS = "INFO 06-01 10:00:00 [utils.py:326] non-default args: {{'model': 'org/model-8b', {extra}}}\n"
ENGINE = ("INFO 06-01 10:00:05 [core.py:69] Initializing a V1 LLM engine (v0.10.1) with config: "
          "model='org/model-8b', max_seq_len=8192, tensor_parallel_size=1\n")
LOADING = "(EngineCore_0 pid=71) INFO 06-01 10:00:10 [gpu_model_runner.py:1] Starting to load model org/model-8b...\n"
SERVING = "(APIServer pid=70) INFO 06-01 10:01:00 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000\n"
#: a log that names its model: without one no command is suggested (issue 17)
MODEL = ARGS.format(extra="")
WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"


def primary(text: str):
    report = diagnose_text(text)
    assert report.findings, "no finding"
    return report.findings[0], report


def close(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=0.011, abs_tol=0.011)


# -- gpu-memory-in-use ---------------------------------------------------------------------------------------


def test_startup_check_computes_the_utilization_that_fits_and_the_command():
    log = (ARGS.format(extra="'gpu_memory_utilization': 0.9") + ENGINE
           + "(EngineCore_0 pid=71) ERROR 06-01 10:00:06 [core.py:700] ValueError: Free memory on device "
             "(30.52/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). "
             "Decrease GPU memory utilization or reduce GPU memory used by other processes.\n" + WRAPPER)
    f, _ = primary(log)
    assert f.rule.id == "gpu-memory-in-use" and f.severity == "error"
    assert (f.facts["gpu_free_gib"], f.facts["gpu_total_gib"], f.facts["requested_gib"]) == (30.52, 79.19, 71.27)
    assert f.facts["util_fit"] == 0.36  # 30.52 / 79.19 = 0.385, less a 2% margin, rounded down
    assert "--gpu-memory-utilization 0.36" in f.command
    assert "add up to less than 1" in f.advice and "nvidia-smi" in f.advice


def test_torch_oom_naming_another_process_beats_the_weights_oom():
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity "
           "of 79.19 GiB of which 300.00 MiB is free. Process 4242 has 40.00 GiB memory in use. Including "
           "non-PyTorch memory, this process has 38.80 GiB memory in use.\n")
    f, report = primary(LOADING + oom)
    assert f.rule.id == "gpu-memory-in-use" and f.stage == "loading"
    assert close(f.facts["other_gib"], 40.1)
    assert "process 4242 40.00 GiB" in f.advice
    assert "weights-oom" not in [x.rule.id for x in report.findings if not x.generic]


def test_torch_oom_of_this_process_alone_stays_a_weights_oom():
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity "
           "of 79.19 GiB of which 300.00 MiB is free. Including non-PyTorch memory, this process has 78.60 GiB "
           "memory in use.\n")
    f, report = primary(LOADING + oom)
    assert f.rule.id == "weights-oom"
    assert "gpu-memory-in-use" not in [x.rule.id for x in report.findings]


def test_profiling_assertion_reports_the_change_in_free_memory():
    log = (ENGINE + "(EngineCore_0 pid=71) INFO 06-01 10:00:20 [gpu_worker.py:1] Memory profiling takes 3.1 seconds\n"
           "AssertionError: Error in memory profiling. Initial free memory 43.37 GiB, current free memory 43.94 GiB. "
           "This happens when other processes sharing the same container release GPU memory while vLLM is "
           "profiling during initialization.\n")
    f, _ = primary(log)
    assert f.rule.id == "gpu-memory-in-use" and f.stage == "startup"
    assert close(f.facts["profiling_delta_gib"], 0.57)
    assert "43.37 GiB to 43.94 GiB" in f.advice and not f.fixes


# -- configuration checks -------------------------------------------------------------------------------------


def test_max_model_len_above_the_model_sets_the_derived_length():
    log = (ARGS.format(extra="'max_model_len': 65536")
           + "ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len "
             "(max_position_embeddings=32768 or model_max_length=None in model's config.json). To allow overriding "
             "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1\n")
    f, _ = primary(log)
    assert f.rule.id == "max-model-len-exceeds-model" and f.stage == "config"
    assert (f.facts["max_model_len"], f.facts["derived_max_model_len"], f.facts["rope_factor"]) == (65536, 32768, 2)
    assert "--max-model-len 32768" in f.command and "--max-model-len 65536" not in f.command
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in f.advice and "NaN" in f.advice


def test_tp_divisibility_picks_a_valid_size_not_above_the_gpus_given():
    log = (ARGS.format(extra="'tensor_parallel_size': 6")
           + "  Value error, Total number of attention heads (64) must be divisible by tensor parallel size (6). "
             "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n")
    f, _ = primary(log)
    assert f.rule.id == "tp-divisibility" and f.stage == "config"
    assert (f.facts["num_attention_heads"], f.facts["tensor_parallel_size"]) == (64, 6)
    assert (f.facts["best_tp"], f.facts["next_tp"]) == (4, 8)
    assert "--tensor-parallel-size 4" in f.command


def test_bf16_on_an_old_gpu_switches_to_half():
    f, _ = primary(MODEL + "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
                   "Tesla T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting the"
                   "`dtype` flag in CLI, for example: --dtype=half.\n")
    assert f.rule.id == "bf16-unsupported"
    assert (f.facts["gpu_name"], f.facts["compute_capability"]) == ("Tesla T4", 7.5)
    assert "--dtype half" in f.command and "same two bytes" in f.advice


def test_batched_tokens_below_max_model_len():
    f, _ = primary(MODEL + "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (8192). This effectively "
                   "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
                   "sequences. Please increase max_num_batched_tokens or decrease max_model_len.\n")
    assert f.rule.id == "batched-tokens-below-max-model-len" and f.stage == "config"
    assert "--max-num-batched-tokens 8192" in f.command and "--enable-chunked-prefill" in f.advice


def test_gpu_utilization_given_as_a_percentage():
    f, _ = primary(MODEL + "ValueError: GPU memory utilization must be less than 1.0. Got 90.0.\n")
    assert f.rule.id == "gpu-util-out-of-range"
    assert "--gpu-memory-utilization 0.9" in f.command


def test_kv_cache_dtype_takes_the_suggested_choice():
    f, _ = primary(MODEL + LOADING + "ValueError: FP8 KV cache is not supported by the Triton attention backend on cuda:0 "
                             "(compute capability 8.6); native FP8 (fp8e4nv) requires SM89+. Re-run with "
                             "--kv-cache-dtype fp8_e5m2.\n")
    assert f.rule.id == "kv-cache-dtype-unsupported" and f.stage == "loading"
    assert f.facts["compute_capability"] == 8.6 and "--kv-cache-dtype fp8_e5m2" in f.command


def test_quantization_on_an_old_gpu_lists_what_runs_there():
    f, _ = primary("ValueError: The quantization method awq_marlin is not supported for the current GPU. Minimum "
                   "capability: 80. Current capability: 75.\n")
    assert f.rule.id == "quantization-unsupported"
    assert (f.facts["need_cc"], f.facts["have_cc"]) == ("8.0", "7.5")
    assert "awq, gptq, bitsandbytes, gguf" in f.advice


# -- command line ---------------------------------------------------------------------------------------------


def test_unrecognized_flags_get_their_right_spelling():
    log = ("usage: vllm serve [-h] [--max-model-len MAX_MODEL_LEN] [model_tag]\n"
           "vllm serve: error: unrecognized arguments: --max_model_len 4096 --gpu-memory-utilisation 0.8 --task embed\n"
           "$ echo $?\n2\n")
    f, _ = primary(log)
    assert f.rule.id == "unrecognized-argument" and f.stage == "cli"
    assert f.facts["bad_argument"] == "--max_model_len"
    assert f.facts["bad_arguments"] == "--max_model_len 4096 --gpu-memory-utilisation 0.8 --task embed"
    assert "--max_model_len -> --max-model-len" in f.advice
    assert "--gpu-memory-utilisation -> --gpu-memory-utilization" in f.advice
    assert "--task -> --runner" in f.advice
    assert "vllm serve ORG/MODEL --max-model-len 4096 --gpu-memory-utilization 0.8 --runner embed" in f.advice


def test_serve_repeated_after_the_docker_image():
    f, _ = primary("usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
                   "vllm: error: unrecognized arguments: serve /models/my-model\n")
    assert f.rule.id == "unrecognized-argument" and f.facts["bad_argument"] == "serve"
    assert "vllm/vllm-openai:TAG /models/my-model" in f.advice


def test_port_in_use_moves_to_the_next_port():
    log = (ARGS.format(extra="'port': 8080") + SERVING
           + "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8080): address already in use\n")
    f, _ = primary(log)
    assert f.rule.id == "port-in-use" and f.stage == "serving"
    assert f.facts["port"] == 8080 and "--port 8081" in f.command and "lsof -i :8080" in f.advice


# -- the model --------------------------------------------------------------------------------------------------


def test_gated_model_needs_a_token():
    f, _ = primary(MODEL + "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url "
                   "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/config.json. Access to model "
                   "meta-llama/Llama-3.1-8B-Instruct is restricted. You must have access to it and be authenticated "
                   "to access it. Please log in.\n")
    assert f.rule.id == "gated-model" and f.facts["http_status"] == 401
    assert f.command.startswith("HF_TOKEN=") and "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct" in f.advice


def test_model_not_found_suggests_the_repo_that_was_meant():
    f, _ = primary("OSError: meta-llama/Meta-Llama-3.1-8B-Instuct is not a local folder and is not a valid model "
                   "identifier listed on 'https://huggingface.co/models'\n")
    assert f.rule.id == "model-not-found"
    assert f.facts["suggestion"] == "meta-llama/Meta-Llama-3.1-8B-Instruct"


def test_missing_local_path_is_a_path_problem():
    f, _ = primary("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
                   "'namespace/repo_name': '/data/models/qwen2-7b'. Use `repo_type` argument if needed.\n")
    assert f.rule.id == "model-not-found" and "ls /data/models/qwen2-7b" in f.advice


def test_unsupported_architecture_says_upgrade():
    f, _ = primary("ValueError: Model architectures ['Qwen3NextForCausalLM'] are not supported for now. Supported "
                   "architectures: dict_keys(['LlamaForCausalLM'])\n")
    assert f.rule.id == "unsupported-architecture" and f.facts["architecture"] == "Qwen3NextForCausalLM"
    assert "pip install -U vllm" in f.advice


def test_remote_code_model_needs_trust_remote_code():
    f, _ = primary(MODEL + "ValueError: Loading internlm/internlm2-chat-7b requires you to execute the configuration file "
                   "in that repo on your local machine. Make sure you have read the code there to avoid malicious "
                   "use, then set the option `trust_remote_code=True` to remove this error.\n")
    assert f.rule.id == "unsupported-architecture" and "--trust-remote-code" in f.command


# -- serving ------------------------------------------------------------------------------------------------------


def test_prompt_too_long_is_one_warning_with_the_longest_request_and_what_the_cache_holds():
    log = (ENGINE
           + "(EngineCore_0 pid=71) INFO 06-01 10:00:30 [kv_cache_utils.py:1] GPU KV cache size: 120,000 tokens\n"
           + SERVING
           + "".join(f"(APIServer pid=70) ERROR 06-01 10:02:0{i} [serving_chat.py:1] ValueError: This model's "
                     f"maximum context length is 8192 tokens. However, you requested {n} tokens ({n - 500} in the "
                     "messages, 500 in the completion). Please reduce the length of the messages or completion.\n"
                     for i, n in enumerate((9000, 12000, 8500))))
    f, report = primary(log)
    assert f.rule.id == "prompt-too-long" and f.severity == "warning" and f.stage == "serving"
    assert (f.facts["hits"], f.facts["prompt_tokens"], f.facts["limit_tokens"]) == (3, 12000, 8192)
    assert "--max-model-len 12288" in f.advice and "120,000 tokens" in f.advice
    assert report.counts()["error"] == 0  # a rejected request is not a crash: no fallback error either


def test_v0_prompt_limit_warning():
    f, _ = primary(SERVING + "WARNING 06-01 10:02:00 scheduler.py:949] Input prompt (35000 tokens) is too long and "
                             "exceeds limit of 32768\n")
    assert f.rule.id == "prompt-too-long" and (f.facts["prompt_tokens"], f.facts["limit_tokens"]) == (35000, 32768)


def test_swap_space_exhausted():
    f, _ = primary(MODEL + SERVING + "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap "
                             "space to avoid this error.\n")
    assert f.rule.id == "swap-space-exhausted" and "--swap-space 8" in f.command


# -- the fallback -------------------------------------------------------------------------------------------------


def test_an_unexplained_crash_reports_its_root_cause_not_the_wrapper():
    log = (LOADING
           + "(EngineCore_0 pid=71) ERROR 06-01 10:00:11 [core.py:700] EngineCore failed to start.\n"
           + "(EngineCore_0 pid=71) ERROR 06-01 10:00:11 [core.py:700] Traceback (most recent call last):\n"
           + '(EngineCore_0 pid=71) ERROR 06-01 10:00:11 [core.py:700]   File "/x/vllm/model_loader.py", line 9, '
             "in load_model\n"
           + "(EngineCore_0 pid=71) ERROR 06-01 10:00:11 [core.py:700] RuntimeError: t == DeviceType::CUDA INTERNAL "
             "ASSERT FAILED at CUDAGuardImpl.h:25\n"
           + WRAPPER)
    f, report = primary(log)
    assert f.rule.id == "unrecognized-failure" and f.stage == "loading"
    assert f.facts["exception"] == "RuntimeError" and f.facts["message"].startswith("t == DeviceType::CUDA")
    assert len([x for x in report.findings if x.rule.id == "unrecognized-failure"]) == 1


def test_the_fallback_is_silent_when_a_rule_explains_the_crash():
    log = ("ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (3).\n"
           "AttributeError: 'NoneType' object has no attribute 'foo'\n" + WRAPPER)
    report = diagnose_text(log)
    assert [f.rule.id for f in report.findings] == ["tp-divisibility"]


def test_healthy_log_has_no_error_or_warning():
    log = (ENGINE + "(EngineCore_0 pid=71) INFO 06-01 10:00:30 [kv_cache_utils.py:1] GPU KV cache size: 120,000 tokens\n"
           + SERVING + "KeyboardInterrupt: terminated\n")
    assert [f for f in diagnose_text(log).findings if f.severity in ("error", "warning")] == []


# -- catalog coverage and helpers -------------------------------------------------------------------------------

#: Catalog entries (vllm-log-catalog, sections A2, A4-A7) these rules own.
OWNED = {
    "gpu-memory-in-use": {"A5.v1.free_lt_requested", "A5.v1.free_lt_requested_device", "A5.v0.error_in_profiling_old",
                          "A5.v0.error_in_profiling_free", "A5.v0.error_in_profiling_used",
                          "A5.v1.error_in_profiling_container"},
    "gpu-util-out-of-range": {"A5.util_gt_1"},
    "max-model-len-exceeds-model": {"A6.user_max_len.v020", "A6.user_max_len.v040", "A6.user_max_len.v054",
                                    "A6.user_max_len.v0102"},
    "prompt-too-long": {"A6.v0.prompt_too_long", "A6.api.max_context.completion", "A6.v1.prompt_longer_than_model"},
    "batched-tokens-below-max-model-len": {"A2.v1.max_num_batched_lt_len"},
    "swap-space-exhausted": {"A4.v0.swap_abort"},
    "tp-divisibility": {"A7.tp_heads"},
    "bf16-unsupported": {"A7.bf16_cc"},
    "kv-cache-dtype-unsupported": {"A7.fp8_kv_unknown", "A7.fp8_kv_cuda118", "A7.fp8_kv_fa"},
    "quantization-unsupported": {"A7.quant_capability"},
    "unrecognized-argument": {"A7.argparse_unrecognized"},
}


@pytest.mark.parametrize("rule_id", sorted(OWNED))
def test_each_catalog_entry_is_claimed_by_its_rule(rule_id):
    rule = {r.id: r for r in builtin_rules()}[rule_id]
    assert OWNED[rule_id] <= set(rule.catalog)
    assert len(rule.cases["match"]) >= len(OWNED[rule_id]) + 1  # every wording plus an edited variant


def test_helpers():
    assert fn.bad_arguments("serve /models/m --foo=1 --bar 2")["model"] == "/models/m"
    assert fn.flag_fix("--max_model_len")["to"] == "--max-model-len"
    assert fn.flag_fix("--tp")["to"] == "-tp"
    procs = fn.process_memory("Process 1 has 30.00 GiB memory in use. Process 2 has 9.36 GiB memory in use.", 8.95)
    assert procs["this_pid"] == 2 and procs["others"] == [(1, 30.0)]
    assert fn.tp_sizes(40, 16) == {"below": 8, "above": 20}
    assert fn.closest_choice("bf16", "'auto', 'half', 'bfloat16', 'float32'") == "bfloat16"
    assert fn.capability(75) == "7.5" and fn.quant_methods_for("8.0")[:2] == ["awq_marlin", "gptq_marlin"]
