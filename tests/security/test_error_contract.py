"""The error contract under hostile or broken input: one line naming the file and what to change, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import TRIGGER, rule_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
         "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
         "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def one_line_error(res, *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("vllm-doctor: error:")]
    assert len(lines) >= 1 and "internal error" not in res.stderr, res.stderr
    for n in needles:
        assert n in res.stderr, res.stderr


def test_output_that_is_an_input_is_refused(tmp_path, doctor):
    log = tmp_path / "same.log"
    log.write_bytes(EXAMPLE.read_bytes())
    res = doctor("-o", str(log), str(log), cwd=tmp_path)
    one_line_error(res, "is one of the inputs")
    assert log.read_bytes() == EXAMPLE.read_bytes()
    res = doctor("-o", "same.log", str(log), cwd=tmp_path)  # the same file by another spelling
    one_line_error(res, "is one of the inputs")


@pytest.mark.parametrize("args", [
    ("scan", "-o", "{log}", "{log}"),
    ("scan", "-o", "{log}", "."),  # the output is one of the logs the folder holds
    ("compare", "-o", "{log}", "{other}", "{log}"),
    ("compare", "--format", "html", "-o", "link.log", "{other}", "{log}"),  # a symlink to an input
    ("diagnose", "-o", "hard.log", "{log}"),  # a hard link
    ("check", "-o", "{log}"),  # stdin redirected from the output file (`< same.log`)
    ("diagnose", "--follow", "{log}", "--until", "exit", "--timeout", "1", "-o", "link.log"),
])
def test_every_command_refuses_an_output_that_is_an_input(args, tmp_path):
    """Every command with -o: the log survives, the error names the output (issue 16, variants)."""
    log, other = tmp_path / "same.log", tmp_path / "other.log"
    log.write_bytes(EXAMPLE.read_bytes())
    other.write_bytes(EXAMPLE.read_bytes())
    (tmp_path / "link.log").symlink_to(log)
    (tmp_path / "hard.log").hardlink_to(log)
    argv = [a.format(log=log, other=other) for a in args]
    with log.open("rb") as stdin:  # stdin is the file itself, as a shell's `< same.log` makes it
        raw = subprocess.run([sys.executable, "-m", "diagnoser", *argv], stdin=stdin, capture_output=True,
                             cwd=tmp_path, timeout=60)
    assert raw.returncode == 2, raw.stderr
    assert b"is one of the inputs" in raw.stderr, raw.stderr
    assert log.read_bytes() == EXAMPLE.read_bytes()


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02\xff\xfe" * 500, b"hello\nthis is a build log\nok\n"],
                         ids=["empty", "binary", "no-vllm-line"])
def test_check_on_input_without_vllm(content, tmp_path, doctor):
    log = tmp_path / "ci.log"
    log.write_bytes(content)
    res = doctor("check", str(log), cwd=tmp_path)
    one_line_error(res, f"no vLLM log found in {log}")
    diag = doctor(str(log), cwd=tmp_path)
    assert diag.returncode == 0 and f"note: no vLLM log found in {log}" in diag.stderr
    assert f"no vLLM log found in {log}" in diag.stdout
    jsonl = doctor("--format", "jsonl", str(log), cwd=tmp_path)
    record = json.loads(jsonl.stdout.splitlines()[0])
    assert record["note"] == f"no vLLM log found in {log}" and record["input"]["path"] == str(log)
    doc = json.loads(doctor("--format", "json", str(log), cwd=tmp_path).stdout)
    assert doc["notes"] == [f"no vLLM log found in {log}"]


@pytest.mark.parametrize("where", [None, 10, 5_000, 70_000, 1_048_565])
def test_a_vllm_sign_anywhere_in_a_big_input_is_seen(where):
    """The sign (vLLM's name or its `LEVEL MM-DD HH:MM:SS` header) is looked for in a chunk's head first: one
    anywhere else, or cut between two chunks, still counts; an input without one is no vLLM log."""
    import io

    from diagnoser.analysis.pipeline import diagnose

    junk = bytearray(b"build step ok, nothing to see here\n" * 60_000)  # 2.1 MB: several chunks
    if where is not None:
        junk[where:where + 22] = b"WARNING 05-01 10:00:00"  # straddles the first 1 MiB chunk's end at 1_048_565
    assert diagnose(io.BytesIO(bytes(junk)), "x").vllm_seen is (where is not None)


def test_check_on_stdin_without_vllm(doctor, tmp_path):
    one_line_error(doctor("check", stdin=b"", cwd=tmp_path), "no vLLM log found in stdin")


def test_one_unreadable_file_among_several(tmp_path, doctor):
    good = tmp_path / "good.log"
    good.write_bytes(EXAMPLE.read_bytes())
    res = doctor("--format", "json", str(good), str(tmp_path / "missing.log"), str(tmp_path), cwd=tmp_path)
    one_line_error(res, "missing.log: cannot read", "is a directory")
    doc = json.loads(res.stdout)
    assert doc["findings"][0]["rule"] == "kv-cache-too-small"


#: A file that opens but whose first read fails with EIO (as a failing disk or a network mount does); root can
#: read any file whatever its mode, so permissions cannot make one here.
_EIO_FILE = Path("/proc/self/mem")


@pytest.mark.skipif(not _EIO_FILE.exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("args, out_format", [((), "json"), (("check",), "json"), (("compare",), "text")])
def test_a_file_whose_reads_fail_is_named_and_the_others_reported(args, out_format, tmp_path, doctor):
    good = tmp_path / "good.log"
    good.write_bytes(EXAMPLE.read_bytes())
    res = doctor(*args, "--format", out_format, str(_EIO_FILE), str(good), cwd=tmp_path)
    one_line_error(res, f"{_EIO_FILE}: cannot read (Input/output error)")
    if not args:  # the readable log's report is still written
        assert json.loads(res.stdout)["findings"][0]["rule"] == "kv-cache-too-small"


def test_wrong_typed_rule_field_from_the_command_line(tmp_path, doctor, rule_file):
    path = rule_file(rule_text("ok").replace('    - phrase: "the demo engine exploded loudly"',
                                             '    - phrase: "the demo engine exploded loudly"\n      threshold: abc')
                     .replace('  - phrase: "the demo engine exploded loudly"',
                              '  - phrase: "the demo engine exploded loudly"\n    threshold: abc'))
    one_line_error(doctor("--rules", str(path), stdin=TRIGGER, cwd=tmp_path), f"{path}: match[0].threshold:")


@pytest.mark.parametrize("change, key", [
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_hidden_layers": 1e308}, "num_hidden_layers"),
    ({"hidden_size": "4096"}, "hidden_size"),
    ({"vocab_size": -1}, "vocab_size"),
    ({"sliding_window_pattern": 0, "sliding_window": 4096}, "sliding_window_pattern"),
    ({"text_config": {"num_key_value_heads": 0}}, "text_config.num_key_value_heads"),
])
def test_hostile_model_config(change, key, tmp_path, doctor):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**LLAMA, **change}))
    one_line_error(doctor("plan", "--model", str(cfg), "--gpu", "A100-80GB", cwd=tmp_path), f"{cfg}: {key}:")


@pytest.mark.parametrize("text, needle", [
    ('{"num_hidden_layers": Infinity}', "Infinity is not a number"),
    ("[" * 50000 + "]" * 50000, "nests too deeply"),
    ("[1, 2]", "top level is not an object"),
])
def test_hostile_model_config_text(text, needle, tmp_path, doctor):
    cfg = tmp_path / "config.json"
    cfg.write_text(text)
    one_line_error(doctor("plan", "--model", str(cfg), "--gpu", "A100-80GB", cwd=tmp_path), needle)


def _bomb(levels: int = 9, width: int = 9) -> str:
    out = ["x0: &a0 [" + ", ".join(["--enforce-eager"] * width) + "]"]
    for i in range(1, levels + 1):
        out.append(f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name, body", [
    ("compose.yaml", "services:\n  vllm:\n    image: vllm/vllm-openai\n    command: *a9\n"),
    ("vllm-config.yaml", "# vllm serve --config\nmodel: meta-llama/Llama-3.1-8B-Instruct\nmax_model_len: *a9\n"),
])
def test_alias_bomb_in_launch_files(name, body, tmp_path, doctor):
    path = tmp_path / name
    path.write_text(_bomb() + body)
    start = time.monotonic()
    res = doctor("plan", "--gpu", "A100-80GB", "--from-file", str(path), cwd=tmp_path)
    assert time.monotonic() - start < 20
    one_line_error(res, str(path), "alias bomb")


def test_a_dockerfile_instruction_continued_a_million_times(tmp_path, doctor):
    # dockerfile-parse joins continued lines by repeated concatenation: quadratic unless bounded first
    path = tmp_path / "Dockerfile"
    path.write_text("FROM vllm/vllm-openai\nCMD vllm serve m \\\n" + "  --x 1 \\\n" * 1_000_000 + "  --y 2\n")
    start = time.monotonic()
    res = doctor("plan", "--gpu", "A100-80GB", "--from-file", str(path), cwd=tmp_path)
    assert time.monotonic() - start < 20
    one_line_error(res, str(path), "line 2: an instruction continued over more lines")


def test_aliases_within_bounds_still_work(tmp_path, doctor):
    path = tmp_path / "compose.yaml"
    path.write_text("x-common: &common\n  image: vllm/vllm-openai\nservices:\n  vllm:\n    <<: *common\n"
                    "    command: --model meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n")
    res = doctor("plan", "--gpu", "A100-80GB", "--from-file", str(path), cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    assert "8,192" in res.stdout or "8192" in res.stdout
