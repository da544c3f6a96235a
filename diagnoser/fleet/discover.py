"""Which files a scan reads: files as given, folders recursively, glob patterns (`**` included).

Lazy and sorted per folder, so listing a million files costs no memory beyond one folder's names; hidden
files and folders (a leading dot) are skipped inside folders, never when named directly.

Only regular files are read (a symlink is followed to see what it names): a link to /dev/zero, a FIFO (whose
open waits for a writer forever) or a socket in a folder is skipped, and so is a link to a folder (not followed:
no loops); named on the command line, a device, FIFO or socket is an error. A dangling link is yielded, and
reported by the scan as unreadable.
"""

from __future__ import annotations

import glob
import os
import stat
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
            elif entry.is_file() or (entry.is_symlink() and not os.path.exists(entry.path)):
                yield entry.path  # a regular file; a dangling link is reported as unreadable
        except OSError:
            yield entry.path


def _kind(path: str) -> str | None:
    """What `path` names when it is not a regular file or a folder ('a device', 'a FIFO', 'a socket'); None for a
    regular file, a folder or a path that cannot be looked at (reported by the scan as unreadable)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


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
        elif (kind := _kind(target)) is not None:
            raise UsageError(f"{target}: is {kind}, not a regular file; scan reads log files and folders")


def _expand(target: str) -> Iterator[str]:
    if _is_glob(target):
        for path in sorted(glob.iglob(target, recursive=True)):
            if os.path.isdir(path):
                yield from _walk(path)
            elif _kind(path) is None:
                yield path
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
