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
- the password in a URL (`scheme://user:pass@host`).

Values that are not secrets stay: `None`, `True`/`False`, empty strings and lists, shell references
(`$HF_TOKEN`), and markers already placed. Ordinary vLLM lines (`max_tokens=16`, `tokenizer=...`,
`token_ids`, `'bos_token': '<s>'`) never match: secret-named keys are a closed list, and bare token-shaped
strings need the prefixes their issuers use.

Speed: the reader calls this on every line its prefilter keeps. A line pays one `lower()` and a handful of
substring tests; only lines that hold a hint run the patterns whose hint they hold.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

MARK = "«redacted:{kind}»"
MARK_START = "«redacted:"

#: Secret-named keys (settings, env vars, dict keys). Lower-case spellings are matched case-insensitively;
#: the upper-case family (`*_TOKEN`, `*_SECRET`, ...) only in upper case, the way env vars are written, so
#: that `bos_token`/`pad_token` in a tokenizer dump are left alone.
_KEY_CORE = (
    r"(?i:[a-z0-9_]*?(?:api[_-]?key|access[_-]?key|secret(?:[_-]?(?:access[_-]?)?key)?|passw(?:or)?d"
    r"|(?:hf|hub|hugging_?face(?:_hub)?|access|auth|api|bearer|refresh|session|id|github|gh|wandb|vllm"
    r"|openai|npm|pypi|ci_job)_token))"
    r"|(?-i:[A-Z][A-Z0-9_]*_(?:TOKEN|SECRET|SECRET_KEY|PASSWORD|API_KEY|ACCESS_KEY))"
)
#: `key: value` / `key=value` / `'key': 'value'` / `"KEY": "value"`; the value is a list, a quoted string
#: or a bare word.
KEYED = re.compile(
    r"(?<![\w$-])(?P<kq>['\"]?)(?P<key>" + _KEY_CORE + r")(?P=kq)(?P<sep>\s*[:=]\s*)"
    r"(?P<val>\[[^\]]*\]|'[^']*'|\"[^\"]*\"|[^\s,;)}\]'\"]+)"
)
#: `--api-key VALUE`, `--api-key=VALUE`, `--hf-token 'VALUE'`.
FLAG = re.compile(
    r"(?<![\w-])--(?P<key>api[-_]key|hf[-_]token|token|password|secret|access[-_]token)(?:=|\s+)"
    r"(?P<val>'[^']*'|\"[^\"]*\"|[^\s'\"]+)"
)
#: `Authorization: Bearer X`, `'Authorization': 'Basic X'`, `authorization=X`.
AUTH_HEADER = re.compile(
    r"(?i)(?<![\w-])(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?(?P<scheme>(?:bearer|basic|token)\s+)?"
    r"(?P<val>[^\s'\",;)}\]]+)"
)
#: A lone `Bearer X` with a token-shaped X (has a digit, 8+ characters): not "Bearer authentication".
BEARER = re.compile(r"(?i)(?<![\w-])bearer\s+(?P<val>(?=[\w.~+/=-]*\d)[\w.~+/=-]{8,})")
#: `x-api-key: X` and `api-key: X` headers.
HEADER_KEY = re.compile(r"(?i)(?<![\w-])(?:x-)?api-key['\"]?\s*:\s*['\"]?(?P<val>[^\s'\",;)}\]]+)")
#: The password of `scheme://user:password@host` (user may be empty: `redis://:pw@host`).
URL_PASSWORD = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@'\"«»]*:(?P<val>[^\s@/'\"«»]+)@")
#: Token shapes that need no key around them.
HF_TOKEN = re.compile(r"(?<![A-Za-z0-9_])(?P<val>(?:hf|api_org)_[A-Za-z0-9]{20,})\b")
OPENAI_KEY = re.compile(
    r"(?<![\w-])(?P<val>sk-(?:proj-|svcacct-|admin-|ant-(?:api\d\d-)?)?(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{20,})"
)
GITHUB_TOKEN = re.compile(r"(?<![A-Za-z0-9_])(?P<val>gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b")
AWS_KEY_ID = re.compile(r"(?<![A-Za-z0-9])(?P<val>(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Za-z0-9])")

_NOT_SECRET = {"", "none", "null", "nil", "true", "false", "[]", "{}", "()", "0", "***", "<redacted>",
               "redacted", "<none>", "unset", "xxx", "bearer", "basic"}


def _value_kind(value: str) -> str | None:
    """The kind a value's own shape proves (an hf_ token is an hf_token under any key)."""
    if value.startswith(("hf_", "api_org_")) and HF_TOKEN.fullmatch(value):
        return "hf_token"
    if value.startswith("sk-"):
        return "api_key"
    return None


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
    """Callable text filter that counts what it removed, by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        #: (hints, pattern, kind for a match) in order: keyed forms first so the kind follows the key.
        self._rules: tuple[tuple[tuple[str, ...], re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
            (("://",), URL_PASSWORD, self._fixed("url_password")),
            (("authoriz",), AUTH_HEADER, self._auth),
            (_FLAG_HINTS, FLAG, self._keyed),
            (_KEYED_HINTS, KEYED, self._keyed),
            (("api-key",), HEADER_KEY, self._fixed("api_key")),
            (("bearer",), BEARER, self._fixed("bearer_token")),
            (("hf_", "api_org_"), HF_TOKEN, self._fixed("hf_token")),
            (("sk-",), OPENAI_KEY, self._fixed("api_key")),
            (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), GITHUB_TOKEN, self._fixed("github_token")),
            (("akia", "asia"), AWS_KEY_ID, self._fixed("aws_access_key_id")),
        )

    def __call__(self, text: str) -> str:
        low = text.lower()
        if not maybe_secret(low):
            return text
        for hints, pattern, handler in self._rules:
            if any(h in low for h in hints):
                text = pattern.sub(handler, text)
        return text

    # -- handlers: each returns the match with its `val` group replaced (or unchanged) --

    def _mark(self, m: re.Match[str], kind: str, group: str = "val") -> str:
        value = m.group(group)
        inner = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value
        if _plain(inner):
            return m.group(0)
        self.counts[kind] += 1
        start, end = m.span(group)
        if inner is not value:  # keep the quotes
            start, end = start + 1, end - 1
        base = m.start()
        whole = m.group(0)
        return whole[: start - base] + MARK.format(kind=kind) + whole[end - base:]

    def _fixed(self, kind: str) -> Callable[[re.Match[str]], str]:
        return lambda m: self._mark(m, kind)

    def _auth(self, m: re.Match[str]) -> str:
        scheme = (m.group("scheme") or "").strip().lower()
        return self._mark(m, "basic_auth" if scheme == "basic" else "bearer_token")

    def _keyed(self, m: re.Match[str]) -> str:
        value = m.group("val")
        if value.strip("'\"[]") == m.group("key").upper().replace("-", "_"):
            return m.group(0)  # argparse's metavar in a usage or help text: `[--api-key API_KEY]`
        key_kind = _key_kind(m.group("key"))
        if not value.startswith("["):
            inner = value.strip("'\"")
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


_QUOTED = re.compile(r"(['\"])(.*?)\1")
_FLAG_HINTS = ("--api", "--hf", "--token", "--passw", "--secret", "--access")
#: Lower-case substrings a line must hold for KEYED to have a chance.
_KEYED_HINTS = ("key", "secret", "passw", "passwd", "_token", "token'", 'token"', "token=", "token:", "token ")
#: The cheap pre-check: a line holding none of these cannot match any pattern (every pattern's hints
#: contain one of them). "token" is common in vLLM lines (tokens/s, max_num_batched_tokens), so it is only a
#: hint in the spellings a secret-named key takes.
_TOKEN_HINTS = ("_token", "token'", 'token"', "token=", "token:", "token ")
_FLAT_HINTS = ("key", "secret", "passw", "://", "authoriz", "bearer", "hf_", "api_org_", "sk-", "ghp_", "gho_",
               "ghu_", "ghs_", "ghr_", "github_pat_", "akia", "asia")
HINTS = (*_FLAT_HINTS, *_TOKEN_HINTS)


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
