#!/usr/bin/env python3
"""Start-up benchmark: each command's wall time as a ratio to importing the dependencies, in the same run.

    python bench/startup.py                          # 10 interleaved rounds, medians
    python bench/startup.py --repeat 20 --strict
    python bench/startup.py --baseline ../base/.venv/bin/python   # another install's commands, interleaved
    python bench/startup.py --instructions           # also: instructions per command (valgrind), load-free

The floor is `python -c "import click, yaml, jinja2, regex, rapidfuzz"`: what any command of ours pays before
it does anything. Each round runs every command once, in turn (interleaved, so a noisy neighbour slows all
of them alike), after one warm-up round: the warm-up writes the bytecode and the parsed-rules cache, as a
user's first run does, and the rounds measure every run after it. PYTHONDONTWRITEBYTECODE is removed from
the children's environment, since pip compiles an installed package's bytecode. The children get a cache
directory of their own (VLLM_DOCTOR_CACHE_DIR, removed afterwards), so other programs sharing the user's
cache cannot evict an entry between rounds; `--user-cache` measures with the user's cache instead.

`--baseline PYTHON` adds each doctor command of the install beside that interpreter (a checkout of the code
before a change, say) as `NAME@base`, interleaved in the same rounds: a before/after comparison that a
loaded machine cannot skew. `--instructions` then counts each command's instructions once under valgrind's
callgrind (about 20 s a command): a figure that does not depend on the machine's load at all, though it
weighs a cache miss like any other instruction and sees no SHA extensions (hashing counts several times
its real share).

Targets (issue 13): diagnose and plan <= 1.5x the floor, --version and --help <= 1.1x.
"""

from __future__ import annotations

import argparse
import os
import re
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
BASE = "@base"


def doctor(python: str = sys.executable) -> list[str]:
    exe = Path(python).with_name("vllm-doctor")
    return [str(exe)] if exe.exists() else [python, "-m", "diagnoser"]


def doctor_commands(python: str = sys.executable) -> dict[str, tuple[list[str], float | None]]:
    """name -> (argv, target ratio), for the install beside `python`."""
    d = doctor(python)
    return {
        "diagnose": ([*d, str(FIXTURE)], 1.5),
        "plan": ([*d, "plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384"], 1.5),
        "--version": ([*d, "--version"], 1.1),
        "--help": ([*d, "--help"], 1.1),
        "rules": ([*d, "rules"], None),
    }


def commands(baseline: str | None = None) -> dict[str, tuple[list[str], float | None]]:
    """The floor, this install's commands and (with a baseline interpreter) the baseline's, no target."""
    cmds = {FLOOR: ([sys.executable, "-c", "import click, yaml, jinja2, regex, rapidfuzz"], None),
            **doctor_commands()}
    if baseline:
        cmds.update({name + BASE: (argv, None) for name, (argv, _) in doctor_commands(baseline).items()})
    return cmds


def once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def instructions(argv: list[str], env: dict[str, str]) -> int | None:
    """Instructions one run executes (callgrind's Ir, every process of it), or None without valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    with tempfile.TemporaryDirectory(prefix="vllm-doctor-bench-cg-") as out:
        done = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", *argv],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, check=False)
    counts = re.findall(r"Collected : (\d+)", done.stderr)
    return sum(map(int, counts)) if counts else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="interleaved rounds; default 10")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--user-cache", action="store_true", help="use the user's cache, not a private one")
    ap.add_argument("--baseline", metavar="PYTHON", help="also time the install beside this interpreter (NAME@base)")
    ap.add_argument("--instructions", action="store_true", help="also count instructions once (valgrind callgrind)")
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
    cmds = commands(args.baseline)
    load_before = _load()
    for cmd, _ in cmds.values():  # warm-up: bytecode and the parsed-rules cache, as after a first run
        once(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.repeat):
        for name, (cmd, _) in cmds.items():
            times[name].append(once(cmd, env))
    floor = statistics.median(times[FLOOR])
    missed = []
    print(f"{'command':<17} {'median s':>9} {'ratio':>7} {'target':>7}   runs (s)")
    for name, (_, target) in cmds.items():
        med = statistics.median(times[name])
        ratio = med / floor
        mark = "" if target is None else f"<={target:.1f}x"
        if target is not None and ratio > target:
            missed.append(name)
            mark += " MISSED"
        runs = " ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:<17} {med:>9.3f} {ratio:>6.2f}x {mark:>7}   {runs}")
    summary = ", ".join(f"{n} {statistics.median(times[n]) / floor:.2f}x" for n in cmds if n != FLOOR)
    print(f"floor {floor:.3f} s; {summary}; load average (1, 5, 15 min) {load_before} before, {_load()} after")
    if args.instructions:
        _count(cmds, env)
    return 1 if args.strict and missed else 0


def _count(cmds: dict[str, tuple[list[str], float | None]], env: dict[str, str]) -> None:
    """One run of each command under callgrind: instructions and their ratio to the floor's."""
    counts = {name: instructions(cmd, env) for name, (cmd, _) in cmds.items()}
    floor = counts[FLOOR]
    if not floor:
        print("instructions: valgrind is not installed (or failed); skipped")
        return
    print(f"\n{'command':<17} {'instructions':>14} {'ratio':>7}")
    for name, n in counts.items():
        print(f"{name:<17} {n or 0:>14,} {(n or 0) / floor:>6.2f}x")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
