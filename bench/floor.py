#!/usr/bin/env python3
"""The floor of any Python reader on a keyword-dense log: why 0.5x grep is out of reach there (issue 16 item 12).

    python bench/floor.py                        # 20 MB each of V0 preemption warnings, V0 and V1 stats lines
    python bench/floor.py --size-mb 100 --kind stats-v1 --repeat 5

For each log (synthlog.write_dense, the logs dense.py measures), fresh processes, medians of --repeat rounds:

  grep     grep -F -i -c -f with the doctor's keywords, the faster of LC_ALL=C and C.UTF-8: the reference
  python   `python -c pass`: the interpreter alone
  imports  importing the five libraries every command of ours needs (bench/startup.py's floor)
  numbers  the file read, one C-level regex pass finding each line's figures, and one Python iteration a line
           reading them as floats (the largest last one kept): less than any reader of each line's figures must
           do, with no import, no clock and no state
  doctor   vllm-doctor --format json

Each row gives its seconds and its speed as a ratio to grep's (grep s / row s); the 0.5x target allows twice
grep's time. When `numbers` alone is slower than that, no Python reader of these logs meets the target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from synthlog import write_dense
from throughput import MB, OUT, doctor_command, prefilter_keywords

KINDS = ("preemption", "stats", "stats-v1")
#: the figures each line of a kind carries (the stats lines' throughputs, running, waiting and KV usage; the
#: warnings' preemption count), found by one C-level regex pass over the whole file
FIGURES = {
    "preemption": rb"total_(?:num_)?cumulative_preemption(?:_cnt)?=(\d+)",
    "stats": rb"prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
             rb"Running: (\d+) reqs, .*?(\d+) reqs, .*?usage: ([\d.]+)%",
}
FIGURES["stats-v1"] = FIGURES["stats"]
#: one Python iteration a line: its figures as floats, the largest last one kept (nothing else: no clock, no state)
NUMBERS = """import re, sys
peak = 0.0
for m in re.finditer(sys.argv[2].encode("latin-1"), open(sys.argv[1], "rb").read()):
    values = [float(x) for x in m.groups()]
    if values[-1] > peak:
        peak = values[-1]
print(peak)
"""


def timed(cmd: list[str], env: dict | None = None) -> float:
    """Wall seconds of one fresh process, its output to a file (GNU grep stops at its first match on /dev/null)."""
    with open(OUT / "floor.out", "wb") as out:
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, check=False)
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=20)
    ap.add_argument("--kind", choices=KINDS, action="append", help=f"repeatable; default all of {', '.join(KINDS)}")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated logs in bench/out/")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    keywords = OUT / "keywords.txt"
    keywords.write_text("\n".join(prefilter_keywords()) + "\n")
    py = sys.executable
    for kind in args.kind or KINDS:
        log = OUT / f"floor-{kind}-{args.size_mb:g}MB.log"
        meta = write_dense(log, kind, args.size_mb)
        grep = ["grep", "-F", "-i", "-c", "-f", str(keywords), str(log)]
        rows = {
            "grep": [grep],
            "python": [[py, "-c", "pass"]],
            "imports": [[py, "-c", "import click, yaml, jinja2, regex, rapidfuzz"]],
            "numbers": [[py, "-c", NUMBERS, str(log), FIGURES[kind].decode("latin-1")]],
            "doctor": [[*doctor_command(), "--format", "json", str(log)]],
        }
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.repeat):  # interleaved: a noisy neighbour slows every row alike
            times["grep"].append(min(timed(grep, {**os.environ, "LC_ALL": loc}) for loc in ("C", "C.UTF-8")))
            for name in ("python", "imports", "numbers", "doctor"):
                times[name].append(timed(rows[name][0]))
        med = {name: statistics.median(ts) for name, ts in times.items()}
        print(f"{kind}: {meta['bytes'] / MB:.0f} MB, {meta['lines']:,} lines; the 0.5x target allows "
              f"{2 * med['grep']:.3f} s (load {os.getloadavg()[0]:.1f})")
        for name, s in med.items():
            print(f"  {name:<8} {s:7.3f} s  {med['grep'] / s:7.3f}x grep")
        if not args.keep:
            log.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
