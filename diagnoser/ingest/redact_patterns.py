"""What a secret looks like: the patterns redact.py runs, and the tests of one name or value.

redact.py lists what is caught and how a line is redacted; this module only says what matches. The marker a
secret becomes (MARK), the secret-named keys and flags (KEYED, FLAG, secret_key, secret_flag), the headers,
URLs, cookies and key blocks that carry credentials, the tokens whose issuer's prefix names them
(ISSUED_TOKENS), and what looks random enough to be a secret (ENTROPY, high_entropy).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from rapidfuzz.distance import OSA

from diagnoser.lazyre import lazy

MARK = "«redacted:{kind}»"
MARK_START = "«redacted:"

#: Secret-named keys (settings, env vars, dict keys). Lower-case spellings are matched case-insensitively;
#: the upper-case family (`*_TOKEN`, `*_SECRET`, ...) only in upper case, the way env vars are written, so
#: that `bos_token`/`pad_token` in a tokenizer dump are left alone.
_KEY_CORE = (
    r"(?i:[a-z0-9_]*?(?:api[_-]?key|access[_-]?key|secret(?:[_-]?(?:access[_-]?)?key)?|passw(?:or)?d"
    r"|(?:hf|hub|hugging_?face(?:_hub)?|access|auth|api|bearer|refresh|session|id|github|gh|wandb|vllm"
    r"|openai|npm|pypi|ci_job)_token"
    r"|(?:account|storage|primary|secondary|master|subscription|shared[_-]?access|signing|encryption)[_-]?key"
    r"|shared[_-]?access[_-]?signature))"
    r"|(?-i:[A-Z][A-Z0-9_]*_(?:TOKEN|SECRET|SECRET_KEY|PASSWORD|API_KEY|ACCESS_KEY|ACCOUNT_KEY|STORAGE_KEY"
    r"|MASTER_KEY|SUBSCRIPTION_KEY|SIGNING_KEY|PRIVATE_KEY))"
)
#: `key: value` / `key=value` / `'key': 'value'` / `"KEY": "value"`; the value is a list, a quoted string
#: or a bare word.
KEYED = lazy(
    r"(?<![\w$-])(?P<kq>\\*['\"]?)(?P<key>" + _KEY_CORE + r")(?P=kq)(?P<sep>\s*[:=]\s*)"
    r"(?P<val>\[[^\]]*\]|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\\+\"[^\"\\]*\\+\"|[^\s,;)}\]'\"\\]+)"
)
#: `--api-key VALUE`, `--api-key=VALUE`, `--hf-token 'VALUE'`; any flag name: secret_flag() decides. Led by its
#: literal "-" (no word character or "-" before it, tested after), so that re skips to each "-" in C instead of
#: trying the look-behind at every character (a megabyte piece in 1 ms instead of 70).
FLAG = lazy(
    r"-(?<![\w-]-)-?(?P<key>[A-Za-z][\w-]{1,40})(?:=|\s+)"
    r"(?P<val>'[^']*'|\"[^\"]*\"|[^\s'\"]+)"
)
#: The words secret flags are made of, and the spellings that are exact (never a typo of something else).
SECRET_WORDS = ("token", "password", "passwd", "secret", "apikey", "hftoken", "credential", "credentials")
EXACT_SECRET_FLAGS = {"api-key", "hf-token", "token", "password", "secret", "access-token", "key", "api-token",
                      "auth-token", "secret-key", "access-key", "passwd", "pwd"}
#: one `name=value` parameter of an Authorization credential (Digest, AWS4-HMAC-SHA256, OAuth 1.0); a quoted value
#: may have its quotes escaped (the header inside JSON)
_AUTH_PARAM = r"[\w.+/~-]+=(?:\\?\"(?:[^\"\\]|\\.)*?\\?\"|[^\s'\",)}\]]+)"
#: `Authorization: SCHEME CREDENTIAL` under any scheme (`Bearer`, `Api-Key`, `SharedKey`, `Bot`, `Digest` with its
#: parameters...), also `authorization=X`, `'Authorization': 'X'` and a headers list's `('Authorization', 'X')`.
AUTH_HEADER = lazy(
    r"(?i)(?<![\w-])(?:proxy-)?authorization(?:['\"]?\s*[:=]|['\"]\s*,)\s*['\"]?"
    r"(?:(?P<scheme>[A-Za-z][\w.+-]{0,39})\s+)?"
    r"(?P<val>" + _AUTH_PARAM + r"(?:\s*,?\s*" + _AUTH_PARAM + r")*|[^\s'\",;)}\]]+)"
)
#: Authorization schemes (lower case) shown as they are: the IANA registry's and the vendors' own. Any other word
#: before a credential may be part of it, and goes with it.
AUTH_SCHEMES = frozenset({
    "basic", "bearer", "digest", "dpop", "gnap", "hoba", "mutual", "negotiate", "ntlm", "oauth", "privatetoken",
    "scram-sha-1", "scram-sha-256", "vapid", "aws4-hmac-sha256", "aws4-ecdsa-p256-sha256", "hmac-sha256",
    "token", "api-key", "apikey", "key", "sharedkey", "sharedkeylite", "bot", "ssws", "googlelogin", "splunk",
    "jwt", "mac", "hawk", "signature", "klaviyo-api-key", "zoho-oauthtoken", "sso-key", "client-id", "kerberos",
    "otp", "sk", "secret", "credential", "credentials", "pat", "access-token", "bearer-token"})
#: A lone `Bearer X` with a token-shaped X (has a digit, 8+ characters): not "Bearer authentication".
BEARER = lazy(r"(?i)(?<![\w-])bearer\s+(?P<val>(?=[\w.~+/=-]*\d)[\w.~+/=-]{8,})")
#: Credential headers: `x-api-key: X`, `api-key: X`, any dashed name ending in token / secret / password /
#: credential(s) (`X-Auth-Token`, `Private-Token`, `X-Vault-Token`, `api-token`), an `x-` header ending in key / auth
#: / signature (`X-Goog-Api-Key`, `X-Registry-Auth`), and the keys named for what they open
#: (`Ocp-Apim-Subscription-Key`, `X-Functions-Key`). Led by a letter or digit with no word character or `-` before it.
HEADER_KEY = lazy(
    r"(?i)(?<![\w-])(?P<key>x-(?:[a-z0-9]+-)*(?:key|auth|token|secret|signature|password|credentials?)"
    r"|(?:[a-z0-9]+-)+(?:token|secret|password|passwd|pass|credentials?)"
    r"|(?:[a-z0-9]+-)*api-?key"
    r"|(?:[a-z0-9]+-)*(?:subscription|access|secret|private|account|master|functions|client|app|auth|signing"
    r"|license)-key)"
    r"['\"]?\s*[:=]\s*['\"]?(?P<val>[^\s'\",;)}\]]+)"
)
#: A credential in a URL's query string (`?token=`, `&sig=`, `X-Amz-Signature=`, `?key=`), also in an access
#: log's request line that has no scheme.
URL_QUERY = lazy(
    r"(?i)[?&;](?P<key>(?:x-(?:amz|goog)-)?(?:signature|security-token|credential)|sig|token|access_token"
    r"|refresh_token|id_token|auth|auth_token|api[_-]?key|key|password|passwd|pwd|pass|secret|client_secret"
    r"|session|sessionid|jwt)=(?P<val>[^&#\s'\"<>:,;)\]}«»]+)"
)
#: A random-looking user name in a URL with no password (`https://TOKEN@host`, how some git hosts take one).
URL_USER = lazy(r"(?i)\b[a-z][a-z0-9+.-]*://(?P<val>[A-Za-z0-9_.~+-]{16,})@")
#: A PEM private key: its header, the base64 on the line, and (by the hard-wrap carry) the lines after it.
PRIVATE_KEY = lazy(r"(?P<head>-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)(?P<val>[A-Za-z0-9+/=\s\\]*)")
#: The end of a private key block (PEM, OpenSSH, PGP); every line before it is part of the key.
PRIVATE_KEY_END = lazy(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
#: The password of `scheme://user:password@host` (user may be empty: `redis://:pw@host`); the password
#: runs to the last `@` before the host, so one holding `/` or `@` is taken whole.
URL_PASSWORD = lazy(
    r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@'\"«»]*:(?P<val>[^\s'\"«»]+)@(?=[^\s@/'\"«»]+(?:[/?#:\s'\",;)\]]|$))"
)
#: `Cookie: a=1; b=2` and `Set-Cookie: session=...; Path=/`: the values (attributes stay).
COOKIE = lazy(r"(?i)(?<![\w-])(?:set-)?cookie['\"]?\s*[:=]\s*['\"]?(?P<val>[^\r\n'\"]+)")
#: A value after the words token / secret / key / password: redacted when it looks random (entropy).
ENTROPY = lazy(
    r"(?i)(?<![\w-])(?:token|secret|key|password|passwd|apikey)s?\b['\"]?(?:\s+is)?\s*[:=]?\s*['\"]?"
    r"(?P<val>[A-Za-z0-9+/_.~=-]{16,})"
)
#: Tokens whose issuer's prefix says what they are, so they need no key around them: (kind, what a line
#: must hold (lower case) before the pattern runs, the pattern).
ISSUED_TOKENS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (kind, hints, lazy(source)) for kind, hints, source in (
        ("hf_token", ("hf_", "api_org_"), r"(?<![A-Za-z0-9_])(?P<val>(?:hf|api_org)_[A-Za-z0-9]{20,})\b"),
        ("api_key", ("sk-",),
         r"(?<![\w-])(?P<val>sk-(?:proj-|svcacct-|admin-|ant-(?:api\d\d-)?)?(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{20,})"),
        ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
         r"(?<![A-Za-z0-9_])(?P<val>gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"),
        ("aws_access_key_id", ("akia", "asia"), r"(?<![A-Za-z0-9])(?P<val>(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Za-z0-9])"),
        # JSON Web Tokens: base64url header `eyJ`, payload and (possibly empty) signature
        ("jwt", ("eyj",), r"(?<![\w-])(?P<val>eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"),
        ("slack_token", ("xox", "xapp-"), r"(?<![\w-])(?P<val>(?:xox[abposr]|xapp)-[A-Za-z0-9-]{10,})"),
        ("google_api_key", ("aiza",), r"(?<![\w-])(?P<val>AIza[0-9A-Za-z_-]{35})"),
        ("nvidia_api_key", ("nvapi-",), r"(?<![\w-])(?P<val>nvapi-[A-Za-z0-9_-]{20,})"),
        ("gitlab_token", ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glcbt-"),
         r"(?<![\w-])(?P<val>gl(?:pat|dt|rt|ptt|soat|cbt)-[A-Za-z0-9_-]{20,})"),
        ("stripe_key", ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
         r"(?<![\w-])(?P<val>(?:[sr]k_(?:live|test)|whsec)_[A-Za-z0-9]{16,})"),
        ("npm_token", ("npm_",), r"(?<![\w-])(?P<val>npm_[A-Za-z0-9]{36,})"),
        ("groq_api_key", ("gsk_",), r"(?<![\w-])(?P<val>gsk_[A-Za-z0-9]{40,})"),
        ("docker_token", ("dckr_",), r"(?<![\w-])(?P<val>dckr_(?:pat|oat)_[A-Za-z0-9_-]{20,})"),
        ("vault_token", ("hvs.", "hvb.", "hvr."), r"(?<![\w.-])(?P<val>hv[sbr]\.[A-Za-z0-9_-]{20,})"),
        ("pypi_token", ("pypi-",), r"(?<![\w-])(?P<val>pypi-[A-Za-z0-9_-]{30,})"),
        ("shopify_token", ("shpat_", "shpss_", "shpca_", "shppa_"),
         r"(?<![\w-])(?P<val>shp(?:at|ss|ca|pa)_[A-Fa-f0-9]{32})"),
        ("sendgrid_key", ("sg.",), r"(?<![\w.-])(?P<val>SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})"),
        ("replicate_token", ("r8_",), r"(?<![\w-])(?P<val>r8_[A-Za-z0-9]{30,})"),
        ("perplexity_key", ("pplx-",), r"(?<![\w-])(?P<val>pplx-[A-Za-z0-9]{40,})"),
        ("digitalocean_token", ("dop_v1_", "doo_v1_", "dor_v1_"), r"(?<![\w-])(?P<val>do[opr]_v1_[a-f0-9]{40,})"),
        ("google_oauth_token", ("ya29.",), r"(?<![\w.-])(?P<val>ya29\.[A-Za-z0-9_-]{20,})"),
        ("grafana_token", ("glc_", "glsa_"), r"(?<![\w-])(?P<val>gl(?:c|sa)_[A-Za-z0-9_=+/-]{30,})"),
    )
)
HF_TOKEN = ISSUED_TOKENS[0][2]


def secret_flag(name: str) -> bool:
    """Whether a flag name (without `--`) looks like a secret flag, misspelled or not.

    >>> [secret_flag(n) for n in ("api-key", "api-kye", "hf-tokn", "pasword", "max-num-batched-tokens", "seed")]
    [True, True, True, True, False, False]
    """
    low = name.lower().strip("-")
    if low.replace("_", "-") in EXACT_SECRET_FLAGS:
        return True
    parts = [p for p in re.split(r"[-_]+", low) if p]
    joined = "".join(parts)
    words = [joined, *parts]
    close = any(OSA.distance(w, s, score_cutoff=1) <= 1 for w in words if len(w) >= 4 for s in SECRET_WORDS)
    keyish = any(p in ("key", "kye", "keys", "ky") for p in parts[1:]) or joined in ("key", "kye")
    if not (close or keyish):
        return False
    from diagnoser.vllm.flags import lookup  # a real vLLM flag (--max-num-batched-tokens) is never a secret

    return lookup("--" + low) is None


_SECRET_KEY = lazy(_KEY_CORE)


def secret_key(key: str) -> bool:
    """Whether a setting, dict key or flag name (`api_key`, `HF_TOKEN`, `--api-key`, `X-Auth-Token`) names a secret.

    >>> [secret_key(k) for k in ("api_key", "--api-key", "HF_TOKEN", "X-Auth-Token", "model", "max_num_batched_tokens")]
    [True, True, True, True, False, False]
    """
    name = key.strip()
    if name.startswith("-"):
        return secret_flag(name.lstrip("-"))
    return bool(_SECRET_KEY.fullmatch(name) or HEADER_KEY.match(name + ": x")) or secret_flag(name)


def high_entropy(value: str) -> bool:
    """Random-looking: 16+ characters mixing classes, about 3.5+ bits of entropy per character.

    >>> high_entropy("q8Zr2LmX9vTb4NcW7kPd"), high_entropy("meta-llama/Llama-3.1-8B"), high_entropy("a" * 20)
    (True, False, False)
    """
    if len(value) < 16 or "/" in value.strip("/") and value.count("/") > 1:
        return False
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"\d"))
    if classes < 2:
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.5

