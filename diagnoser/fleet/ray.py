"""Ray Data: diagnose a fleet's logs where they are (local folders, s3://, gs://) on a Ray cluster.

`pip install 'vllm-log-doctor[ray]'`. Each log file is one row of `ray.data.read_binary_files`; a Ray
task diagnoses it exactly as `vllm-doctor scan` does (decompression, one log per pod/container) and emits
rows. Ray reuses its worker processes, and the rules are cached per process, so each worker loads them
once. `diagnose_dataset(ds)` gives the flat rows of report/rows.py (one per finding, one per clean or
unreadable log) for Parquet or aggregation; `scan_paths` gives the JSON documents `scan` writes.

    from diagnoser.fleet.ray import diagnose_dataset, read_logs
    ds = read_logs("s3://bucket/vllm-logs/")          # one row per file, read raw inside the tasks
    diagnose_dataset(ds).write_parquet("s3://bucket/vllm-doctor/")
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from diagnoser.errors import UsageError
from diagnoser.fleet.run import ScanOptions, scan_stream

if TYPE_CHECKING:
    import ray.data

INSTALL_HINT = "the ray engine needs Ray Data: pip install 'vllm-log-doctor[ray]'"
URI_SCHEMES = ("s3://", "gs://", "gcs://", "hdfs://", "abfs://", "abfss://", "az://", "file://")


def _ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401 - the extra's second half (pyarrow, pandas)
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return ray


def _open_uri(uri: str) -> Any:
    """A URI's bytes as pyarrow's filesystem streams them, never decompressed by pyarrow (the doctor does it)."""
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(uri)
    return filesystem.open_input_stream(path, compression=None)


def _docs(row: dict[str, Any], opts: ScanOptions) -> list[dict[str, Any]]:
    """The documents of one row: a local `file` or a `uri` (from read_logs), or `bytes` (read_binary_files)."""
    path = str(row.get("path") or "-")
    if row.get("file"):
        from diagnoser.fleet.run import scan_file

        docs = scan_file(str(row["file"]), opts)
        if path != row["file"]:
            for doc in docs:
                doc["input"]["path"] = path + doc["input"]["path"][len(str(row["file"])):]
                if "error" in doc:
                    doc["error"]["message"] = doc["error"]["message"].replace(str(row["file"]), path, 1)
        return docs
    if row.get("uri"):
        from diagnoser.fleet.run import error_doc
        from diagnoser.ingest.sources import sniff

        try:
            raw = _open_uri(str(row["uri"]))
        except OSError as exc:
            return [error_doc(path, "unreadable", f"{path}: cannot read ({exc})")]
        with raw:
            return scan_stream(sniff(raw, 0)[1], path, opts)
    return scan_stream(io.BytesIO(bytes(row["bytes"])), path, opts)


def _flat(row: dict[str, Any], opts: ScanOptions) -> list[dict[str, Any]]:
    from diagnoser.report.rows import rows

    return [r for doc in _docs(row, opts) for r in rows(doc)]


def _documents(row: dict[str, Any], opts: ScanOptions) -> list[dict[str, Any]]:
    return [{"path": str(row.get("path") or "-"), "document": json.dumps(doc, ensure_ascii=False, default=str)}
            for doc in _docs(row, opts)]


def _options(rules: Sequence[str] | None, redact: bool) -> ScanOptions:
    return ScanOptions(rule_paths=tuple(os.path.abspath(p) for p in rules or ()), redact=redact)


def diagnose_dataset(ds: ray.data.Dataset, *, rules: Sequence[str] | None = None,
                     redact: bool = True) -> ray.data.Dataset:
    """Flat report rows for a Dataset of log files: `read_logs(...)`, or `bytes` and `path` columns as
    `read_binary_files(..., include_paths=True)` makes them. Columns (report/rows.py COLUMNS): source,
    stream, status, rule, severity, stage, line, title, model, GPU, release, the main facts, all facts as JSON.
    """
    from functools import partial

    return ds.flat_map(partial(_flat, opts=_options(rules, redact)))


def list_logs(targets: Sequence[str]) -> list[dict[str, str]]:
    """The log files under the targets, one row each (`path` as reported, `file` or `uri` to read).

    Local files, folders and globs are listed as the local scan lists them; URIs (s3://, gs://, ...) through
    pyarrow's filesystems, folders recursively, hidden names skipped, sorted.
    """
    from diagnoser.fleet.discover import check_targets, iter_paths

    local = [t for t in targets if not t.startswith(URI_SCHEMES)]
    if local:
        check_targets(local)
    rows: list[dict[str, str]] = []
    for target in targets:
        if not target.startswith(URI_SCHEMES):
            rows.extend({"path": p, "file": os.path.abspath(p)} for p in iter_paths([target]))
            continue
        from pyarrow import fs

        scheme = target[: target.index("://") + 3]
        try:
            filesystem, base = fs.FileSystem.from_uri(target)
            info = filesystem.get_file_info(base)
            if info.type == fs.FileType.NotFound:
                raise UsageError(f"{target}: no such file or folder; check the URI")
            if info.type == fs.FileType.Directory:
                found = filesystem.get_file_info(fs.FileSelector(base, recursive=True))
                names = sorted(i.path for i in found if i.type == fs.FileType.File
                               and not any(part.startswith(".") for part in i.path[len(base):].split("/")))
            else:
                names = [base]
        except (OSError, ValueError) as exc:
            raise UsageError(f"{target}: cannot list ({exc})") from None
        for name in names:  # pyarrow's paths: "bucket/key" for object stores, "/abs/path" for file://
            uri = "file://" + name if scheme == "file://" else scheme + name.lstrip("/")
            rows.append({"path": uri, "uri": uri})
    return rows


def read_logs(targets: str | Sequence[str]) -> ray.data.Dataset:
    """A Dataset of the log files under the targets (see list_logs), for `diagnose_dataset`.

    Unlike `read_binary_files`, each file is read inside the task that diagnoses it, as raw bytes: pyarrow
    would decompress `.gz` / `.bz2` / `.zst` by name, and one truncated archive would fail the whole job,
    where the doctor reports it as one bad file.
    """
    ray = _ray()
    items = list_logs([targets] if isinstance(targets, str) else list(targets))
    if not items:
        raise UsageError("no log files found in " + (targets if isinstance(targets, str) else ", ".join(targets)))
    cpus = (int(ray.cluster_resources().get("CPU", 1)) or 1) if ray.is_initialized() else (os.cpu_count() or 1)
    return ray.data.from_items(items, override_num_blocks=_blocks(len(items), cpus))


def _blocks(files: int, cpus: int) -> int:
    """Tasks to cut a file list into: a few per CPU (balance), at most ~500 files each (retries stay cheap).

    >>> _blocks(300, 2), _blocks(1_000_000, 8)
    (8, 2000)
    """
    return max(1, min(files, max(4 * cpus, -(-files // 500))))


def init(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join the cluster at `address` ($RAY_ADDRESS), else start a local Ray; True when this call started it."""
    ray = _ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR,
                              "configure_logging": True}
    if address is None:
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    ray.init(address=address, **kwargs)
    return True


def scan_paths(targets: Sequence[str], opts: ScanOptions | None = None, *, address: str | None = None,
               num_cpus: int | None = None) -> Iterator[dict[str, Any]]:
    """`scan --engine ray`: the JSON documents of every log under the targets, in file order.

    Local targets (files, folders, globs) are listed here, as the local scan lists them; URIs (s3://,
    gs://, ...) are listed by Ray's and pyarrow's filesystems. Ray is shut down after if this call started it.
    """
    ray = _ray()
    opts = opts or ScanOptions()
    list_logs([t for t in targets if not t.startswith(URI_SCHEMES)])  # a bad local path: error before Ray starts
    started = init(address, num_cpus)
    try:
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        from functools import partial

        for row in read_logs(targets).flat_map(partial(_documents, opts=opts)).iter_rows():
            yield json.loads(row["document"])
    finally:
        if started:
            ray.shutdown()


__all__ = ["diagnose_dataset", "init", "list_logs", "read_logs", "scan_paths"]
