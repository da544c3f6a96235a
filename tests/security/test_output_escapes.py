"""Terminal escapes, bidi overrides and GitHub workflow commands never reach an output, in any format.

The hostile values arrive the ways a log can carry them: `\\x1b` text inside argument strings that the
tracker decodes with ast.literal_eval (a real ESC, OSC 52 clipboard writes, a screen clear), raw C1 and
bidi characters on an error line, embedded newlines followed by `::add-mask::` / `::stop-commands::`, and
a file name holding ESC and a newline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnoser.report import FORMATS

from .conftest import run_doctor

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
#: What must never be in an output: C0 but tab/newline, DEL, C1, bidi controls, line separators.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
HOSTILE_ARGS = (
    "(APIServer pid=21873) INFO 08-21 14:02:14 [utils.py:326] non-default args: {'model_tag': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'host': '0.0.0.0', 'model': 'meta-llama/Llama-3.1-8B-Instruct', "
    "'gpu_memory_utilization': 0.92, 'served_model_name': 'x\\n::add-mask::PWN1\\n  ::stop-commands::PWN2\\n"
    "\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J\\x9b31m\\u202etxt.exe', 'chat_template': '\\r::error::PWN3'}"
)
GITHUB_OWN = ("::group::", "::endgroup::", "::stop-commands::", "::error ", "::warning ", "::notice ", "::error::",
              "::warning::", "::notice::")


def hostile_log(tmp_path: Path, name: str = "hostile.log") -> Path:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    lines[2] = HOSTILE_ARGS
    # raw C1 CSI, a bidi override and an OSC title on the error line itself
    lines = [ln.replace("ValueError: To serve", "ValueError: \x9b2J\u202e\x1b]0;owned\x07To serve") for ln in lines]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def assert_inert(text: str, fmt: str) -> None:
    assert not UNSAFE.search(text), repr(UNSAFE.search(text))
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence is not None:
            if stripped == f"::{fence}::":
                fence = None
            continue
        if not stripped.startswith("::"):
            continue
        assert fmt == "github", f"{fmt}: a workflow command line: {line!r}"
        assert stripped.startswith(GITHUB_OWN), line  # our own commands (their data and properties escaped)
        if stripped.startswith("::stop-commands::"):
            fence = stripped[len("::stop-commands::"):]
    assert fence is None


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_no_escape_or_command_in_any_format(fmt, tmp_path, doctor):
    log = hostile_log(tmp_path)
    res = doctor("--format", fmt, "--no-color", str(log), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "PWN1" in res.stdout or fmt in ("github",) or "served_model_name" not in res.stdout
    assert_inert(res.stdout, fmt)
    assert_inert(res.stderr, "stderr")


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_output_file_is_inert_too(fmt, tmp_path, doctor):
    log = hostile_log(tmp_path)
    out = tmp_path / f"report.{fmt}"
    res = doctor("--format", fmt, "-o", str(out), str(log), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert_inert(out.read_text(encoding="utf-8"), fmt)


def test_json_values_decode_clean(tmp_path, doctor):
    """A consumer that decodes the JSON (jq -r) gets escaped text, not the control characters."""
    import json

    res = doctor("--format", "json", str(hostile_log(tmp_path)), cwd=tmp_path)
    doc = json.loads(res.stdout)
    assert not UNSAFE.search(json.dumps(doc, ensure_ascii=False).replace("\\n", ""))

    def strings(v):
        if isinstance(v, dict):
            for k, x in v.items():
                yield k
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)
        elif isinstance(v, str):
            yield v
    for s in strings(doc):
        assert not UNSAFE.search(s), s
    served = doc["context"]["args"]["served_model_name"]
    assert "\n" not in served and "\\u001b]52" in served and "::add-mask::" in served


def test_hostile_file_name(tmp_path, doctor):
    log = hostile_log(tmp_path, "evil\x1b]0;t\x07\n::add-mask::PWN9.log")
    for fmt in ("text", "markdown", "github", "json", "sarif"):
        res = doctor("--format", fmt, "--no-color", str(log), cwd=tmp_path)
        assert res.returncode == 1, res.stderr
        assert_inert(res.stdout, fmt)
    missing = doctor(str(tmp_path / "gone\x1b[2J\n::error::PWN8.log"), cwd=tmp_path)
    assert missing.returncode == 2
    assert_inert(missing.stderr, "stderr")
    assert missing.stderr.count("\n") == 1


def test_composite_action_fences_what_it_echoes(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    log = hostile_log(tmp_path)
    doctor = tmp_path / "vllm-doctor"
    doctor.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m diagnoser "$@"\n')
    doctor.chmod(0o755)
    for fmt in ("text", "markdown", "json"):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
        env.update({"INPUT_LOG": str(log), "INPUT_FORMAT": fmt, "VLLM_DOCTOR_BIN": str(doctor),
                    "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(tmp_path / "out")})
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "action-run.sh"), "run"], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("::stop-commands::vllm-doctor-")
        assert lines[-1] == f"::{lines[0].split('::')[2]}::"
        assert_inert(proc.stdout, "github")


def test_subprocess_entry_point_filters_too(tmp_path):
    """The installed command (not just cli.run in-process) escapes and defuses."""
    res = run_doctor("--format", "text", str(hostile_log(tmp_path)), cwd=tmp_path)
    assert res.returncode == 1
    assert_inert(res.stdout, "text")
