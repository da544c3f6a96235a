"""The installed command as a user runs it: exit codes, formats, stdin, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KV_ERROR = ("(EngineCore_DP0 pid=7) ERROR 11-24 11:44:20 [core.py:708] ValueError: To serve at least one request with "
            "the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV "
            "cache memory (4.62 GiB). Based on the available memory, the estimated maximum model length is 37840. Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
PREEMPT = ("WARNING 05-19 10:13:11 scheduler.py:1560] Sequence group 3 is preempted by PreemptionMode.RECOMPUTE mode "
           "because there is not enough KV cache space. This can affect the end-to-end performance. "
           "total_num_cumulative_preemption=1\n")
HEALTHY = "INFO 11-24 11:45:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"


def doctor(*args: str, stdin: bytes | None = None, cwd: Path | None = None, env: dict | None = None):
    """Run the doctor as a subprocess (the installed script when present, else python -m diagnoser)."""
    exe = shutil.which("vllm-doctor")
    cmd = [exe] if exe else [sys.executable, "-m", "diagnoser"]
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    full_env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(cmd + list(args), input=stdin, capture_output=True, cwd=cwd, env=full_env, timeout=60)


@pytest.fixture
def logs(tmp_path):
    out = {}
    for name, text in (("kv.log", KV_ERROR), ("pre.log", PREEMPT), ("ok.log", HEALTHY)):
        (tmp_path / name).write_text(text)
        out[name] = tmp_path / name
    return out


def test_error_finding_exits_1_and_text_has_the_fix(logs):
    r = doctor(str(logs["kv.log"]))
    assert r.returncode == 1
    out = r.stdout.decode()
    assert "kv-cache-too-small" in out and "stage: startup" in out
    assert "--max-model-len 36864" in out and "\x1b[" not in out


def test_json_contract(logs):
    r = doctor("--format", "json", str(logs["kv.log"]))
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    assert doc["tool"]["name"] == "vllm-doctor" and doc["tool"]["version"]
    assert doc["input"] == {"path": str(logs["kv.log"]), "lines": 1, "bytes": len(KV_ERROR)}
    f = doc["findings"][0]
    for key in ("rule", "title", "severity", "stage", "line", "end_line", "evidence", "facts", "advice", "fixes",
                "command"):
        assert key in f
    assert (f["rule"], f["severity"], f["stage"], f["line"]) == ("kv-cache-too-small", "error", "startup", 1)
    assert f["facts"]["max_model_len"] == 131072 and f["facts"]["required_gib"] == 16.0
    assert f["facts"]["available_gib"] == 4.62 and f["facts"]["estimated_max_model_len"] == 37840
    assert f["fixes"][0] == {"flag": "--max-model-len", "value": "36864",
                             "reason": "the largest length (multiple of 1024) whose KV cache fits in 4.62 GiB"}
    assert doc["summary"] == {"error": 1, "warning": 0, "info": 0}


def test_warning_only_exits_0_by_default_and_1_with_fail_on_warning(logs):
    assert doctor(str(logs["pre.log"])).returncode == 0
    assert doctor("--fail-on", "warning", str(logs["pre.log"])).returncode == 1
    assert doctor("--fail-on", "warning", "--exit-zero", str(logs["pre.log"])).returncode == 0


def test_healthy_exits_0(logs):
    r = doctor(str(logs["ok.log"]))
    assert r.returncode == 0 and b"no problems found" in r.stdout


def test_stdin_pipe_and_dash(logs):
    data = logs["kv.log"].read_bytes()
    assert doctor(stdin=data).returncode == 1
    assert doctor("-", stdin=data).returncode == 1
    assert doctor("-", "--format", "json", stdin=b"").returncode == 0


def test_several_files_each_reported(logs):
    doc = json.loads(doctor("--format", "json", str(logs["kv.log"]), str(logs["ok.log"])).stdout)
    assert [d["input"]["path"] for d in doc] == [str(logs["kv.log"]), str(logs["ok.log"])]


@pytest.mark.parametrize("args, needle", [
    (("/no/such/file.log",), "/no/such/file.log"),
    (("--bogus-flag", "x.log"), "--bogus-flag"),
    (("--format", "yaml", "x.log"), "yaml"),
    (("explain", "kv-cache-too-smal"), "kv-cache-too-small"),
])
def test_user_errors_are_one_line_and_exit_2(args, needle):
    r = doctor(*args)
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and needle in err


def test_bad_rule_file_names_file_and_key(tmp_path, logs):
    bad = tmp_path / "my-rule.yaml"
    bad.write_text("id: my-rule\ntitle: t\nseverity: fatal\n")
    r = doctor("--rules", str(bad), str(logs["kv.log"]))
    err = r.stderr.decode().strip()
    assert r.returncode == 2 and str(bad) in err and "severity" in err and len(err.splitlines()) == 1


def test_rules_and_explain():
    r = doctor("rules")
    assert r.returncode == 0
    ids = [line.split()[0] for line in r.stdout.decode().splitlines()]
    assert {"kv-cache-too-small", "weights-oom", "warmup-oom", "no-cache-blocks", "preemption"} <= set(ids)
    page = doctor("explain", "warmup-oom").stdout.decode()
    assert "warmup-oom" in page and "lower --gpu-memory-utilization" in page


def test_runs_from_outside_the_source_tree(tmp_path, logs):
    r = doctor(str(logs["kv.log"]), cwd=tmp_path, env={"PYTHONPATH": ""})
    assert r.returncode == 1 and b"kv-cache-too-small" in r.stdout


def test_python_m_diagnoser_works(logs):
    r = subprocess.run([sys.executable, "-m", "diagnoser", "--format", "json", str(logs["kv.log"])],
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and json.loads(r.stdout)["findings"][0]["rule"] == "kv-cache-too-small"


def test_output_file(tmp_path, logs):
    out = tmp_path / "report.json"
    r = doctor("--format", "json", "-o", str(out), str(logs["kv.log"]))
    assert r.returncode == 1 and r.stdout == b""
    assert json.loads(out.read_text())["findings"][0]["rule"] == "kv-cache-too-small"


def test_binary_and_huge_garbage_never_crash(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(b for b in range(256) if b != 10) * 4096 + b"\n" + b"\xff" * 300000)
    r = doctor("--format", "json", str(junk))
    assert r.returncode == 0 and json.loads(r.stdout)["input"]["lines"] == 2


def test_live_mode_announces_on_stderr_as_it_reads(logs):
    r = doctor("--live", str(logs["kv.log"]))
    err = r.stderr.decode()
    assert r.returncode == 1 and "line 1: error [kv-cache-too-small]" in err
    assert err.count("kv-cache-too-small") == 1


def test_help_lists_each_command_with_the_first_line_of_its_own_help():
    """`--help` lists the commands from LAZY_COMMANDS without importing them: each one-liner there must be the
    command's own, or the listing drifts from `vllm-doctor COMMAND --help`."""
    import click

    from diagnoser.cli.main import LAZY_COMMANDS, main

    ctx = click.Context(main)
    for name, (_module, _attr, short) in LAZY_COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(limit=1000) == click.Command(name, help=short).get_short_help_str(limit=1000)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_command(flag):
    """`--help` and `--version` load the group alone: no command module, no rule machinery, no planner."""
    code = ("import sys\nfrom diagnoser.cli.main import run\nsys.argv = ['vllm-doctor', sys.argv[1]]\ncode = 0\n"
            "try:\n    run()\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print(code, sorted(m for m in sys.modules if m.startswith(('diagnoser.cli.', 'diagnoser.rules', "
            "'diagnoser.plan', 'diagnoser.analysis'))), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, timeout=60)
    assert proc.stderr.strip() == "0 ['diagnoser.cli.main']"
    assert ("Commands:" in proc.stdout) if flag == "--help" else proc.stdout.startswith("vllm-doctor, version ")


def _closed_stdin(*args: str) -> subprocess.CompletedProcess:
    """The doctor started with stdin closed (`vllm-doctor ARGS <&-`); a hang fails on the timeout."""
    exe = shutil.which("vllm-doctor")
    cmd = [exe] if exe else [sys.executable, "-m", "diagnoser"]
    return subprocess.run([*cmd, *args], capture_output=True, timeout=60,
                          preexec_fn=lambda: os.close(0), env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.parametrize("args", [(), ("-",), ("diagnose", "--until", "ready"), ("diagnose", "--tee"), ("check",)])
def test_closed_stdin_is_a_one_line_usage_error(args):
    res = _closed_stdin(*args)
    err = res.stderr.decode()
    assert res.returncode == 2 and res.stdout == b""
    assert err.splitlines() == ["vllm-doctor: error: stdin is closed: give a log FILE, or pipe the log in "
                                "(`vllm serve ... 2>&1 | vllm-doctor`)"], err


def test_follow_stdin_is_a_one_line_usage_error_open_or_closed():
    for res in (_closed_stdin("diagnose", "--follow", "-"), doctor("diagnose", "--follow", "-", stdin=b"x\n")):
        err = res.stderr.decode()
        assert res.returncode == 2 and len(err.splitlines()) == 1 and "--follow reads a file" in err, err


def test_closed_stdin_does_not_stop_a_file_from_being_read(logs):
    res = _closed_stdin(str(logs["kv.log"]), "--format", "json")
    assert res.returncode == 1 and json.loads(res.stdout)["findings"][0]["rule"] == "kv-cache-too-small"
