"""Bundled data: one YAML loader for every module, each file parsed once per process.

Nothing is kept on disk between runs: a cache in the user's folder is written by whoever ran before (a cache
restored by `actions/cache`, a shared runner's home), so trusting it would let that writer decide what the next
run reports. Parsing every bundled file with libyaml's C loader takes ~15-25 ms, a small part of a start-up.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"


def yaml_load(text: str) -> Any:
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
