"""The log's own clock: a line's time in seconds, and a time printed back as the log would print it.

vLLM's header time has no year (`05-01 10:00:10`): it is read by vllm/timestamps.py, counting from 2000 and
stepping a year when the date runs backwards (a log across New Year). A shipper's ISO time carries
the year. One clock serves a whole log, chosen by its first timed line.
"""

from __future__ import annotations

import calendar

from diagnoser.ingest.line import Line
from diagnoser.lazyre import lazy
from diagnoser.vllm.timestamps import VLLM_TIME, later_time

ISO_TIME = lazy(r"^\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")


class Clock:
    """The log's own clock -> seconds: vLLM's year-less header time (vllm/timestamps.py) or a shipper's ISO
    time, whichever the log's first timed line carries."""

    def __init__(self) -> None:
        self.year_known = False
        self.relative = False
        self._year = 2000
        self._last: float | None = None
        self.source: str | None = None   #: "vllm" or "iso", set by the first timed line

    def of_line(self, line: Line) -> float | None:
        """One clock for the whole log, chosen by its first timed line: vLLM's own header time (the same
        whatever shipper wrapped the line), else a shipper's ISO time (which carries the year)."""
        if line.timestamp and self.source != "iso" and VLLM_TIME.match(line.timestamp):
            self.source = "vllm"
            t, self._year = later_time(line.timestamp, self._year, self._last)
            if t is not None:
                self._last = t
            return t
        m = ISO_TIME.match(line.raw) if self.source != "vllm" else None
        if m:
            self.source = "iso"
            y, mo, d, h, mi, s = (int(g) for g in m.groups())
            self.year_known = True
            return self._stamp(y, mo, d, h, mi, s)
        return None

    def _stamp(self, y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
        try:
            t = float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
        except (ValueError, OverflowError):
            return None
        self._last = t
        return t

    def label(self, t: float) -> str:
        """A time as the log would print it: 'MM-DD HH:MM:SS', with the year when the log had one."""
        if self.relative:
            t = max(0, int(t))
            return f"+{t // 3600}:{t // 60 % 60:02d}:{t % 60:02d}"
        import time

        st = time.gmtime(t)
        return time.strftime("%Y-%m-%d %H:%M:%S" if self.year_known else "%m-%d %H:%M:%S", st)
