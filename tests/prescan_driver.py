"""Run the reader over a log in a fresh process, as test_prescan.py needs it: the helper is forked only by a
process with one thread, and the test process has others (a library imported at collection starts native ones).

    python tests/prescan_driver.py MODE LOG [--serial] [--die-at N] [--stop-after LINE] [--thread]

Blocks of 16 KiB, a paste-sized start of 32 KiB and a helper for any size, so a few MB take every path. Prints
one JSON object: MODE `report` the report (series included), `lines` every line the reader yields, `early` what
a reader closed after LINE saw of its helper; with the blocks each helper scanned, and whether every helper's
process is gone at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from diagnoser import engine, prescan, reader
from diagnoser.report.model import report_dict
from diagnoser.rules import builtin_rules
from diagnoser.series import Series, access_counts
from diagnoser.sources import open_log


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("report", "lines", "early"))
    parser.add_argument("log")
    parser.add_argument("--serial", action="store_true")
    parser.add_argument("--die-at", type=int, default=0, help="the helper exits at its Nth block")
    parser.add_argument("--stop-after", type=int, default=4000, help="(early) the line after which to close")
    parser.add_argument("--thread", action="store_true", help="another thread runs meanwhile")
    parser.add_argument("--no-fork", action="store_true", help="fork fails (EAGAIN), as a sandbox may make it")
    args = parser.parse_args()
    out: dict[str, object] = {"supported": prescan.supported()}  # (before the thread and the switch below)
    if args.thread:
        import threading

        threading.Thread(target=threading.Event().wait, daemon=True).start()
    if args.serial:
        os.environ[prescan.SERIAL_ENV] = "1"
    if args.no_fork:
        def refused() -> int:
            raise BlockingIOError(11, "Resource temporarily unavailable")

        prescan.os.fork = refused  # type: ignore[assignment]  # (the driver's own process: nothing else forks)
    reader.BLOCK, reader.PASTE_MAX, prescan.MIN_REST = 1 << 14, 1 << 15, 0
    made: list[prescan.Ahead] = []

    class Counted(prescan.Ahead):
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__(*a, **k)  # type: ignore[arg-type]
            made.append(self)

    prescan.Ahead = Counted  # type: ignore[misc]
    if args.die_at:
        original = reader.AheadScan.__call__
        calls = [0]

        def dies(self: reader.AheadScan, block: bytes) -> object:  # runs in the helper
            calls[0] += 1
            if calls[0] == args.die_at:
                os._exit(3)
            return original(self, block)

        reader.AheadScan.__call__ = dies  # type: ignore[method-assign]
    with open_log(args.log) as stream:
        if args.mode == "report":
            out["report"] = report_dict(engine.diagnose(stream, args.log), series=True)
        else:
            sniffer = engine._Sniffer(stream)
            lines = reader.read_lines(sniffer, engine.prefilter_for(builtin_rules()),
                                      on_block=Series().access_block, prepass=access_counts,
                                      ahead=engine._ahead(stream, sniffer))
            if args.mode == "lines":
                out["lines"] = [(line.number, line.text, line.follow) for line in lines]
            else:
                for line in lines:
                    if made and line.number > args.stop_after:
                        break
                out["running_before_close"] = bool(made) and not _gone(made[0].pid)
                lines.close()
    out["helpers"] = [a.blocks for a in made]
    out["gone"] = all(_gone(a.pid) for a in made)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
