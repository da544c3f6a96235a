#!/usr/bin/env python3
"""Keyword-dense logs (issue 16 items 10 and 12): the doctor against grep on logs where every line matches.

    python bench/dense.py                       # 20 MB each of: V0 preemption storm, stats lines only, one line
    python bench/dense.py --size-mb 100 --kind long-line

Each log comes from synthlog.write_dense into bench/out/ (deleted afterwards unless --keep). Printed per log:
the doctor's and grep's wall time (grep -F -i -c -f with the doctor's own keywords, faster locale of C and
C.UTF-8), the ratio of their speeds, and the doctor's peak RSS (a fresh process each, as throughput.py does).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from synthlog import DENSE, write_dense
from throughput import OUT, doctor_command, prefilter_keywords, run_measured


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=20)
    ap.add_argument("--kind", choices=DENSE, action="append", help="repeatable; default all")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    keywords = OUT / "keywords.txt"
    keywords.write_text("\n".join(prefilter_keywords()) + "\n")
    print(f"{'log':<12} {'MB':>6} {'lines':>9} {'doctor s':>9} {'grep s':>8} {'ratio':>7} {'RSS MB':>7}")
    for kind in args.kind or DENSE:
        path = OUT / f"dense-{kind}-{args.size_mb:g}MB.log"
        meta = write_dense(path, kind, args.size_mb)
        with open(path, "rb") as fh:  # page cache warm
            while fh.read(1 << 24):
                pass
        doc, rss = [], []
        for _ in range(args.repeat):
            with open(OUT / "dense-report.json", "wb") as out:
                wall, _, peak = run_measured([*doctor_command(), "--format", "json", str(path)], out)
            doc.append(wall)
            rss.append(peak)
        greps = []
        for locale in ("C", "C.UTF-8"):
            with open(OUT / "grep-count.txt", "wb") as out:
                wall, _, _ = run_measured(["env", f"LC_ALL={locale}", "grep", "-F", "-i", "-c", "-f",
                                           str(keywords), str(path)], out)
            greps.append(wall)
        d, g = statistics.median(doc), min(greps)
        print(f"{kind:<12} {meta['bytes'] / 1e6:>6.1f} {meta['lines']:>9,} {d:>9.2f} {g:>8.2f} {g / d:>6.3f}x "
              f"{max(rss):>7.1f}")
        if not args.keep:
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
