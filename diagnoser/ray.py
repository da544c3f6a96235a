"""Ray Data: diagnose a fleet's logs where they are (local folders, s3://, gs://) on a Ray cluster.

`pip install 'vllm-log-doctor[ray]'`. Each log file is one row of `ray.data.read_binary_files`; a Ray
task diagnoses it exactly as `vllm-doctor scan` does (decompression, one log per pod/container) and emits
rows. Ray reuses its worker processes, and the rules are cached per process, so each worker loads them
once. `diagnose_dataset(ds)` gives the flat rows of report/rows.py (one per finding, one per clean or
unreadable log) for Parquet or aggregation; `scan_paths` gives the JSON documents `scan` writes.

    import ray
    from diagnoser.ray import diagnose_dataset
    ds = ray.data.read_binary_files("s3://bucket/vllm-logs/", include_paths=True)
    diagnose_dataset(ds).write_parquet("s3://bucket/vllm-doctor/")
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .scan.run import ScanOptions, scan_stream

if TYPE_CHECKING:
    import ray.data

INSTALL_HINT = "the ray engine needs Ray Data: pip install 'vllm-log-doctor[ray]'"
URI_SCHEMES = ("s3://", "gs://", "gcs://", "hdfs://", "abfs://", "abfss://", "az://", "file://", "local://")


def _ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401 - the extra's second half (pyarrow, pandas)
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return ray


def _docs(row: dict[str, Any], opts: ScanOptions) -> list[dict[str, Any]]:
    """A row of file bytes (read_binary_files), or a local file named by `file` and reported as `path`."""
    path = str(row.get("path") or "-")
    if row.get("file"):
        from .scan.run import scan_file

        docs = scan_file(str(row["file"]), opts)
        if path != row["file"]:
            for doc in docs:
                doc["input"]["path"] = path + doc["input"]["path"][len(str(row["file"])):]
                if "error" in doc:
                    doc["error"]["message"] = doc["error"]["message"].replace(str(row["file"]), path, 1)
        return docs
    return scan_stream(io.BytesIO(bytes(row["bytes"])), path, opts)


def _flat(row: dict[str, Any], opts: ScanOptions) -> list[dict[str, Any]]:
    from .report.rows import rows

    return [r for doc in _docs(row, opts) for r in rows(doc)]


def _documents(row: dict[str, Any], opts: ScanOptions) -> list[dict[str, Any]]:
    return [{"path": str(row.get("path") or "-"), "document": json.dumps(doc, ensure_ascii=False, default=str)}
            for doc in _docs(row, opts)]


def _options(rules: Sequence[str] | None, redact: bool) -> ScanOptions:
    return ScanOptions(rule_paths=tuple(os.path.abspath(p) for p in rules or ()), redact=redact)


def diagnose_dataset(ds: ray.data.Dataset, *, rules: Sequence[str] | None = None,
                     redact: bool = True) -> ray.data.Dataset:
    """Flat report rows for a Dataset of log files (`bytes` and `path` columns, as `read_binary_files(...,
    include_paths=True)` makes them): source, stream, status, rule, severity, stage, line, model, GPU,
    release, the main facts and all facts as JSON (report/rows.py COLUMNS)."""
    from functools import partial

    return ds.flat_map(partial(_flat, opts=_options(rules, redact)))


def _local_files(targets: Sequence[str]) -> list[dict[str, str]]:
    """Local targets listed as the local scan lists them: read by absolute path, reported as given."""
    from .scan.discover import check_targets, iter_paths

    check_targets(targets)
    return [{"path": p, "file": os.path.abspath(p)} for p in iter_paths(targets)]


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
    uris = [t for t in targets if t.startswith(URI_SCHEMES)]
    local = [t for t in targets if not t.startswith(URI_SCHEMES)]
    files = _local_files(local) if local else []
    started = init(address, num_cpus)
    try:
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        from functools import partial

        parts = []
        if files:
            parts.append(ray.data.from_items(files, override_num_blocks=_blocks(len(files), cpus)))
        if uris:
            parts.append(ray.data.read_binary_files(uris, include_paths=True))
        ds = parts[0] if len(parts) == 1 else parts[0].union(*parts[1:])
        for row in ds.flat_map(partial(_documents, opts=opts)).iter_rows():
            yield json.loads(row["document"])
    finally:
        if started:
            ray.shutdown()


__all__ = ["diagnose_dataset", "init", "scan_paths"]
