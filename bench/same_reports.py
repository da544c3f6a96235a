#!/usr/bin/env python3
"""No behaviour change: the JSON reports of two checkouts, log by log (issue 16 item 12's acceptance).

    python bench/same_reports.py --before /work/main --after .                 # fixtures and tests/data logs
    python bench/same_reports.py --before /work/main --after . bench/out/*.log  # and more logs

Each checkout runs in one process of its own (`python -m diagnoser diagnose --format json LOG`, with the
checkout first on PYTHONPATH) per log; the reports must be byte-identical. Prints one line per differing
log and a summary; exits 1 when any report differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def report(checkout: Path, log: Path) -> bytes:
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    done = subprocess.run([sys.executable, "-m", "diagnoser", "diagnose", "--format", "json", str(log)],
                          capture_output=True, env=env, cwd=checkout)
    return done.stdout + f"\nexit {done.returncode}\n".encode() + done.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("logs", type=Path, nargs="*", help="more logs (default: fixtures/*.log, tests/data/logs)")
    args = ap.parse_args(argv)
    logs = [*sorted((ROOT / "fixtures").glob("*.log")), *sorted((ROOT / "tests/data/logs").rglob("*.log")),
            *(p.resolve() for p in args.logs)]
    differ = [log for log in logs if report(args.before, log) != report(args.after, log)]
    for log in differ:
        print(f"DIFFERS: {log}")
    print(f"{len(logs) - len(differ)}/{len(logs)} reports identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
