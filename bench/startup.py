#!/usr/bin/env python3
"""Start-up benchmark: each command's wall time as a ratio to importing the dependencies, in the same run.

    python bench/startup.py              # 10 interleaved rounds, medians
    python bench/startup.py --repeat 20 --strict

The floor is `python -c "import click, yaml, jinja2, regex, rapidfuzz"`: what any command of ours pays before
it does anything. Each round runs every command once, in turn (interleaved, so a noisy neighbour slows all
of them alike), after one warm-up round: the warm-up writes the bytecode and the parsed-rules cache, as a
user's first run does, and the rounds measure every run after it. PYTHONDONTWRITEBYTECODE is removed from
the children's environment, since pip compiles an installed package's bytecode. The children get a cache
directory of their own (VLLM_DOCTOR_CACHE_DIR, removed afterwards), so other programs sharing the user's
cache cannot evict an entry between rounds; `--user-cache` measures with the user's cache instead.

Targets (issue 13): diagnose and plan <= 1.5x the floor, --version and --help <= 1.1x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
FLOOR = "floor"


def doctor() -> list[str]:
    exe = Path(sys.executable).with_name("vllm-doctor")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "diagnoser"]


def commands() -> dict[str, tuple[list[str], float | None]]:
    """name -> (argv, target ratio)."""
    d = doctor()
    return {
        FLOOR: ([sys.executable, "-c", "import click, yaml, jinja2, regex, rapidfuzz"], None),
        "diagnose": ([*d, str(FIXTURE)], 1.5),
        "plan": ([*d, "plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384"], 1.5),
        "--version": ([*d, "--version"], 1.1),
        "--help": ([*d, "--help"], 1.1),
        "rules": ([*d, "rules"], None),
    }


def once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="interleaved rounds; default 10")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--user-cache", action="store_true", help="use the user's cache, not a private one")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "VLLM_DOCTOR_NO_CACHE")}
    private = None if args.user_cache else tempfile.mkdtemp(prefix="vllm-doctor-bench-cache-")
    if private:
        env["VLLM_DOCTOR_CACHE_DIR"] = private
    try:
        return _measure(args, env)
    finally:
        if private:
            shutil.rmtree(private, ignore_errors=True)


def _measure(args: argparse.Namespace, env: dict[str, str]) -> int:
    cmds = commands()
    for cmd, _ in cmds.values():  # warm-up: bytecode and the parsed-rules cache, as after a first run
        once(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.repeat):
        for name, (cmd, _) in cmds.items():
            times[name].append(once(cmd, env))
    floor = statistics.median(times[FLOOR])
    missed = []
    print(f"{'command':<12} {'median s':>9} {'ratio':>7} {'target':>7}   runs (s)")
    for name, (_, target) in cmds.items():
        med = statistics.median(times[name])
        ratio = med / floor
        mark = "" if target is None else f"<={target:.1f}x"
        if target is not None and ratio > target:
            missed.append(name)
            mark += " MISSED"
        runs = " ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:<12} {med:>9.3f} {ratio:>6.2f}x {mark:>7}   {runs}")
    summary = ", ".join(f"{n} {statistics.median(times[n]) / floor:.2f}x" for n in cmds if n != FLOOR)
    print(f"floor {floor:.3f} s; {summary}")
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
