"""Secrets in the shapes the second round missed (issue 29, item 2), tested as classes: every Authorization
scheme (the scheme stays, the credential goes), every dashed token header, Azure keys and connection strings,
issuer-prefixed tokens, PGP private key blocks; in all 8 formats, the job summary and live stderr; and a secret
counts as redacted only when it is gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnoser.ingest.redact import Redactor
from diagnoser.report import FORMATS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"

CRED = "Zx81kQp0Lm3Nv7Rt5Ws2"
#: schemes from the IANA registry and the vendors' own (Azure SharedKey, Discord Bot, Okta SSWS, ...)
SCHEMES = ("Bearer", "Basic", "Token", "Api-Key", "ApiKey", "Key", "SharedKey", "SharedKeyLite", "Bot", "OAuth",
           "Negotiate", "NTLM", "SSWS", "GoogleLogin", "Splunk", "DPoP", "PrivateToken", "JWT", "MAC", "Hawk",
           "Klaviyo-API-Key", "Zoho-oauthtoken", "vapid")
#: how a header reaches a log: raw, a Python dict repr, JSON, curl's trace, a key=value dump
HEADER_SPELLINGS = ("Authorization: {v}", "authorization={v}", "{{'authorization': '{v}'}}",
                    '{{"Authorization":"{v}"}}', "> Proxy-Authorization: {v}", "headers=[('Authorization', '{v}')]")


@pytest.mark.parametrize("spelling", HEADER_SPELLINGS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_authorization_scheme_loses_its_credential(scheme, spelling):
    r = Redactor()
    line = "(APIServer pid=1) DEBUG 08-21 14:04:41 [client.py:88] request " + spelling.format(v=f"{scheme} {CRED}")
    out = r(line)
    assert CRED not in out and "«redacted:" in out, out
    assert scheme in out, out  # the scheme is not the secret: it stays, to say what kind of credential it was
    assert r.total == 1, r.counts


@pytest.mark.parametrize("value,secrets", [
    ('Digest username="alice", realm="api", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/v1/models", '
     'response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41"',
     ["6629fae49393a05397450978507c4ef1", "dcd98b7102dd2f0e8b11d0f600bfb0c093"]),
    ("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=host;x-amz-date, "
     "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
     ["5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"]),
    ('OAuth oauth_consumer_key="xvz1evFS4wEEPTGEFPHBog", oauth_signature="tnnArxj06cWHq44gCs1OSKk%2FjLY%3D", '
     'oauth_token="370773112-GmHxMAgYyLbNEtIKZeRNFsMKPR9EyMZeS9weJAEb"',
     ["tnnArxj06cWHq44gCs1OSKk%2FjLY%3D", "370773112-GmHxMAgYyLbNEtIKZeRNFsMKPR9EyMZeS9weJAEb"]),
    ("SharedKey myaccount:ctzMq410TV3wS7upTBcunJTDLEJwMAZuFPfr0mrrA08=", ["ctzMq410TV3wS7upTBcunJTDLEJwMAZuFPfr0mrrA08="]),
    ("Basic dXNlcjpodW50ZXIy", ["dXNlcjpodW50ZXIy"]),
])
def test_multi_part_credentials_lose_every_part(value, secrets):
    for spelling in ("Authorization: {v}", '{{"authorization": "{v}"}}'):
        out = Redactor()("INFO 08-21 14:04:41 [auth.py:12] " + spelling.format(v=value.replace('"', '\\"')
                                                                             if spelling.startswith("{") else value))
        for secret in secrets:
            assert secret not in out, out


def test_a_scheme_alone_is_not_counted():
    """Nothing removed, nothing counted: the summary never claims a redaction that did not happen."""
    for line in ("Authorization: Bearer", "authorization header missing", "Authorization: none",
                 "'authorization': None", "Authorization: Api-Key $API_KEY"):
        r = Redactor()
        assert r(line) == line and r.total == 0, (line, r.counts)


TOKEN_HEADERS = ("X-Auth-Token", "X-Access-Token", "Private-Token", "X-Vault-Token", "api-token", "X-Api-Token",
                 "X-Gitlab-Token", "X-Figma-Token", "X-Shopify-Access-Token", "X-Goog-Api-Key", "X-Functions-Key",
                 "X-RapidAPI-Key", "Ocp-Apim-Subscription-Key", "X-Api-Secret", "X-Client-Secret",
                 "X-Registry-Auth", "X-Amz-Security-Token", "X-Session-Token", "Api-Password")


@pytest.mark.parametrize("spelling", ["{h}: {v}", "{h}={v}", "'{h}': '{v}'", '"{h}":"{v}"', "-H '{h}: {v}'"])
@pytest.mark.parametrize("header", TOKEN_HEADERS)
def test_dashed_token_headers(header, spelling):
    for value in (CRED, "hvs.CAESIJ2xK9mQ0pL7vR3tW5sY", "abc123", "0123456789abcdef0123456789abcdef"):
        out = Redactor()("curl -sS " + spelling.format(h=header, v=value) + " https://h.example/v1")
        assert value not in out and "«redacted:" in out, out
        assert header in out, out


@pytest.mark.parametrize("line,secret", [
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4cXV1eA==;"
     "EndpointSuffix=core.windows.net", "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4cXV1eA=="),
    ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=q9Lw2Zk3Rt8Yp1Xc5Vb7Nm4Hj6Gf0Ds=",
     "q9Lw2Zk3Rt8Yp1Xc5Vb7Nm4Hj6Gf0Ds="),
    ("BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=b&sig=Ab12Cd34Ef56Gh78Ij90",
     "Ab12Cd34Ef56Gh78Ij90"),
    ("AZURE_STORAGE_KEY=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4", "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4"),
    ("{'account_key': 'plainish-key-value'}", "plainish-key-value"),
    ("primaryKey: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d", "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"),
])
def test_azure_keys(line, secret):
    out = Redactor()(line)
    assert secret not in out and "«redacted:" in out, out


PREFIXED = (
    "glpat-AbCdEfGhIjKlMnOpQrSt", "gldt-AbCdEfGhIjKlMnOpQrSt", "glrt-AbCdEfGhIjKlMnOpQrSt",
    "sk_live_51HqLyjABCDEFGHijklmnop", "sk_test_51HqLyjABCDEFGHijklmnop", "rk_live_51HqLyjABCDEFGHijklmn",
    "whsec_AbCdEfGhIjKlMnOpQrStUvWx", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijkl", "dckr_pat_AbCdEfGhIjKlMnOpQrStUvWx",
    "xapp-1-A0123456789-0123456789012-abcdef0123456789", "hvs.CAESIJ2xK9mQ0pL7vR3tW5sYaBcD",
    "pypi-AgEIcHlwaS5vcmcCJGI0ZmZiZWM4LTk2NzAtNGM", "shpat_0123456789abcdef0123456789abcdef",
    "SG.AbCdEfGhIjKlMnOpQrStUv.WxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz0", "r8_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "pplx-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghij", "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef",
    "ya29.a0AfH6SMBx-AbCdEfGhIjKlMnOpQrStUvWxYz", "glc_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
)


@pytest.mark.parametrize("token", PREFIXED)
def test_issuer_prefixed_tokens(token):
    for around in ("using {t} for auth", "TOKEN={t}", "'{t}'", "[{t}]", "({t})", "{t}"):
        out = Redactor()(around.format(t=token))
        assert token not in out and "«redacted:" in out, out
        assert token[6:] not in out, out


def test_prefixes_do_not_take_ordinary_words():
    for line in ("INFO 08-21 14:02:14 [gpu_model_runner.py:1] sk_live_mode=False", "npm_config_cache=/tmp/npm",
                 "using model_name gsk_small", "ya29.", "SG.x"):
        r = Redactor()
        assert r(line) == line and r.total == 0, line


PGP = ["-----BEGIN PGP PRIVATE KEY BLOCK-----", "Version: GnuPG v2", "Comment: https://gnupg.org", "",
       "lQOYBF1234abcdEFGHijklMNOPqrstUVWXyz0123456789+/abcdEFGHijklMNOPqr",
       "stUVWXyz0123456789+/abcdEFGHijklMNOPqrstUVWXyz0123456789+/abcdEF", "short",
       "=Ab3X", "-----END PGP PRIVATE KEY BLOCK-----"]


@pytest.mark.parametrize("prefix", ["", "(APIServer pid=1) ERROR 08-21 14:04:41 [x.py:1] "])
def test_a_pgp_private_key_block_loses_every_line(prefix):
    r = Redactor()
    out = [r(prefix + line if i == 0 else line) for i, line in enumerate(PGP)]
    joined = "\n".join(out)
    for secret in ("lQOYBF1234", "stUVWXyz", "short", "=Ab3X", "GnuPG"):
        assert secret not in joined, joined
    assert out[0].startswith(prefix + "-----BEGIN PGP PRIVATE KEY BLOCK-----")
    assert out[-1] == PGP[-1]
    assert r("INFO 08-21 14:02:15 [api_server.py:1] Starting") == "INFO 08-21 14:02:15 [api_server.py:1] Starting"
    assert r.counts["private_key"] == 1


def test_an_unterminated_key_block_ends_at_the_next_log_line_it_cannot_hide_the_log():
    r = Redactor()
    r("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in r("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ")
    line = "(EngineCore_0 pid=22010) ERROR 08-21 14:04:41 [core.py:700] ValueError: boom"
    assert r(line) == line


#: one secret of each new class, as an error line the doctor keeps as evidence
PLANTED = {
    "api-key-scheme": ("Q7w8E9r0T1y2U3i4O5p6", "Authorization: Api-Key Q7w8E9r0T1y2U3i4O5p6"),
    "sharedkey": ("ctzMq410TV3wS7upTBcunJTD", "authorization: SharedKey acct:ctzMq410TV3wS7upTBcunJTD"),
    "bot": ("MTk4NjIyNDgzNDcxOTI1MjQ4", "Authorization: Bot MTk4NjIyNDgzNDcxOTI1MjQ4"),
    "x-auth-token": ("Xa81kQp0Lm3Nv7Rt5Ws2", "X-Auth-Token: Xa81kQp0Lm3Nv7Rt5Ws2"),
    "vault": ("hvs.CAESIJ2xK9mQ0pL7vR3tW5sY", "X-Vault-Token: hvs.CAESIJ2xK9mQ0pL7vR3tW5sY"),
    "azure": ("Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4", "AccountName=a;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4;x=y"),
    "apim": ("0123456789abcdef0123456789abcdef", "Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcdef"),
    "glpat": ("glpat-AbCdEfGhIjKlMnOpQrSt", "git push via glpat-AbCdEfGhIjKlMnOpQrSt"),
    "stripe": ("sk_live_51HqLyjABCDEFGHijklmnop", "charge with sk_live_51HqLyjABCDEFGHijklmnop"),
    "npm": ("npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "npm token npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    "groq": ("gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijkl",
             "GROQ gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijkl"),
    "docker": ("dckr_pat_AbCdEfGhIjKlMnOpQrStUvWx", "docker login -p dckr_pat_AbCdEfGhIjKlMnOpQrStUvWx"),
    "xapp": ("xapp-1-A0123456789-0123456789012-abcdef0123456789", "slack xapp-1-A0123456789-0123456789012-abcdef0123456789"),
}


def _planted_logs(tmp_path: Path) -> list[Path]:
    """One log per shape, the secret on the very error line the doctor shows as evidence (early in it, so that no
    format's excerpt cuts it off)."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    paths = []
    for name, (_, planted) in PLANTED.items():
        text = "\n".join(ln.replace("ValueError: To serve", f"ValueError: [{planted}] To serve") for ln in lines)
        path = tmp_path / f"{name}.log"
        path.write_text(text + "\n", encoding="utf-8")
        paths.append(path)
    return paths


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_new_shapes_in_every_format(fmt, tmp_path, doctor):
    for log, (name, (secret, _)) in zip(_planted_logs(tmp_path), PLANTED.items(), strict=True):
        res = doctor("--format", fmt, "--no-color", str(log), cwd=tmp_path)
        assert res.returncode == 1, res.stderr
        assert secret not in res.stdout + res.stderr, (name, fmt)
        if fmt in ("json", "sarif"):
            json.loads(res.stdout)
        if fmt == "json":
            assert json.loads(res.stdout)["redactions"]["total"] >= 1, name


def test_new_shapes_in_the_job_summary_and_live_stderr(tmp_path, doctor, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    for log, (name, (secret, _)) in zip(_planted_logs(tmp_path), PLANTED.items(), strict=True):
        summary.write_text("")
        res = doctor("--format", "github", str(log), cwd=tmp_path)
        assert res.returncode == 1, res.stderr
        text = summary.read_text(encoding="utf-8")
        assert "kv-cache-too-small" in text, "the job summary was written"
        live = doctor("--live", "--format", "text", "--no-color", str(log), cwd=tmp_path)
        assert "kv-cache-too-small" in live.stderr, live.stderr
        assert secret not in res.stdout + res.stderr + text, name
        assert secret not in live.stdout + live.stderr, name
