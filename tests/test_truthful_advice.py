"""Every subcommand tells the truth (issue 28): advice that does not contradict itself or the log."""

from __future__ import annotations

import json
import re

import pytest

from diagnoser.analysis.pipeline import diagnose

from .conftest import FIXTURES
from .test_cli import doctor


def run(name: str):
    with open(FIXTURES / name, "rb") as fh:
        return diagnose(fh, name)


def finding(name: str, rule: str):
    return next(f for f in run(name).findings if f.rule.id == rule)


def text_of(name: str) -> str:
    return doctor(str(FIXTURES / name)).stdout.decode()


def section(out: str, rule: str) -> str:
    """The text report's block of one finding (from its head line to the next numbered finding)."""
    m = re.search(rf"^\d+\. \w+ \[{re.escape(rule)}\].*?(?=^\d+\. |\Z|^\d+ error\(s\))", out, re.M | re.S)
    assert m, out[:2000]
    return m.group(0)


# -- item 6: the preemption text's times and counts agree -----------------------------------------------------

def test_preemption_text_names_the_window_not_a_zero_length_span():
    f = finding("serving-v1-dp2-0.10.log", "preemption")
    first = f.advice.split("\n")[0]
    spans = re.findall(r"from (\d\d-\d\d \d\d:\d\d:\d\d) to (\d\d-\d\d \d\d:\d\d:\d\d)", f.advice)
    assert spans and all(a != b for a, b in spans), f.advice
    assert "stats interval" not in first, first
    assert "05-19 09:21:10" in first and "05-19 09:31:00" in first, first


# -- item 7: compare tells a crash while serving from a failed start ---------------------------------------------

def test_compare_says_the_after_log_started_then_died_while_serving():
    r = doctor("compare", str(FIXTURES / "healthy-v1-0.10.log"), str(FIXTURES / "engine-dead-worker-killed-0.11.log"))
    out = r.stdout.decode()
    assert "failed to start" not in out, out[-1500:]
    assert "while serving" in out
    assert "10-20 22:27:44" in out and "line 59" in out and "engine-dead" in out
    doc = json.loads(doctor("compare", "--format", "json", str(FIXTURES / "healthy-v1-0.10.log"),
                            str(FIXTURES / "engine-dead-worker-killed-0.11.log")).stdout)
    assert "failed to start" not in json.dumps(doc)


# -- item 8: one failure, one error ----------------------------------------------------------------------

@pytest.mark.parametrize("name, rule", [("unrecognized-failure-nccl-0.6.log", "shared-memory-too-small"),
                                        ("unrecognized-failure-importerror-0.8.log", "build-mismatch")])
def test_one_root_cause_is_one_error(name, rule):
    report = run(name)
    errors = [f.rule.id for f in report.findings if f.severity == "error"]
    assert errors == [rule], errors
    assert report.counts()["error"] == 1


# -- item 9: no "not a change to the command line" after advice that changes a flag ------------------------------

@pytest.mark.parametrize("name", ["no-cache-blocks-v1-0.8.5.log", "unrecognized-argument-underscore-0.4.log"])
def test_no_false_note_after_flag_advice(name):
    out = text_of(name)
    assert "the fix is not a change to the command line" not in out, out


# -- item 10: prefix caching is not suggested when it is on -------------------------------------------------

def test_preemption_does_not_suggest_prefix_caching_that_is_on():
    assert "--enable-prefix-caching" not in finding("preemption-v1-0.12.log", "preemption").advice
    # V0 0.5 left it off by default: there the suggestion stands
    assert "--enable-prefix-caching" in finding("preemption-v0-0.5.log", "preemption").advice


# -- item 11: a launch the log's release understands --------------------------------------------------------

def test_command_for_a_release_before_vllm_serve_uses_the_api_server_module():
    f = finding("preemption-v0-swap-0.4-crlf.log", "preemption")
    assert f.command.startswith("python -m vllm.entrypoints.openai.api_server --model mistralai/Mistral-7B-Instruct-v0.2 "), f.command
    assert "vllm serve" not in f.command
    # the argument fix of a server started as api_server.py is written the same way
    adv = finding("unrecognized-argument-underscore-0.4.log", "unrecognized-argument").advice
    assert "`python -m vllm.entrypoints.openai.api_server --model TheBloke/Mistral-7B-Instruct-v0.2-AWQ " \
           "--max-model-len 4096 --gpu-memory-utilization 0.85`" in adv, adv
    # a release with `vllm serve` keeps it
    assert finding("preemption-v1-0.12.log", "preemption").command.startswith("vllm serve ")


# -- item 12: --enforce-eager after a kernel crash is a diagnostic step, and says so -------------------------------

def test_illegal_memory_access_command_is_labelled_a_diagnostic_step():
    name = "illegal-memory-access-serving-specdec-0.10.log"
    block = section(text_of(name), "illegal-memory-access")
    cmd_lines = [ln for ln in block.splitlines() if "--enforce-eager" in ln and "vllm serve" in ln]
    assert cmd_lines, block
    assert not any(ln.strip().startswith("run:") for ln in cmd_lines), cmd_lines
    assert all("diagnostic" in ln for ln in cmd_lines), cmd_lines
    f = finding(name, "illegal-memory-access")
    assert "throughput" in f.advice and re.search(r"[Ii]f it (still|no longer) crash", f.advice), f.advice
    assert f.fixes[0]["flag"] == "--enforce-eager" and f.fixes[0].get("diagnostic") is True


# -- item 13: error-burst shows the failing requests --------------------------------------------------------

def test_error_burst_evidence_is_the_failing_access_lines():
    f = finding("serving-v1-0.12-3h.log", "error-burst")
    assert f.evidence
    for ln in f.evidence:
        assert re.search(r'" (5\d\d|429) ', ln.text), ln.text


def test_error_burst_html_windows_table_has_status_codes():
    html = doctor("--format", "html", str(FIXTURES / "serving-v1-0.12-3h.log")).stdout.decode()
    card = html.split("<code>error-burst</code>")[-1].split('<div class="card finding"')[0]
    table = re.search(r"<h3>Windows.*?</table>", card, re.S)
    assert table, card[:1500]
    heads = re.findall(r"<th>(.*?)</th>", table.group(0))
    assert "peak KV %" not in heads and "preemptions" not in heads, heads
    assert "503" in heads and "500" in heads and "failed" in heads, heads


# -- item 15: TP from the process tags ---------------------------------------------------------------------

def test_worker_process_tags_mean_tensor_parallel_even_without_the_args_line():
    report = run("preemption-v0-tp2-no-args-0.6.log")
    assert report.context.tensor_parallel_size == 2
    f = next(f for f in report.findings if f.rule.id == "preemption")
    assert "--tensor-parallel-size 2 " not in f.advice and "--tensor-parallel-size 4" in f.advice, f.advice


def test_v1_worker_tp_tags_mean_tensor_parallel():
    lines = ("(Worker_TP0 pid=311) INFO 11-02 09:12:01 [gpu_model_runner.py:2602] Model loading took 7.4 GiB\n"
             "(Worker_TP1 pid=312) INFO 11-02 09:12:01 [gpu_model_runner.py:2602] Model loading took 7.4 GiB\n"
             "(Worker_TP3 pid=314) INFO 11-02 09:12:01 [gpu_model_runner.py:2602] Model loading took 7.4 GiB\n")
    import io

    report = diagnose(io.BytesIO(lines.encode()), "tp.log")
    assert report.context.tensor_parallel_size == 4
