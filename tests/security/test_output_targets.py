"""`-o` never replaces a file the command reads, and a model name never becomes an option (issue 29, item 16).

- `-o` naming the `--rules` file (or a file inside a `--rules` folder) or the `--config-file`, directly or through
  a symlink or a hard link, would replace it with the report: a one-line usage error, exit 2, the file untouched.
- A model whose name starts with `-` (`--trust-remote-code`, from a log someone else wrote) must not become an
  option in the suggested `run:` command: it is given as `--model NAME`, quoted, or refused.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from .conftest import TRIGGER, rule_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"


def _targets(tmp_path: Path, victim: Path) -> dict[str, Path]:
    link = tmp_path / "link.out"
    link.symlink_to(victim)
    hard = tmp_path / "hard.out"
    os.link(victim, hard)
    return {"same": victim, "symlink": link, "hardlink": hard, "dotted": victim.parent / "." / victim.name}


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "dotted"])
@pytest.mark.parametrize("command", ["diagnose", "check", "scan"])
def test_o_never_replaces_the_rules_file(tmp_path, doctor, rule_file, command, how):
    rules = rule_file(rule_text())
    before = rules.read_bytes()
    log = tmp_path / "t.log"
    log.write_text(TRIGGER)
    out = _targets(tmp_path, rules)[how]
    extra = ("--no-progress",) if command == "scan" else ()
    res = doctor(command, *extra, "--rules", str(rules), "-o", str(out), str(log), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "-o" in res.stderr, res.stderr
    assert rules.read_bytes() == before


@pytest.mark.parametrize("command", ["diagnose", "check", "scan"])
def test_o_never_replaces_a_file_inside_a_rules_folder(tmp_path, doctor, command):
    folder = tmp_path / "pack"
    folder.mkdir()
    rules = folder / "demo-attack.yaml"
    rules.write_text(rule_text())
    log = tmp_path / "t.log"
    log.write_text(TRIGGER)
    extra = ("--no-progress",) if command == "scan" else ()
    res = doctor(command, *extra, "--rules", str(folder), "-o", str(rules), str(log), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert rules.read_text() == rule_text()


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize("command", ["diagnose", "check"])
def test_o_never_replaces_the_config_file(tmp_path, doctor, command, how):
    config = tmp_path / "serve.sh"
    config.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.92\n")
    before = config.read_bytes()
    out = _targets(tmp_path, config)[how]
    res = doctor(command, "--config-file", str(config), "-o", str(out), "--format", "sarif", str(EXAMPLE),
                 cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert config.read_bytes() == before


@pytest.mark.parametrize("model", ["--trust-remote-code", "-tp", "--served-model-name=x", "-", "--", "-h"])
def test_a_model_name_starting_with_a_dash_is_never_an_option(tmp_path, doctor, model):
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    lines = [ln.replace("'meta-llama/Llama-3.1-8B-Instruct'", repr(model))
             .replace("model=meta-llama/Llama-3.1-8B-Instruct", f"model={model}") for ln in lines]
    log = tmp_path / "dash.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = doctor("--format", "json", str(log), cwd=tmp_path)
    import json

    doc = json.loads(res.stdout)
    commands = [f["command"] for f in doc["findings"] if f.get("command")]
    for command in commands:
        words = shlex.split(command)
        assert words[:2] == ["vllm", "serve"], command
        if model in words:
            at = words.index(model)
            assert words[at - 1] == "--model", command  # the value of --model, never a word of its own
        else:
            assert f"--model={model}" in words, command
        # nothing in it switches on remote code that the log did not ask for
        assert "--trust-remote-code" not in words or model == "--trust-remote-code", command
