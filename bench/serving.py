#!/usr/bin/env python3
"""Serving bench: a big V1 serving log (stats every 10 s, request-logger and access lines between) through
the doctor's JSON and HTML formats, against grep over the same file in the same run.

    python bench/serving.py                 # 1000 MB log in /tmp, then delete it
    python bench/serving.py --size-mb 200

Prints MB/s, the ratio to `wc -l` over the same file in the same run (a baseline that reads every byte),
peak RSS (flat memory: compare --size-mb 100 and 1000) and the HTML report's size (target: under 2 MB).
bench/throughput.py measures the throughput target against grep.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import serving_logs  # noqa: E402


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KB) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serving.log"
        serving_logs.big(log, args.size_mb)
        mb = log.stat().st_size / 1e6
        grep_s, _ = timed(["wc", "-l", str(log)], {**os.environ, "LC_ALL": "C"})
        doctor = [sys.executable, "-m", "diagnoser", "--exit-zero"]
        json_s, json_rss = timed([*doctor, "--format", "json", "-o", f"{tmp}/r.json", str(log)])
        html_s, html_rss = timed([*doctor, "--format", "html", "-o", f"{tmp}/r.html", str(log)])
        html_mb = Path(f"{tmp}/r.html").stat().st_size / 1e6
        print(f"log {mb:,.0f} MB; wc -l {mb / grep_s:,.0f} MB/s")
        print(f"doctor json {mb / json_s:,.0f} MB/s ({grep_s / json_s:.2f}x wc -l), peak RSS {json_rss / 1024:.0f} MB")
        print(f"doctor html {mb / html_s:,.0f} MB/s ({grep_s / html_s:.2f}x wc -l), peak RSS {html_rss / 1024:.0f} MB, "
              f"report {html_mb:.2f} MB")


if __name__ == "__main__":
    main()
