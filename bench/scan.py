#!/usr/bin/env python3
"""Scan benchmark: logs per second for `scan --jobs 1`, `--jobs 2` and `--engine ray` on this machine.

    python bench/scan.py                 # 200 logs made from the fixtures, each mode once, ratios vs --jobs 1
    python bench/scan.py --logs 1000 --repeat 3 --no-ray

The logs (bench/out/scan-fleet/, deleted after unless --keep) are the fixtures copied round-robin, one in
five gzip-compressed and one in eleven a two-pod `kubectl logs --prefix` file, so every part of a scan runs:
listing, decompressing, splitting, diagnosing, writing JSONL. Each mode is the installed command in a fresh
process (start-up, Ray's start included: that is what a user waits for), its output checked against the
--jobs 1 run (same documents: a fast mode that loses logs fails). Peak RSS of the scan process via wait4
(the workers are separate processes). The median of --repeat runs is reported; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"


def make_fleet(folder: Path, n: int) -> int:
    """n files from the fixtures; returns the number of logs they hold (a two-pod file holds two)."""
    sources = sorted((ROOT / "fixtures").glob("*.log"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    logs = 0
    for i in range(n):
        data = sources[i % len(sources)].read_bytes()
        sub = folder / f"node-{i % 10}"
        sub.mkdir(exist_ok=True)
        if i % 11 == 3:
            other = sources[(i + 1) % len(sources)].read_bytes()
            text = b"".join(b"[pod/vllm-%d-0/vllm] %s\n" % (i, ln) for ln in data.splitlines())
            text += b"".join(b"[pod/vllm-%d-1/vllm] %s\n" % (i, ln) for ln in other.splitlines())
            (sub / f"pods-{i}.log").write_bytes(text)
            logs += 2
        elif i % 5 == 1:
            (sub / f"replica-{i}.log.gz").write_bytes(gzip.compress(data))
            logs += 1
        else:
            (sub / f"replica-{i}.log").write_bytes(data)
            logs += 1
    return logs


def peak_rss(args: list[str]) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS (MB) of the scan process itself, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        sys.exit(f"{' '.join(args)} failed with exit code {code}")
    return elapsed, int(usage.ru_maxrss / 1024), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=int, default=200, help="files to generate (default 200)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-ray", action="store_true", help="skip --engine ray (the ray extra not installed)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    doctor = shutil.which("vllm-doctor") or sys.exit("install the package first: pip install -e '.[ray]'")
    folder = OUT / "scan-fleet"
    n_logs = make_fleet(folder, args.logs)
    modes = [("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"])]
    if not args.no_ray:
        modes.append(("--engine ray (2 CPUs)", ["--engine", "ray", "--jobs", "2"]))
    results: dict[str, tuple[float, int]] = {}
    reference: list[dict] | None = None
    try:
        for name, extra in modes:
            times, rss = [], 0
            for _ in range(args.repeat):
                elapsed, peak, out = peak_rss([doctor, "scan", "--format", "jsonl", "--no-progress", *extra,
                                               str(folder)])
                times.append(elapsed)
                rss = max(rss, peak)
                docs = [json.loads(line) for line in out.splitlines()]
                if len(docs) != n_logs:
                    sys.exit(f"{name}: {len(docs)} documents for {n_logs} logs")
                if reference is None:
                    reference = docs
                elif sorted(map(json.dumps, docs)) != sorted(map(json.dumps, reference)):
                    sys.exit(f"{name}: documents differ from --jobs 1")
            results[name] = (statistics.median(times), rss)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    base = results["--jobs 1"][0]
    print(f"{args.logs} files, {n_logs} logs, {os.cpu_count()} CPUs, median of {args.repeat}")
    print(f"{'mode':<24} {'seconds':>8} {'logs/s':>8} {'vs --jobs 1':>12} {'peak RSS MB':>12}")
    for name, (secs, rss) in results.items():
        print(f"{name:<24} {secs:>8.1f} {n_logs / secs:>8.1f} {base / secs:>11.2f}x {rss:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
