"""Pasted text: the doctor gives the same answer however a log reached it.

Every log (the bundled fixtures when fixtures/expected.yaml lists them, and the small logs below) goes through
each transformation a paste suffers: hard-wrapped at 80 and at 60 columns (splitting words and numbers),
quoted with '> ', wrapped in a Markdown fence with chatter around it, CRLF line ends, flattened onto one
line, vLLM's prefixes stripped, cut off mid-line (inside the last line, or in a line after the message).
The primary rule and the key numbers must not change.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from diagnoser.analysis.pipeline import diagnose_text

from .matrix import sample

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# -- transformations -----------------------------------------------------------------------------------------


def hard_wrap(text: str, width: int) -> str:
    """A terminal or chat window: every line cut every `width` characters, inside words and numbers."""
    out = []
    for line in text.split("\n"):
        if not line:
            out.append(line)
            continue
        out.extend(line[i:i + width] for i in range(0, len(line), width))
    return "\n".join(out)


def quoted(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.split("\n"))


def fenced(text: str) -> str:
    return ("Hi all, my server dies on start, here is the log:\n\n```text\n" + text.rstrip("\n")
            + "\n```\n\nAny idea what is wrong? Thanks!\n")


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def flattened(text: str) -> str:
    return " ".join(line for line in text.split("\n") if line.strip()) + "\n"


VLLM_PREFIX = re.compile(
    r"^(?:\(\w[\w ]*?(?:rank=\d+ )?pid=\d+(?:, ip=[^)]*)?\) )?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]+\]|[\w./-]+:\d+\]) ?)?",
    re.MULTILINE)


def stripped(text: str) -> str:
    return VLLM_PREFIX.sub("", text)


def cut_mid_line(text: str) -> str:
    """The copy stopped in the middle of the last line (skipped when that line is the message itself)."""
    lines = text.rstrip("\n").split("\n")
    last = lines[-1]
    return "\n".join([*lines[:-1], last[: max(1, len(last) // 2)]])


def ran_on(text: str) -> str:
    """The copy ran past the message and stopped in the middle of the next line."""
    tail = "INFO 06-01 10:00:30 [launcher.py:80] Shutting down FastAPI HTTP server."
    return text.rstrip("\n") + "\n" + tail[:31]


TRANSFORMS = {
    "wrap80": lambda t: hard_wrap(t, 80),
    "wrap60": lambda t: hard_wrap(t, 60),
    "quoted": quoted,
    "fenced": fenced,
    "crlf": crlf,
    "flattened": flattened,
    "stripped": stripped,
    "cut": cut_mid_line,
    "ran-on": ran_on,
    "quoted+wrap80": lambda t: quoted(hard_wrap(t, 80)),
}

# -- logs -----------------------------------------------------------------------------------------------------
# Small synthetic logs in the shapes vLLM prints (no user's log is copied here). Each ends with a line after
# the key message, so that cutting the paste mid-line never cuts the message itself.

LOGS: dict[str, dict[str, Any]] = {
    "kv-cache-too-small-v1": {
        "rule": "kv-cache-too-small",
        "facts": {"max_model_len": 131072, "required_gib": 16.0, "available_gib": 4.62,
                  "estimated_max_model_len": 37840},
        "text": """\
INFO 06-01 10:00:00 [core.py:69] Initializing a V1 LLM engine (v0.10.0) with config: model='org/model-8b', max_seq_len=131072, tensor_parallel_size=1
(EngineCore_0 pid=4100) INFO 06-01 10:00:20 [gpu_worker.py:276] Available KV cache memory: 4.62 GiB
(EngineCore_0 pid=4100) ERROR 06-01 10:00:21 [core.py:586] EngineCore failed to start.
(EngineCore_0 pid=4100) ERROR 06-01 10:00:21 [core.py:586] Traceback (most recent call last):
(EngineCore_0 pid=4100) ERROR 06-01 10:00:21 [core.py:586]   File "/usr/lib/python3/vllm/v1/core/kv_cache_utils.py", line 612, in check_enough_kv_cache_memory
(EngineCore_0 pid=4100) ERROR 06-01 10:00:21 [core.py:586]     raise ValueError(
(EngineCore_0 pid=4100) ERROR 06-01 10:00:21 [core.py:586] ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (4.62 GiB). Based on the available memory, the estimated maximum model length is 37840. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
""",
    },
    "gpu-memory-in-use-v1": {
        "rule": "gpu-memory-in-use",
        "facts": {"gpu_free_gib": 30.52, "gpu_total_gib": 79.19, "gpu_memory_utilization": 0.9,
                  "requested_gib": 71.27},
        "text": """\
(EngineCore_0 pid=5100) INFO 06-01 11:00:00 [parallel_state.py:1000] rank 0 in world size 1 is assigned as DP rank 0
(EngineCore_0 pid=5100) ERROR 06-01 11:00:02 [core.py:700] EngineCore failed to start.
(EngineCore_0 pid=5100) ERROR 06-01 11:00:02 [core.py:700] Traceback (most recent call last):
(EngineCore_0 pid=5100) ERROR 06-01 11:00:02 [core.py:700]   File "/usr/lib/python3/vllm/v1/worker/gpu_worker.py", line 180, in init_device
(EngineCore_0 pid=5100) ERROR 06-01 11:00:02 [core.py:700]     raise ValueError(
(EngineCore_0 pid=5100) ERROR 06-01 11:00:02 [core.py:700] ValueError: Free memory on device (30.52/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
(APIServer pid=5000) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
""",
    },
    "weights-oom-v1": {
        "rule": "weights-oom",
        "facts": {"tried_to_allocate_gib": 0.875, "gpu_total_gib": 23.55},
        "text": """\
INFO 06-01 12:00:00 [gpu_model_runner.py:1800] Starting to load model org/model-32b...
(VllmWorker rank=0 pid=6101) ERROR 06-01 12:00:09 [multiproc_executor.py:470] WorkerProc hit an exception.
(VllmWorker rank=0 pid=6101) ERROR 06-01 12:00:09 [multiproc_executor.py:470] Traceback (most recent call last):
(VllmWorker rank=0 pid=6101) ERROR 06-01 12:00:09 [multiproc_executor.py:470]   File "/usr/lib/python3/vllm/model_executor/model_loader/default_loader.py", line 260, in load_weights
(VllmWorker rank=0 pid=6101) ERROR 06-01 12:00:09 [multiproc_executor.py:470]     param.data.copy_(loaded)
(VllmWorker rank=0 pid=6101) ERROR 06-01 12:00:09 [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 22.98 GiB memory in use. Of the allocated memory 22.40 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
(VllmWorker rank=0 pid=6101) ERROR 06-01 12:00:09 [multiproc_executor.py:470] See documentation for Memory Management.
""",
    },
    "tp-divisibility": {
        "rule": "tp-divisibility",
        "facts": {"num_attention_heads": 40, "tensor_parallel_size": 16},
        "text": """\
INFO 06-01 13:00:00 [utils.py:326] non-default args: {'model': 'org/model-14b', 'tensor_parallel_size': 16}
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, Total number of attention heads (40) must be divisible by tensor parallel size (16). [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.11/v/value_error
""",
    },
    "prompt-too-long-v0": {
        "rule": "prompt-too-long",
        "facts": {"prompt_tokens": 35000, "limit_tokens": 32768},
        "text": """\
INFO 06-01 14:00:00 api_server.py:212] Starting vLLM API server on http://0.0.0.0:8000
INFO 06-01 14:00:10 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 3.1%, CPU KV cache usage: 0.0%.
WARNING 06-01 14:00:11 scheduler.py:949] Input prompt (35000 tokens) is too long and exceeds limit of 32768
INFO 06-01 14:00:11 async_llm_engine.py:179] Finished request cmpl-0001.
""",
    },
    "unrecognized-argument": {
        "rule": "unrecognized-argument",
        "facts": {"bad_argument": "--max_model_len", "bad_arguments": "--max_model_len 4096"},
        "text": """\
usage: vllm serve [-h] [--model MODEL] [--max-model-len MAX_MODEL_LEN] [model_tag]
vllm serve: error: unrecognized arguments: --max_model_len 4096
""",
    },
    "max-model-len-exceeds-model": {
        "rule": "max-model-len-exceeds-model",
        "facts": {"max_model_len": 65536, "derived_max_model_len": 32768},
        "text": """\
INFO 06-01 15:00:00 [utils.py:326] non-default args: {'model': 'org/model-7b', 'max_model_len': 65536}
ERROR 06-01 15:00:01 [serve.py:50] ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len (max_position_embeddings=32768 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.
INFO 06-01 15:00:01 [launcher.py:80] Shutting down FastAPI HTTP server.
""",
    },
    "no-cache-blocks-v1": {
        "rule": "no-cache-blocks",
        "facts": {},
        "text": """\
INFO 06-01 16:00:00 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: model='org/model-70b', max_seq_len=8192
(EngineCore_0 pid=7100) INFO 06-01 16:00:30 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB
(EngineCore_0 pid=7100) ERROR 06-01 16:00:30 [core.py:586] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
(EngineCore_0 pid=7100) ERROR 06-01 16:00:30 [core.py:586] EngineCore failed to start.
""",
    },
}


def _load_fixture_logs() -> dict[str, dict[str, Any]]:
    """fixtures/expected.yaml, when present: file -> primary rule and the numbers it must report."""
    path = FIXTURES / "expected.yaml"
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return {}
    entries = data.items() if isinstance(data, dict) else (
        (e.get("file") or e.get("log") or e.get("name"), e) for e in data if isinstance(e, dict))
    out: dict[str, dict[str, Any]] = {}
    for name, spec in entries:
        if not name or not isinstance(spec, dict):
            continue
        log = FIXTURES / name
        if not log.suffix:
            log = log.with_suffix(".log")
        rule = spec.get("rule") or spec.get("primary") or spec.get("class")
        if not log.exists() or not rule or rule in ("healthy", "other"):
            continue
        facts = spec.get("facts") or {}
        out[f"fixture:{log.name}"] = {
            "rule": rule,
            "facts": {k: v for k, v in facts.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            "text": log.read_text(encoding="utf-8", errors="replace"),
        }
    return out


ALL_LOGS = {**LOGS, **_load_fixture_logs()}

# -- checks ---------------------------------------------------------------------------------------------------


def _close(want: Any, got: Any) -> bool:
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(want), float(got), rel_tol=0.011, abs_tol=0.011)
    return want == got


@functools.cache
def _diagnose(text: str):
    report = diagnose_text(text)
    assert report.findings, "no finding at all"
    return report.findings[0], report.context.as_dict()


def _number(finding, context: dict[str, Any], key: str) -> Any:
    """A key number as the report gives it: in the finding's facts, else in the log's context."""
    value = finding.facts.get(key)
    return value if value is not None else context.get(key)


@pytest.mark.parametrize("name", sorted(ALL_LOGS))
def test_original_log_is_diagnosed(name):
    spec = ALL_LOGS[name]
    finding, context = _diagnose(spec["text"])
    assert finding.rule.id == spec["rule"]
    if name.startswith("fixture:"):
        return  # the fixtures' numbers are the rules' tests; here they are the reference for the pastes
    for key, want in spec["facts"].items():
        assert _close(want, _number(finding, context, key)), (key, _number(finding, context, key))


PASTE_PAIRS = sample(sorted(ALL_LOGS), sorted(TRANSFORMS), per_row=3)


@pytest.mark.parametrize(("name", "transform"), PASTE_PAIRS, ids=[f"{n}-{t}" for n, t in PASTE_PAIRS])
def test_pasted_log_gives_the_same_answer(name, transform):
    spec = ALL_LOGS[name]
    base, base_ctx = _diagnose(spec["text"])
    last_line = spec["text"].rstrip("\n").count("\n") + 1
    if transform == "cut" and base.end_line >= last_line:
        pytest.skip("the last line is the message itself: a paste cut inside it cannot give the same answer")
    if transform == "flattened" and "wrapped" in name:
        pytest.skip("flattening an already wrapped paste turns each cut into a space: '407 04' is two numbers")
    if transform == "flattened" and name.endswith((".prom", ".txt")):
        pytest.skip("a Prometheus exposition flattened onto one line: not a shape a scrape is shared in")
    if transform.startswith(("wrap", "quoted+wrap")) and len(spec["text"]) > 100_000:
        pytest.skip("hours of stats lines are a file, not a paste through a terminal window")
    finding, context = _diagnose(TRANSFORMS[transform](spec["text"]))
    assert finding.rule.id == base.rule.id == spec["rule"], (transform, finding.rule.id)
    for key, want in spec["facts"].items():
        if not _close(want, _number(base, base_ctx, key)):
            continue  # a number the intact log does not yield either: not a paste problem
        got = _number(finding, context, key)
        assert _close(want, got), f"{transform}: {key} = {got!r}, want {want!r}"


def test_number_split_by_a_wrap_is_rejoined():
    text = ("ValueError: To serve at least one request with the model's max seq len (1310\n"
            "72), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (4.\n"
            "62 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing.\n")
    finding, _ = _diagnose(text)
    assert finding.rule.id == "kv-cache-too-small"
    assert finding.facts["max_model_len"] == 131072
    assert _close(4.62, finding.facts["available_gib"])


def test_word_split_by_a_wrap_still_matches():
    text = ("ValueError: Total number of attention heads (64) must be divis\n"
            "ible by tensor parallel size (3).\n")
    finding, _ = _diagnose(text)
    assert finding.rule.id == "tp-divisibility"
    assert (finding.facts["num_attention_heads"], finding.facts["tensor_parallel_size"]) == (64, 3)


def test_equally_wide_lines_before_a_shell_message_are_not_a_wrap():
    # idle stats lines are all one width; the shell's line after the last one is its own record, not a piece
    stats = ("(APIServer pid=1) INFO 07-16 14:20:{:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 "
             "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache "
             "usage: 0.0%, Prefix cache hit rate: 0.0%\n")
    text = ("(APIServer pid=1) INFO 07-16 14:19:56 [api_server.py:1880] Starting vLLM API server 0 on "
            "http://0.0.0.0:8000\n" + stats.format(6) + "INFO:     10.0.5.26:31496 - \"GET /health HTTP/1.1\" 200 OK\n"
            + stats.format(16) + "Segmentation fault (core dumped)\n")
    finding, _ = _diagnose(text)
    assert finding.rule.id == "process-crashed"


def test_chatter_around_a_fence_is_not_a_finding():
    text = fenced("INFO 06-01 14:00:00 api_server.py:212] Starting vLLM API server on http://0.0.0.0:8000\n")
    assert not [f for f in diagnose_text(text).findings if f.severity in ("error", "warning")]
