"""Bundled data (diagnoser/data/*.yaml: GPUs, models, releases, flags, landmarks, places): `load(NAME)` reads
and parses one file the first time a module asks for it, and hands every later caller in the process the same
parsed value. `yaml_load` is the one YAML parser for trusted text (these files and the shipped rules): libyaml's
C loader when present. Nothing is written anywhere.
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
