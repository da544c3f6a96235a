"""Sizes as vLLM and PyTorch print them in logs ('896.00 MiB', '16.00 GiB', '12345678 bytes'), read as GiB.

The one reader of log sizes: the matcher types `size` facts with it and the advice reads PyTorch's process list
with it. vLLM's "GB" is bytes / 2^30, so GB counts as GiB here (unlike `plan --gpu-memory 24GB`, where a person
means 10^9: plan's parse_size).
"""

from __future__ import annotations

import re

from diagnoser.lazyre import lazy

GIB = 1 << 30
MIB = 1 << 20

#: GiB per unit as logs print it.
LOG_UNIT_GIB = {"b": 1 / GIB, "bytes": 1 / GIB, "kib": 1 / MIB, "kb": 1 / MIB, "mib": 1 / 1024, "mb": 1 / 1024,
                "gib": 1.0, "gb": 1.0, "tib": 1024.0, "tb": 1024.0}
_LOG_SIZE = lazy(r"(-?[\d.,\s]+)\s*([KMGT]?i?B|bytes)?", re.IGNORECASE)


def log_size_gib(text: str) -> float | None:
    """A size as a log prints it, in GiB; no unit means GiB; None if the text is not a size.

    >>> log_size_gib("896.00 MiB"), log_size_gib("16.00 GiB"), log_size_gib("2147483648 bytes"), log_size_gib("x")
    (0.875, 16.0, 2.0, None)
    """
    m = _LOG_SIZE.fullmatch(text.strip())
    if not m:
        return None
    try:
        number = float(re.sub(r"[,\s]", "", m.group(1)))
    except ValueError:
        return None
    return number * LOG_UNIT_GIB.get((m.group(2) or "gib").lower(), 1.0)
