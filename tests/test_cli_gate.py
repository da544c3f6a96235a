"""Issue 17 output polish: the gate ignores context, --color forces colour, --config-file must exist."""

from __future__ import annotations

import subprocess
import sys

from .conftest import FIXTURES

HEALTHY = str(FIXTURES / "healthy-v1-0.10.log")
FAILING = str(FIXTURES / "example-kv-cache-too-small.log")


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_fail_on_info_passes_a_healthy_log_and_keeps_the_summary_in_the_report():
    out = doctor("--fail-on", "info", HEALTHY)
    assert out.returncode == 0, out.stdout
    assert "startup-summary" in out.stdout and "0 error(s), 0 warning(s), 0 info" in out.stdout


def test_color_is_forced_into_a_pipe_and_off_by_default():
    assert "\x1b[" in doctor("--color", FAILING).stdout
    assert "\x1b[" not in doctor(FAILING).stdout


def test_a_missing_config_file_is_a_usage_error():
    out = doctor("--config-file", "/nonexistent/vllm.yaml", HEALTHY)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "/nonexistent/vllm.yaml" in out.stderr


def test_unknown_running_and_waiting_counts_are_omitted_not_zero():
    from diagnoser.analysis.pipeline import diagnose_text

    log = ("WARNING 05-19 10:00:11 scheduler.py:1560] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode "
           "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
           "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
           "total_num_cumulative_preemption=1\n")
    f = diagnose_text(log).findings[0]
    assert f.rule.id == "preemption"
    for name in ("max_running_reqs", "max_waiting_reqs", "peak_kv_usage_pct"):
        assert f.facts.get(name) is None, name
    assert "with 0 running" not in f.advice


def test_the_numbers_line_shows_what_the_log_printed_in_words():
    out = doctor(FAILING).stdout
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("numbers:"))
    assert "max model len 131,072" in line and "available 4.62 GiB" in line
    for internal in ("util_now", "next_tp", "fit_len", "hits", "first_line", "_gib"):
        assert internal not in line, internal
    import json
    facts = json.loads(doctor("--format", "json", FAILING).stdout)["findings"][0]["facts"]
    assert facts["fit_len"] == 36864 and "next_tp" in facts     # internals stay in the JSON
