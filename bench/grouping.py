"""Grouping many distinct exceptions (issue 16, item 11): the indexed advise._group against the plain scan
it replaced, on the same synthetic hits, measured in the same run.

    python bench/grouping.py            # 500, 2,000 and 8,000 distinct exceptions
    python bench/grouping.py --n 20000  # the indexed grouping only, beyond that (the scan takes minutes)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diagnoser.analysis.advise import _group  # noqa: E402
from diagnoser.ingest.line import Line  # noqa: E402
from tests.security.test_grouping import _reference  # noqa: E402


def hits(n: int) -> list[SimpleNamespace]:
    rule = SimpleNamespace(id="unrecognized-failure", aggregate={})
    return [SimpleNamespace(rule=rule, facts={"exception": f"E{i}", "message": f"message {i}"},
                            line=Line(number=i, text="x", raw="x", rank=i % 4 if i % 3 else None))
            for i in range(n)]


def timed(fn, data) -> tuple[float, int]:
    start = time.perf_counter()
    groups = fn(data)
    return time.perf_counter() - start, len(groups)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="*", default=[500, 2000, 8000])
    ap.add_argument("--scan-limit", type=int, default=8000, help="largest n the plain scan is run for")
    args = ap.parse_args()
    for n in args.n:
        data = hits(n)
        fast, groups = timed(_group, data)
        line = f"{n:>7,} distinct: indexed {fast:8.3f} s ({groups:,} groups)"
        if n <= args.scan_limit:
            slow, ref_groups = timed(_reference, data)
            assert ref_groups == groups
            line += f"   scan {slow:8.3f} s   ratio {slow / fast:8.1f}x"
        print(line)


if __name__ == "__main__":
    main()
