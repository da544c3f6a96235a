"""Redact secrets when reading, before matching: no finding, fact, excerpt or format can then carry one.

Each secret becomes a typed marker (`«redacted:hf_token»`) and is counted, so a report says how many were
removed without saying what they were. What is caught:

- Hugging Face tokens (`hf_...`, `api_org_...`), OpenAI/Anthropic-style keys (`sk-...`, `sk-proj-...`),
  GitHub tokens (`ghp_...`, `github_pat_...`), AWS access key ids (`AKIA...`), wherever they appear;
- the value of a secret-named setting in every spelling a vLLM log uses: `non-default args` dicts
  (`'api_key': ['...']`), `Namespace(api_key='...', hf_token='...')` dumps, `key=value` config strings,
  env dumps (`HF_TOKEN=...`, `'VLLM_API_KEY': '...'`, `export AWS_SECRET_ACCESS_KEY=...`);
- command-line flags (`--api-key VALUE`, `--hf-token=VALUE`);
- `Authorization: Bearer ...` (and Basic) headers, and a lone `Bearer <token>`;
- the password in a URL (`scheme://user:pass@host`, also one holding `/` or `@`);
- JWTs (`eyJ...` three-part tokens), Slack (`xoxb-...`), Google (`AIza...`) and NVIDIA (`nvapi-...`) keys;
- `Cookie:` / `Set-Cookie:` values;
- the value of a flag that looks like a secret flag even when misspelled (`--api-kye`, `--hf-tokn`,
  `--pasword`): a known vLLM flag is never taken for one;
- a high-entropy value right after the words token, secret, key or password;
- credentials in a URL's query string (`?token=`, `&sig=`, `X-Amz-Signature=`), a random-looking URL user,
  values with escaped quotes (JSON `\\"`, Python `\\'`, JSON inside JSON), and PEM private keys;
- the rest of a token that a hard wrap cut onto the next line.

Values that are not secrets stay: `None`, `True`/`False`, empty strings and lists, shell references
(`$HF_TOKEN`), and markers already placed. Ordinary vLLM lines (`max_tokens=16`, `tokenizer=...`,
`token_ids`, `'bos_token': '<s>'`) never match: secret-named keys are a closed list, and bare token-shaped
strings need the prefixes their issuers use.

Speed: the reader calls this on every line its prefilter keeps. A line pays one `lower()` and a handful of
substring tests; only lines that hold a hint run the patterns whose hint they hold. A long text (a 1 MB piece
of an enormous line) finds all its hints in one pass (keywords.KeywordIndex.present_in, with no lower-cased copy
of an ASCII piece), and every pattern whose matches start at (or just before) the word holding a hint is tried
only there (`_match_starts`, `_sub_at`): the same matches, found at tens of MB/s instead of 1-3, in any piece
that lower-cases character for character; the lower-cased copy follows the substitutions.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from rapidfuzz.distance import OSA

from diagnoser.ingest.keywords import LONG_TEXT, KeywordIndex, lowered, remember_lowered
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
#: The password of `scheme://user:password@host` (user may be empty: `redis://:pw@host`); the password
#: runs to the last `@` before the host, so one holding `/` or `@` is taken whole.
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
#: A log line's header: a key block that never ends is over where the log goes on (it cannot hide the log).
_LOG_HEADER = lazy(r"(?:^|\s)(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d"
                   r"|^Traceback \(most recent call last\)")
#: Lines a key block may hold at most (a 4096-bit PGP key with its armour: ~110).
KEY_BLOCK_LINES = 400
URL_PASSWORD = lazy(
    r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@'\"«»]*:(?P<val>[^\s'\"«»]+)@(?=[^\s@/'\"«»]+(?:[/?#:\s'\",;)\]]|$))"
)
#: `Cookie: a=1; b=2` and `Set-Cookie: session=...; Path=/`: the values (attributes stay).
COOKIE = lazy(r"(?i)(?<![\w-])(?:set-)?cookie['\"]?\s*[:=]\s*['\"]?(?P<val>[^\r\n'\"]+)")
_COOKIE_PAIR = lazy(r"(?P<name>[^=;,\s]+)=(?P<val>[^;,\s]*)")
_COOKIE_ATTRS = {"path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority", "version"}
#: A value after the words token / secret / key / password: redacted when it looks random (entropy).
ENTROPY = lazy(
    r"(?i)(?<![\w-])(?:token|secret|key|password|passwd|apikey)s?\b['\"]?(?:\s+is)?\s*[:=]?\s*['\"]?"
    r"(?P<val>[A-Za-z0-9+/_.~=-]{16,})"
)
#: A token-shaped fragment at the end of a line, and the start of the next: a hard wrap cut a secret.
_PARTIAL_AT_END = lazy(
    r"(?<![\w-])(?P<val>(?:hf_|api_org_|sk-|gh[pousr]_|github_pat_|xox[abposr]-|AIza|nvapi-|eyJ)[A-Za-z0-9_.-]*)$"
)
_CONTINUATION = lazy(r"^(?P<val>[A-Za-z0-9_.+/=-]+)(?=[\s'\",;)\]}]|$)")
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

_NOT_SECRET = {"", "none", "null", "nil", "true", "false", "[]", "{}", "()", "0", "***", "<redacted>",
               "redacted", "<none>", "unset", "xxx", "bearer", "basic"}


def _value_kind(value: str) -> str | None:
    """The kind a value's own shape proves (an hf_ token is an hf_token under any key)."""
    if value.startswith(("hf_", "api_org_")) and HF_TOKEN.fullmatch(value):
        return "hf_token"
    if value.startswith("sk-"):
        return "api_key"
    return None


def _random_looking(piece: str) -> bool:
    """A piece of a token rather than a word: it holds a digit, or mixes upper and lower case."""
    return bool(re.search(r"\d", piece)) or (piece.lower() != piece and piece.upper() != piece)


def _partial_kind(value: str) -> str:
    """The kind of a token's first piece, from its issuer's prefix."""
    for prefix, kind in (("hf_", "hf_token"), ("api_org_", "hf_token"), ("sk-", "api_key"), ("gh", "github_token"),
                         ("xox", "slack_token"), ("AIza", "google_api_key"), ("nvapi-", "nvidia_api_key"),
                         ("eyJ", "jwt")):
        if value.startswith(prefix):
            return kind
    return "token"


def _key_kind(key: str) -> str:
    k = key.lower().replace("-", "_")
    if "passw" in k:
        return "password"
    if k.startswith("aws") or "secret_access" in k:
        return "aws_secret"
    if "hf" in k or "hugging" in k or "hub_token" in k:
        return "hf_token"
    if "api_key" in k or "apikey" in k or "access_key" in k:
        return "api_key"
    if "secret" in k:
        return "secret"
    return "token"


def _plain(value: str) -> bool:
    """True for values that are not secrets: None, booleans, empties, shell references, markers."""
    v = value.strip()
    return (v.lower() in _NOT_SECRET or v.startswith(("$", "%", MARK_START, "<")) or set(v) <= {"*", "x", "X"}
            or MARK_START in v)


class Redactor:
    """Callable text filter that counts what it removed, by kind.

    `output=True` is for text the doctor itself wrote (JSON reports): a bare number under a quoted key
    (`"api_key": 1`, a count by kind) is data, not a secret.
    """

    def __init__(self, output: bool = False) -> None:
        self.output = output
        self.counts: Counter[str] = Counter()
        #: (hints, pattern, kind for a match) in order: keyed forms first so the kind follows the key.
        self._rules: tuple[tuple[tuple[str, ...], re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
            (("://",), URL_PASSWORD, self._fixed("url_password")),
            (("private key",), PRIVATE_KEY, self._private_key),
            (("cookie",), COOKIE, self._cookie),
            (("authoriz",), AUTH_HEADER, self._auth),
            (_FLAG_HINTS, FLAG, self._flag),
            (_KEYED_HINTS, KEYED, self._keyed),
            (_HEADER_HINTS, HEADER_KEY, self._header),
            (("bearer",), BEARER, self._fixed("bearer_token")),
            *((hints, pattern, self._fixed(kind)) for kind, hints, pattern in ISSUED_TOKENS),
            (("token", "secret", "key", "passw"), ENTROPY, self._entropy),
            # after the issuers' patterns: their kind is more precise
            (("?",), URL_QUERY, self._fixed("url_secret")),
            (("://",), URL_USER, self._entropy),
        )
        #: the kind of a secret the previous line ended in (a hard wrap may have cut it)
        self._carry: str | None = None
        #: lines of a private key block read so far (None: not in one)
        self._key_lines: int | None = None

    def __call__(self, text: str) -> str:
        if self._key_lines is not None:
            inside = self._in_key_block(text)
            if inside is not None:
                return inside
        carry, self._carry = self._carry, None
        if carry is not None:
            text = _CONTINUATION.sub(lambda m: self._continuation(m, carry), text, count=1)
        if len(text) >= LONG_TEXT:
            return self._long(text)
        low = text.lower()
        if not maybe_secret(low):
            return text
        for hints, pattern, handler in self._rules:
            if any(h in low for h in hints):
                text = pattern.sub(handler, text)
        if text.endswith("»") or any(h in low[-60:] for h in _PARTIAL_HINTS):
            text = self._carry_from(text)
        return text

    def _long(self, text: str) -> str:
        """__call__ for a long text: one pass finds which hints it holds (without a lower-cased copy of an ASCII
        text: see KeywordIndex.present_in); KEYED runs only where one is."""
        if _HINTS._db() is not None:  # hyperscan: one pass
            present = set(_HINTS.present_in(text))
        elif maybe_secret(low := lowered(text)):  # substring tests beat the pure-Python keyword regex over 1 MB
            present = {h for h in _HINTS.words if h in low}
        else:
            return text
        if not present & _MAYBE:
            return text
        # text.lower(), kept in step with the text through the substitutions (a megabyte is not lower-cased
        # again after each pattern that replaced something; None: lower-cased when next needed)
        low: str | None = None
        original = text
        for hints, pattern, handler in self._rules:
            if not any(h in present for h in hints):
                continue
            if pattern in _HINT_STARTS or pattern is KEYED or pattern in _SCHEME_PATTERNS:
                low = lowered(text) if low is None else low
                starts = _match_starts(pattern, [h for h in hints if h in present], text, low)
            else:
                starts = None
            if starts is None:
                new = pattern.sub(handler, text)  # the same object when nothing was replaced
                text, low = new, (low if new is text else None)
            else:
                text, low = _sub_at(pattern, handler, text, starts, low)
        if text is not original and low is not None:
            remember_lowered(text, low, original)  # the tracker and the matcher ask for it next
        if text.endswith("»") or any(h in text[-60:].lower() for h in _PARTIAL_HINTS):
            text = self._carry_from(text)
        return text

    def _in_key_block(self, text: str) -> str | None:
        """A line inside a private key block: gone whole (armour headers, blank lines and checksum too); None when
        the block is over (its END line, a log line, or KEY_BLOCK_LINES), and the line is read as any other."""
        assert self._key_lines is not None
        self._key_lines += 1
        if PRIVATE_KEY_END.search(text) or _LOG_HEADER.search(text) or self._key_lines > KEY_BLOCK_LINES:
            self._key_lines = None
            return None
        return MARK.format(kind="private_key") if text.strip() else text

    def _carry_from(self, text: str) -> str:
        """Note a line that ends inside a secret, so the next line's first word is taken as its rest."""
        m = _ENDS_IN_MARK.search(text)
        if m:
            self._carry = m.group("kind")
            return text
        m = _PARTIAL_AT_END.search(text)
        if m and len(m.group("val")) >= 6 and _random_looking(m.group("val")[3:]):
            kind = self._carry = _value_kind(m.group("val")) or _partial_kind(m.group("val"))
            self.counts[kind] += 1
            return text[: m.start("val")] + MARK.format(kind=kind)
        return text

    def _continuation(self, m: re.Match[str], kind: str) -> str:
        piece = m.group("val")
        # a cut token goes on with random-looking text; a new log line starts with a header or a word
        if not _random_looking(piece):
            return piece
        if _HEADER_WORD.match(piece):
            return piece
        if "=" in piece.rstrip("=") or piece.lower() in _NOT_SECRET:
            return piece  # `authorization=Bearer`, `Bearer`: a key of its own, whose value the patterns take
        return MARK.format(kind=kind)  # the rest of a secret already counted

    # -- handlers: each returns the match with its `val` group replaced (or unchanged) --

    def _mark(self, m: re.Match[str], kind: str, group: str = "val") -> str:
        if group == "scheme_val":
            if _plain(m.group("val")):
                return m.group(0)
            self.counts[kind] += 1
            base, whole = m.start(), m.group(0)
            return whole[: m.start("scheme") - base] + MARK.format(kind=kind) + whole[m.end("val") - base:]
        value = m.group(group)
        quoted = _QUOTES.fullmatch(value)  # 'x', "x", and JSON-in-JSON's \"x\"
        inner = quoted.group(2) if quoted else value
        if _plain(inner):
            return m.group(0)
        self.counts[kind] += 1
        start, end = m.span(group)
        if quoted:  # keep the quotes
            start, end = start + len(quoted.group(1)), end - len(quoted.group(1))
        base = m.start()
        whole = m.group(0)
        return whole[: start - base] + MARK.format(kind=kind) + whole[end - base:]

    def _flag(self, m: re.Match[str]) -> str:
        key = m.group("key")
        if not secret_flag(key):
            return m.group(0)
        value = m.group("val").strip("'\"")
        if key.lower() not in EXACT_SECRET_FLAGS and re.fullmatch(r"[\d.]{1,9}", value):
            return m.group(0)  # `--max-num-batched-tokns 8192`: a number to a misspelled setting, not a secret
        return self._keyed(m)

    def _private_key(self, m: re.Match[str]) -> str:
        """The header stays, what follows it goes, and so does every line up to the block's END line."""
        self.counts["private_key"] += 1
        self._key_lines = 0
        return f"{m.group('head')} {MARK.format(kind='private_key')}"

    def _cookie(self, m: re.Match[str]) -> str:
        def pair(q: re.Match[str]) -> str:
            if q.group("name").lower() in _COOKIE_ATTRS or _plain(q.group("val")):
                return q.group(0)
            self.counts["cookie"] += 1
            return f"{q.group('name')}={MARK.format(kind='cookie')}"

        start, end = m.span("val")
        base = m.start()
        whole = m.group(0)
        return whole[: start - base] + _COOKIE_PAIR.sub(pair, m.group("val")) + whole[end - base:]

    def _entropy(self, m: re.Match[str]) -> str:
        value = m.group("val")
        if MARK_START in value or not high_entropy(value):
            return m.group(0)
        return self._mark(m, "secret")

    def _fixed(self, kind: str) -> Callable[[re.Match[str]], str]:
        return lambda m: self._mark(m, kind)

    def _auth(self, m: re.Match[str]) -> str:
        scheme = (m.group("scheme") or "").lower()
        kind = "basic_auth" if scheme == "basic" else "bearer_token"
        if scheme and scheme not in AUTH_SCHEMES:
            return self._mark(m, kind, "scheme_val")  # an unknown first word may be the credential itself
        return self._mark(m, kind)

    def _header(self, m: re.Match[str]) -> str:
        key = m.group("key").lower()
        return self._mark(m, "api_key" if key.endswith("key") else "token")

    def _keyed(self, m: re.Match[str]) -> str:
        value = m.group("val")
        if self.output and m.groupdict().get("kq") == '"' and value.isdigit():
            return m.group(0)
        if value.strip("'\"[]") == m.group("key").upper().replace("-", "_"):
            return m.group(0)  # argparse's metavar in a usage or help text: `[--api-key API_KEY]`
        key_kind = _key_kind(m.group("key"))
        if not value.startswith("["):
            inner = value.strip("'\"\\")
            return self._mark(m, _value_kind(inner) or key_kind)
        # a list of keys (`'api_key': ['k1', 'k2']`): each quoted item is one secret
        def item(q: re.Match[str]) -> str:
            inner = q.group(2)
            if _plain(inner):
                return q.group(0)
            kind = _value_kind(inner) or key_kind
            self.counts[kind] += 1
            return q.group(1) + MARK.format(kind=kind) + q.group(1)

        new = _QUOTED.sub(item, value)
        base = m.start()
        start, end = m.span("val")
        whole = m.group(0)
        return whole[: start - base] + new + whole[end - base:]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def value(self, text: str) -> str:
        """One value on its own (a JSON string, a list item): no hard-wrap carry or key block in or out."""
        saved = self._carry, self._key_lines
        self._carry = self._key_lines = None
        try:
            return self(text)
        finally:
            self._carry, self._key_lines = saved

    def secret_value(self, key: str, value: str) -> str | None:
        """The marker for `value` under a secret-named `key` (a setting, a dict key, a flag), counted; None when
        the key is not secret-named or the value is not a secret (None, empty, `$VAR`, a marker)."""
        if not secret_key(key) or _plain(value):
            return None
        kind = _value_kind(value.strip()) or _key_kind(key.strip("-"))
        self.counts[kind] += 1
        return MARK.format(kind=kind)


_QUOTED = lazy(r"(['\"])((?:[^\\]|\\.)*?)\1")
_QUOTES = lazy(r"(\\*['\"])(.*)\1", re.S)
_ENDS_IN_MARK = lazy(r"«redacted:(?P<kind>\w+)»$")
_HEADER_WORD = lazy(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|Traceback|File)$")
_PARTIAL_HINTS = ("hf_", "api_org_", "sk-", "gh", "github_pat_", "xox", "aiza", "nvapi-", "eyj")
_FLAG_HINTS = ("--api", "--hf", "--tok", "--pas", "--pw", "--sec", "--access", "--key", "--auth", "--cred",
               "-key", "_key", "-kye", "-token", "_token", "-secret", "_secret", "-pass", "_pass", "-pwd", "-api")
#: Lower-case substrings a line must hold for KEYED to have a chance.
_KEYED_HINTS = ("key", "secret", "passw", "passwd", "_token", "token'", 'token"', "token=", "token:", "token ",
                "signature")
#: The cheap pre-check: a line holding none of these cannot match any pattern (every pattern's hints
#: contain one of them). "token" is common in vLLM lines (tokens/s, max_num_batched_tokens), so it is only a
#: hint in the spellings a secret-named key takes.
_TOKEN_HINTS = ("_token", "token'", 'token"', "token=", "token:", "token ")
#: HEADER_KEY's hints: each of its names ends in one of these
_HEADER_HINTS = ("-token", "-key", "-secret", "-auth", "-signature", "-pass", "-credential", "api-key", "apikey")
_FLAT_HINTS = ("key", "secret", "passw", "://", "authoriz", "bearer", "hf_", "api_org_", "sk-", "ghp_", "gho_",
               "ghu_", "ghs_", "ghr_", "github_pat_", "akia", "asia", "eyj", "xox", "aiza", "nvapi-", "cookie",
               "--api", "--hf", "--tok", "--pas", "--pw", "--sec", "--cred", "--auth",
               "-key", "-kye", "-token", "-pass", "_pass", "-pwd", "-api", "?", "private key",
               "-auth", "signature", "-credential",
               *(h for _kind, hints, _p in ISSUED_TOKENS for h in hints))


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


def redact_value(value: Any, redactor: Redactor, _depth: int = 0) -> Any:
    """A copy of `value` (dicts, lists, tuples, strings) with every string redacted on its own, before anything is
    serialised: a string under a secret-named key, or after a secret flag in a list (`["--api-key", "x y"]`),
    goes whole. Serialising the result never needs the serialised text redacted (which breaks JSON escapes)."""
    if isinstance(value, str):
        return redactor.value(value)
    if _depth > 50:
        return value
    if isinstance(value, dict):
        if set(value) == {"key", "value"} and isinstance(value["key"], str) and isinstance(value["value"], dict):
            # an OpenTelemetry attribute: `key` holds a name (never a secret in itself), the value is judged by it
            name = value["key"]
            return {"key": redactor.value(name),
                    "value": {t: (redactor.secret_value(name, v) or redactor.value(v)) if isinstance(v, str)
                              else redact_value(v, redactor, _depth + 1) for t, v in value["value"].items()}}
        out = {}
        for k, v in value.items():
            mark = redactor.secret_value(k, v) if isinstance(k, str) and isinstance(v, str) else None
            out[k] = mark if mark is not None else redact_value(v, redactor, _depth + 1)
        return out
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for i, v in enumerate(value):
            prev = value[i - 1] if i else None
            mark = (redactor.secret_value(prev, v) if isinstance(prev, str) and prev.startswith("-")
                    and isinstance(v, str) and "=" not in prev else None)
            items.append(mark if mark is not None else redact_value(v, redactor, _depth + 1))
        return items if isinstance(value, list) else type(value)(items)
    return value


_JSON_STRING = lazy(r'"(?:[^"\\]|\\.)*"')


def looks_like_json(line: str) -> bool:
    """A line of JSON output (a JSON Lines document, a line of an indented one): it starts with `{`, `[`, `]`,
    `}` or a string, and holds a string."""
    head = line.lstrip()[:1]
    return head in ('{', '[', '"', '}', ']') and '"' in line


def redact_json_line(line: str, redactor: Redactor) -> str:
    """One line of JSON output with each string value redacted on its decoded text, and re-encoded: the line stays
    valid JSON whatever the secret holds (quotes, backslashes). A value under a secret-named key goes whole; keys,
    numbers and punctuation are kept."""
    out: list[str] = []
    pos = 0
    key: str | None = None
    name: str | None = None  #: an OpenTelemetry attribute's name (`{"key": NAME, "value": {"stringValue": ...}}`)
    for m in _JSON_STRING.finditer(line):
        between = line[pos:m.start()]
        out.append(between)
        pos = m.end()
        raw = m.group(0)
        try:
            text = json.loads(raw)
        except ValueError:
            out.append(raw)
            continue
        if line[m.end():].lstrip().startswith(":"):  # a key: kept, and remembered for its value
            key, new = text, text
        else:
            if key is not None and between.strip() == ":" and key.endswith("Value") and name is not None:
                key, name = name, None  # an attribute's value is judged by the attribute's name
            if key == "key" and between.strip() == ":":
                name, mark = text, None  # a name, never a secret in itself
            else:
                mark = redactor.secret_value(key, text) if key is not None and between.strip() == ":" else None
            new = mark if mark is not None else redactor.value(text)
            key = None
        out.append(raw if new == text else json.dumps(new, ensure_ascii=False))
    out.append(line[pos:])
    return "".join(out)


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


_MAYBE = frozenset(_FLAT_HINTS + _TOKEN_HINTS)
#: every hint any rule or the pre-check asks about, found in one pass over a long text
_HINTS = KeywordIndex([[h] for h in sorted(_MAYBE | {h for hints in (
    ("://",), ("cookie",), ("authoriz",), _FLAG_HINTS, _KEYED_HINTS, _HEADER_HINTS, ("bearer",),
    *(hints for _kind, hints, _p in ISSUED_TOKENS), ("token", "secret", "key", "passw")) for h in hints})])
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+.-")
#: patterns whose every match starts at one of its hints (or this many characters before it: `proxy-`,
#: `set-`, `x-`; `api` of `apikey`), in a text where _same_positions holds
_HINT_STARTS: dict[Any, tuple[int, ...]] = {
    AUTH_HEADER: (0, len("proxy-")), COOKIE: (0, len("set-")), BEARER: (0,),
    ENTROPY: (0, len("api")), **{pattern: (0,) for _kind, _hints, pattern in ISSUED_TOKENS}}
#: patterns that start at the scheme before a `://`
_SCHEME_PATTERNS = (URL_PASSWORD, URL_USER)


def _finds(low: str, word: str) -> Iterator[int]:
    i = low.find(word)
    while i != -1:
        yield i
        i = low.find(word, i + 1)


#: the non-ASCII characters that re's IGNORECASE takes for an ASCII letter or digit, or that lower-case to ASCII
#: (dotted and dotless i, long s, the Kelvin sign: tests/test_redaction.py derives them)
_ASCII_FOLDS = ("\u0130", "\u0131", "\u017f", "\u212a")


def _same_positions(text: str, low: str) -> bool:
    """Whether an ASCII word found in `low` (text.lower()) is where KEYED or ENTROPY would match it in `text`: an
    ASCII text, or one that lower-cases character for character with none of _ASCII_FOLDS (a JSON blob with
    accents, a text that already holds a «marker»)."""
    return text.isascii() or (len(low) == len(text) and not any(c in text for c in _ASCII_FOLDS))


def _match_starts(pattern: Any, hints: list[str], text: str, low: str) -> list[int] | None:
    """Every place in a long text where a match of `pattern` (one of _HINT_STARTS, KEYED, _SCHEME_PATTERNS) can
    start, found from where its `hints` are in `low` (text.lower()), sorted; None: anywhere (the text does not
    lower-case character for character: the regex scans it all)."""
    if not _same_positions(text, low):
        return None
    back = _HINT_STARTS.get(pattern)
    if pattern is KEYED:
        return _keyed_starts(low, hints)
    if back is None:
        return _scheme_starts(text, low)
    return sorted({p for h in hints for i in _finds(low, h) for p in (i - b for b in back) if p >= 0})


def _scheme_starts(text: str, low: str) -> list[int]:
    """Where `\\b[a-z][a-z0-9+.-]*://` can start: at a word start (re's `\\b`: no word character before) in the
    run of scheme characters before a `://`."""
    starts: set[int] = set()
    for i in _finds(low, "://"):
        j = i
        while j > 0 and low[j - 1] in _SCHEME_CHARS:
            j -= 1
        starts.update(p for p in range(j, i) if low[p].isalpha() and not (
            p and (text[p - 1].isalnum() or text[p - 1] == "_")))
    return sorted(starts)


def _keyed_starts(low: str, hints: list[str]) -> list[int]:
    """Where a KEYED match can start in a text (where _same_positions holds): at the run of key characters holding
    a hint (a key is made of them, and the look-behind refuses a start inside one), or at the quote just before
    that run (and the backslashes before it: JSON inside JSON, `\\"api_key\\"`)."""
    starts: set[int] = set()
    for j in _run_starts(low, sorted({i for h in hints for i in _finds(low, h)}), _KEY_CHARS):
        starts.add(j)
        if j > 0 and low[j - 1] in "'\"":
            starts.add(j - 1)
            while j > 1 and low[j - 2] == "\\":
                j -= 1
                starts.add(j - 1)
    return sorted(starts)


def _run_starts(low: str, positions: list[int], chars: frozenset[str]) -> set[int]:
    """The start of the run of `chars` that ends at each of `positions` (sorted): each character is looked at
    once, however many hints one long run holds (walking back from each was quadratic in a run of `key_key_...`)."""
    found: set[int] = set()
    prev, prev_start = -1, -1
    for i in positions:
        j = i
        while j > prev and j > 0 and low[j - 1] in chars:
            j -= 1
        start = prev_start if j == prev and prev >= 0 else j
        found.add(start)
        prev, prev_start = i, start
    return found


def _sub_at(pattern: re.Pattern[str], handler: Callable[[re.Match[str]], str], text: str,
            starts: list[int], low: str) -> tuple[str, str | None]:
    """pattern.sub(handler, text) when every match starts at one of `starts` (sorted): the same leftmost,
    non-overlapping matches, tried only there. Also the new text's lower-cased copy, made from `low`
    (text.lower(), character for character where _same_positions holds) and the lower-cased replacements;
    None when the text holds a capital sigma (lower-cased by its neighbours)."""
    out: list[str] = []
    lows: list[str] | None = None if "\u03a3" in text else []
    pos = 0
    for s in starts:
        if s < pos:
            continue
        m = pattern.match(text, s)
        if m is None or m.end() == m.start():
            continue
        new = handler(m)
        out.append(text[pos:m.start()])
        out.append(new)
        if lows is not None:
            lows.append(low[pos:m.start()])
            lows.append(new.lower())
        pos = m.end()
    if not out:
        return text, low
    out.append(text[pos:])
    if lows is None:
        return "".join(out), None
    lows.append(low[pos:])
    return "".join(out), "".join(lows)


def maybe_secret(low: str) -> bool:
    """True when the lower-cased line holds a hint (a plain loop: cheaper than any() over a generator)."""
    for h in _FLAT_HINTS:
        if h in low:
            return True
    if "token" in low:
        for h in _TOKEN_HINTS:
            if h in low:
                return True
    return False


def redact_text(text: str) -> tuple[str, dict[str, int]]:
    """Redact a whole text (several lines); returns it and the counts by kind."""
    r = Redactor()
    out = "\n".join(r(line) for line in text.split("\n"))
    return out, dict(r.counts)
