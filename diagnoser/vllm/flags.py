"""The `vllm serve` flag list (data/vllm_flags.yaml): lookup, typo suggestions and renamed/removed flags.

Used by the planner's command-line parser (reject what vLLM would reject) and by the unrecognized-argument
rule (suggest the flag that was meant).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from diagnoser import datafiles


@dataclass(frozen=True)
class Flag:
    """One flag of `vllm serve`."""

    name: str
    value: bool = True
    short: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    renamed_to: str | None = None
    renamed_from: str | None = None
    negatable: bool = False
    negatable_since: str | None = None
    nargs: str | None = None       #: "+" for one or more values
    json: bool = False             #: the value is a JSON object or list
    item: str | None = None        #: how one element of a structured list is written ("{name}={path}")
    default: Any = None            #: the value every release defaults to
    group: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """The argument's Python name ('--max-model-len' -> 'max_model_len')."""
        return self.name[2:].replace("-", "_")

    @property
    def server_only(self) -> bool:
        """An option of the OpenAI server, not an argument of the Python LLM(...) class."""
        return self.group == "frontend"


@lru_cache(maxsize=1)
def load_flags() -> dict[str, Flag]:
    """Every known flag by its long name ('--max-model-len')."""
    out: dict[str, Flag] = {}
    for item in datafiles.load("vllm_flags.yaml")["flags"]:
        f = Flag(
            name=item["name"], value=bool(item.get("value", True)), short=tuple(item.get("short") or ()),
            since=item.get("since"), until=item.get("until"), renamed_to=item.get("renamed_to"),
            renamed_from=item.get("renamed_from"), negatable=bool(item.get("negatable")),
            negatable_since=item.get("negatable_since"), nargs=item.get("nargs"), json=bool(item.get("json")),
            item=item.get("item"), default=item.get("default"),
            group=item.get("group", ""), note=item.get("note", ""),
        )
        out[f.name] = f
    return out


@lru_cache(maxsize=1)
def _by_spelling() -> dict[str, Flag]:
    table: dict[str, Flag] = {}
    for f in load_flags().values():
        table[f.name] = f
        for s in f.short:
            table[s] = f
        if f.negatable:
            table["--no-" + f.name[2:]] = f
    return table


def normalize(name: str) -> str:
    """'--max_model_len' -> '--max-model-len' (vLLM >= 0.5.1 rewrites the part before the first '.')."""
    head, dot, tail = name.partition(".")
    if head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    return head + dot + tail


def lookup(name: str) -> Flag | None:
    """The flag a spelling names ('-tp', '--no-enable-prefix-caching', '--max_model_len'), or None.

    A dotted spelling ('--compilation-config.level') names its base flag.
    """
    table = _by_spelling()
    spelled = normalize(name)
    return table.get(spelled) or table.get(spelled.split(".", 1)[0])


@lru_cache(maxsize=1)
def _long_spellings() -> tuple[str, ...]:
    return tuple(sorted(n for n in _by_spelling() if n.startswith("--")))


def by_prefix(name: str) -> Flag | None:
    """argparse's allow_abbrev: an unambiguous prefix of one long flag names it ('--kv-cache-memory')."""
    spelled = normalize(name)
    if not spelled.startswith("--") or len(spelled) < 4:
        return None
    names = _long_spellings()
    at = bisect.bisect_left(names, spelled)
    unique: dict[str, Flag] = {}
    while at < len(names) and names[at].startswith(spelled):   # the sorted run that starts with it
        flag = _by_spelling()[names[at]]
        unique[flag.name] = flag
        at += 1
    return next(iter(unique.values())) if len(unique) == 1 else None


def closest_flag(name: str) -> tuple[str | None, float]:
    """The real flag a typo most likely meant, with rapidfuzz's score (0-100)."""
    from rapidfuzz import fuzz, process

    spelled = normalize(name)
    names = [n for n in _by_spelling() if n.startswith("--")]
    best = process.extractOne(spelled, names, scorer=fuzz.ratio)
    if not best:
        return None, 0.0
    return str(best[0]), float(best[1])


def renamed(name: str) -> dict[str, Any] | None:
    """What became of a renamed or removed flag: {'flag', 'renamed_to', 'until', 'since', 'note'}."""
    f = lookup(name)
    if f is None or not (f.renamed_to or f.until):
        return None
    return {"flag": f.name, "renamed_to": f.renamed_to, "until": f.until, "since": f.since, "note": f.note}

