"""The library API: `from diagnoser import diagnose, plan`, the JSON contract, errors, cheap import."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import diagnoser
from diagnoser import DoctorError, InputError, Plan, Report, UsageError, diagnose, plan
from diagnoser.api import resolve_rules
from diagnoser.cli.main import main
from diagnoser.rules.loader import builtin_rules
from tests.conftest import FIXTURES, ROOT

EXAMPLE = FIXTURES / "example-kv-cache-too-small.log"


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return json.loads(result.output)


def test_to_dict_is_the_json_contract() -> None:
    report = diagnose(EXAMPLE)
    assert isinstance(report, Report)
    assert report.to_dict() == cli_json("--format", "json", str(EXAMPLE))
    assert report.to_dict()["schema_version"] == 1


@pytest.mark.parametrize("kind", ["str-path", "bytes", "text", "lines", "generator", "binary-file", "text-file",
                                  "gzip", "bzip2", "xz"])
def test_every_source_kind_gives_the_same_findings(kind: str, tmp_path: Path) -> None:
    data = EXAMPLE.read_bytes()
    text = data.decode()
    sources = {
        "str-path": lambda: str(EXAMPLE), "bytes": lambda: data, "text": lambda: text,
        "lines": lambda: text.splitlines(), "generator": lambda: (ln for ln in text.splitlines(keepends=True)),
        "binary-file": lambda: io.BytesIO(data), "text-file": lambda: io.StringIO(text),
    }
    for name, opener in (("gzip", gzip.open), ("bzip2", bz2.open), ("xz", lzma.open)):
        path = tmp_path / f"server.{name}"  # no telling suffix: recognised by its magic bytes
        with opener(path, "wb") as fh:
            fh.write(data)
        sources[name] = lambda path=path: path
    report = diagnose(sources[kind]())
    doc = report.to_dict()
    expected = diagnose(EXAMPLE).to_dict()
    assert doc["findings"] == expected["findings"]
    assert doc["input"]["lines"] == expected["input"]["lines"] == 126
    assert doc["context"] == expected["context"]


def test_name_sets_the_reported_path() -> None:
    assert diagnose(EXAMPLE.read_bytes(), name="replica-3.log").to_dict()["input"]["path"] == "replica-3.log"
    assert diagnose(EXAMPLE.read_bytes()).path == "-"


def test_redaction_is_on_by_default_and_can_be_turned_off() -> None:
    log = "INFO 05-01 10:00:00 [api_server.py:1] non-default args: {'model': 'm', 'hf_token': 'hf_abcdefghijklmnopqrstuvwxyz0123'}\n"
    assert "hf_abcdefghij" not in json.dumps(diagnose(log).to_dict())
    assert diagnose(log).redactions
    assert not diagnose(log, redact=False).redactions


def test_missing_path_is_an_input_error_naming_it() -> None:
    with pytest.raises(InputError, match="nope/server.log"):
        diagnose(Path("nope/server.log"))
    with pytest.raises(InputError, match="server.lgo.log: no such file"):
        diagnose("server.lgo.log")
    with pytest.raises(InputError, match="is a directory"):
        diagnose(FIXTURES)


def test_a_corrupt_archive_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes())[:300])
    with pytest.raises(InputError, match="cut.log.gz: cannot read"):
        diagnose(path)


def test_wrong_argument_types_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="cannot read a int"):
        diagnose(42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="neither a Rule nor a path"):
        diagnose("x\n", rules=[3])  # type: ignore[list-item]


def test_rules_load_once_and_extra_packs_are_cached(tmp_path: Path) -> None:
    assert resolve_rules() is builtin_rules() is resolve_rules(None)
    rule = (ROOT / "rules" / "port-in-use.yaml").read_text().replace("id: port-in-use", "id: port-in-use-copy")
    (tmp_path / "port-in-use-copy.yaml").write_text(rule)
    first = resolve_rules([tmp_path / "port-in-use-copy.yaml"])
    assert first is resolve_rules(str(tmp_path / "port-in-use-copy.yaml"))
    assert len(first) == len(builtin_rules()) + 1
    report = diagnose(FIXTURES / "port-in-use-uvicorn-0.6.log", rules=[tmp_path])
    assert {"port-in-use", "port-in-use-copy"} <= {f.rule.id for f in report.findings}


def test_a_broken_rule_file_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("id: bad\ntitle: x\nseverity: fatal\n")
    with pytest.raises(InputError, match="bad.yaml"):
        diagnose("x\n", rules=[tmp_path / "bad.yaml"])
    with pytest.raises(InputError, match="no such rule file"):
        diagnose("x\n", rules=[tmp_path / "missing.yaml"])


def test_plan_to_dict_is_plan_format_json() -> None:
    p = plan("llama-3.1-8b", gpu="L4", max_model_len=16384)
    assert isinstance(p, Plan)
    assert p.to_dict() == cli_json("plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384",
                                   "--format", "json")
    assert p.starts and p.ok
    assert "KV cache" in p.text


def test_plan_from_a_command_line_and_kwargs_agree() -> None:
    a = plan(command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --kv-cache-dtype fp8",
             gpu_memory="24GiB")
    b = plan("meta-llama/Llama-3.1-8B-Instruct", gpu_memory="24GiB", max_model_len=8192, kv_cache_dtype="fp8")
    assert a.to_dict()["kv_cache_tokens"] == b.to_dict()["kv_cache_tokens"]
    assert a.to_dict()["kv_bytes_per_token"] == 65536


def test_plan_errors_are_the_projects_own() -> None:
    with pytest.raises(UsageError, match="no GPU"):
        plan("llama-3.1-8b")
    with pytest.raises(UsageError, match="unknown GPU"):
        plan("llama-3.1-8b", gpu="Z80")
    with pytest.raises(DoctorError):
        plan(command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-modle-len 8192", gpu="L4")
    with pytest.raises(InputError, match="no such log"):
        plan("llama-3.1-8b", gpu="L4", log="missing.log")


def test_plan_stays_the_function_after_the_planner_module_is_imported() -> None:
    import diagnoser.plan  # noqa: F401 - the submodule of the same name
    from diagnoser import plan as again

    assert again is plan and callable(diagnoser.plan) and not isinstance(diagnoser.plan, type(diagnoser))
    assert sys.modules["diagnoser.plan"].plan_config


def test_public_names() -> None:
    for name in diagnoser.__all__:
        assert getattr(diagnoser, name) is not None
    assert set(diagnoser.__all__) >= {"diagnose", "plan", "Report", "Plan", "DoctorError", "InputError",
                                      "UsageError"}
    with pytest.raises(AttributeError):
        diagnoser.no_such_name  # noqa: B018


def test_importing_the_package_loads_nothing_heavy() -> None:
    code = ("import sys, diagnoser; print(sorted(m for m in sys.modules if m.startswith('diagnoser') "
            "or m in ('click', 'jinja2', 'yaml', 'rapidfuzz', 'regex')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['diagnoser']"


def test_the_library_never_prints(capsys: pytest.CaptureFixture[str]) -> None:
    diagnose(EXAMPLE)
    plan("llama-3.1-8b", gpu="L4")
    with pytest.raises(UsageError):
        plan("llama-3.1-8b")
    assert capsys.readouterr() == ("", "")
