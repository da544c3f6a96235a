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
only there (redact_hints.py: `match_starts`, `sub_at`): the same matches, found at tens of MB/s instead of 1-3,
in any piece that lower-cases character for character; the lower-cased copy follows the substitutions.

Here: the `Redactor` (a line at a time, with what a line carries to the next: a token a hard wrap cut, a
private key block). The patterns are in redact_patterns.py, the hints in redact_hints.py, and the redaction
of a Python value or a line of JSON output in redact_structured.py.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from diagnoser.ingest.keywords import LONG_TEXT, lowered, remember_lowered
from diagnoser.ingest.redact_hints import (
    FLAG_HINTS,
    HEADER_HINTS,
    HINT_STARTS,
    HINTS,
    KEYED_HINTS,
    MAYBE,
    SCHEME_PATTERNS,
    match_starts,
    maybe_secret,
    sub_at,
)
from diagnoser.ingest.redact_patterns import (
    AUTH_HEADER,
    AUTH_SCHEMES,
    BEARER,
    COOKIE,
    ENTROPY,
    EXACT_SECRET_FLAGS,
    FLAG,
    HEADER_KEY,
    HF_TOKEN,
    ISSUED_TOKENS,
    KEYED,
    MARK,
    MARK_START,
    PRIVATE_KEY,
    PRIVATE_KEY_END,
    URL_PASSWORD,
    URL_QUERY,
    URL_USER,
    high_entropy,
    secret_flag,
    secret_key,
)
from diagnoser.lazyre import lazy

#: A log line's header: a key block that never ends is over where the log goes on (it cannot hide the log).
_LOG_HEADER = lazy(r"(?:^|\s)(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d"
                   r"|^Traceback \(most recent call last\)")
#: Lines a key block may hold at most (a 4096-bit PGP key with its armour: ~110).
KEY_BLOCK_LINES = 400
_COOKIE_PAIR = lazy(r"(?P<name>[^=;,\s]+)=(?P<val>[^;,\s]*)")
_COOKIE_ATTRS = {"path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority", "version"}
#: A token-shaped fragment at the end of a line, and the start of the next: a hard wrap cut a secret.
_PARTIAL_AT_END = lazy(
    r"(?<![\w-])(?P<val>(?:hf_|api_org_|sk-|gh[pousr]_|github_pat_|xox[abposr]-|AIza|nvapi-|eyJ)[A-Za-z0-9_.-]*)$"
)
_CONTINUATION = lazy(r"^(?P<val>[A-Za-z0-9_.+/=-]+)(?=[\s'\",;)\]}]|$)")

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
            (FLAG_HINTS, FLAG, self._flag),
            (KEYED_HINTS, KEYED, self._keyed),
            (HEADER_HINTS, HEADER_KEY, self._header),
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
        if HINTS._db() is not None:  # hyperscan: one pass
            present = set(HINTS.present_in(text))
        elif maybe_secret(low := lowered(text)):  # substring tests beat the pure-Python keyword regex over 1 MB
            present = {h for h in HINTS.words if h in low}
        else:
            return text
        if not present & MAYBE:
            return text
        # text.lower(), kept in step with the text through the substitutions (a megabyte is not lower-cased
        # again after each pattern that replaced something; None: lower-cased when next needed)
        low: str | None = None
        original = text
        for hints, pattern, handler in self._rules:
            if not any(h in present for h in hints):
                continue
            if pattern in HINT_STARTS or pattern is KEYED or pattern in SCHEME_PATTERNS:
                low = lowered(text) if low is None else low
                starts = match_starts(pattern, [h for h in hints if h in present], text, low)
            else:
                starts = None
            if starts is None:
                new = pattern.sub(handler, text)  # the same object when nothing was replaced
                text, low = new, (low if new is text else None)
            else:
                text, low = sub_at(pattern, handler, text, starts, low)
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


def redact_text(text: str) -> tuple[str, dict[str, int]]:
    """Redact a whole text (several lines); returns it and the counts by kind."""
    r = Redactor()
    out = "\n".join(r(line) for line in text.split("\n"))
    return out, dict(r.counts)
