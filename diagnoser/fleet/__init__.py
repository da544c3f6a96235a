"""Fleets: `vllm-doctor scan` diagnoses thousands of logs in one run, one report per log, in constant memory.

The parts, in the order data flows: `discover` lists the log files under paths, folders and globs;
`split` opens one (decompressing it) and cuts it into one log per pod/container when it holds several
(`kubectl logs --prefix`, Loki exports); `run` diagnoses each log, over worker processes with `--jobs`,
and yields one JSON-contract document per log (or one error document for a file it could not read).
The report/scan_*.py modules render that stream; `ray` runs the same over a Ray cluster (the `ray` extra).
"""

from __future__ import annotations

from diagnoser.fleet.run import ScanOptions, error_doc, scan, scan_file

__all__ = ["ScanOptions", "error_doc", "scan", "scan_file"]
