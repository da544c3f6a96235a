"""A lone surrogate (`\\ud800`) that a log spells as an escape never crashes a command (issue 29, item 13).

JSON escapes (`"\\ud800"` in a docker json-file, Kubernetes or CRI-JSON line; a pair cut in two) and Python's
(`'\\ud800'` in a `non-default args` dict the tracker reads with literal_eval) decode to a lone surrogate, which
UTF-8 cannot encode: the run died with "internal error" and took every other input's report with it. Each
such character is shown as U+FFFD; every format stays valid; the other inputs are reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnoser.report import FORMATS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
LONE = ["\\ud800", "\\udfff", "\\udc80", "\\ud83d", "\\ude00x", "\\ud800\\ud800", "a\\udbff"]


def _docker_json(text: str, escape: str) -> str:
    """The example log as docker's json-file driver writes it, one line carrying `escape` raw in its JSON."""
    out = []
    for i, line in enumerate(text.splitlines()):
        body = json.dumps(line + "\n")[1:-1]
        if "ValueError: To serve" in line:
            body = body.replace("ValueError: To serve", f"ValueError: {escape} To serve")
        out.append(f'{{"log":"{body}","stream":"stderr","time":"2025-08-21T14:04:{i % 60:02d}.000000000Z"}}')
    return "\n".join(out) + "\n"


def _args_dict(text: str, escape: str) -> str:
    lines = text.splitlines()
    lines[2] = lines[2].replace("'gpu_memory_utilization': 0.92",
                                f"'gpu_memory_utilization': 0.92, 'served_model_name': 'x{escape}y'")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("escape", LONE)
@pytest.mark.parametrize("shape", ["docker-json", "args-dict"])
def test_every_command_survives_a_lone_surrogate(tmp_path, doctor, shape, escape):
    text = EXAMPLE.read_text(encoding="utf-8")
    bad = tmp_path / "bad.log"
    bad.write_text(_docker_json(text, escape) if shape == "docker-json" else _args_dict(text, escape),
                   encoding="utf-8")
    good = tmp_path / "good.log"
    good.write_text(text, encoding="utf-8")
    for args in (("--format", "json", str(bad), str(good)), ("check", str(bad), str(good)),
                 ("compare", "--format", "json", str(good), str(bad))):
        res = doctor(*args, cwd=tmp_path)
        assert "internal error" not in res.stderr, (args, res.stderr)
        assert res.returncode in (0, 1), (args, res.stderr)
        assert "\ud800" not in res.stdout
    res = doctor("--format", "json", str(bad), str(good), cwd=tmp_path)
    docs = json.loads(res.stdout)
    assert [d["findings"][0]["rule"] for d in docs] == ["kv-cache-too-small"] * 2


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_is_valid_with_a_lone_surrogate(tmp_path, doctor, fmt):
    bad = tmp_path / "bad.log"
    bad.write_text(_docker_json(EXAMPLE.read_text(encoding="utf-8"), "\\ud800"), encoding="utf-8")
    res = doctor("--format", fmt, str(bad), cwd=tmp_path)
    assert res.returncode == 1 and "internal error" not in res.stderr, res.stderr
    if fmt in ("json", "sarif"):
        json.loads(res.stdout)
    if fmt in ("jsonl", "otel"):
        for line in res.stdout.splitlines():
            json.loads(line)
