"""What leaves the doctor is inert: no terminal escape, no bidi trick, no GitHub workflow command.

A log is attacker-controlled text, and so are rule packs and launch files. Once the doctor has decoded
them (ANSI `^[[` forms, `ast.literal_eval` of argument strings, JSON escapes), a value can hold a real ESC
(OSC 52 writes the clipboard, OSC 0 sets the window title, CSI clears the screen), a C1 control (U+009B is
a one-byte CSI), a bidi override (U+202E shows `exe.txt` as `txt.exe`), or a newline followed by
`::add-mask::` or `::stop-commands::` that a GitHub runner executes. Three layers stop them:

- `clean()` escapes every such character as visible `\\uXXXX` text (a `\\n` inside a one-line value too).
  `sanitized()` applies it to every string of a Report, deeply, and the report package runs every format
  over that copy, so JSON consumers decode clean values as well.
- `no_commands()` defuses what the GitHub runner would take for a workflow command: a line that starts with
  `::` after any white space (the runner's .NET `TrimStart()` strips NBSP, U+2003, U+3000 and the rest, not only
  spaces and tabs) gets a space between the colons, and the legacy `##[command]`, which the runner finds
  anywhere in a line, becomes `## [command]`. Every format but `github` goes through it; `github` (whose own
  annotations are commands) through `no_legacy_commands()`.
- `OutputFilter` wraps stdout and stderr for every command (`plan`, `rules`, errors included): it
  escapes what is left and redacts secrets (unless `--no-redact`), one line at a time.

    >>> clean("title\\x1b]0;pwned\\x07 \\u202eexe.txt")
    'title\\\\u001b]0;pwned\\\\u0007 \\\\u202eexe.txt'
    >>> no_commands("ok\\n  ::add-mask::x")
    'ok\\n  : :add-mask::x'
    >>> no_commands("ok\\n\\u3000::add-mask::x ##[error]y")
    'ok\\n\\u3000: :add-mask::x ## [error]y'
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Callable
from typing import Any

from diagnoser.lazyre import lazy

#: C0 (but tab and newline), DEL, C1, the bidi embeddings/overrides/isolates and marks, line and
#: paragraph separators, and the BOM / zero-width no-break space.
_UNSAFE = ([c for c in range(0x20) if c not in (0x09, 0x0A)] + list(range(0x7F, 0xA0))
           + list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)) + [0x200E, 0x200F, 0x061C, 0x2028,
                                                                           0x2029, 0xFEFF])
_TABLE = {c: f"\\u{c:04x}" for c in _UNSAFE}
#: lone surrogates (a log's `\\ud800` escape decoded by JSON or literal_eval): U+FFFD, as a decoder shows bad input
_TABLE.update(dict.fromkeys(range(0xD800, 0xE000), "\ufffd"))
_TABLE_ONE_LINE = {**_TABLE, 0x0A: "\\n"}
_UNSAFE_RE = lazy("[" + "".join(re.escape(chr(c)) for c in _UNSAFE) + "\ud800-\udfff]")
#: Our own colour codes (`--color`): the only escape sequences an output may carry.
_SGR = lazy(r"\x1b\[[0-9;]*m")
#: `::` after white space at a line's start: every character str.isspace() accepts but the newline (a superset of
#: what .NET's TrimStart() strips), and the Mongolian vowel separator and zero-width characters older .NETs strip.
_COMMAND_LINE = lazy("^((?:[^\\S\\n]|[\u180e\u200b\ufeff])*):(?=:)", re.MULTILINE)
#: the runner's legacy command syntax, honoured anywhere in a line
_LEGACY_COMMAND = "##["

#: Fields whose text is several lines by design (advice paragraphs, a rule's explanation).
MULTILINE_FIELDS = frozenset({"advice", "explanation", "reason", "text_block", "notes"})


def clean(text: str, multiline: bool = False) -> str:
    """`text` with every unsafe character as visible `\\uXXXX` text (newlines kept when `multiline`)."""
    if not _UNSAFE_RE.search(text) and (multiline or "\n" not in text):
        return text
    return text.translate(_TABLE if multiline else _TABLE_ONE_LINE)


def no_commands(text: str) -> str:
    """Lines that a GitHub runner would take for a workflow command get a space between the colons, and every
    legacy `##[command]` a space before its bracket."""
    text = no_legacy_commands(text)
    return _COMMAND_LINE.sub(r"\1: ", text) if "::" in text else text


def no_legacy_commands(text: str) -> str:
    """`##[command]` (the runner's legacy syntax, found anywhere in a line) as `## [command]`: for the github
    format too, whose own commands use `::` only."""
    return text.replace(_LEGACY_COMMAND, "## [") if _LEGACY_COMMAND in text else text


def clean_output(text: str, keep_color: bool = True) -> str:
    """A whole rendered output: unsafe characters escaped, except our own SGR colour codes."""
    if not _UNSAFE_RE.search(text):
        return text
    if not keep_color or "\x1b" not in text:
        return clean(text, multiline=True)
    parts = _SGR.split(text)
    codes = _SGR.findall(text)
    out = [clean(parts[0], multiline=True)]
    for code, part in zip(codes, parts[1:], strict=True):
        out += [code, clean(part, multiline=True)]
    return "".join(out)


def sanitized(value: Any, multiline: bool = False, _depth: int = 0) -> Any:
    """A copy of `value` with `clean` applied to every string in it (dataclasses, dicts, lists, tuples)."""
    if isinstance(value, str):
        return clean(value, multiline)
    if _depth > 50 or value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {sanitized(k, False, _depth + 1): sanitized(v, k in MULTILINE_FIELDS, _depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [sanitized(v, multiline, _depth + 1) for v in value]
        return type(value)(items) if not isinstance(value, list) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        copy = _shallow_copy(value)
        for f in dataclasses.fields(value):
            if f.name in _SKIP_FIELDS:
                continue
            old = getattr(value, f.name)
            new = sanitized(old, f.name in MULTILINE_FIELDS, _depth + 1)
            if new is not old:
                object.__setattr__(copy, f.name, new)
        return copy
    return value


#: A rule's compiled parts (patterns, cases): never rendered, and costly to copy.
_SKIP_FIELDS = frozenset({"patterns", "extractors", "cases", "fixes_spec", "derive", "when", "keep_when",
                          "aggregate", "facts_spec"})


def _shallow_copy(value: Any) -> Any:
    import copy

    return copy.copy(value)


class OutputFilter(io.TextIOBase):
    """A text stream that escapes unsafe characters, defuses workflow commands and redacts secrets, by line.

    A line of JSON (`plan --format json`, a JSON Lines document) is redacted value by value (redact_json_line):
    never through its serialised text, whose escaped quotes a pattern could cut, leaving invalid JSON.

    `allow_commands` is set by the github format (its own `::error` lines); `redact` is cleared by
    `--no-redact`. Partial lines wait for their newline, or for flush().
    """

    def __init__(self, stream: Any, redact: Callable[[str], str] | None) -> None:
        super().__init__()
        self._stream = stream
        self._pending = ""
        self.redact = redact
        self.allow_commands = False

    # what click and the renderers ask of a stream
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._stream.fileno()

    def write(self, text: str) -> int:  # type: ignore[override]
        self._pending += text
        if "\n" in self._pending:
            head, _, self._pending = self._pending.rpartition("\n")
            self._stream.write(self._process(head + "\n"))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            text, self._pending = self._pending, ""
            self._stream.write(self._process(text))
        self._stream.flush()

    def _process(self, text: str) -> str:
        if self.redact is not None:
            text = "\n".join(self._redacted(line) for line in text.split("\n"))
        text = clean_output(text)
        return no_legacy_commands(text) if self.allow_commands else no_commands(text)

    def _redacted(self, line: str) -> str:
        assert self.redact is not None
        from diagnoser.ingest.redact import Redactor
        from diagnoser.ingest.redact_structured import looks_like_json, redact_json_line

        if isinstance(self.redact, Redactor) and looks_like_json(line):
            return redact_json_line(line, self.redact)
        return self.redact(line)
