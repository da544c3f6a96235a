"""Where a failure happened, read from its traceback's frames (analysis/frames.py, data/places.yaml).

Each case is a traceback's frames as vLLM 0.10-0.33 and its dependencies print them; the component and the
stage must come from the file paths, functions and source lines, never from the exception's words.
"""

from __future__ import annotations

import pytest

from diagnoser.analysis.frames import Frame, component_of_exception, describe, frames_of, locate, parse_frame

SP = "/usr/local/lib/python3.12/dist-packages"


def tb(*frames: tuple[str, str] | tuple[str, str, str]) -> list[Frame]:
    """Frames outermost first: (path under site-packages, function[, source line])."""
    out = []
    for i, f in enumerate(frames):
        path = f[0] if f[0].startswith("/") else f"{SP}/{f[0]}"
        out.append(Frame(path, f[1], 100 + i, f[2] if len(f) > 2 else ""))
    return out


ENGINE = (("vllm/v1/engine/core.py", "run_engine_core"), ("vllm/v1/engine/core.py", "__init__"))
BUSY = (("vllm/v1/engine/core.py", "run_engine_core"), ("vllm/v1/engine/core.py", "run_busy_loop"),
        ("vllm/v1/engine/core.py", "step"), ("vllm/v1/executor/abstract.py", "execute_model"),
        ("vllm/v1/worker/gpu_worker.py", "execute_model"), ("torch/utils/_contextlib.py", "decorate_context"))

CASES = {
    # compile / warm-up: an OOM in Inductor's compiled code while capturing a graph is capture, not compile
    "inductor code under graph capture": (
        tb(*ENGINE, ("vllm/v1/worker/gpu_model_runner.py", "capture_model"),
           ("vllm/v1/worker/gpu_model_runner.py", "_dummy_run"),
           ("vllm/compilation/cuda_graph.py", "__call__", "with torch.cuda.graph(cudagraph, pool=self.graph_pool):"),
           ("torch/_inductor/output_code.py", "__call__"),
           ("/root/.cache/vllm/torch_compile_cache/ab/rank_0_0/inductor_cache/x/cx.py", "call")),
        "compile", ("cuda_graph_capture",)),
    "a capture fragment: the source line alone says capture": (
        tb(("vllm/compilation/cuda_graph.py", "__call__", "with torch.cuda.graph(cudagraph, pool=self.graph_pool):"),
           ("vllm/compilation/cuda_piecewise_backend.py", "__call__"), ("torch/_inductor/output_code.py", "__call__")),
        "compile", ("cuda_graph_capture",)),
    "compiled code in the profiling run": (
        tb(*ENGINE, ("vllm/v1/worker/gpu_worker.py", "determine_available_memory"),
           ("vllm/v1/worker/gpu_model_runner.py", "profile_run"), ("vllm/v1/worker/gpu_model_runner.py", "_dummy_run"),
           ("vllm/compilation/decorators.py", "__call__"), ("torch/_inductor/output_code.py", "__call__")),
        "compile", ("memory_profiling",)),
    "Triton building its launcher": (
        tb(("torch/_inductor/compile_fx.py", "compile_fx"), ("triton/runtime/build.py", "_build")),
        "compile", ("memory_profiling", "cuda_graph_capture")),
    "weights": (
        tb(*ENGINE, ("vllm/v1/worker/gpu_model_runner.py", "load_model"),
           ("vllm/model_executor/model_loader/default_loader.py", "load_weights"),
           ("vllm/model_executor/layers/linear.py", "weight_loader")),
        "loading", ("weight_loading",)),
    "the sampler while serving": (
        tb(*BUSY, ("vllm/v1/worker/gpu_model_runner.py", "execute_model"), ("vllm/v1/sample/sampler.py", "forward")),
        "sampler", ("serving",)),
    "the sampler in its warm-up": (
        tb(*ENGINE, ("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model"),
           ("vllm/v1/worker/gpu_model_runner.py", "_dummy_sampler_run"), ("vllm/v1/sample/sampler.py", "forward")),
        "sampler", ("sampler_warmup",)),
    "a sampler fragment: warm-up or serving, undecided": (
        tb(("vllm/v1/sample/sampler.py", "forward"), ("vllm/v1/sample/ops/penalties.py", "apply_all_penalties")),
        "sampler", ("sampler_warmup", "serving")),
    "the LMCache connector while serving": (
        tb(*BUSY, ("vllm/v1/worker/kv_connector_model_runner_mixin.py", "maybe_setup_kv_connector"),
           ("vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py", "start_load_kv"),
           ("lmcache/integration/vllm/vllm_v1_adapter.py", "start_load_kv"), ("lmcache/v1/cache_engine.py", "retrieve")),
        "kv_transfer", ("serving",)),
    "NIXL's bindings": (
        tb(("vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py", "_read_blocks"),
           ("nixl/_api.py", "transfer")),
        "kv_transfer", ()),
    "an EAGLE drafter loading": (
        tb(*ENGINE, ("vllm/v1/worker/gpu_model_runner.py", "load_model"), ("vllm/v1/spec_decode/eagle.py", "load_model"),
           ("vllm/model_executor/models/llama_eagle3.py", "load_weights")),
        "spec_decode", ("weight_loading",)),
    "an ngram proposer while serving": (
        tb(*BUSY, ("vllm/v1/worker/gpu_model_runner.py", "execute_model"),
           ("vllm/v1/spec_decode/ngram_proposer.py", "propose")),
        "spec_decode", ("serving",)),
    "NCCL set-up": (
        tb(("vllm/v1/worker/gpu_worker.py", "init_device"),
           ("vllm/distributed/parallel_state.py", "ensure_model_parallel_initialized"),
           ("vllm/distributed/device_communicators/pynccl.py", "__init__")),
        "collectives", ("distributed_init",)),
    "HCCL through torch_npu": (
        tb(("vllm_ascend/worker/worker_v1.py", "_init_worker_distributed_environment"),
           ("vllm/distributed/parallel_state.py", "init_model_parallel_group"),
           ("torch_npu/distributed/distributed_c10d.py", "_new_group_with_tag")),
        "collectives", ("distributed_init",)),
    "Ray's executor": (
        tb(("vllm/v1/executor/ray_distributed_executor.py", "_init_workers_ray"), ("ray/_private/worker.py", "get")),
        "ray", ()),
    "ZeroMQ / msgspec IPC": (
        tb(("/usr/lib/python3.12/threading.py", "run"), ("vllm/v1/engine/core.py", "process_input_sockets"),
           ("vllm/v1/serial_utils.py", "decode")),
        "ipc", ()),
    "the model runner's own speculative-decoding step": (
        tb(*BUSY, ("vllm/v1/worker/gpu_model_runner.py", "propose_draft_token_ids"),
           ("vllm/v1/worker/gpu_model_runner.py", "propose_ngram_draft_token_ids")),
        "spec_decode", ("serving",)),
    "xgrammar in the scheduler's update": (
        tb(*BUSY[:3], ("vllm/v1/core/sched/scheduler.py", "update_from_output"),
           ("vllm/v1/structured_output/backend_xgrammar.py", "accept_tokens"), ("xgrammar/matcher.py", "accept_token")),
        "structured_output", ("serving",)),
    "the scheduler itself": (
        tb(*BUSY[:3], ("vllm/v1/core/sched/scheduler.py", "schedule"),
           ("vllm/v1/core/sched/scheduler.py", "_try_schedule_encoder_inputs")),
        "scheduler", ("serving",)),
    "a transformers processor during profiling": (
        tb(*ENGINE, ("vllm/v1/worker/gpu_model_runner.py", "profile_run"), ("vllm/multimodal/profiling.py", "get_decoder_dummy_data"),
           ("transformers/processing_utils.py", "from_pretrained"),
           ("transformers/image_processing_utils_fast.py", "__init__")),
        "tokenizer", ("memory_profiling",)),
    "the Ascend model runner loading": (
        tb(("/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", "load_model"),
           ("vllm/model_executor/model_loader/__init__.py", "get_model"),
           ("vllm/model_executor/model_loader/weight_utils.py", "default_weight_loader")),
        "loading", ("weight_loading",)),
    "torch_xla on TPU while precompiling": (
        tb(("vllm/v1/worker/tpu_model_runner.py", "capture_model"), ("vllm/v1/worker/tpu_model_runner.py", "_precompile_backbone"),
           ("torch_xla/core/xla_model.py", "mark_step")),
        "platform", ("cuda_graph_capture",)),
    # V0's profile_run runs execute_model: the start-up frame further out wins over the serving one
    "V0 profiling through execute_model": (
        tb(("vllm/worker/worker.py", "determine_num_available_blocks"), ("vllm/worker/model_runner.py", "profile_run"),
           ("vllm/worker/model_runner.py", "execute_model")),
        None, ("memory_profiling",)),
    "the API server's wrapper traceback": (
        tb(("/usr/local/bin/vllm", "<module>"), ("vllm/entrypoints/cli/serve.py", "cmd"),
           ("vllm/v1/engine/utils.py", "wait_for_engine_startup")),
        None, ()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_component_and_stage_from_frames(name: str) -> None:
    frames, component, stages = CASES[name]
    place = locate(frames)
    assert place.component == component
    assert place.stages == stages
    assert place.stage == (stages[0] if len(stages) == 1 else None)


def test_platform_is_reported_apart_from_the_component() -> None:
    place = locate(CASES["the Ascend model runner loading"][0])
    assert (place.component, place.platform) == ("loading", "ascend")
    assert locate(CASES["torch_xla on TPU while precompiling"][0]).platform == "tpu"
    assert locate(CASES["weights"][0]).platform is None


def test_innermost_vllm_and_library_frames() -> None:
    place = locate(CASES["the LMCache connector while serving"][0])
    assert place.vllm_frame is not None and place.vllm_frame.func == "start_load_kv"
    assert place.vllm_frame.short == "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py"
    assert place.library_frame is not None and place.library_frame.short == "lmcache/v1/cache_engine.py"
    assert describe(place) == ("in the KV connector (disaggregated prefill / KV offload) "
                               "(lmcache/v1/cache_engine.py, retrieve)")


@pytest.mark.parametrize(("exception", "component"), [
    ("nixl._bindings.nixlBackendError", "kv_transfer"),
    ("torch._inductor.exc.InductorError", "compile"),
    ("ray.exceptions.RayTaskError", "ray"),
    ("zmq.error.ZMQError", "ipc"),
    ("msgspec.ValidationError", "ipc"),
    ("torch.distributed.DistBackendError", "collectives"),
    ("ValueError", None),
    ("torch.OutOfMemoryError", None),
    (None, None),
])
def test_component_of_an_exception_class(exception: str | None, component: str | None) -> None:
    assert component_of_exception(exception) == component
    assert locate([], exception).component == component


def test_a_logger_file_and_the_source_line_markers() -> None:
    from diagnoser.analysis.frames import code_marks, component_names, component_of_source

    assert component_of_source("nixl_connector.py:651") == "kv_transfer"
    assert component_of_source("core.py:700") is None          # the engine's own files name no component
    assert component_of_source("multiproc_executor.py:671") is None
    assert "torch.cuda.graph(" in code_marks()
    assert {"kv_transfer", "spec_decode", "platform"} <= set(component_names())


def test_frames_of_attaches_source_lines_and_skips_carets() -> None:
    text = [
        'Traceback (most recent call last):',
        '  File "/usr/lib/python3/dist-packages/vllm/compilation/cuda_graph.py", line 162, in __call__',
        '    with torch.cuda.graph(cudagraph, pool=self.graph_pool):',
        '         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^',
        '  File "C:\\Users\\me\\venv\\Lib\\site-packages\\vllm\\v1\\sample\\sampler.py", line 64, in forward',
        '    ^^^^^',
        'torch.OutOfMemoryError: CUDA out of memory.',
    ]
    frames = frames_of(text)
    assert [(f.func, f.line, f.code) for f in frames] == [
        ("__call__", 162, "with torch.cuda.graph(cudagraph, pool=self.graph_pool):"), ("forward", 64, "")]
    assert frames[1].short == "vllm/v1/sample/sampler.py"   # a Windows path reads the same
    assert locate(frames).component == "sampler"
    assert parse_frame("File is missing") is None
