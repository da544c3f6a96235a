"""vLLM's year-less header time (`05-01 10:00:10`) read as seconds: the one reader, for the serving series'
clock and the `fn.seconds_between` template helper alike.

The time counts from 2000 (a leap year, so 02-29 parses); a time that comes far before the one read before it
is in the next year (a log across New Year).

    >>> vllm_time_seconds("01-18 20:15:59")
    948226559.0
    >>> later_time("01-01 00:00:05", 2000, vllm_time_seconds("12-31 23:59:59"))
    (978307205.0, 2001)
"""

from __future__ import annotations

import datetime
from functools import lru_cache

from diagnoser.lazyre import lazy

VLLM_TIME = lazy(r"^(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)$")

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


def later_time(text: str, year: int, before: float | None) -> tuple[float | None, int]:
    """`text` read as a time after `before` (seconds, None: nothing before): in `year`, or in the next year
    when it would fall more than NEW_YEAR_GAP before it. Returns the seconds and the year used."""
    t = vllm_time_seconds(text, year)
    if t is not None and before is not None and t < before - NEW_YEAR_GAP:
        year += 1
        t = vllm_time_seconds(text, year)
    return t, year


@lru_cache(maxsize=1024)
def _month_start(year: int, month: int) -> int | None:
    """Days from the epoch to a month's first day (None: no such month), as calendar.timegm counts them."""
    try:
        return datetime.date(year, month, 1).toordinal() - _EPOCH_ORDINAL
    except (ValueError, OverflowError):
        return None


_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
