"""The GitHub Action (action.yml + scripts/action-run.sh) run locally with a fake runner environment, and the
pre-commit hook definition."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "action-run.sh"
LOGS = ROOT / "tests" / "data" / "logs"
GATE_RULES = ROOT / "tests" / "data" / "rules" / "gate"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _exe(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def runner(tmp_path):
    """A fake Actions runner: $GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY, $RUNNER_TEMP and the doctor command."""
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    doctor = _exe(tmp_path / "vllm-doctor", f'#!/bin/sh\nexec "{sys.executable}" -m diagnoser "$@"\n')
    # the same command with only the test gate rules (one per severity): counts that shipped rules cannot move
    pinned = _exe(tmp_path / "gate-doctor", f"""#!/bin/sh
exec "{sys.executable}" -c '
import sys
from pathlib import Path
from diagnoser.cli import files, main as cli
from diagnoser.rules.loader import load_rule_file
rules = tuple(load_rule_file(p) for p in sorted(Path(sys.argv[1]).glob("*.yaml")))
files.builtin_rules = lambda: rules
sys.argv = ["vllm-doctor", *sys.argv[2:]]
cli.run()
' "{GATE_RULES}" "$@"
""")

    def run(step: str, cwd: Path | None = None, **inputs: str) -> tuple[subprocess.CompletedProcess, dict, str]:
        out_file, summary = tmp_path / "github_output", tmp_path / "step_summary.md"
        for f in (out_file, summary):
            f.write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
        env.update({"GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_TEMP": str(temp),
                    "GITHUB_ACTIONS": "true", "GITHUB_ACTION_PATH": str(ROOT), "VLLM_DOCTOR_BIN": str(doctor),
                    "NO_COLOR": "1"})
        env.update(inputs)
        proc = subprocess.run(["bash", str(SCRIPT), step], capture_output=True, text=True, env=env,
                              cwd=cwd or tmp_path, timeout=300)
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
        return proc, outputs, summary.read_text()

    run.tmp = tmp_path
    run.pinned = str(pinned)
    return run


# -- action.yml -------------------------------------------------------------------------------------------

def test_action_yml_is_composite_with_inputs_through_env():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert {"log", "fail-on", "format", "version"} <= set(action["inputs"])
    assert action["inputs"]["log"]["required"] is True
    assert action["inputs"]["fail-on"]["default"] == "error"
    assert {"findings", "sarif"} <= set(action["outputs"])
    used = set()
    for step in action["runs"]["steps"]:
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], f"expression interpolated into run: {step['run']!r}"
        assert step["run"].startswith('bash "$GITHUB_ACTION_PATH/scripts/action-run.sh" ')
        for value in (step.get("env") or {}).values():
            used |= set(re.findall(r"inputs\.([\w-]+)", str(value)))
    assert used >= {"log", "fail-on", "format", "version"}
    assert "action-run.sh" in SCRIPT.name and os.access(SCRIPT, os.X_OK)


def test_pre_commit_hook_definition():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "vllm-doctor-plan")
    assert hook["entry"].startswith("vllm-doctor plan --check")
    assert hook["language"] == "python" and hook.get("pass_filenames", True)
    pattern = re.compile(hook["files"])
    for name in ("deploy/serve-vllm.sh", "vllm.yaml", "configs/vllm-llama.yml"):
        assert pattern.search(name), name
    for name in ("README.md", "src/app.py", "docker-compose.yml"):
        assert not pattern.search(name), name


# -- the run step -----------------------------------------------------------------------------------------

def test_run_error_log_writes_outputs_annotations_summary_and_sarif(runner):
    proc, out, summary = runner("run", INPUT_LOG=str(LOGS / "kv-cache-secrets.log"), INPUT_FAIL_ON="error",
                                INPUT_FORMAT="github")
    assert proc.returncode == 0, proc.stderr
    assert int(out["findings"]) >= 1 and int(out["errors"]) >= 1
    assert out["exit-code"] == "1"
    sarif = Path(out["sarif"])
    assert sarif.parent == runner.tmp / "runner-temp" and json.loads(sarif.read_text())["version"] == "2.1.0"
    assert re.search(r"^::error file=[^\n]*kv-cache-secrets\.log,line=20,", proc.stdout, re.M)
    assert "::stop-commands::" in proc.stdout
    assert "kv-cache-too-small" in summary and "--max-model-len 36864" in summary
    assert summary.count("# vllm-doctor:") == 1  # the summary is written once


def test_gate_fails_on_exit_code_1_and_passes_on_0(runner):
    proc, _, _ = runner("gate", EXIT_CODE="1", FINDINGS="2", INPUT_FAIL_ON="warning")
    assert proc.returncode == 1 and "at or above --fail-on warning" in proc.stderr
    proc, _, _ = runner("gate", EXIT_CODE="0", INPUT_FAIL_ON="error")
    assert proc.returncode == 0
    proc, _, _ = runner("gate", EXIT_CODE="")
    assert proc.returncode == 2 and proc.stdout.startswith("::error ")


@pytest.mark.parametrize("log, fail_on, code, counts", [
    ("gate-clean", "error", "0", ("0", "0", "0", "0")),
    ("gate-clean", "info", "0", ("0", "0", "0", "0")),
    ("gate-error", "error", "1", ("1", "1", "0", "0")),
    ("gate-error", "never", "0", ("1", "1", "0", "0")),
    ("gate-warning", "error", "0", ("1", "0", "1", "0")),
    ("gate-warning", "warning", "1", ("1", "0", "1", "0")),
    ("gate-info", "warning", "0", ("1", "0", "0", "1")),
    ("gate-info", "info", "1", ("1", "0", "0", "1")),
])
def test_run_exit_code_output_follows_fail_on(runner, log, fail_on, code, counts):
    proc, out, _ = runner("run", INPUT_LOG=str(LOGS / f"{log}.log"), INPUT_FAIL_ON=fail_on,
                          VLLM_DOCTOR_BIN=runner.pinned)
    assert proc.returncode == 0, proc.stderr
    assert out["exit-code"] == code
    assert (out["findings"], out["errors"], out["warnings"], out["notices"]) == counts


def test_run_several_logs_custom_sarif_path_and_text_format(runner):
    logs = f"{LOGS / 'gate-error.log'}\n\n  \n{LOGS / 'gate-warning.log'}\n"
    target = runner.tmp / "reports" / "doctor.sarif"
    proc, out, summary = runner("run", INPUT_LOG=logs, INPUT_FORMAT="text", INPUT_SARIF=str(target),
                                VLLM_DOCTOR_BIN=runner.pinned)
    assert proc.returncode == 0, proc.stderr
    assert out["sarif"] == str(target) and target.exists()
    assert out["findings"] == "2" and out["exit-code"] == "1"
    assert "::error " not in proc.stdout and "1. ERROR [test-gate-error]" in proc.stdout
    assert summary.count("# vllm-doctor:") == 2  # the Markdown summary, for a non-github format too


def test_run_points_at_the_config_file(runner):
    conf = runner.tmp / "serve.sh"
    conf.write_text("#!/bin/sh\nvllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --max-model-len 131072\n")
    proc, out, _ = runner("run", INPUT_LOG=str(LOGS / "kv-cache-secrets.log"), INPUT_CONFIG_FILE=str(conf))
    assert proc.returncode == 0, proc.stderr
    assert "::error file=serve.sh,line=3," in proc.stdout  # relative to the working directory
    res = json.loads(Path(out["sarif"]).read_text())["runs"][0]["results"][0]
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 3


def test_run_secrets_stay_out_of_stdout_summary_and_sarif(runner):
    proc, out, summary = runner("run", INPUT_LOG=str(LOGS / "kv-cache-secrets.log"))
    everything = proc.stdout + proc.stderr + summary + Path(out["sarif"]).read_text()
    for secret in ("sk-proj-Zq3xT9vB2mN8kL4pR7sW1yH6", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890", "S3cretPass"):
        assert secret not in everything


@pytest.mark.parametrize("inputs, message", [
    ({"INPUT_LOG": ""}, "the log input is empty"),
    ({"INPUT_LOG": "/no/such/file.log"}, "log file not found"),
    ({"INPUT_FAIL_ON": "fatal"}, "fail-on must be"),
    ({"INPUT_FORMAT": "xml"}, "format must be"),
    ({"INPUT_CONFIG_FILE": "/no/such/serve.sh"}, "config-file not found"),
])
def test_run_rejects_bad_inputs_with_exit_2(runner, inputs, message):
    base = {"INPUT_LOG": str(LOGS / "healthy.log")}
    proc, out, _ = runner("run", **{**base, **inputs})
    assert proc.returncode == 2
    assert proc.stdout.startswith("::error title=vllm-doctor action::") and message in proc.stdout
    assert "exit-code" not in out


def test_an_input_cannot_write_step_outputs(runner):
    """The sarif path is echoed into $GITHUB_OUTPUT: a line break in it would set exit-code or findings."""
    proc, out, _ = runner("run", INPUT_LOG=str(LOGS / "healthy.log"),
                          INPUT_SARIF=str(runner.tmp / "r.sarif") + "\nexit-code=0\nfindings=0")
    assert proc.returncode == 2 and "sarif must be one path" in proc.stdout
    assert out == {}


def test_inputs_are_never_executed(runner):
    marker = runner.tmp / "pwned"
    hostile = f'x"; touch {marker}; echo "\n$(touch {marker})\n`touch {marker}`'
    for name in ("INPUT_LOG", "INPUT_FAIL_ON", "INPUT_FORMAT", "INPUT_CONFIG_FILE", "INPUT_SARIF"):
        inputs = {"INPUT_LOG": str(LOGS / "healthy.log"), name: hostile}
        proc, _, _ = runner("run", **inputs)
        assert not marker.exists(), name
        assert proc.returncode in (0, 2)
        # an input echoed in an error annotation is escaped: it cannot start a second command
        for line in proc.stdout.splitlines():
            assert not line.startswith("$(") and not line.startswith("`")


def test_doctor_error_exit_2_propagates(runner):
    broken = _exe(runner.tmp / "broken-doctor", "#!/bin/sh\necho 'vllm-doctor: internal error: boom' >&2\nexit 2\n")
    proc, out, _ = runner("run", INPUT_LOG=str(LOGS / "healthy.log"), VLLM_DOCTOR_BIN=str(broken))
    assert proc.returncode == 2 and "exit-code" not in out


# -- the install step (a fake python3 records what would be installed) ------------------------------------

@pytest.fixture
def fake_python(tmp_path):
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    log = tmp_path / "pip-args.txt"
    _exe(bindir / "venv-python", f'#!/bin/bash\nfor a in "$@"; do echo "$a"; done > "{log}"\n')
    _exe(bindir / "venv-doctor", '#!/bin/bash\necho "vllm-doctor 9.9.9"\n')
    # fake python3: `-m venv DIR` makes DIR/bin/python (records the pip arguments) and DIR/bin/vllm-doctor
    _exe(bindir / "python3", f"""#!/bin/bash
if [[ "$1" == "-m" && "$2" == "venv" ]]; then
  mkdir -p "$3/bin"
  cp "{bindir}/venv-python" "$3/bin/python"
  cp "{bindir}/venv-doctor" "$3/bin/vllm-doctor"
  exit 0
fi
exit 97
""")
    return bindir, log


@pytest.mark.parametrize("version, expected", [("0.1.0", "vllm-log-doctor==0.1.0"), ("", str(ROOT))])
def test_install_from_pypi_or_the_action_checkout(runner, fake_python, version, expected):
    bindir, log = fake_python
    path = f"{bindir}:{os.environ['PATH']}"
    proc, out, _ = runner("install", INPUT_VERSION=version, PATH=path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = log.read_text().split("\n")
    assert args[:2] == ["-m", "pip"] and "install" in args and expected in args
    assert out["bin"] == str(runner.tmp / "runner-temp" / "vllm-doctor-venv" / "bin" / "vllm-doctor")


@pytest.mark.parametrize("version", ["1.0 --index-url http://evil.example", "../x", "1.0;rm -rf /", "latest"])
def test_install_rejects_a_version_that_is_not_a_release(runner, fake_python, version):
    bindir, log = fake_python
    proc, out, _ = runner("install", INPUT_VERSION=version, PATH=f"{bindir}:{os.environ['PATH']}")
    assert proc.returncode == 2 and "version must be a release number" in proc.stdout
    assert not log.exists() and "bin" not in out


def test_install_skip_uses_the_command_on_path(runner, tmp_path):
    bindir = tmp_path / "onpath"
    bindir.mkdir()
    _exe(bindir / "vllm-doctor", "#!/bin/sh\nexit 0\n")
    proc, out, _ = runner("install", VLLM_DOCTOR_SKIP_INSTALL="true", PATH=f"{bindir}:{os.environ['PATH']}")
    assert proc.returncode == 0 and out["bin"] == str(bindir / "vllm-doctor")


def test_unknown_step_is_a_usage_error(runner):
    proc, _, _ = runner("deploy")
    assert proc.returncode == 2 and "usage:" in proc.stderr
