#!/usr/bin/env python3
"""Keyword-dense logs (issue 16 items 10 and 12): the doctor against grep on logs where every line matches.

    python bench/dense.py                       # 20 MB each of: V0 preemption storm, V0 / V1 stats lines only, one line
    python bench/dense.py --size-mb 100 --kind long-line
    python bench/dense.py --size-mb 20 --kind long-json --kind long-flat    # other enormous lines
    python bench/dense.py --size-mb 100 --kind stats --before ../main   # also another checkout's code, same run
    python bench/dense.py --log bench/out/LOG --before ../main --after . --repeat 3   # a kept throughput.py log
    python bench/dense.py --sizes 100,300,1000 --kind stats-v1 --before ../main --after .   # memory against size

Each log comes from synthlog.write_dense into bench/out/ (deleted afterwards unless --keep). Printed per log:
the doctor's and grep's wall time (grep -F -i -c -f with the doctor's own keywords, faster locale of C and
C.UTF-8), the ratio of their speeds, and the doctor's peak RSS (a fresh process each, as throughput.py does).
With --before DIR the code in DIR (`python -m diagnoser` with DIR on PYTHONPATH) runs on the same log right
before, its row marked `before`, and `same` says whether both printed the same JSON report. CPU s is the
process's user + system time (on a loaded machine it moves less than the wall time). With --sizes the logs of
each kind are written at every size in turn, and each checkout's peak RSS at the largest size is printed
against the smallest's, measured in the same run: the growth in MB per 100 MB of log and the ratio (a flat
RSS is +0 MB and 1.00x).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import subprocess
import sys
from pathlib import Path

from synthlog import DENSE, LONG, write_dense
from throughput import LAUNCHER, MAXRSS_UNIT, MB, OUT, doctor_command, prefilter_keywords, run_measured


def run_cpu(cmd: list[str], out: Path, env: dict | None = None, cwd: Path | None = None) -> tuple[float, float, float]:
    """One fresh process, spawned from throughput's small launcher (this process holds the generated log's text,
    over 200 MB for one enormous line, and Linux keeps the high-water RSS across exec): (wall s, user + system
    CPU s, its own peak RSS MB)."""
    probe = (OUT / "launcher.out").resolve()
    with open(out, "wb") as fh:
        subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(probe), *cmd], stdout=fh,
                       stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=True)
    wall, _code, maxrss, cpu = probe.read_text().split()
    return float(wall), float(cpu), int(maxrss) * MAXRSS_UNIT / MB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=20)
    ap.add_argument("--sizes", type=lambda v: [float(x) for x in v.split(",")],
                    help="comma-separated MB (e.g. 100,300,1000): each kind at every size, RSS growth printed")
    ap.add_argument("--kind", choices=DENSE + LONG, action="append",
                    help=f"repeatable; default all of {', '.join(DENSE)} ({', '.join(LONG)}: other enormous lines)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--log", type=Path, action="append",
                    help="an existing log to measure instead (throughput.py --keep's); repeatable")
    ap.add_argument("--before", type=Path, help="a checkout of the code before (its folder holds diagnoser/)")
    ap.add_argument("--after", type=Path, help="a checkout to measure instead of the installed doctor")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    keywords = OUT / "keywords.txt"
    keywords.write_text("\n".join(prefilter_keywords()) + "\n")
    print(f"{'log':<18} {'MB':>6} {'lines':>9} {'doctor s':>9} {'CPU s':>7} {'grep s':>8} {'ratio':>7} "
          f"{'RSS MB':>7} {'same':>5}  load")
    def checkout(folder: Path) -> tuple[list[str], dict, Path]:
        # run from the checkout: `python -m` puts the working folder first on sys.path
        return [sys.executable, "-m", "diagnoser"], {**os.environ, "PYTHONPATH": str(folder.resolve())}, folder
    runs = [("", doctor_command(), None, None)]
    if args.after:
        runs = [("", *checkout(args.after))]
    if args.before:
        runs.insert(0, (" before", *checkout(args.before)))
    warm = OUT / "dense-warm-up.log"  # each checkout builds its caches once, as after a user's first run: a run
    write_dense(warm, "stats-v1", 0.05)  # that rebuilds them (rules validated, databases compiled) peaks higher
    for _label, cmd, env, cwd in runs:
        run_cpu([*cmd, "--format", "json", str(warm)], OUT / "dense-warm-up.json", env, cwd)
    for kind in args.log or args.kind or DENSE:
        peaks = {size: measure(kind, size, args, runs, keywords) for size in args.sizes or [args.size_mb]}
        if len(peaks) > 1 and not isinstance(kind, Path):
            (small, low), (large, high) = min(peaks.items()), max(peaks.items())
            for label in low:
                print(f"{kind + label:<18} peak RSS {low[label]:.1f} MB at {small:g} MB, {high[label]:.1f} MB at "
                      f"{large:g} MB: {100 * (high[label] - low[label]) / (large - small):+.2f} MB per 100 MB, "
                      f"{high[label] / low[label]:.2f}x  load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


def measure(kind: str | Path, size_mb: float, args: argparse.Namespace, runs: list, keywords: Path
            ) -> dict[str, float]:
    """One log (written at `size_mb`, or an existing one) through each checkout and grep; prints its rows and
    returns each checkout's peak RSS MB."""
    if isinstance(kind, Path):
        path, kind = kind.resolve(), kind.stem[:18]  # resolved: a checkout runs from its own folder
        with open(path, "rb") as fh:
            lines = sum(b.count(b"\n") for b in iter(lambda: fh.read(1 << 24), b""))
        meta = {"bytes": path.stat().st_size, "lines": lines}
    else:
        path = OUT / f"dense-{kind}-{size_mb:g}MB.log"
        meta = write_dense(path, kind, size_mb)
    with open(path, "rb") as fh:  # page cache warm
        while fh.read(1 << 24):
            pass
    measured: dict[str, tuple[list[float], ...]] = {label: ([], [], []) for label, *_ in runs}
    for _ in range(args.repeat):  # interleaved: a change of load hits both checkouts alike
        for label, cmd, env, cwd in runs:
            report = OUT / f"dense-report{label.strip()}.json"
            for into, value in zip(measured[label], run_cpu([*cmd, "--format", "json", str(path)], report,
                                                            env, cwd), strict=True):
                into.append(value)
    rows = [(kind + label, statistics.median(measured[label][0]), statistics.median(measured[label][1]),
             max(measured[label][2]), OUT / f"dense-report{label.strip()}.json") for label, *_ in runs]
    greps = []
    for locale in ("C", "C.UTF-8"):
        with open(OUT / "grep-count.txt", "wb") as out:
            wall, _, _ = run_measured(["env", f"LC_ALL={locale}", "grep", "-F", "-i", "-c", "-f",
                                       str(keywords), str(path)], out)
        greps.append(wall)
    g = min(greps)
    for name, d, used, peak, report in rows:
        same = "yes" if filecmp.cmp(report, rows[-1][4], shallow=False) else "NO"
        print(f"{name:<18} {meta['bytes'] / 1e6:>6.1f} {meta['lines']:>9,} {d:>9.2f} {used:>7.2f} {g:>8.2f} "
              f"{g / d:>6.3f}x {peak:>7.1f} {same:>5}  {os.getloadavg()[0]:.1f}", flush=True)
    if not args.keep and not args.log:
        path.unlink()
    return {label: peak for (label, *_), (_, _, _, peak, _) in zip(runs, rows, strict=True)}


if __name__ == "__main__":
    sys.exit(main())
