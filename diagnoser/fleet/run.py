"""Run a scan: each file diagnosed on its own, in this process or over `--jobs` worker processes.

Results come back in input order with a bounded number of files in flight, so memory stays flat however
many logs there are. Every file yields documents: one JSON-contract report per log it holds, or one error
document when it cannot be read (a missing, unreadable, truncated or corrupt file); a bad file never stops
the scan. Workers load the rules once each (the initializer), not once per file.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from diagnoser.errors import DoctorError

#: `error.type` values of an error document
ERROR_TYPES = ("unreadable", "corrupt", "too-large", "invalid", "internal")


@dataclass(frozen=True)
class ScanOptions:
    """What every worker needs to diagnose a file the same way."""

    rule_paths: tuple[str, ...] = ()
    redact: bool = True
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def error_doc(path: str, kind: str, message: str) -> dict[str, Any]:
    """The document for a file that could not be diagnosed: same head as a report, `error` instead of findings."""
    from diagnoser.analysis.contract import SCHEMA_VERSION, TOOL

    return {"schema_version": SCHEMA_VERSION, "tool": dict(TOOL), "input": {"path": path},
            "error": {"type": kind, "message": message}}


def _error_kind(exc: BaseException) -> str:
    from diagnoser.errors import LimitError

    if isinstance(exc, LimitError):
        return "too-large"
    if isinstance(exc, DoctorError):
        return "invalid"
    from diagnoser.ingest.sources import is_codec_error

    if is_codec_error(exc) or isinstance(exc, ValueError):
        return "corrupt"
    if isinstance(exc, OSError):
        return "unreadable" if exc.errno is not None else "corrupt"
    return "internal"


def _message(path: str, exc: BaseException) -> str:
    if isinstance(exc, DoctorError):
        return str(exc)
    from diagnoser.ingest.sources import read_error

    error = read_error(path, exc)
    if error is not None:
        return str(error)
    return f"{path}: cannot read ({str(exc) or type(exc).__name__})"


def scan_stream(raw: BinaryIO, path: str, opts: ScanOptions) -> list[dict[str, Any]]:
    """Every log in one (possibly compressed) byte stream, as JSON-contract documents."""
    from diagnoser.analysis.contract import report_dict
    from diagnoser.analysis.pipeline import diagnose
    from diagnoser.api import resolve_rules
    from diagnoser.fleet.split import logs_in
    from diagnoser.ingest.sources import decompressed

    rules = resolve_rules(list(opts.rule_paths) or None)
    docs: list[dict[str, Any]] = []
    try:
        stream = decompressed(raw, path)
        for log in logs_in(stream, path):
            with log.stream:
                doc = report_dict(diagnose(log.stream, log.name, rules, redact=opts.redact))
            if log.key is not None:
                doc["input"]["stream"] = log.key
                doc["input"]["labels"] = log.labels
            docs.append(doc)
    except Exception as exc:  # noqa: BLE001 - one bad file is reported and counted, never stops the scan
        return [error_doc(path, _error_kind(exc), _message(path, exc))]
    return docs


def scan_file(path: str, opts: ScanOptions) -> list[dict[str, Any]]:
    """Every log in one file (see scan_stream); an unreadable file gives one error document."""
    if os.path.isdir(path):
        return [error_doc(path, "unreadable", f"{path}: cannot read this folder (permission denied)")]
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        return [error_doc(path, "unreadable", f"{path}: cannot read ({exc.strerror or exc})")]
    with raw:
        return scan_stream(raw, path, opts)


_WORKER_OPTS = ScanOptions()


def _init_worker(opts: ScanOptions) -> None:
    """Once per worker process: keep the options and load the rules (so no file pays for it)."""
    global _WORKER_OPTS
    _WORKER_OPTS = opts
    from diagnoser.api import resolve_rules

    resolve_rules(list(opts.rule_paths) or None)


def _work(path: str) -> list[dict[str, Any]]:
    return scan_file(path, _WORKER_OPTS)


def scan(paths: Sequence[str] | Iterator[str], opts: ScanOptions | None = None, jobs: int = 1
         ) -> Iterator[dict[str, Any]]:
    """Diagnose each path; yield its documents in input order. `jobs` > 1 uses that many processes."""
    opts = opts or ScanOptions()
    if jobs <= 1:
        for path in paths:
            yield from scan_file(path, opts)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
    window = jobs * 4  # files in flight: enough to keep every worker busy, few enough to stay flat
    with ctx.Pool(jobs, initializer=_init_worker, initargs=(opts,)) as pool:
        pending: deque[Any] = deque()
        for path in paths:
            pending.append(pool.apply_async(_work, (path,)))
            if len(pending) >= window:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()


__all__ = ["ERROR_TYPES", "ScanOptions", "error_doc", "scan", "scan_file", "scan_stream"]
