"""The pipeline end to end on small logs: stage disambiguation, root cause, ranks, context, advice numbers."""

from __future__ import annotations

from diagnoser.analysis.pipeline import diagnose_text

V1_HEAD = """\
(APIServer pid=101) INFO 11-24 11:43:10 [utils.py:328] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', 'gpu_memory_utilization': 0.92, 'max_num_seqs': 256}
(EngineCore_DP0 pid=202) INFO 11-24 11:43:20 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
(EngineCore_DP0 pid=202) INFO 11-24 11:43:25 [gpu_model_runner.py:2338] Starting to load model meta-llama/Llama-3.1-8B-Instruct...
"""

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
       "22.03 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 21.00 GiB memory in use.")


def tb(*funcs: str, exc: str = OOM, prefix: str = "(EngineCore_DP0 pid=202) ") -> str:
    frames = "".join(f'{prefix}  File "/usr/lib/python3.12/site-packages/vllm/x.py", line 1, in {f}\n'
                     f"{prefix}    call()\n" for f in funcs)
    return f"{prefix}Traceback (most recent call last):\n{frames}{prefix}{exc}\n"


def primary(text: str):
    report = diagnose_text(text)
    assert report.findings, "no finding"
    return report.findings[0], report


def test_bare_oom_during_weight_loading_is_weights_oom():
    f, report = primary(V1_HEAD + tb("run_engine_core", "load_model", "load_weights", "weight_loader"))
    assert (f.rule.id, f.stage) == ("weights-oom", "loading")
    assert f.facts["tried_to_allocate_gib"] == 1.96 and f.facts["gpu_total_gib"] == 22.03
    assert report.context.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert "--tensor-parallel-size 2" in f.command


def test_same_oom_during_graph_capture_is_warmup_oom_and_lowers_utilization():
    log = V1_HEAD + ("(EngineCore_DP0 pid=202) INFO 11-24 11:44:01 [gpu_model_runner.py:2392] "
                     "Model loading took 14.99 GiB and 4.76 seconds\n")
    f, _ = primary(log + tb("run_engine_core", "compile_or_warm_up_model", "capture_model", "_dummy_run"))
    assert (f.rule.id, f.stage) == ("warmup-oom", "warmup")
    # 0.92 - (1.96 + 0.5) / 22.03 = 0.808 -> 0.80: lower, not higher
    fix = {x["flag"]: x["value"] for x in f.fixes}
    assert fix["--gpu-memory-utilization"] == "0.8"
    assert "--gpu-memory-utilization 0.8" in f.command


def test_landmark_decides_when_the_traceback_names_no_stage():
    log = V1_HEAD + "(EngineCore_DP0 pid=202) INFO 11-24 11:44:05 [gpu_model_runner.py:1] Capturing CUDA graph shapes\n"
    f, _ = primary(log + tb("run_engine_core", "forward", "__call__"))
    assert f.rule.id == "warmup-oom"


def test_other_process_holding_memory_is_not_a_weights_oom():
    exc = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of "
           "79.19 GiB of which 300.00 MiB is free. Process 5555 has 40.00 GiB memory in use. Including non-PyTorch "
           "memory, this process has 38.00 GiB memory in use.")
    report = diagnose_text(V1_HEAD + tb("run_engine_core", "load_model", exc=exc))
    assert "weights-oom" not in [f.rule.id for f in report.findings]


def test_root_cause_beats_wrapper_and_ranks_are_listed():
    err = ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache "
           "is needed, which is larger than the available KV cache memory (4.62 GiB). Based on the available memory, "
           "the estimated maximum model length is 37840. Try increasing `gpu_memory_utilization` or decreasing "
           "`max_model_len` when initializing the engine.")
    log = V1_HEAD
    for rank in (0, 1):
        log += tb("initialize_kv_cache", "check_enough_kv_cache_memory", exc=err,
                  prefix=f"(VllmWorker rank={rank} pid={300 + rank}) ")
    log += ("(APIServer pid=101) RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': 1}\n")
    f, report = primary(log)
    assert f.rule.id == "kv-cache-too-small" and f.stage == "startup"
    assert f.ranks == [0, 1] and f.occurrences == 2
    assert len([x for x in report.findings if x.rule.id == "kv-cache-too-small"]) == 1
    assert f.facts["max_model_len"] == 131072 and f.facts["estimated_max_model_len"] == 37840
    assert f.facts["fit_len"] == 36864
    assert "--max-model-len 36864" in f.command
    assert f.command.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")
    assert "--gpu-memory-utilization 0.92" in f.command
    assert "max_model_len=36864" in f.python


def test_context_from_engine_line_and_memory_lines():
    log = V1_HEAD + """\
(EngineCore_DP0 pid=202) INFO 11-24 11:44:01 [gpu_model_runner.py:2392] Model loading took 14.9926 GiB and 4.761309 seconds
(EngineCore_DP0 pid=202) INFO 11-24 11:44:17 [gpu_worker.py:348] Available KV cache memory: 4.62 GiB
(EngineCore_DP0 pid=202) INFO 11-24 11:44:18 [kv_cache_utils.py:1234] GPU KV cache size: 37,840 tokens
(EngineCore_DP0 pid=202) INFO 11-24 11:44:18 [kv_cache_utils.py:1239] Maximum concurrency for 16,384 tokens per request: 2.31x
"""
    report = diagnose_text(log)
    c = report.context
    assert (c.version, c.engine, c.dtype, c.kv_cache_dtype) == ("0.10.2", "V1", "bfloat16", "auto")
    assert (c.gpu_memory_utilization, c.max_num_seqs, c.tensor_parallel_size) == (0.92, 256, 1)
    assert (c.weights_gib, c.available_kv_cache_gib, c.kv_cache_tokens) == (14.9926, 4.62, 37840)
    assert (c.max_model_len, c.max_concurrency) == (16384, 2.31)
    assert [f for f in report.findings if f.severity in ("error", "warning")] == []


def test_v0_memory_summary_and_namespace_dump():
    log = """\
INFO 07-17 13:37:40 api_server.py:712] args: Namespace(host=None, port=8000, model='Qwen/Qwen2.5-14B-Instruct', max_model_len=8192, gpu_memory_utilization=0.8, tensor_parallel_size=1, max_num_seqs=256, enforce_eager=False)
INFO 07-17 13:38:00 worker.py:267] the current vLLM instance can use total_gpu_memory (39.38GiB) x gpu_memory_utilization (0.80) = 31.50GiB
INFO 07-17 13:38:00 worker.py:267] model weights take 27.57GiB; non_torch_memory takes 0.11GiB; PyTorch activation peak memory takes 1.49GiB; the rest of the memory reserved for KV Cache is 2.33GiB.
INFO 07-17 13:38:00 executor_base.py:111] # cuda blocks: 796, # CPU blocks: 1365
"""
    c = diagnose_text(log).context
    assert (c.model, c.max_model_len, c.gpu_memory_utilization) == ("Qwen/Qwen2.5-14B-Instruct", 8192, 0.8)
    assert (c.gpu_total_gib, c.requested_gib, c.weights_gib, c.available_kv_cache_gib) == (39.38, 31.5, 27.57, 2.33)
    assert (c.num_gpu_blocks, c.num_cpu_blocks, c.enforce_eager) == (796, 1365, False)


def test_no_cache_blocks_computes_the_utilization_that_fits():
    log = """\
INFO 07-17 13:38:00 worker.py:267] the current vLLM instance can use total_gpu_memory (23.64GiB) x gpu_memory_utilization (0.70) = 16.55GiB
INFO 07-17 13:38:00 worker.py:267] model weights take 15.20GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 1.80GiB; the rest of the memory reserved for KV Cache is -0.65GiB.
ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
"""
    f, _ = primary(log)
    assert f.rule.id == "no-cache-blocks"
    assert f.facts["available_gib"] == -0.65 and f.facts["deficit_gib"] == 0.65
    # 0.70 + (0.65 + 1.0) / 23.64 = 0.7698 -> 0.77
    assert f.facts["util_needed"] == 0.77
    assert "--gpu-memory-utilization 0.77" in f.advice


def test_no_cache_blocks_says_when_the_model_cannot_fit():
    log = """\
INFO 07-17 13:38:00 worker.py:267] the current vLLM instance can use total_gpu_memory (15.00GiB) x gpu_memory_utilization (0.95) = 14.25GiB
INFO 07-17 13:38:00 worker.py:267] model weights take 14.90GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 1.00GiB; the rest of the memory reserved for KV Cache is -1.85GiB.
"""
    f, _ = primary(log)
    assert f.rule.id == "no-cache-blocks" and f.facts["util_needed"] is None
    assert "does not fit this GPU" in f.advice
    assert {"flag": "--tensor-parallel-size", "value": "2"}.items() <= f.fixes[0].items()
    # the log never names the model: no `vllm serve MODEL` placeholder, a note instead (issue 17)
    assert f.command is None and f.python is None
    assert f.command_notes == ["no command is suggested: the model could not be read from the log"]


def test_preemptions_fold_into_one_warning_with_count_and_times():
    line = ("WARNING 05-19 10:{m:02d}:11 scheduler.py:1560] Sequence group {i} is preempted by PreemptionMode.RECOMPUTE "
            "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
            "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            "total_num_cumulative_preemption={n}\n")
    stats = ("INFO 05-19 10:{m:02d}:20 metrics.py:351] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
             "9.0 tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: {p}%, CPU KV "
             "cache usage: 0.0%.\n")
    log = "".join(line.format(m=m, i=m, n=n) + stats.format(m=m, r=8 + m, p=90 + m)
                  for m, n in ((1, 1), (2, 51), (3, 101)))
    report = diagnose_text(log)
    pre = [f for f in report.findings if f.rule.id == "preemption"]
    assert len(pre) == 1
    f = pre[0]
    assert f.severity == "warning" and f.stage == "serving"
    assert f.facts["preemptions"] == 101
    assert (f.facts["first_time"], f.facts["last_time"]) == ("05-19 10:01:11", "05-19 10:03:11")
    assert f.facts["peak_kv_usage_pct"] == 93.0
    assert "--max-num-seqs 8" in f.advice  # 3/4 of the peak of 11 running


def test_healthy_startup_and_serving_has_no_error_or_warning():
    log = V1_HEAD + """\
(EngineCore_DP0 pid=202) INFO 11-24 11:44:01 [gpu_model_runner.py:2392] Model loading took 14.99 GiB and 4.76 seconds
(EngineCore_DP0 pid=202) WARNING 11-24 11:44:02 [topk_topp_sampler.py:69] FlashInfer is not available. Falling back to the PyTorch-native implementation of top-p & top-k sampling.
(EngineCore_DP0 pid=202) INFO 11-24 11:44:17 [gpu_worker.py:348] Available KV cache memory: 4.62 GiB
(APIServer pid=101) INFO 11-24 11:45:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=101) INFO 11-24 11:45:01 [logger.py:43] Received request chatcmpl-1: prompt: 'my job died with torch.OutOfMemoryError: CUDA out of memory, why?', params: SamplingParams(n=1), prompt_token_ids: [1, 2, 3]
(APIServer pid=101) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK
(APIServer pid=101) INFO 11-24 11:45:10 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 40.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.1%, Prefix cache hit rate: 0.0%
"""
    report = diagnose_text(log)
    assert [f.rule.id for f in report.findings if f.severity in ("error", "warning")] == []
    assert report.context.server_started and report.context.peak_kv_usage_pct == 3.1


def test_secrets_are_redacted_before_matching():
    log = ("(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'org/m', "
           "'api_key': 'supersecretvalue123', 'hf_token': 'hf_abcdefghijklmnopqrstuvwxyz012345'}\n")
    report = diagnose_text(log)
    assert "supersecretvalue123" not in repr(report.context.args)
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" not in repr(report.context.args)
    assert sum(report.redactions.values()) >= 2


def test_vllm_weights_oom_wrapper_with_other_process_is_gpu_memory_in_use():
    line = ("ERROR 01-19 22:26:14 [gpu_model_runner.py:3657] Failed to load model - not enough GPU memory. Try lowering "
            "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using "
            "--quantization. (original error: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 115.31 MiB is free. Process 4242 has 40.12 GiB memory in use. Including "
            "non-PyTorch memory, this process has 38.90 GiB memory in use.)\n")
    report = diagnose_text(V1_HEAD + line)
    assert [f.rule.id for f in report.findings if f.severity == "error"] == ["gpu-memory-in-use"]


def test_fragment_starting_mid_traceback_uses_its_frames():
    frag = ('  File "/venv/lib/python3.12/site-packages/vllm/worker/model_runner.py", line 1, in capture_model\n'
            "    graph_runner.capture(**capture_inputs)\n" + OOM + "\n")
    f, _ = primary(frag)
    assert (f.rule.id, f.stage) == ("warmup-oom", "warmup")


def test_unknown_override_target_is_refused(tmp_path):
    from diagnoser.rules.loader import load_rules
    from diagnoser.rules.model import RuleError

    src = (tmp_path / "x.yaml")
    src.write_text("""id: x
title: X
severity: error
overrides: [no-such-rule]
match: [{phrase: "the x machine exploded"}]
advice: boom
explanation: x
cases: {match: [{text: "the x machine exploded"}], near_miss: ["fine"]}
""")
    import pytest

    with pytest.raises(RuleError, match="no-such-rule"):
        load_rules((src,))


def test_pasted_launch_command_fills_the_context():
    log = ("$ VLLM_USE_V1=1 vllm serve org/model-70b --max-model-len 2048 --gpu-memory-utilization 0.98 -tp 2 "
           "--enforce-eager\n"
           "INFO 01-30 03:19:14 [kv_cache_utils.py:395] # GPU blocks: 1381\n")
    c = diagnose_text(log).context
    assert (c.model, c.max_model_len, c.gpu_memory_utilization) == ("org/model-70b", 2048, 0.98)
    assert (c.tensor_parallel_size, c.enforce_eager) == (2, True)
    # argparse's usage text names the command too, but is not a launch
    c = diagnose_text("usage: vllm serve [-h] [--max-model-len MAX_MODEL_LEN]\n").context
    assert c.max_model_len is None


REQUEST_TB = """\
(APIServer pid=1) INFO 11-24 11:45:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) ERROR 11-24 11:45:21 [serving_chat.py:203] Error in preprocessing prompt inputs
(APIServer pid=1) ERROR 11-24 11:45:21 [serving_chat.py:203] Traceback (most recent call last):
(APIServer pid=1) ERROR 11-24 11:45:21 [serving_chat.py:203]   File "/x/vllm/entrypoints/openai/serving_chat.py", line 186, in create_chat_completion
(APIServer pid=1) ERROR 11-24 11:45:21 [serving_chat.py:203]     ) = await self._preprocess_chat(
(APIServer pid=1) ERROR 11-24 11:45:21 [serving_chat.py:203] jinja2.exceptions.TemplateError: Conversation roles must alternate user/assistant/user/assistant/...
(APIServer pid=1) INFO:     127.0.0.1:51236 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request
"""


def test_a_failed_request_on_a_live_server_is_information_not_a_crash():
    report = diagnose_text(REQUEST_TB)
    assert [(f.rule.id, f.severity) for f in report.findings] == [("request-failed", "info")]
    assert report.findings[0].facts["exception"] == "TemplateError"


def test_an_engine_crash_while_serving_stays_an_error():
    log = REQUEST_TB.split("(APIServer pid=1) ERROR")[0] + (
        "(EngineCore_DP0 pid=2) ERROR 11-24 11:46:00 [core.py:1] EngineCore encountered a fatal error.\n"
        "(EngineCore_DP0 pid=2) Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=2)   File "/x/vllm/v1/engine/core.py", line 1, in run_busy_loop\n'
        "(EngineCore_DP0 pid=2)     self._process_engine_step()\n"
        "(EngineCore_DP0 pid=2) RuntimeError: CUDA error: an illegal memory access was encountered\n")
    f, report = primary(log)
    # the cause is named (issue 8), not the "EngineCore encountered a fatal error" header printed above it
    assert (f.rule.id, f.severity, f.stage) == ("illegal-memory-access", "error", "serving")
    assert [x.rule.id for x in report.findings][:2] == ["illegal-memory-access", "engine-dead"]


def test_exceptions_while_the_operator_shuts_the_server_down_are_not_a_crash():
    log = REQUEST_TB.split("(APIServer pid=1) ERROR")[0] + """\
(APIServer pid=1) INFO 11-24 12:00:00 [launcher.py:80] Shutting down FastAPI HTTP server.
(APIServer pid=1) Traceback (most recent call last):
(APIServer pid=1)   File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run
(APIServer pid=1)     return self._loop.run_until_complete(task)
(APIServer pid=1) RuntimeError: Event loop is closed
"""
    report = diagnose_text(log)
    assert [f for f in report.findings if f.severity == "error"] == []


def test_long_max_model_len_override_warning_is_not_an_error():
    log = ("WARNING 06-25 16:32:00 config.py:1450] User-specified max_model_len (8192) is greater than the derived "
           "max_model_len (max_position_embeddings=4096 or model_max_length=None in model's config.json). This may "
           "lead to incorrect model outputs or CUDA errors. Make sure the value is correct and within the model "
           "context size.\n")
    assert diagnose_text(log).findings == []
    error = log.replace("WARNING 06-25 16:32:00 config.py:1450] ", "ValueError: ")
    assert diagnose_text(error).findings[0].rule.id == "max-model-len-exceeds-model"


def test_profiling_run_oom_shrinks_the_batch_not_the_budget():
    log = """\
INFO 10-03 14:22:11 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='Qwen/Qwen2.5-32B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
INFO 10-03 14:23:06 model_runner.py:1071] Loading model weights took 30.7114 GB
(VllmWorkerProcess pid=3120) ERROR 10-03 14:23:09 multiproc_worker_utils.py:231] Traceback (most recent call last):
(VllmWorkerProcess pid=3120) ERROR 10-03 14:23:09 multiproc_worker_utils.py:231]   File "/v/vllm/worker/worker.py", line 223, in determine_num_available_blocks
(VllmWorkerProcess pid=3120) ERROR 10-03 14:23:09 multiproc_worker_utils.py:231]     self.model_runner.profile_run()
(VllmWorkerProcess pid=3120) ERROR 10-03 14:23:09 multiproc_worker_utils.py:231] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB. GPU 1 has a total capacity of 39.39 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process has 36.26 GiB memory in use.
"""
    f, report = primary(log)
    assert (f.rule.id, f.stage, report.context.engine) == ("warmup-oom", "startup", "V0")
    fixes = {x["flag"]: x["value"] for x in f.fixes}
    assert fixes == {"--max-num-batched-tokens": "16384", "--enable-chunked-prefill": ""}
    assert f.command == ("vllm serve Qwen/Qwen2.5-32B-Instruct --tensor-parallel-size 2 "
                         "--max-num-batched-tokens 16384 --enable-chunked-prefill")
