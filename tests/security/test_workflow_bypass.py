"""GitHub workflow commands that the second round's defusing missed (issue 29, item 4).

The runner (actions/runner, ActionCommand) honours two syntaxes: the legacy `##[command]data` found ANYWHERE in a
line, and `::command::data` after .NET's `TrimStart()`, which strips every Unicode white space (NBSP, U+2003,
U+3000, ...), not only spaces and tabs. Both must be defused in every format (the `github` format's own
annotations and fences excepted), in scan's file names, and in rule-pack titles, advice and `explain`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diagnoser.report import FORMATS, SCAN_FORMATS

from .conftest import TRIGGER, rule_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
#: every character Python's str.isspace() accepts (what .NET's TrimStart() strips is a subset), and the ones an
#: older .NET took for white space
WHITESPACE = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) + "\u180e"
LEGACY = ("##[error]PWN1", "##[add-mask]PWN2", "##[set-output name=x;]PWN3", "##[warning file=a]PWN4",
          "##[group]PWN5", "##[ error]PWN6", "x##[debug]PWN7")
GITHUB_OWN = ("::group::", "::endgroup::", "::stop-commands::", "::error ", "::warning ", "::notice ", "::error::",
              "::warning::", "::notice::")


def runner_commands(text: str, fmt: str) -> list[str]:
    """The lines of `text` the runner would execute, but the github format's own commands (and what its
    `::stop-commands::` fences hold)."""
    found = []
    fence: str | None = None
    for line in text.splitlines():
        if "##[" in line:
            found.append(line)
            continue
        stripped = line.lstrip(WHITESPACE)
        if fence is not None:
            if stripped == f"::{fence}::":
                fence = None
            continue
        if not stripped.startswith("::"):
            continue
        if fmt == "github" and line == stripped and stripped.startswith(GITHUB_OWN):
            if stripped.startswith("::stop-commands::"):
                fence = stripped[len("::stop-commands::"):]
            continue
        found.append(line)
    return found


def hostile_log(tmp_path: Path) -> Path:
    """The KV-cache error (a finding in every format) carrying the legacy commands, and evidence lines that start
    with each kind of white space then `::`."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    out = []
    for ln in lines:
        if "ValueError: To serve" in ln:
            ln = ln.replace("ValueError: To serve", "ValueError: " + " ".join(LEGACY) + " To serve")
            # the same error again, at the start of a line behind white space (a wrapped or indented dump)
            out += [f"{ws}::add-mask::PWN-{ord(ws):04x} ValueError: To serve at least one request" for ws in WHITESPACE]
        out.append(ln)
    lines = out
    lines[2] = lines[2].replace("'gpu_memory_utilization': 0.92",
                                "'gpu_memory_utilization': 0.92, 'served_model_name': 'x##[add-mask]PWN8'")
    path = tmp_path / "hostile.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_no_legacy_or_whitespace_led_command_in_any_format(fmt, tmp_path, doctor):
    res = doctor("--format", fmt, "--no-color", str(hostile_log(tmp_path)), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "PWN1" in res.stdout or "PWN1" in res.stdout.replace("\\u", "") or fmt in ("otel",), res.stdout[:2000]
    assert runner_commands(res.stdout, fmt) == []
    assert runner_commands(res.stderr, "stderr") == []


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_output_files_too(fmt, tmp_path, doctor):
    out = tmp_path / "report.out"
    res = doctor("--format", fmt, "-o", str(out), str(hostile_log(tmp_path)), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert runner_commands(out.read_text(encoding="utf-8"), fmt) == []


@pytest.mark.parametrize("fmt", sorted(SCAN_FORMATS))
def test_scan_file_names(fmt, tmp_path, doctor):
    folder = tmp_path / "logs"
    folder.mkdir()
    names = ["a##[add-mask]PWN9.log", "##[error]PWN10.log", "\u3000::add-mask::PWN11.log", "\u00a0::error::PWN12.log",
             "\u2003::warning::PWN13.log"]
    for name in names:
        (folder / name).write_bytes(EXAMPLE.read_bytes())
    (folder / "b##[error]unreadable.log").symlink_to(folder / "missing")
    res = doctor("scan", "--format", fmt, "--no-progress", *sorted(p.name for p in folder.iterdir()), cwd=folder)
    assert res.returncode in (1, 2), res.stderr
    assert "PWN9" in res.stdout or "PWN10" in res.stdout or fmt == "otel"
    assert runner_commands(res.stdout, fmt) == []
    assert runner_commands(res.stderr, "stderr") == []


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_rule_pack_title_and_advice(fmt, tmp_path, doctor, rule_file):
    advice = "line one ##[add-mask]PWN20\n" + "".join(f"{ws}::add-mask::PWN21\n" for ws in WHITESPACE if ws != "\n")
    rules = rule_file(rule_text(advice).replace("title: Demo", "title: 'Demo ##[error]PWN22'"))
    log = tmp_path / "t.log"
    log.write_text(TRIGGER)
    res = doctor("--format", fmt, "--no-color", "--rules", str(rules), str(log), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert runner_commands(res.stdout, fmt) == []
    assert runner_commands(res.stderr, "stderr") == []


def test_explain_a_rule_pack(tmp_path, doctor, rule_file):
    explanation = "why ##[add-mask]PWN30\n" + "".join(f"{ws}::add-mask::PWN31\n" for ws in WHITESPACE if ws != "\n")
    rules = rule_file(rule_text().replace("explanation: Demo.", f"explanation: {explanation!r}")
                      .replace("title: Demo", "title: 'Demo ##[error]PWN32'"))
    res = doctor("explain", "--rules", str(rules), "demo-attack", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "PWN30" in res.stdout and "PWN32" in res.stdout
    assert runner_commands(res.stdout, "text") == []
