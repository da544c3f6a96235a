"""Bundled data (diagnoser/data/*.yaml: GPUs, models, releases, flags, landmarks, places): `load(NAME)` reads
and parses one file the first time a module asks for it, and hands every later caller in the process the same
parsed value. `yaml_load` is the one YAML parser for trusted text (these files and the shipped rules).

Parsing YAML is most of what a run spends before it reads its log (about 45 ms for the shipped rules and data,
where JSON takes 2), so the package ships each shipped YAML text parsed: data/parsed_yaml.json maps the hash of
a text to its value as JSON, written by scripts/gen-parsed-yaml (the suite fails when it is stale). A text is
looked up by its own content, so an edited rule or data file is never answered from the file: it misses and is
parsed as YAML, correct and only slower. Nothing is written at run time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"
#: the shipped YAML texts, parsed (see the module doc)
PARSED = "parsed_yaml.json"


def yaml_load(text: str) -> Any:
    """A shipped YAML text's value: from data/parsed_yaml.json when it holds this very text, else parsed.

    >>> yaml_load("a: [1, 2]\\nb: {c: d}\\n")
    {'a': [1, 2], 'b': {'c': 'd'}}
    """
    found = _parsed().get(text_key(text))
    return json.loads(found) if found is not None else parse_yaml(text)


def text_key(text: str) -> str:
    """The key of a text in data/parsed_yaml.json: a hash of its content."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@cache
def _parsed() -> dict[str, str]:
    try:
        index = json.loads(_read_data(PARSED))
    except (OSError, ValueError, ModuleNotFoundError):  # absent or damaged: every text is parsed as YAML
        return {}
    return index if isinstance(index, dict) else {}


def parsed_index(texts: Iterable[str]) -> str:
    """The text of data/parsed_yaml.json for `texts` (scripts/gen-parsed-yaml): one line per text, sorted by
    key. A text whose value JSON would change (a non-string key, a date, NaN) is left out: it is parsed."""
    entries = {}
    for text in texts:
        value = parse_yaml(text)
        try:
            encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):  # a date, a set...
            continue
        if json.loads(encoded) == value and _same_types(json.loads(encoded), value):
            entries[text_key(text)] = encoded
    lines = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(entries.items())]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _same_types(a: Any, b: Any) -> bool:
    """`a` and `b` (equal) hold the same types all the way down (JSON would make 1 == 1.0 and True == 1 alike)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return True


def data_texts() -> list[str]:
    """The text of every bundled YAML data file (what scripts/gen-parsed-yaml records besides the rules)."""
    return [_read_data(p.name).decode("utf-8") for p in sorted(DATA_DIR.glob("*.yaml"))]


def parse_yaml(text: str) -> Any:
    """yaml.safe_load with libyaml's C loader when present (the pure-Python loader is ~10x slower)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, in C when libyaml is there


@cache
def load(name: str) -> Any:
    """A bundled data file (diagnoser/data/NAME, YAML), parsed once per process."""
    return yaml_load(_read_data(name).decode("utf-8"))


def _read_data(name: str) -> bytes:
    path = DATA_DIR / name
    if path.is_file():
        return path.read_bytes()
    from importlib import resources  # a zipped install: the slow, general way

    return resources.files("diagnoser.data").joinpath(name).read_bytes()
