"""Every subcommand tells the truth (issue 28): what the command line says about itself, its inputs and its
counts, as a new user meets it from a fresh clone."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from .conftest import FIXTURES, ROOT
from .test_cli import doctor
from .test_rule_selfcheck import PACK, write

KV16 = FIXTURES / "kv-cache-too-small-v1-0.16.log"
KV16_LINES = len(KV16.read_bytes().splitlines())


# -- item 1: scan --format jsonl stays valid JSON when a finding's command holds --api-key "$VLLM_API_KEY" ------

def test_scan_jsonl_is_valid_json_when_a_command_holds_the_api_key_variable(tmp_path):
    text = (FIXTURES / "kv-cache-too-small-v1-0.11-tp2.log").read_text()
    secret = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    text = text.replace("'host': '0.0.0.0', ", f"'host': '0.0.0.0', 'api_key': ['{secret}'], ", 1)
    assert secret in text
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text(text)
    r = doctor("scan", "--format", "jsonl", str(logs))
    out = r.stdout.decode()
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    finding = next(f for rec in records for f in rec.get("findings", []) if f["rule"] == "kv-cache-too-small")
    assert '--api-key "$VLLM_API_KEY"' in finding["command"]
    assert secret not in out


# -- item 2: run --follow FILE -- CMD is refused in one line, never a hang ------------------------------------

def test_run_with_follow_is_a_usage_error_not_a_hang(tmp_path):
    log = tmp_path / "server.log"
    log.write_text((FIXTURES / "healthy-v1-0.10.log").read_text())
    r = doctor("run", "--follow", str(log), "--", "echo", "hi")
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "--follow" in err and len(err.strip().splitlines()) == 1
    assert b"hi" not in r.stdout


# -- item 3: --follow counts the lines it read ----------------------------------------------------------------

def test_follow_report_counts_the_lines_it_read(tmp_path):
    log = tmp_path / "kv.log"
    shutil.copy(KV16, log)
    r = doctor("diagnose", "--until", "failure", "--format", "json", "--follow", str(log))
    doc = json.loads(r.stdout)
    assert doc["input"]["bytes"] == log.stat().st_size
    assert doc["input"]["lines"] == KV16_LINES
    r = doctor("diagnose", "--until", "failure", "--format", "text", "--follow", str(log))
    assert f"({KV16_LINES} lines)" in r.stdout.decode()
    assert "(0 lines)" not in r.stdout.decode()


# -- item 4: rules --test DIR tests that pack even when its ids are the shipped ones ----------------------------

def test_rules_test_on_a_copy_of_the_shipped_pack_tests_the_copy(tmp_path):
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    r = doctor("rules", "--test", str(pack))
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, err[-400:] + out[-800:]
    assert "already defined" not in err
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    assert m and int(m.group(1)) > 100 and m.group(2) == "0"
    assert "shadow" in (out + err)  # the note that the pack's ids replace the shipped ones while testing


# -- item 5: a binary file and a notes.txt are not "clean" logs ---------------------------------------------

@pytest.fixture
def mixed_dir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(FIXTURES / "healthy-v1-0.10.log", d / "healthy.log")
    shutil.copy(KV16, d / "kv.log")
    (d / "blob.bin").write_bytes(bytes(range(256)) * 20)
    (d / "notes.txt").write_text("remember: restart the staging box on friday\n")
    return d


def test_scan_counts_non_vllm_files_as_their_own_outcome_in_every_format(mixed_dir):
    text = doctor("scan", str(mixed_dir)).stdout.decode()
    head = text.splitlines()[0]
    assert "1 clean" in head and "2 not vLLM logs" in head, head
    md = doctor("scan", "--format", "markdown", str(mixed_dir)).stdout.decode()
    assert "1 clean" in md and "2 not vLLM logs" in md
    html = doctor("scan", "--format", "html", str(mixed_dir)).stdout.decode()
    assert "1 clean" in html and "2 not vLLM logs" in html
    csv_out = doctor("scan", "--format", "csv", str(mixed_dir)).stdout.decode()
    import csv
    import io

    rows = {Path(r["source"]).name: r["status"] for r in csv.DictReader(io.StringIO(csv_out))}
    assert rows["blob.bin"] == rows["notes.txt"] == "not-vllm"
    assert rows["healthy.log"] == "finding" and rows["kv.log"] == "finding"
    jsonl = [json.loads(x) for x in doctor("scan", "--format", "jsonl", str(mixed_dir)).stdout.decode().splitlines()]
    by_name = {Path(d["input"]["path"]).name: d for d in jsonl if "input" in d}
    assert any("no vLLM log" in n for n in by_name["notes.txt"]["notes"])


# -- item 14: the counts agree with what is listed, in the text and in the Action's outputs ----------------------

@pytest.mark.parametrize("name", ["healthy-v1-0.10.log", "serving-v1-dp2-0.10.log", "warmup-oom-cudagraph-0.10.log"])
def test_text_summary_counts_the_findings_it_numbers(name):
    out = doctor(str(FIXTURES / name)).stdout.decode()
    listed = {"error": 0, "warning": 0, "info": 0}
    for m in re.finditer(r"^\d+\. (ERROR|WARNING|INFO) \[", out, re.M):
        listed[m.group(1).lower()] += 1
    tail = re.search(r"^(\d+) error\(s\), (\d+) warning\(s\), (\d+) info", out, re.M)
    assert tail, out[-300:]
    assert (int(tail.group(1)), int(tail.group(2)), int(tail.group(3))) == (
        listed["error"], listed["warning"], listed["info"]), out


def test_action_outputs_count_what_the_report_counts(tmp_path):
    import os
    import subprocess
    import sys

    from .test_action import SCRIPT

    doctor_exe = tmp_path / "vllm-doctor"
    doctor_exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m diagnoser "$@"\n')
    doctor_exe.chmod(0o755)
    (tmp_path / "temp").mkdir()
    out_file, summary = tmp_path / "out", tmp_path / "summary.md"
    out_file.write_text("")
    summary.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
    env.update({"GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_TEMP": str(tmp_path / "temp"),
                "GITHUB_ACTIONS": "true", "GITHUB_ACTION_PATH": str(ROOT), "VLLM_DOCTOR_BIN": str(doctor_exe),
                "NO_COLOR": "1", "INPUT_LOG": str(FIXTURES / "serving-v1-dp2-0.10.log"), "INPUT_FAIL_ON": "error",
                "INPUT_FORMAT": "github"})
    proc = subprocess.run(["bash", str(SCRIPT), "run"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
    counts = json.loads(doctor("--format", "json", str(FIXTURES / "serving-v1-dp2-0.10.log")).stdout)["summary"]
    assert counts == {"error": 0, "warning": 2, "info": 0}
    assert (outputs["findings"], outputs["errors"], outputs["warnings"], outputs["notices"]) == ("2", "0", "2", "0")


# -- item 18: --series is shown or said to be ignored ---------------------------------------------------------

def test_series_with_a_format_that_cannot_carry_it_says_so():
    r = doctor("--series", str(FIXTURES / "serving-v1-dp2-0.10.log"))
    err = r.stderr.decode()
    assert "--series" in err and "json" in err, err
    assert r.returncode == 0 and b"[preemption]" in r.stdout
    assert b"--series" not in doctor("--series", "--format", "json", str(FIXTURES / "serving-v1-dp2-0.10.log")).stderr


# -- item 20: explain takes any case and offers every close id ------------------------------------------------

def test_explain_is_case_insensitive_and_suggests_every_close_id():
    r = doctor("explain", "KV-Cache-Too-Small")
    assert r.returncode == 0 and r.stdout.decode().startswith("kv-cache-too-small  (error"), r.stderr
    r = doctor("explain", "kv-cache")
    err = r.stderr.decode()
    assert r.returncode == 2
    for rid in ("kv-cache-too-small", "kv-cache-dtype-unsupported"):
        assert rid in err, err


# -- item 21: help and messages are whole sentences, the README's numbers are right ------------------------------

def test_run_help_example_is_its_own_paragraph():
    lines = doctor("run", "--help").stdout.decode().splitlines()
    i = next(n for n, ln in enumerate(lines) if "vllm-doctor run --tee" in ln)
    assert lines[i + 1].strip() == "", lines[i:i + 3]


def test_rules_test_coverage_message_names_the_unnamed_cases(tmp_path):
    text = PACK.replace('  - phrase: "the demo engine exploded loudly"\n',
                        '  - phrase: "the demo engine exploded loudly"\n'
                        "  - regex: 'demo engine melted'\n    keywords: [\"demo engine melted\"]\n")
    text = text.replace("  near_miss:\n", '    - text: "the demo engine melted"\n  near_miss:\n')
    path = write(tmp_path, text)
    r = doctor("rules", "--test", str(path))
    out = r.stdout.decode()
    line = next(ln for ln in out.splitlines() if "give one of them a name" in ln)
    assert re.search(r"give one of them a name: cases\.match\[\d+\]", line), line


def test_readme_and_docs_preset_count_is_the_bundled_count():
    models = yaml.safe_load((ROOT / "diagnoser" / "data" / "models.yaml").read_text())["models"]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    counts = [int(n) for page in pages for n in re.findall(r"\((\d+) presets", page.read_text())]
    assert counts and all(n == len(models) for n in counts), (counts, len(models))
    # the planning page is where the presets are described
    assert re.search(r"\((\d+) presets", (ROOT / "docs" / "planning.md").read_text())


# -- item 22: the two names, explained where a user installs ----------------------------------------------------

def test_install_line_says_why_the_distribution_and_command_names_differ():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    line = next((ln for ln in quick.splitlines() if "vllm-log-doctor" in ln and "vllm-doctor" in ln.replace(
        "vllm-log-doctor", "")), None)
    assert line is not None, quick
    assert "PyPI" in line or "taken" in line or "because" in line, line
