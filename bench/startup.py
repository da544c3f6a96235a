#!/usr/bin/env python3
"""Start-up benchmark: each command's time as a ratio to importing the dependencies, in the same run.

    python bench/startup.py                          # 10 interleaved rounds, medians, warm and cold
    python bench/startup.py --repeat 20 --strict
    python bench/startup.py --only diagnose --only --version
    python bench/startup.py --baseline ../base/.venv/bin/python   # another install's commands, interleaved
    python bench/startup.py --instructions           # also: instructions per command (valgrind), load-free

The floor is `python -c "import click, yaml, jinja2, regex, rapidfuzz"`: what any command of ours pays before
it does anything. Each round runs every command once, in turn (interleaved, so a noisy neighbour slows all
of them alike), after one warm-up round that writes the bytecode (pip compiles an installed package's too;
PYTHONDONTWRITEBYTECODE is removed from the children's environment).

Two figures per command, each the median over the rounds and its ratio to the floor's: the CPU time the
process used (user + system, from getrusage of the children: what a shared, loaded machine distorts least)
and the wall time. Each run is measured twice: warm (the user's HOME) and cold (a fresh, empty HOME and
XDG_CACHE_HOME for that one run, as on a new CI runner): nothing the doctor could have left in a user's
folder helps a cold run.

`--baseline PYTHON` adds each doctor command of the install beside that interpreter (a checkout of the code
before a change, say) as `NAME@base`, interleaved in the same rounds: a before/after comparison that a
loaded machine cannot skew. `--instructions` then counts each command's instructions once under valgrind's
callgrind (about 20 s a command): a figure that does not depend on the machine's load at all, though it
weighs a cache miss like any other instruction.

Targets (issue 27): diagnose and plan <= 1.5x the floor, cold and warm; --version and --help <= 1.1x.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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


@dataclass
class Run:
    wall: float
    cpu: float  #: user + system seconds of the child


def once(argv: list[str], env: dict[str, str], cold: bool = False) -> Run:
    """One fresh process of `argv`; `cold`: with an empty HOME and XDG_CACHE_HOME of its own."""
    home = tempfile.mkdtemp(prefix="vllm-doctor-bench-home-") if cold else None
    if home:
        env = {**env, "HOME": home, "XDG_CACHE_HOME": os.path.join(home, ".cache")}
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        if home:
            shutil.rmtree(home, ignore_errors=True)
    return Run(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


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
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed (CPU time, warm or cold)")
    ap.add_argument("--only", action="append", metavar="NAME", help="time only these commands (and the floor)")
    ap.add_argument("--baseline", metavar="PYTHON", help="also time the install beside this interpreter (NAME@base)")
    ap.add_argument("--instructions", action="store_true", help="also count instructions once (valgrind callgrind)")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmds = commands(args.baseline)
    if args.only:
        cmds = {n: c for n, c in cmds.items() if n == FLOOR or n.removesuffix(BASE) in args.only}
    load_before = _load()
    for cmd, _ in cmds.values():  # warm-up: the bytecode, as after an install
        once(cmd, env)
    runs: dict[tuple[str, bool], list[Run]] = {(name, cold): [] for name in cmds for cold in (False, True)}
    for _ in range(args.repeat):
        for name, (cmd, _) in cmds.items():
            for cold in (False, True):
                runs[name, cold].append(once(cmd, env, cold))
    missed = _table(cmds, runs)
    print(f"load average (1, 5, 15 min) {load_before} before, {_load()} after")
    if args.instructions:
        _count(cmds, env)
    return 1 if args.strict and missed else 0


def _table(cmds: dict[str, tuple[list[str], float | None]], runs: dict[tuple[str, bool], list[Run]]) -> list[str]:
    """Print medians and ratios to the floor (CPU and wall, warm and cold); the commands that miss a target."""
    def med(name: str, cold: bool, what: str) -> float:
        return statistics.median(getattr(r, what) for r in runs[name, cold])

    missed = []
    print(f"{'command':<17} {'target':>7}  {'cpu warm':>14} {'cpu cold':>14}  {'wall warm':>14} {'wall cold':>14}")
    for name, (_, target) in cmds.items():
        cells = []
        for what in ("cpu", "wall"):
            for cold in (False, True):
                value, floor = med(name, cold, what), med(FLOOR, cold, what)
                cells.append(f"{value:6.3f} {value / floor:5.2f}x")
                if what == "cpu" and target is not None and value / floor > target:
                    missed.append(name)
        mark = "" if target is None else f"<={target:.1f}x"
        print(f"{name:<17} {mark:>7}  {cells[0]:>14} {cells[1]:>14}  {cells[2]:>14} {cells[3]:>14}"
              f"{'  MISSED' if name in missed else ''}")
    return missed


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
