"""Redacting structured output: a Python value before it is serialised, and one line of JSON output.

A string is redacted on its own decoded text, so that serialising the result never needs the serialised text
redacted (which breaks JSON escapes); a string under a secret-named key goes whole.
"""

from __future__ import annotations

import json
from typing import Any

from diagnoser.ingest.redact import Redactor
from diagnoser.lazyre import lazy


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

