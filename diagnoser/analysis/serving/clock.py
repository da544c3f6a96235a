"""The log's own clock: a line's time in seconds, and a time printed back as the log would print it.

vLLM's header time has no year (`05-01 10:00:10`): a year-less clock counts from 2000 (a leap year, so 02-29
parses) and steps a year when the date runs backwards (a log across New Year). A shipper's ISO time carries
the year. One clock serves a whole log, chosen by its first timed line.
"""

from __future__ import annotations

import calendar
import datetime
import re
from functools import lru_cache

from diagnoser.ingest.line import Line

ISO_TIME = re.compile(r"^\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")
VLLM_TIME = re.compile(r"^(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)$")

#: A year-less time this far before the previous one is in the next year (a log across New Year).
NEW_YEAR_GAP = 180 * 86400


@lru_cache(maxsize=4096)  # a dense log repeats each second on several lines
def vllm_time_seconds(text: str, year: int = 2000) -> float | None:
    """vLLM's year-less header time as seconds since the epoch, in `year`: '01-18 20:15:59' -> 948226559.0
    (year 2000, a leap year, so 02-29 parses); None for another shape or an impossible date."""
    m = VLLM_TIME.match(text)
    if not m:
        return None
    mo, d, h, mi, s = map(int, m.groups())
    days = _month_start(year, mo)
    # calendar.timegm's own arithmetic (linear in the day and the time), the month's start computed once
    return None if days is None else float((((days + d - 1) * 24 + h) * 60 + mi) * 60 + s)


@lru_cache(maxsize=1024)
def _month_start(year: int, month: int) -> int | None:
    """Days from the epoch to a month's first day (None: no such month), as calendar.timegm counts them."""
    try:
        return datetime.date(year, month, 1).toordinal() - _EPOCH_ORDINAL
    except (ValueError, OverflowError):
        return None


_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


class Clock:
    """The log's own clock -> seconds. vLLM's header has no year: a year-less clock counts from 2000 (a leap
    year, so 02-29 parses) and steps a year when the date runs backwards (a log across New Year)."""

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
            before = self._last
            t = vllm_time_seconds(line.timestamp, self._year)
            if t is not None and before is not None and t < before - NEW_YEAR_GAP:
                self._year += 1
                t = vllm_time_seconds(line.timestamp, self._year)
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
