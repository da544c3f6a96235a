"""Redaction: every secret shape is replaced by a typed marker and counted; ordinary vLLM lines are untouched;
secrets planted in every field a log can carry them never reach any output format."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser.analysis.pipeline import diagnose, diagnose_text
from diagnoser.ingest.redact import Redactor, redact_text
from diagnoser.ingest.redact_hints import maybe_secret
from diagnoser.ingest.redact_patterns import MARK_START
from diagnoser.report import FORMATS, renderer
from diagnoser.rules.loader import load_rules

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"
ECHO_RULE = ROOT / "tests" / "data" / "rules" / "secret-echo.yaml"

#: line, the secrets it holds (must vanish), the kinds counted
POSITIVE = [
    ("non-default args: {'model': 'm', 'api_key': ['sk-proj-Zq3xT9vB2mN8kL4pR7sW1yH6', 'token-abc123XYZ'], "
     "'hf_token': 'hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890'}",
     ["sk-proj-Zq3xT9vB2mN8kL4pR7sW1yH6", "token-abc123XYZ", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890"],
     {"api_key": 2, "hf_token": 1}),
    ("non-default args: {'model': 'm', 'api_key': 'plainkey-7'}", ["plainkey-7"], {"api_key": 1}),
    ("args: Namespace(host=None, port=8000, api_key='secret-key-9', hf_token='hf_zz', ssl_keyfile=None)",
     ["secret-key-9", "'hf_zz'"], {"api_key": 1, "hf_token": 1}),
    ("args: Namespace(api_key=['k-one-1', 'k-two-2'], model='m')", ["k-one-1", "k-two-2"], {"api_key": 2}),
    ("Namespace(api_key=bare-value-1, hf_token=hf_bareTokenValue0123456789ab)",
     ["bare-value-1", "hf_bareTokenValue0123456789ab"], {"api_key": 1, "hf_token": 1}),
    ("HF_TOKEN=hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef12 vllm serve m", ["hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef12"],
     {"hf_token": 1}),
    ("export HF_TOKEN=shortish", ["shortish"], {"hf_token": 1}),
    ("VLLM_API_KEY=abc12345 AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     ["abc12345", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"], {"api_key": 1, "aws_secret": 1}),
    ("environ({'PATH': '/usr/bin', 'HF_TOKEN': 'tok-in-env-1', \"VLLM_API_KEY\": \"key-in-env-2\"})",
     ["tok-in-env-1", "key-in-env-2"], {"hf_token": 1, "api_key": 1}),
    ("  - name: HUGGING_FACE_HUB_TOKEN\n", [], {}),
    ("HUGGING_FACE_HUB_TOKEN: hub-tok-value-1", ["hub-tok-value-1"], {"hf_token": 1}),
    ("OPENAI_API_KEY='sk-abcdefghijklmnopqrstu12345'", ["sk-abcdefghijklmnopqrstu12345"], {"api_key": 1}),
    ("docker run -e WANDB_API_KEY=0123456789abcdef -e MY_SERVICE_TOKEN=zzz-123", ["0123456789abcdef", "zzz-123"],
     {"api_key": 1, "token": 1}),
    ("DB_PASSWORD=hunter2-x", ["hunter2-x"], {"password": 1}),
    ("$ vllm serve meta-llama/Llama-3.1-8B --api-key token-abc123 --max-model-len 4096", ["token-abc123"],
     {"api_key": 1}),
    ("vllm serve m --api-key=s3cr3t-v4lue --hf-token 'hf_short'", ["s3cr3t-v4lue", "hf_short"],
     {"api_key": 1, "hf_token": 1}),
    ('vllm serve m --api-key "quoted key 1"', ["quoted key 1"], {"api_key": 1}),
    ('curl -H "Authorization: Bearer sk-1234567890abcdefghij" http://localhost:8000/v1/models',
     ["sk-1234567890abcdefghij"], {"bearer_token": 1}),
    ("headers={'Authorization': 'Basic dXNlcjpwYXNzd29yZA=='}", ["dXNlcjpwYXNzd29yZA=="], {"basic_auth": 1}),
    ("authorization: token-without-scheme-1", ["token-without-scheme-1"], {"bearer_token": 1}),
    ("sending Bearer abc123def456ghi to the server", ["abc123def456ghi"], {"bearer_token": 1}),
    ("x-api-key: xk-98765-abcde", ["xk-98765-abcde"], {"api_key": 1}),
    ("model='https://user:p4ssw0rd@example.com/models/x'", ["p4ssw0rd"], {"url_password": 1}),
    ("redis://:pw123@cache:6379/0 and postgresql://app:Sup3r%2Fsecret@db/x", ["pw123", "Sup3r%2Fsecret"],
     {"url_password": 2}),
    ("token in text hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef12.", ["hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef12"],
     {"hf_token": 1}),
    ("org token api_org_ABCDEFGHIJKLMNOPQRSTUVWXYZab", ["api_org_ABCDEFGHIJKLMNOPQRSTUVWXYZab"], {"hf_token": 1}),
    ("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12_-yz and sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv12",
     ["sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12_-yz", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv12"], {"api_key": 2}),
    ("git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/x/y",
     ["ghp_abcdefghijklmnopqrstuvwxyz0123456789"], {"github_token": 1}),
    ("aws_access_key_id=AKIAIOSFODNN7EXAMPLE", ["AKIAIOSFODNN7EXAMPLE"], {"aws_access_key_id": 1}),
    ("client_secret: 'cs-abc-123'", ["cs-abc-123"], {"secret": 1}),
]

#: Ordinary vLLM lines that must come out byte for byte as they went in.
NEGATIVE = [
    "SamplingParams(n=1, temperature=0.7, max_tokens=16, stop_token_ids=[], skip_special_tokens=True)",
    "'bos_token': '<s>', 'pad_token': '<pad>', 'eos_token': '</s>', 'unk_token': '<unk>'",
    '"tool_call_parser": "hermes", "tokenizer": "meta-llama/Llama-3.1-8B", "token_ids": [1, 2, 3]',
    "non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'tokenizer': 'meta-llama/x', "
    "'max_model_len': 8192, 'api_key': None, 'hf_token': None}",
    "args: Namespace(host=None, port=8000, api_key=None, hf_token=True, ssl_keyfile=None, ssl_certfile=None, "
    "max_num_batched_tokens=8192, tokenizer_mode='auto', hf_overrides=None, use_hf_transfer=False)",
    "Initializing a V1 LLM engine (v0.10.0) with config: model='m', speculative_config=None, tokenizer='m', "
    "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config={}, "
    "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=131072",
    "INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%",
    "INFO 11-24 11:45:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
    "Chunked prefill is enabled with max_num_batched_tokens=2048.",
    "Bearer authentication is enabled for /v1 routes",
    "Authorization: Bearer",
    "vllm serve m --api-key $VLLM_API_KEY --hf-token ${HF_TOKEN}",
    "HF_TOKEN=$HF_TOKEN VLLM_API_KEY=<your-key> OPENAI_API_KEY=",
    "Using default chat template; the key 'chat_template' is missing",
    "KeyError: 'model.layers.0.mlp.down_proj.weight'",
    "task-abcdefghijklmnopqrstu1234 is done; disk-sk-abcdefghijklmnopqrstu1234",
    "hf_config_path=None hf_overrides={'rope_scaling': None} use_hf_chat_template",
    "The tokenizer's pad_token_id is None; generation_config: max_new_tokens=256",
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:05<00:00, 1.31s/it]",
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips.",
    "speculative_config: {'method': 'eagle', 'num_speculative_tokens': 3}",
    "  File \"/usr/lib/python3/dist-packages/vllm/transformers_utils/tokenizer.py\", line 12, in get_tokenizer",
    "secrets_dir=/etc/secrets, keyfile=/etc/ssl/key.pem",
    "redacted already: api_key='«redacted:api_key»' HF_TOKEN=«redacted:hf_token»",
    "                     [--allowed-headers ALLOWED_HEADERS] [--api-key API_KEY]",
    "  --api-key API_KEY [API_KEY ...]   If provided, the server will require one of these keys",
    "  --hf-token [HF_TOKEN]  The token to use as HTTP bearer authorization for remote files.",
]


@pytest.mark.parametrize("line, secrets, kinds", POSITIVE)
def test_secret_shapes_are_redacted_and_counted(line, secrets, kinds):
    r = Redactor()
    out = r(line)
    for secret in secrets:
        assert secret not in out, out
    assert dict(r.counts) == kinds, out
    for kind in kinds:
        assert f"«redacted:{kind}»" in out
    # a second pass finds nothing more: markers are never redacted again
    again = Redactor()
    assert again(out) == out and again.total == 0


@pytest.mark.parametrize("line", NEGATIVE)
def test_ordinary_lines_are_untouched(line):
    r = Redactor()
    assert r(line) == line
    assert r.total == 0


def test_structure_around_a_secret_is_kept():
    r = Redactor()
    out = r("non-default args: {'model': 'm', 'api_key': ['a-key-1', 'b-key-2'], 'max_model_len': 8192}")
    assert out == ("non-default args: {'model': 'm', 'api_key': ['«redacted:api_key»', '«redacted:api_key»'], "
                   "'max_model_len': 8192}")
    rep = diagnose_text("INFO 01-01 00:00:00 [utils.py:1] " + out + "\n")
    assert rep.context.args["api_key"] == ["«redacted:api_key»", "«redacted:api_key»"]
    assert rep.context.max_model_len == 8192


def test_redact_text_counts_by_kind():
    text, counts = redact_text("HF_TOKEN=abc-123\nnothing here\nvllm serve m --api-key k-1234\n")
    assert "abc-123" not in text and "k-1234" not in text and text.count("\n") == 3
    assert counts == {"hf_token": 1, "api_key": 1}


def test_fixture_logs_hold_no_false_positives():
    """The realistic logs in fixtures/ carry no secrets: nothing in them may be redacted."""
    fixtures = [p for p in sorted((ROOT / "fixtures").glob("*.log"))
                if "secret" not in p.name and "redact" not in p.name]
    if not fixtures:
        pytest.skip("no fixtures yet")
    for path in fixtures:
        r = Redactor()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            out = r(line)
            assert out == line, f"{path.name}: {out}"


def test_precheck_rejects_hot_lines_cheaply():
    """The reader calls the redactor on every kept line: the common ones must not reach the patterns."""
    hot = [
        "INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%",
        "(EngineCore_0 pid=2211) ERROR 08-14 09:12:40 [core.py:700] Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 691, in run_engine_core',
        "INFO:     127.0.0.1:51234 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
        "INFO 08-14 09:12:38 [kv_cache_utils.py:849] GPU KV cache size: 1,581,648 tokens",
    ]
    for line in hot:
        assert not maybe_secret(line.lower()), line


def test_precheck_never_hides_a_secret():
    """Every positive case passes the pre-check (else it would be skipped)."""
    for line, secrets, _ in POSITIVE:
        if secrets:
            assert maybe_secret(line.lower()), line


def test_lines_without_a_hint_skip_the_secret_patterns():
    """Redaction stays cheap because a line with no secret-like word never reaches the keyed and entropy
    patterns (the speed itself is measured by bench/, never asserted here)."""
    plain = [
        "INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 18 reqs",
        "(EngineCore_0 pid=2211) ERROR 08-14 09:12:40 [core.py:700] ValueError: To serve at least one request",
        "INFO 08-14 09:12:01 [utils.py:326] non-default args: {'model': 'm', 'max_model_len': 131072}",
    ]
    r = Redactor()
    for line in plain:
        assert not maybe_secret(line.lower()), line
        assert r(line) == line
    # a line that names a secret setting does take the slow path
    assert maybe_secret("args: namespace(host=none, api_key=none, hf_token=none)")


# -- secrets planted in every field, checked absent from every format -------------------------------------

PLANTED = {
    "kv-cache-secrets": [
        "sk-proj-Zq3xT9vB2mN8kL4pR7sW1yH6", "token-abc123XYZ", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0987654321", "vk-7f3a9c2e1b", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "Mirr0rPassw0rd", "sk-live-9aB8cD7eF6gH5iJ4kL3m", "S3cretPass", "hf_ZxCvBnMaSdFgHjKlQwErTyUiOp5647382910",
    ],
    "namespace-secrets": ["sk-Nmsp4ceKey0123456789abcdef", "hf_NamespaceTokenValue0123456789abcd", "D0wnl0adPw"],
    "hub-auth-secrets": [
        "hf_PrIvAtEmOdElToKeN0123456789abcdefgh", "Hub-P4ssw0rd", "hf_UrLqUeRyToKeN0123456789abcdefghij",
        "hf_HeAdErToKeN0123456789abcdefghijkl", "hf_FaCtToKeN0123456789abcdefghijklm",
        "hf_EvIdEnCeToKeN0123456789abcdefghij", "sk-EvidenceKey0123456789abcdef",
    ],
    "healthy": ["token-abc123"],
}
#: Fragments of the secrets above that must not survive either (a partial leak is a leak).
FRAGMENTS = ["Zq3xT9vB2mN8", "QwErTyUiOp", "AbCdEfGhIj", "7f3a9c2e1b", "EXAMPLEKEY", "Mirr0r", "9aB8cD7e",
             "S3cret", "ZxCvBnMa", "Nmsp4ce", "NamespaceToken", "D0wnl0ad", "PrIvAtE", "P4ssw0rd", "UrLqUeRy",
             "HeAdEr", "FaCtToKeN", "EvIdEnCe", "EvidenceKey", "abc123"]


def _all_outputs(log: str, rules, tmp_path: Path) -> dict[str, str]:
    with (LOGS / f"{log}.log").open("rb") as fh:
        report = diagnose(fh, f"logs/{log}.log", rules)
    summary = tmp_path / f"{log}-summary.md"
    outs = {}
    for fmt in FORMATS:
        outs[fmt] = renderer(fmt)([report], {"color": False, "step_summary": str(summary)})
    outs["job-summary"] = summary.read_text()
    outs["repr(report)"] = repr(report)
    return outs


@pytest.mark.parametrize("log", sorted(PLANTED))
def test_planted_secrets_never_reach_any_output(log, tmp_path):
    rules = load_rules((ECHO_RULE,))
    outs = _all_outputs(log, rules, tmp_path)
    assert set(outs) >= {"text", "json", "jsonl", "sarif", "github", "markdown", "job-summary"}
    for fmt, text in outs.items():
        for secret in PLANTED[log]:
            assert secret not in text, f"{log}: {secret!r} leaked into {fmt}"
        for frag in FRAGMENTS:
            assert frag not in text, f"{log}: fragment {frag!r} leaked into {fmt}"
    doc = json.loads(outs["json"])
    assert doc["redactions"]["total"] >= len(PLANTED[log])


def test_every_field_of_the_echo_finding_holds_markers_only():
    """Facts, advice, fixes, command and evidence of a rule that echoes what it matched."""
    rules = load_rules((ECHO_RULE,))
    with (LOGS / "hub-auth-secrets.log").open("rb") as fh:
        report = diagnose(fh, "x.log", rules)
    f = next(f for f in report.findings if f.rule.id == "secret-echo")
    assert f.facts["token"] == "«redacted:hf_token»"
    assert "«redacted:url_password»" in f.facts["url"] and "«redacted:hf_token»" in f.facts["url"]
    assert f.facts["header"].startswith("Authorization: Bearer «redacted:bearer_token»")
    assert "«redacted:" in f.advice and f.fixes[0]["value"] == "«redacted:hf_token»"
    assert all(MARK_START in ln.raw for ln in f.evidence)
    assert report.context.args["hf_token"] == "«redacted:hf_token»"
    assert report.redactions == {"hf_token": 4, "url_password": 1, "bearer_token": 1, "api_key": 1}


def test_context_args_from_namespace_and_engine_line_are_redacted():
    with (LOGS / "namespace-secrets.log").open("rb") as fh:
        report = diagnose(fh, "x.log")
    args = report.context.args
    assert args["api_key"] == "«redacted:api_key»" and args["hf_token"] == "«redacted:hf_token»"
    assert args["tool_call_parser"] == "hermes" and args["max_model_len"] == 32768
    assert report.redactions == {"api_key": 1, "hf_token": 1, "url_password": 1}


def test_counts_are_reported_in_json_and_text():
    with (LOGS / "kv-cache-secrets.log").open("rb") as fh:
        report = diagnose(fh, "x.log")
    doc = json.loads(renderer("json")([report], {}))
    assert doc["redactions"] == {"total": 10, "by_kind": {"api_key": 3, "hf_token": 3, "aws_secret": 1,
                                                          "url_password": 2, "bearer_token": 1}}
    assert "10 secret(s) redacted" in renderer("text")([report], {"color": False})


def test_no_redact_keeps_secrets_and_warns(tmp_path):
    cmd = [sys.executable, "-m", "diagnoser", "check", "-f", "json", "--no-redact", "--exit-zero",
           str(LOGS / "namespace-secrets.log")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert "--no-redact" in r.stderr and "warning" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["redactions"]["total"] == 0
    assert doc["context"]["args"]["api_key"] == "sk-Nmsp4ceKey0123456789abcdef"


def test_redaction_happens_before_matching_and_in_follow_lines():
    """A secret on a line the prefilter keeps only as a follow line is redacted too."""
    text = ("ERROR 01-01 00:00:00 [core.py:1] ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.\n"
            "plain follow line with HF_TOKEN=hf_FoLlOwLiNeToKeN0123456789abcdefgh\n")
    report = diagnose(io.BytesIO(text.encode()), "x.log")
    assert report.redactions.get("hf_token") == 1
    out = "".join(renderer(fmt)([report], {"color": False, "step_summary": None}) for fmt in FORMATS)
    assert "FoLlOwLiNe" not in out
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", out)


EXTRA_LONG = [  # what the long path finds from its hints: cookies, proxy and x- headers, schemes, JSON-in-JSON
    "Set-Cookie: session=abc123DEF456; Path=/", "Proxy-Authorization: Basic dXNlcjpwYXNz", "X-API-KEY: k-123-456",
    'body="{\\"api_key\\": \\"sk-abcdefghijklmnopqrstu12345\\"}"', "x.postgres://u:pw-9@db/x", "apikey=q8Zr2LmX9vTb4NcW7kPd",
    "token is Zq3xT9vB2mN8kL4pR7sW1yH6", "apikeys: Zq3xT9vB2mN8kL4pR7sW1yH6", "key_key_key_key=value-1", "git+https://ABCDEFGHIJKLMNOPQRSTUV@host/x",
]


@pytest.mark.parametrize("accent", ["", "é ü «»", "\u212a ap\u0131_key=v-3 \u017fecret: v-4", "\u0130"])
def test_a_long_text_is_redacted_as_a_short_one_is(accent, monkeypatch):
    """A long text (a piece of an enormous line) runs most patterns only where its hints are: the same text and
    counts come out as from the short path, which runs every pattern over all of it; ASCII or not, with the
    characters re folds to ASCII letters (then the patterns scan it all) or a marker already in it."""
    import random

    from diagnoser.ingest import redact
    from diagnoser.ingest.keywords import lowered

    lines = [line for line, _s, _k in POSITIVE] + NEGATIVE + EXTRA_LONG
    rng = random.Random(len(accent))
    text = " ".join(f"{rng.choice(lines)} {accent} {'x' * rng.randint(0, 300)}" for _ in range(400))
    assert len(text) >= redact.LONG_TEXT * 4
    long = Redactor()
    got = long(text)
    assert lowered(got) == got.lower()  # the copy kept in step with the substitutions, held for the matcher
    monkeypatch.setattr(redact, "LONG_TEXT", 10**9)
    short = Redactor()
    assert got == short(text) and long.counts == short.counts and long.total > 200


def test_the_characters_re_folds_to_ascii_are_all_known():
    """redact_hints._ASCII_FOLDS: every non-ASCII character that re's IGNORECASE matches to an ASCII letter, digit or
    `_`, or that lower-cases to something holding ASCII (a text holding one is scanned whole, not at its hints)."""
    import sys

    from diagnoser.ingest import redact_hints

    word = re.compile(r"(?i)[a-z0-9_]").match
    found = {c for c in map(chr, range(0x80, sys.maxunicode + 1))
             if word(c) or any(ch.isascii() for ch in c.lower())}
    assert found == set(redact_hints._ASCII_FOLDS)


def test_flag_led_by_its_dash_matches_what_the_look_behind_form_matches():
    """redact_patterns.FLAG starts with its literal "-" and tests the character before it after (re skips between
    dashes in C): the same flags, keys and values as the form led by the look-behind."""
    import random

    from diagnoser.ingest import redact_patterns

    reference = re.compile(redact_patterns.FLAG.pattern.replace(r"-(?<![\w-]-)-?", r"(?<![\w-])--?", 1))
    assert reference.pattern != redact_patterns.FLAG.pattern
    rng = random.Random(9)
    atoms = ["-", "--", "api-key", "x", " ", "=", "'v 1'", "é", "_", "hf-token", "\t", "a-b", "9", '"q"']
    texts = ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 200))) for _ in range(400)]
    spans = [[m.span("key") + m.span("val") + m.span() for m in p.finditer(t)] for p in (redact_patterns.FLAG, reference)
             for t in texts]
    assert spans[:len(texts)] == spans[len(texts):] and sum(map(len, spans)) > 400
