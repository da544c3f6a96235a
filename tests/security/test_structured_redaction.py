"""Machine-readable output stays valid when secrets are redacted (issue 29, item 15): values are redacted, never the
serialised text. `plan --format json` with `--api-key` was invalid JSON whatever the key: the redactor took
`\\"$VLLM_API_KEY\\"` (the suggested command, serialised) for a flag value and cut through its escaped quotes."""

from __future__ import annotations

import json

import pytest

from diagnoser.ingest.redact import Redactor
from diagnoser.ingest.redact_structured import redact_json_line, redact_value

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: key values as a user types them: quotes, backslashes, JSON-looking text, spaces, non-ASCII
KEYS = ["plainsecret99", 'ab"cd12345678', "a\\b'c\\\"d9876", '{"k": "v"} 1234567', "two words here 42",
        "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234", "ключ-секрет-12345", "x\\", '"']


@pytest.mark.parametrize("key", KEYS)
def test_plan_json_is_valid_with_any_api_key(doctor, tmp_path, key):
    for extra in (["--api-key", key], [f"--api-key={key}", "--hf-token", key]):
        res = doctor("plan", "--gpu", "L4", "--format", "json", "--", "vllm", "serve", MODEL, *extra, cwd=tmp_path)
        assert res.returncode in (0, 1), res.stderr
        doc = json.loads(res.stdout)  # valid JSON
        assert "--api-key" in json.dumps(doc)
        for secret in {key, key.strip('"\\ ')} - {"", '"', "x"}:
            assert secret not in res.stdout and secret not in json.dumps(doc, ensure_ascii=False), secret


@pytest.mark.parametrize("key", KEYS)
def test_plan_launch_file_json_is_valid(doctor, tmp_path, key):
    launch = tmp_path / "serve.sh"
    quoted = "'" + key.replace("'", "'\\''") + "'"
    launch.write_text(f"vllm serve {MODEL} --api-key {quoted} --max-model-len 8192\n")
    res = doctor("plan", "--gpu", "L4", "--format", "json", "--from-file", str(launch), cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    json.loads(res.stdout)


def test_a_json_line_is_redacted_value_by_value():
    r = Redactor(output=True)
    line = ('  "command": "vllm serve m --api-key \\"$VLLM_API_KEY\\" --hf-token hf_AbCdEfGhIjKlMnOpQrStUvWx12",'
            ' "api_key": "two words 42", "n": 3, "note": "say \\"hi\\"",')
    out = redact_json_line(line, r)
    doc = json.loads("{" + out.strip().rstrip(",") + "}")
    assert doc["command"].startswith('vllm serve m --api-key "$VLLM_API_KEY" --hf-token «redacted:')
    assert doc["api_key"].startswith("«redacted:") and doc["n"] == 3 and doc["note"] == 'say "hi"'
    assert r.total == 2


def test_redact_value_walks_the_structure():
    r = Redactor()
    value = {"args": {"api_key": "two words 42", "hf_token": None, "model": "m"},
             "command": ["vllm", "serve", "--api-key", "abc def"], "text": "Authorization: Bearer Zx81kQp0Lm3Nv7Rt5Ws2"}
    out = redact_value(value, r)
    assert out["args"]["api_key"].startswith("«redacted:") and out["args"]["hf_token"] is None
    assert out["args"]["model"] == "m" and "Zx81kQp0Lm3Nv7Rt5Ws2" not in out["text"]
    assert value["args"]["api_key"] == "two words 42"  # a copy


@pytest.mark.parametrize("redact", ["line", "value"])
def test_an_opentelemetry_attribute_is_judged_by_its_name_not_by_the_word_key(redact):
    """OTel attributes are `{"key": NAME, "value": {"stringValue": V}}`: NAME is never a secret in itself (the
    word `key` is not a secret-named setting there), and V goes whole when NAME is secret-named."""
    attrs = [{"key": "vllm_doctor.rule", "value": {"stringValue": "weights-oom"}},
             {"key": "log.file.path", "value": {"stringValue": "/var/log/vllm/a.log"}},
             {"key": "vllm.api_key", "value": {"stringValue": "plainsecret99"}}]
    if redact == "line":
        out = json.loads(redact_json_line(json.dumps({"attributes": attrs}), Redactor()))["attributes"]
    else:
        out = redact_value(attrs, Redactor())
    assert [a["key"] for a in out] == ["vllm_doctor.rule", "log.file.path", "vllm.api_key"]
    assert out[0]["value"]["stringValue"] == "weights-oom"
    assert out[1]["value"]["stringValue"] == "/var/log/vllm/a.log"
    assert "plainsecret99" not in json.dumps(out) and "redacted" in out[2]["value"]["stringValue"]
