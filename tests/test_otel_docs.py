"""docs/otel.md's Vector and Fluent Bit `exec` examples, the doctor's side: the documented command runs as
written and prints what the documented config expects (one JSON object per line, its records where the
Vector remap reads them). The tools themselves are not packaged for the project's machines (docs/otel.md says
so), so their side is not run here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

DOC = (ROOT / "docs" / "otel.md").read_text(encoding="utf-8")
FOLDER = "/var/log/vllm/"


def _block(lang: str, marker: str) -> str:
    return next(b for b in re.findall(rf"```{lang}\n(.*?)```", DOC, re.S) if marker in b)


def _fleet(tmp_path: Path) -> Path:
    folder = tmp_path / "vllm"
    folder.mkdir()
    for name in ("kv-cache-too-small-v1-0.24-k8s.log", "weights-oom-v1-0.15.log", "healthy-v1-0.10.log"):
        (folder / name).write_bytes((FIXTURES / name).read_bytes())
    return folder


def _run(argv: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "vllm-doctor" and argv[-1] == FOLDER
    code = "import sys; from diagnoser.cli.main import run; sys.argv = ['vllm-doctor', *sys.argv[1:]]; run()"
    return subprocess.run([sys.executable, "-c", code, *argv[1:-1], str(folder)], capture_output=True, text=True,
                          timeout=120)


def _records(lines: list[str]) -> list[dict]:
    """What the Vector remap makes of the lines (`json` decoding, then one event per record plus its resource)."""
    out = []
    for line in lines:
        event = json.loads(line)  # decoding.codec = "json": each line must be one object
        resource = event["resourceLogs"][0]["resource"]["attributes"]
        out += [{**record, "resource": resource} for record in event["resourceLogs"][0]["scopeLogs"][0]["logRecords"]]
    return out


def _rule(record: dict) -> str:
    return next(a["value"]["stringValue"] for a in record["attributes"] if a["key"] == "vllm_doctor.rule")


def test_vector_exec_command_prints_what_the_remap_reads(tmp_path: Path) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads(_block("toml", "[sources.vllm_doctor]"))
    source = config["sources"]["vllm_doctor"]
    assert source["type"] == "exec" and source["decoding"]["codec"] == "json"
    done = _run(source["command"], _fleet(tmp_path))
    assert done.returncode == 0, done.stderr  # --exit-zero: findings are data, not a failed command
    lines = done.stdout.splitlines()
    assert len(lines) == 3  # one request per log with findings (the healthy one: its start-up summary)
    records = _records(lines)
    assert {"kv-cache-too-small", "weights-oom"} <= {_rule(r) for r in records}
    for record in records:
        assert record["severityText"] in ("ERROR", "WARN", "INFO") and record["body"]["stringValue"]
        assert any(a["key"] == "log.file.path" for a in record["resource"])


def test_fluent_bit_exec_command_prints_one_json_object_per_line(tmp_path: Path) -> None:
    ini = _block("ini", "Name          exec")
    command = re.search(r"^\s*Command\s+(.+)$", ini, re.M)
    assert command and re.search(r"^\s*Parser\s+json$", ini, re.M)
    done = _run(shlex.split(command.group(1)), _fleet(tmp_path))
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        assert set(json.loads(line)) == {"resourceLogs"}  # the `json` parser's record: one request each
