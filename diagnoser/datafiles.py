"""Bundled data: one YAML loader for every module, and a JSON copy of what it parsed in the user's cache.

Start-up counts (a pasted log, a pre-commit hook, a CI step over many logs all pay it), and parsing YAML is
most of it: even libyaml's C loader takes ~2 ms per rule file, the pure-Python one ten times that. So each
bundled file is parsed once per content: its parsed form is kept as JSON in the user's cache directory,
keyed by a hash of the bytes it came from, and read back on later runs without importing yaml at all.

The cache is safe to trust as far as the user's own files are: JSON cannot run code, a copy is used only
when its embedded key matches the current content, and only if the user owns it and nobody else can write
it (or its directory). Three kinds of entry are not plain JSON values: serialized hyperscan databases
(keywords.py, checked by a probe scan on load), compiled code (templatecache.py: the rules' templates, the
methods @dataclass generates), trusted as Python trusts its own __pycache__, and the validated shipped rules,
pickled (rules.py; read by an unpickler that can build nothing but rules). Any problem (unreadable, corrupt,
foreign, a full disk) falls back to parsing. Set VLLM_DOCTOR_CACHE_DIR to move it, VLLM_DOCTOR_NO_CACHE=1 to
turn it off.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

#: Bump when the shape of a cached value changes.
CACHE_FORMAT = 1
#: Copies kept per cached name: the newest written win.
KEEP = 4
DATA_DIR = Path(__file__).resolve().parent / "data"


def yaml_load(text: str) -> Any:
    """yaml.safe_load with libyaml's C loader when present (the pure-Python loader is ~10x slower)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, in C when libyaml is there


def cache_dir() -> Path | None:
    """Where parsed copies live; None when caching is off."""
    if os.environ.get("VLLM_DOCTOR_NO_CACHE"):
        return None
    explicit = os.environ.get("VLLM_DOCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    try:
        root = Path(base) if base else Path.home() / ".cache"
    except RuntimeError:  # no home directory
        return None
    return root / "vllm-doctor"


def content_key(parts: Iterable[bytes]) -> str:
    """A hash of everything a cached value was computed from (length-prefixed, so parts cannot run together)."""
    h = hashlib.sha256(f"vllm-doctor-cache/{CACHE_FORMAT}".encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:40]


def _trusted(path: Path) -> bool:
    """Owned by this user and writable by nobody else (like ssh's checks on its own files)."""
    if not hasattr(os, "getuid"):
        return True
    st = path.stat()
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def read_cache(name: str, key: str) -> Any | None:
    """The value stored under (name, key), or None when there is none that can be trusted."""
    raw = _read(name, key, "json")
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or doc.get("key") != key:
        return None
    return doc.get("value")


def write_cache(name: str, key: str, value: Any) -> None:
    """Store a JSON-able value atomically, readable only by the user; silently skipped on any failure."""
    try:
        text = json.dumps({"format": CACHE_FORMAT, "key": key, "value": value}, allow_nan=False)
    except (TypeError, ValueError):
        return
    _write(name, key, "json", text.encode("utf-8"))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by another run
        return 0.0


def _blob_header(key: str) -> bytes:
    return f"vllm-doctor-cache/{CACHE_FORMAT} {key}\n".encode()


def read_blob(name: str, key: str) -> bytes | None:
    """Bytes stored by write_blob under (name, key), or None (missing, foreign, or another key's header).

    For what JSON cannot hold (a serialized hyperscan database); its reader must still check what it gets."""
    raw = _read(name, key, "bin")
    header = _blob_header(key)
    if raw is None or not raw.startswith(header):
        return None
    return raw[len(header):]


def write_blob(name: str, key: str, data: bytes) -> None:
    """Store bytes atomically under (name, key), readable only by the user; silently skipped on any failure."""
    _write(name, key, "bin", _blob_header(key) + data)


def _read(name: str, key: str, ext: str) -> bytes | None:
    folder = cache_dir()
    if folder is None:
        return None
    path = folder / f"{name}-{key}.{ext}"
    try:
        if not (_trusted(folder) and _trusted(path)):
            return None
        return path.read_bytes()
    except OSError:
        return None


def _write(name: str, key: str, ext: str, data: bytes) -> None:
    folder = cache_dir()
    if folder is None:
        return
    import tempfile  # only a run that writes pays for it (tempfile imports random, shutil)

    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # a few copies per name (two installs, or two keyword sets, take turns); older ones are dead weight
        copies = sorted(folder.glob(f"{name}-*.{ext}"), key=_mtime, reverse=True)
        for old in copies[KEEP - 1:]:
            old.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, folder / f"{name}-{key}.{ext}")
    except OSError:
        return


def cached(name: str, parts: Iterable[bytes], build: Callable[[], Any]) -> Any:
    """`build()`'s value, computed once per content of `parts` and kept as JSON across runs.

    A value that JSON would change (tuples, non-string keys, dates) is returned as built and not stored.
    """
    key = content_key(parts)
    hit = read_cache(name, key)
    if hit is not None:
        return hit
    value = build()
    try:
        faithful = json.loads(json.dumps(value, allow_nan=False)) == value
    except (TypeError, ValueError):
        faithful = False
    if faithful:
        write_cache(name, key, value)
    return value


@cache
def load(name: str) -> Any:
    """A bundled data file (diagnoser/data/NAME, YAML), parsed: once per process, once per content on disk."""
    raw = _read_data(name)
    return cached(f"data-{Path(name).stem}", [raw], lambda: yaml_load(raw.decode("utf-8")))


def _read_data(name: str) -> bytes:
    path = DATA_DIR / name
    if path.is_file():
        return path.read_bytes()
    from importlib import resources  # a zipped install: the slow, general way

    return resources.files("diagnoser.data").joinpath(name).read_bytes()
