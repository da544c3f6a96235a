"""Which files a scan reads: files as given, folders recursively, glob patterns (`**` included).

Lazy and sorted per folder, so listing a million files costs no memory beyond one folder's names; hidden
files and folders (a leading dot) are skipped inside folders, never when named directly.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator

from diagnoser.errors import UsageError

GLOB_CHARS = ("*", "?", "[")


def _walk(folder: str) -> Iterator[str]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        yield folder  # unreadable folder: reported by the scan as a bad input
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(entry.path)
            elif entry.is_file() or entry.is_symlink():  # a dangling link is reported as unreadable
                yield entry.path
        except OSError:
            yield entry.path


def _is_glob(target: str) -> bool:
    return any(c in target for c in GLOB_CHARS) and not os.path.lexists(target)


def check_targets(targets: Iterable[str]) -> None:
    """Before anything is scanned: a target that names nothing is a UsageError naming it."""
    for target in targets:
        if _is_glob(target):
            if next(glob.iglob(target, recursive=True), None) is None:
                raise UsageError(f"{target}: the pattern matches no file; check it (quote it so the shell "
                                 "does not expand it)")
        elif not os.path.lexists(target):
            raise UsageError(f"{target}: no such file or folder; check the path")


def _expand(target: str) -> Iterator[str]:
    if _is_glob(target):
        for path in sorted(glob.iglob(target, recursive=True)):
            yield from _walk(path) if os.path.isdir(path) else iter([path])
    elif os.path.isdir(target):
        yield from _walk(target)
    else:
        yield target


def iter_paths(targets: Iterable[str]) -> Iterator[str]:
    """Every log file the targets name, in order, each once (check_targets first)."""
    seen: set[str] = set()
    for target in targets:
        for path in _expand(target):
            key = os.path.normpath(path)
            if key in seen:
                continue
            if len(seen) < 1_000_000:  # bounded: past a million names a repeat would be scanned twice
                seen.add(key)
            yield path
