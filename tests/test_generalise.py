"""Issue 25: right on logs it has never seen, honest where it cannot know.

Fragments (the lines users paste into a prompt) get the full log's answer or "stage unknown" with the fix for
each stage and the lines that would decide it; a dead server always gets an error finding; a healthy one that
was shut down never does; a failure no rule knows by its words is named by the component its frames point at.
The logs are the project's own fixtures and development corpus (fixtures/corpus/dev), cut the way users cut.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser.analysis.pipeline import Report, diagnose_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
DEV = FIXTURES / "corpus" / "dev"


def lines(path: Path, first: int, last: int) -> str:
    """`sed -n FIRST,LASTp PATH` (newline-separated lines, as sed counts them)."""
    with path.open(encoding="utf-8", newline="") as fh:
        return "".join(piece + "\n" for piece in fh.read().split("\n")[first - 1:last])


def first(report: Report):
    assert report.findings, "no finding"
    return report.findings[0]


def serious(report: Report) -> list:
    return [f for f in report.findings if f.severity in ("error", "warning")]


def exit_code(text: str) -> int:
    return subprocess.run([sys.executable, "-m", "diagnoser", "-"], input=text.encode(), capture_output=True,
                          cwd=ROOT, timeout=60).returncode


# --- fragments -----------------------------------------------------------------------------------------------

def test_a_graph_capture_fragment_is_warmup_or_stage_unknown_never_a_weights_oom():
    """`sed -n 120,137p fixtures/warmup-oom-cudagraph-0.10.log`: frames in vllm/compilation/cuda_graph.py."""
    f = first(diagnose_text(lines(FIXTURES / "warmup-oom-cudagraph-0.10.log", 120, 137)))
    assert f.rule.id != "weights-oom"
    assert "is not the problem" not in f.advice
    if f.rule.id == "warmup-oom":
        assert f.stage == "warmup"
        assert "--gpu-memory-utilization" in f.advice
    else:
        assert (f.rule.id, f.stage) == ("oom-stage-unknown", None)
        assert "stage unknown" in f.advice and "--max-num-seqs" in f.advice and "--tensor-parallel-size" in f.advice


def test_a_sampler_fragment_is_serving_or_stage_unknown_with_both_fixes():
    """`sed -n 15,18p fixtures/serving-oom-sampler-v1-0.10.log`: frames in v1/sample/sampler.py only."""
    f = first(diagnose_text(lines(FIXTURES / "serving-oom-sampler-v1-0.10.log", 15, 18)))
    assert f.rule.id in ("serving-oom", "oom-stage-unknown")
    if f.rule.id == "oom-stage-unknown":
        assert f.stage is None
        assert "stage unknown" in f.advice
        # the warm-up fix and the serving fix, and the lines that decide between them
        assert "warming up the sampler" in f.advice and "While serving" in f.advice
        assert "Traceback (most recent call last)" in f.advice
    assert f.facts["tried_to_allocate_gib"] == pytest.approx(1.96)


WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"


@pytest.mark.parametrize("text", [
    WRAPPER,
    "(APIServer pid=88) " + WRAPPER,
    (DEV / "api-wrapper-only-paste-0.10.log").read_text(encoding="utf-8"),
], ids=["line alone", "with its prefix", "with its traceback"])
def test_the_api_server_wrapper_alone_is_a_failure_asking_for_the_enginecore_lines(text: str):
    f = first(diagnose_text(text))
    assert (f.rule.id, f.severity, f.stage) == ("engine-start-failed", "error", None)
    assert "EngineCore" in f.advice and "Traceback (most recent call last):" in f.advice
    assert exit_code(text) == 1


def test_the_wrapper_gives_way_to_the_cause_when_the_log_has_it():
    log = (DEV / "warmup-oom-profile-run-inductor-0.14.log").read_text(encoding="utf-8")
    ids = [f.rule.id for f in diagnose_text(log).findings]
    assert ids[0] == "warmup-oom" and "engine-start-failed" not in ids


KEYERROR_PASTE = (
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/qwen3_moe.py", line 512, in load_weights\n'
    "    param = params_dict[name]\n"
    "            ~~~~~~~~~~~^^^^^^\n"
    "KeyError: 'model.layers.0.mlp.experts.w13_weight'\n"
)


def test_a_four_line_keyerror_paste_is_a_loading_failure_not_profiling():
    f = first(diagnose_text(KEYERROR_PASTE))
    assert f.stage == "loading"
    assert "profiling memory" not in f.advice
    assert f.rule.id == "component-loading"
    assert "model.layers.0.mlp.experts.w13_weight" in f.advice


# --- dead servers are never silent ---------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "kill_line"), [
    ("host-oom-killed-loading-docker-0.11.log", "exited with code 137"),
    ("host-oom-killed-serving-journald-0.12.log", "Out of memory: Killed process"),
    ("host-oom-killed-offline-plain-killed-0.10.log", "Killed"),
])
def test_a_killed_server_is_an_error_that_shows_the_kill(name: str, kill_line: str):
    report = diagnose_text((DEV / name).read_text(encoding="utf-8"))
    f = first(report)
    assert f.severity == "error" and f.rule.id == "process-killed"
    assert any(kill_line in e.text for e in f.evidence)


@pytest.mark.parametrize(("name", "rule", "cause"), [
    ("engine-dead-scheduler-assert-under-load-0.12.log", "component-scheduler", "AssertionError: Encoder cache miss"),
    ("kv-connector-lmcache-retrieve-failed-0.11.log", "component-kv-transfer", "LMCache ERROR: Failed to retrieve"),
    ("spec-decode-ngram-propose-crash-serving-0.10.log", "component-spec-decode", "IndexError: index 4097"),
    ("structured-output-xgrammar-crash-0.10.log", "component-structured-output", "Check failed"),
    ("ipc-msgspec-decode-error-dp2-0.12.log", "component-ipc", "msgspec.ValidationError"),
])
def test_a_component_failure_after_ready_is_named_with_its_root_cause(name: str, rule: str, cause: str):
    f = first(diagnose_text((DEV / name).read_text(encoding="utf-8")))
    assert (f.rule.id, f.severity, f.stage) == (rule, "error", "serving")
    assert any(cause in e.text for e in f.evidence)


# --- healthy servers are never alarmed -------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "shutdown-sigterm-new-wording-engine-dead-echo-0.28.log",
    "shutdown-ctrl-c-0.10.log",
    "shutdown-sigterm-kubectl-0.12.log",
    "healthy-nixl-decode-0.11.log",
    "healthy-spec-decode-metrics-0.12.log",
])
def test_a_healthy_server_and_its_shutdown_raise_no_alarm(name: str):
    report = diagnose_text((DEV / name).read_text(encoding="utf-8"))
    assert serious(report) == [], [(f.rule.id, f.line) for f in serious(report)]


# --- failures no rule knows by their words: named by their frames -----------------------------------------------

@pytest.mark.parametrize(("text", "rule", "stage"), [
    # an exception whose words name nothing, raised in the KV connector's files while serving
    ("Traceback (most recent call last):\n"
     '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 720, in run_busy_loop\n'
     "    self._process_engine_step()\n"
     '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1/'
     'nixl_connector.py", line 1148, in get_finished\n'
     "    assert req_id in self._recving_metadata\n"
     "AssertionError\n", "component-kv-transfer", "serving"),
    ("Traceback (most recent call last):\n"
     '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/spec_decode/eagle.py", line 212, in propose\n'
     "    hidden_states = self.model(\n"
     "ValueError: too many values to unpack (expected 2)\n", "component-spec-decode", "serving"),
])
def test_a_failure_named_by_its_frames(text: str, rule: str, stage: str):
    f = first(diagnose_text(text))
    assert (f.rule.id, f.stage) == (rule, stage)


# --- no default stage ------------------------------------------------------------------------------------------
DIED = "(APIServer pid=1) ERROR 05-02 10:01:07 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, " \
       "shutting down client.\n"


def test_a_generic_message_of_a_multi_stage_rule_keeps_an_unknown_stage_unknown():
    """A paste of the death line alone does not say whether the engine died starting or serving: stage unknown,
    not the rule's first stage; the same line after the server became ready is a death while serving."""
    alone = first(diagnose_text(DIED))
    assert (alone.rule.id, alone.stage) == ("engine-dead", None)
    ready = "(APIServer pid=1) INFO 05-02 10:00:00 [api_server.py:1080] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    served = first(diagnose_text(ready + DIED))
    assert (served.rule.id, served.stage) == ("engine-dead", "serving")


def test_a_rules_specific_wording_still_names_its_stage_in_a_fragment():
    """vLLM's own words for the sampler warm-up name the stage: a fragment of them is warmup, not unknown."""
    text = ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
            "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n")
    found = first(diagnose_text(text))
    assert (found.rule.id, found.stage) == ("warmup-oom", "warmup")
