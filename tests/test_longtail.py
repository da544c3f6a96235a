"""Issue 8's cross-cutting behaviours on small logs in vLLM's shapes (synthetic): the stage of a failure no
rule knows, a death reported with the cause printed before it, errors a completed start-up recovered from,
and an operator's stop."""

from __future__ import annotations

from diagnoser.analysis.pipeline import diagnose_text
from diagnoser.rules import functions as fn

ENGINE = ("(EngineCore_DP0 pid=240) INFO 06-01 10:00:05 [core.py:71] Initializing a V1 LLM engine (v0.10.1) with "
          "config: model='org/model-8b', max_seq_len=8192, tensor_parallel_size=2\n")
LOADING = "(VllmWorker TP0 pid=300) INFO 06-01 10:00:10 [gpu_model_runner.py:1] Starting to load model org/model-8b...\n"
READY = ("(EngineCore_DP0 pid=240) INFO 06-01 10:01:00 [core.py:216] init engine (profile, create kv cache, warmup "
         "model) took 20.14 seconds\n"
         "(APIServer pid=1) INFO 06-01 10:01:02 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
         "INFO:     Application startup complete.\n")
STATS = ("(APIServer pid=1) INFO 06-01 10:{m}:00 [loggers.py:123] Engine 000: Avg prompt throughput: 900.0 tokens/s, "
         "Avg generation throughput: 300.0 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 8.0%, "
         "Prefix cache hit rate: 0.0%\n")
WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"


def frames(proc: str, *funcs: str) -> str:
    out = f"({proc}) Traceback (most recent call last):\n"
    for f in funcs:
        out += f'({proc})   File "/x/vllm/worker.py", line 1, in {f}\n({proc})     call()\n'
    return out


def test_an_unknown_error_in_distributed_init_is_at_startup_not_config():
    log = ENGINE + frames("VllmWorker TP1 pid=301", "init_device", "init_worker_distributed_environment",
                          "ensure_model_parallel_initialized") + \
        "(VllmWorker TP1 pid=301) RuntimeError: Something failed while setting up the process groups\n" + WRAPPER
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.stage, f.fine_stage) == ("unrecognized-failure", "startup", "distributed_init")


def test_a_worker_device_check_is_at_startup_not_config():
    # init_device runs in the worker once the engine has its config (the config line is already printed)
    log = ENGINE + frames("VllmWorker TP0 pid=300", "init_worker", "init_device") + \
        "(VllmWorker TP0 pid=300) RuntimeError: Cannot access accelerator device when none is available.\n" + WRAPPER
    f = diagnose_text(log).findings[0]
    assert (f.stage, f.fine_stage) == ("startup", "worker_init")


def test_a_config_check_before_the_engine_starts_stays_config():
    log = frames("APIServer pid=1", "create_engine_config", "__post_init__") + \
        "(APIServer pid=1) RuntimeError: Something in the engine arguments cannot be combined\n"
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.stage) == ("unrecognized-failure", "config")


def test_an_unknown_error_inside_engine_start_up_frames_is_at_startup():
    log = frames("EngineCore_DP0 pid=240", "run_engine_core", "__init__") + \
        "(EngineCore_DP0 pid=240) AttributeError: 'Tokenizer' object has no attribute 'vocab_files_names'\n"
    assert diagnose_text(log).findings[0].stage == "startup"


def test_engine_start_up_frames_do_not_override_a_later_landmark():
    log = ENGINE + LOADING + frames("EngineCore_DP0 pid=240", "run_engine_core", "__init__") + \
        "(EngineCore_DP0 pid=240) AttributeError: 'Foo' object has no attribute 'bar'\n"
    assert diagnose_text(log).findings[0].stage == "loading"


def test_after_ready_a_start_up_frame_does_not_move_a_crash_back_to_start_up():
    log = ENGINE + READY + STATS.format(m="05") + frames("VllmWorker TP0 pid=300", "execute_model", "load_weights") + \
        "(VllmWorker TP0 pid=300) RuntimeError: Weight reload failed in a custom op\n"
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.severity, f.stage) == ("unrecognized-failure", "error", "serving")


def test_engine_dead_takes_the_cause_printed_before_it_and_the_time_since_ready():
    log = (ENGINE + READY + STATS.format(m="05")
           + "(VllmWorker TP0 pid=300) ERROR 06-01 10:09:30 [multiproc_executor.py:1] RuntimeError: Check failed: "
             "(status == cudaSuccess) is false: SomeKernel failed with error invalid argument\n"
           + "(EngineCore_DP0 pid=240) ERROR 06-01 10:09:30 [core.py:1] RuntimeError: Worker failed with error "
             "'Check failed', please check the stack trace above for the root cause\n"
           + "(APIServer pid=1) ERROR 06-01 10:09:31 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: "
             "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.stage) == ("engine-dead", "serving")
    assert "SomeKernel failed" in f.facts["cause"] and "SomeKernel failed" in f.evidence[0].text
    assert f.facts["since_ready"] == 509 and "8 min 29 s after" in f.advice
    assert "Running: 12 reqs" in f.facts["last_stats"]


def test_a_named_cause_outranks_the_death_message_printed_before_it():
    log = (ENGINE + READY
           + "(EngineCore_DP0 pid=240) ERROR 06-01 10:09:30 [core.py:1] EngineCore encountered a fatal error.\n"
           + "(EngineCore_DP0 pid=240) RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert [f.rule.id for f in diagnose_text(log).findings][:2] == ["illegal-memory-access", "engine-dead"]


def test_an_error_the_start_up_recovered_from_is_information():
    log = ("(APIServer pid=1) ERROR 06-01 10:00:02 [config.py:1] Error retrieving file list: 404 Client Error. "
           "Repository Not Found for url: https://huggingface.co/api/models/org/model-8b/tree/main, retrying 1 of 2\n"
           + ENGINE + LOADING + READY + STATS.format(m="05"))
    report = diagnose_text(log)
    f = next(x for x in report.findings if x.rule.id == "model-not-found")
    assert f.severity == "info" and "recovered" in f.advice
    assert [x for x in report.findings if x.severity in ("error", "warning")] == []


def test_the_same_error_without_a_completed_start_up_stays_an_error():
    log = ("(APIServer pid=1) ERROR 06-01 10:00:02 [config.py:1] Repository Not Found for url: "
           "https://huggingface.co/api/models/org/model-8b\n" + ENGINE)
    assert diagnose_text(log).findings[0].severity == "error"


def test_ctrl_c_while_loading_is_interrupted_at_loading_and_its_echo_is_not_a_crash():
    log = (ENGINE + LOADING + frames("VllmWorker TP0 pid=300", "worker_busy_loop", "acquire_read")
           + "(VllmWorker TP0 pid=300) KeyboardInterrupt\n"
           + "(APIServer pid=1) RuntimeError: Engine process failed to start. See stack trace for the root cause.\n"
           + "(EngineCore_DP0 pid=240) OSError: [Errno 9] Bad file descriptor\n")
    report = diagnose_text(log)
    assert [(f.rule.id, f.severity, f.stage) for f in report.findings] == [("interrupted", "info", "loading")]
    assert "at stage loading" in report.findings[0].advice


def test_advice_helpers():
    assert fn.seconds_between("12-31 23:59:50", "12-31 23:59:59") == 9
    assert fn.seconds_between("06-01 10:00:00", None) is None
    assert fn.seconds_between("12-31 23:59:00", "01-01 00:01:00") == 120  # across New Year, as series.Clock reads it
    assert fn.seconds_between("01-18 20:15:59", "01-18 20:00:00") is None  # an end before the start
    assert fn.duration(7384) == "2 h 3 min"
    assert fn.cuda_of_driver(12080) == "12.8" and fn.cuda_of_driver("x") is None
    assert fn.driver_for_cuda("12.8") == "570.26" and fn.driver_for_cuda("99.0") is None
    assert fn.pip_package("google.protobuf.message") == "protobuf" and fn.pip_package("qwen_vl_utils") == "qwen-vl-utils"
    assert fn.pip_package("some_pkg") == "some-pkg"
    assert fn.lora_rank_for(16) == 16 and fn.lora_rank_for(600) is None
    assert fn.version_at_least("0.11.0", "0.11") is True and fn.version_at_least(None, "0.11") is None


def test_ray_killing_a_worker_for_host_memory_is_not_a_gpu_oom():
    # Ray's memory monitor (host RAM) names its exception OutOfMemoryError too: no GPU-OOM advice for it
    log = (ENGINE + LOADING
           + "(EngineCore_DP0 pid=240) ERROR 06-01 10:00:30 [core.py:1] ray.exceptions.OutOfMemoryError: Task was "
             "killed due to the node running low on memory.\n")
    rules = [f.rule.id for f in diagnose_text(log).findings]
    assert not {"weights-oom", "warmup-oom", "serving-oom"} & set(rules), rules


def test_kv_cache_memory_bytes_line_tracks_the_stage_and_the_reserved_cache():
    log = (ENGINE + LOADING
           + "(VllmWorker TP0 pid=300) INFO 06-01 10:00:40 [gpu_worker.py:276] Initial free memory 74.31 GiB, reserved "
             "8.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.\n"
           + "(EngineCore_DP0 pid=240) RuntimeError: Something no rule knows\n")
    report = diagnose_text(log)
    assert report.context.available_kv_cache_gib == 8.0 and report.context.gpu_free_gib == 74.31
    assert (report.findings[0].stage, report.findings[0].fine_stage) == ("startup", "kv_cache_allocation")


def test_the_cause_after_tritons_location_header_outranks_the_header():
    log = (ENGINE + frames("EngineCore_DP0 pid=240", "profile_run", "w8a8_block_fp8_matmul")
           + "(EngineCore_DP0 pid=240) triton.compiler.errors.CompilationError: at 1:0:\n"
           + "(EngineCore_DP0 pid=240) def _w8a8_block_fp8_matmul(\n"
           + "(EngineCore_DP0 pid=240) ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 "
             "dtypes are ('fp8e4b15', 'fp8e5')\")\n")
    rules = [f.rule.id for f in diagnose_text(log).findings]
    assert rules[:2] == ["quantization-unsupported", "compile-failure"]
    # alone, the header is still a compile failure (not an unrecognized one)
    header_only = ENGINE + "triton.compiler.errors.CompilationError: at 12:4:\n    pid = tl.program_id(axis=0)\n"
    assert diagnose_text(header_only).findings[0].rule.id == "compile-failure"


# --- coverage2: failures that used to read as unrecognized-failure ---------------------------------------------

def _fix(finding, key: str):
    return next((f.get("value") for f in finding.fixes if f.get("flag") == key or f.get("env") == key), None)


def test_a_gloo_reset_after_a_worker_oom_ranks_below_the_oom():
    log = ENGINE + READY + \
        "(VllmWorker TP1 pid=301) ERROR 06-01 10:05:00 [multiproc_executor.py:1] torch.OutOfMemoryError: CUDA out " \
        "of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n" \
        "(VllmWorker TP0 pid=300) ERROR 06-01 10:05:01 [multiproc_executor.py:1] RuntimeError: [../third_party/gloo/" \
        "gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.7]:43139\n"
    ids = [f.rule.id for f in diagnose_text(log).findings]
    assert ids[:2] == ["serving-oom", "nccl-error"]


def test_a_bare_keyerror_on_a_model_type_asks_for_a_newer_transformers():
    log = frames("APIServer pid=1", "create_engine_config", "get_config", "from_pretrained", "__getitem__") + \
        "(APIServer pid=1) KeyError: 'qwen2'\n"
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.stage, f.facts["model_type"]) == ("unsupported-architecture", "config", "qwen2")
    assert "Upgrade Transformers first: `pip install -U transformers`" in f.advice


def test_a_keyerror_on_anything_else_is_not_an_unknown_model_type():
    log = frames("APIServer pid=1", "create_engine_config", "get_config") + "(APIServer pid=1) KeyError: 'rope_type'\n"
    assert diagnose_text(log).findings[0].rule.id == "unrecognized-failure"


def test_a_full_disk_is_told_from_a_full_dev_shm():
    hf = ENGINE + LOADING + "(VllmWorker TP0 pid=300) OSError: [Errno 28] No space left on device: " \
        "'/root/.cache/huggingface/hub/models--org--model-8b/blobs/1f2e.incomplete'\n" + WRAPPER
    f = diagnose_text(hf).findings[0]
    assert (f.rule.id, f.stage, _fix(f, "HF_HOME")) == ("disk-full", "loading", "/data/hf")
    shm = ENGINE + LOADING + "(VllmWorker TP0 pid=300) OSError: [Errno 28] No space left on device: '/dev/shm/psm_1a2b'\n"
    assert diagnose_text(shm).findings[0].rule.id == "shared-memory-too-small"


def test_cublas_not_initialized_reads_as_a_full_gpu_not_a_kernel_bug():
    log = ENGINE + LOADING + "(VllmWorker TP0 pid=300) RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when " \
        "calling `cublasCreate(handle)`\n" + WRAPPER
    f = diagnose_text(log).findings[0]
    assert f.rule.id == "illegal-memory-access"
    assert "GPU was already full" in f.advice and "--gpu-memory-utilization" in f.advice
    assert _fix(f, "--enforce-eager") is None


def test_a_privileged_port_suggests_an_unprivileged_one():
    log = READY + "ERROR:    [Errno 13] error while attempting to bind on address ('0.0.0.0', 80): permission denied\n"
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.severity, _fix(f, "--port")) == ("bind-failed", "error", "8000")


def test_a_missing_chat_template_path_stops_the_start_up_at_config():
    log = frames("APIServer pid=1", "run_server", "init_app_state", "load_chat_template") + \
        "(APIServer pid=1) ValueError: The supplied chat template string (/templates/llama3.jinja) appears " \
        "path-like, but doesn't exist!\n"
    f = diagnose_text(log).findings[0]
    assert (f.rule.id, f.severity, f.facts["template"]) == ("chat-template-error", "error", "/templates/llama3.jinja")
