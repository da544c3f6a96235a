"""Secrets never reach an output unless --no-redact: each shape in every format, misspelled secret flags,
`plan` (command line and launch files, text and JSON), and a token that a hard wrap cut in two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnoser.ingest.redact import Redactor
from diagnoser.ingest.redact_patterns import secret_flag
from diagnoser.report import FORMATS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
#: secret -> a log line that carries it (the secret must vanish from every output)
SHAPES = {
    "typo-api-kye": ("Zx81PqvR33", "api_server.py: error: unrecognized arguments: --api-kye Zx81PqvR33"),
    "typo-hf-tokn": ("mytokenvalue77", "vllm serve m --hf-tokn mytokenvalue77 --max-model-len 4096"),
    "typo-pasword": ("hunter2hunter", "launcher: --pasword=hunter2hunter"),
    "jwt": (JWT, f"request failed: Authorizatio header {JWT} rejected"),
    "url-password-slash": ("pa/ss@word9", "loading from https://alice:pa/ss@word9@models.example.com/x"),
    "cookie": ("s3ssion-Value-42", "headers: Cookie: session=s3ssion-Value-42; theme=dark"),
    "set-cookie": ("abcDEF123456", "Set-Cookie: sid=abcDEF123456; Path=/; HttpOnly"),
    "slack": ("xoxb-1234567890-ABCDEFGHIJ", "notify via xoxb-1234567890-ABCDEFGHIJ failed"),
    "google": ("AIzaSyA1234567890abcdefghijklmnopqrstu", "GOOGLE key AIzaSyA1234567890abcdefghijklmnopqrstu set"),
    "nvidia": ("nvapi-AbCdEfGhIjKlMnOpQrStUvWx12", "NIM: using nvapi-AbCdEfGhIjKlMnOpQrStUvWx12 for auth"),
    "entropy-after-token": ("q8Zr2LmX9vTb4NcW7kPd", "the access token is q8Zr2LmX9vTb4NcW7kPd (expires soon)"),
    "entropy-after-secret": ("Tz9KwQ2mB7xLr4VnP8sD", "client secret: Tz9KwQ2mB7xLr4VnP8sD"),
    # variants: query strings (also an access log's request line), a token as a URL's user, quotes escaped
    # inside the value (JSON, Python repr, JSON inside JSON), flag spellings, header with `=`, a PEM key
    "url-query-signature": ("Yb72jHs9Kd0Pq4Lr8Vt3",
                            "GET https://s3.example.com/b/m.bin?X-Amz-Signature=Yb72jHs9Kd0Pq4Lr8Vt3&X-Amz-Expires=60"),
    "url-query-access-log": ("AbCdEf0123456789gh", '10.0.0.1:5000 - "GET /v1/models?sig=AbCdEf0123456789gh HTTP/1.1"'),
    "url-query-plain-token": ("lowentropyvalue", "fetch https://h.example.com/x?token=lowentropyvalue&page=2"),
    "url-user-token": ("Qw7eRt5yUi3oP1aS9dF2", "git clone https://Qw7eRt5yUi3oP1aS9dF2@git.example.com/x.git"),
    "json-escaped-quote": ("cD4eF5gH6iJ7kL8", 'config {"api_key": "aB3\\"cD4eF5gH6iJ7kL8", "n": 1}'),
    "repr-escaped-quote": ("b secretrest", "Namespace(api_key='a\\'b secretrest', model='m')"),
    "json-in-json": ("Mn8bV6cX4zL2kJ0hG9fD", 'payload "{\\"api_key\\": \\"Mn8bV6cX4zL2kJ0hG9fD\\"}"'),
    "flag-underscore": ("plainvalue42", "vllm serve m --api_key plainvalue42"),
    "flag-hf-underscore": ("hfplain77", "vllm serve m --hf_token hfplain77"),
    "flag-prefixed": ("openaiplain9", "launcher --openai-api-key openaiplain9 --port 1"),
    "flag-single-dash": ("dashplain5", "run.sh -api-key dashplain5"),
    "header-with-equals": ("Hk2Jd8Ls0Pq4Wr6Ty1", "headers X-API-Key=Hk2Jd8Ls0Pq4Wr6Ty1"),
    "private-key": ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_is_redacted(name):
    secret, line = SHAPES[name]
    out = Redactor()(line)
    assert secret not in out and "«redacted:" in out, out


def test_hard_wrapped_token_is_redacted_on_both_lines():
    r = Redactor()
    first = r("(APIServer pid=1) INFO 08-21 14:02:14 [utils.py:326] non-default args: {'hf_token': 'hf_AbCdEfGhIj")
    second = r("KlMnOpQrStUvWxYz0123456789', 'model': 'm'}")
    assert "hf_AbCdEfGhIj" not in first and "KlMnOpQrStUvWxYz0123456789" not in second
    # a complete secret at a line's end does not eat the next log line's header
    r2 = Redactor()
    r2("vllm serve m --api-key abcdefghijkl123")
    assert r2("INFO 08-21 14:02:15 [api_server.py:1] Starting") == "INFO 08-21 14:02:15 [api_server.py:1] Starting"


def test_a_wrapped_secret_does_not_swallow_the_next_lines_key():
    """The rest of a cut token is the next line's first word, unless that word is a key: then its value must
    still be found (`authorization=Bearer TOKEN`, once, took the key as the rest and left TOKEN)."""
    r = Redactor()
    r("env HF_TOKEN=hf_PlMoKnIjBuHvGyCfTxDrZeSwAq98765432")
    out = r("authorization=Bearer Zx81kQp0Lm3Nv7Rt5Ws2")
    assert "Zx81kQp0Lm3Nv7Rt5Ws2" not in out and "«redacted:bearer_token»" in out, out
    r("Authorization: Bearer abc.def.123456789")
    out = r("Bearer Zx81kQp0Lm3Nv7Rt5Ws2")
    assert "Zx81kQp0Lm3Nv7Rt5Ws2" not in out, out


def test_a_private_key_is_redacted_on_every_line():
    r = Redactor()
    pem = ["-----BEGIN RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi", "Z1BjP5CE/Wm/Rr500P5sK+b",
           "-----END RSA PRIVATE KEY-----", "INFO 08-21 14:02:15 [api_server.py:1] Starting"]
    out = [r(line) for line in pem]
    assert out[0] == "-----BEGIN RSA PRIVATE KEY----- «redacted:private_key»"
    assert out[1:3] == ["«redacted:private_key»"] * 2
    assert out[3:] == pem[3:]


def test_secret_flag_is_fuzzy_but_knows_real_flags():
    for name in ("api-key", "api-kye", "apikey", "hf-token", "hf-tokn", "token", "tokne", "password", "pasword",
                 "secret", "secert", "secret-key", "access-key", "key", "api_key", "hf_token", "openai-api-key"):
        assert secret_flag(name), name
    for name in ("max-num-batched-tokens", "tokenizer", "tokenizer-mode", "kv-cache-dtype", "seed",
                 "ssl-keyfile", "max-model-len", "served-model-name", "skip-tokenizer-init"):
        assert not secret_flag(name), name
    assert Redactor()("--max-num-batched-tokns 8192") == "--max-num-batched-tokns 8192"


def _log_with_secrets(tmp_path: Path) -> Path:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    # every shape on an ERROR line the doctor keeps as evidence, and in the settings it repeats
    planted = [f"(EngineCore_0 pid=22010) ERROR 08-21 14:04:41 [core.py:700] ValueError: To serve {line}"
               for _, line in SHAPES.values()]
    lines[2] = lines[2].replace("'gpu_memory_utilization': 0.92",
                                "'gpu_memory_utilization': 0.92, 'served_model_name': 'https://u:pa/ss@word9@h/x'")
    path = tmp_path / "secrets.log"
    path.write_text("\n".join(lines[:50] + planted + lines[50:]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_no_secret_in_any_format(fmt, tmp_path, doctor):
    log = _log_with_secrets(tmp_path)
    res = doctor("--format", fmt, "--no-color", str(log), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    for name, (secret, _) in SHAPES.items():
        assert secret not in res.stdout, name
        assert secret not in res.stderr, name
    if fmt in ("json", "sarif"):
        json.loads(res.stdout)  # redaction never breaks the document (the counts stay numbers)
    if fmt == "jsonl":
        assert [json.loads(line) for line in res.stdout.splitlines()]
    if fmt == "json":
        assert all(isinstance(n, int) for n in json.loads(res.stdout)["redactions"]["by_kind"].values())


def test_no_redact_keeps_them(tmp_path, doctor):
    log = _log_with_secrets(tmp_path)
    res = doctor("--format", "json", "--no-redact", str(log), cwd=tmp_path)
    assert "Zx81PqvR33" in res.stdout and "--no-redact" in res.stderr


def test_plan_redacts_command_line_and_launch_files(tmp_path, doctor):
    secrets = ["sekrit-value-123", "hf_abcdefghijklmnopqrstuvwxyz123456", "Zx81PqvR33"]
    for fmt in ("text", "json"):
        res = doctor("plan", "--gpu", "A100-80GB", "--format", fmt, "--", "vllm", "serve",
                     "meta-llama/Llama-3.1-8B-Instruct", "--api-key", secrets[0], "--hf-token", secrets[1],
                     cwd=tmp_path)
        assert res.returncode in (0, 1), res.stderr
        assert "«redacted:" in res.stdout
        for s in secrets:
            assert s not in res.stdout + res.stderr
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        "services:\n  vllm:\n    image: vllm/vllm-openai\n    environment:\n"
        f"      HF_TOKEN: {secrets[1]}\n"
        f"    command: --model meta-llama/Llama-3.1-8B-Instruct --api-key {secrets[0]} --api-kye {secrets[2]}\n")
    for fmt in ("text", "json"):
        res = doctor("plan", "--gpu", "A100-80GB", "--format", fmt, "--from-file", str(compose), cwd=tmp_path)
        assert res.returncode in (0, 1), res.stderr
        for s in secrets:
            assert s not in res.stdout + res.stderr, (fmt, s)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "sarif"])
def test_a_secret_in_the_file_name_is_redacted(fmt, tmp_path, doctor):
    """A log saved under a name that holds a token (a signed URL's query, a token pasted into a folder name)."""
    token = "hf_" + "Qw7Rt" * 6
    log = tmp_path / f"vllm-{token}.log"
    log.write_bytes(EXAMPLE.read_bytes())
    res = doctor("--format", fmt, "--no-color", str(log), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert token not in res.stdout and token not in res.stderr
    assert "vllm-" in res.stdout  # the rest of the name still tells the user which file it is
    kept = doctor("--format", fmt, "--no-color", "--no-redact", str(log), cwd=tmp_path)
    assert token in kept.stdout
