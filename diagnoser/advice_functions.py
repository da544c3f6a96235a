"""Small helpers that advice templates call as `fn.NAME(...)`.

Arithmetic lives in memory.py (`mem.` in templates); these are the non-arithmetic pieces a fix needs:
flag spellings, divisors, the closest real flag to a typo.
"""

from __future__ import annotations

import re
from typing import Any


def hyphen(flag: str) -> str:
    """'--max_model_len' -> '--max-model-len' (the part before a '.' only, as vLLM rewrites it)."""
    head, dot, tail = flag.partition(".")
    if head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    return head + dot + tail


def underscore(flag: str) -> str:
    """'--max-model-len' -> 'max_model_len' (the Python/LLM(...) spelling)."""
    return flag.lstrip("-").replace("-", "_")


def divisors(n: int) -> list[int]:
    """All divisors of n, ascending."""
    n = int(n)
    if n <= 0:
        return []
    return [d for d in range(1, n + 1) if n % d == 0]


def divisors_near(n: int, target: int, count: int = 3) -> list[int]:
    """Divisors of n closest to target (valid tensor-parallel sizes), ascending."""
    ds = divisors(n)
    near = sorted(ds, key=lambda d: (abs(d - int(target)), d))[:count]
    return sorted(near)


def flags_in(text: str) -> list[str]:
    """The --flags named in an argparse 'unrecognized arguments: ...' tail."""
    return re.findall(r"(?<!\S)(--?[A-Za-z][\w.-]*)", text or "")


def closest_flag(flag: str) -> str | None:
    """The real vLLM flag a typo most likely meant (None when nothing is close)."""
    try:
        from .flags import closest_flag as _closest
    except ImportError:
        return None
    found = _closest(hyphen(flag))
    if isinstance(found, tuple):
        found = found[0] if found and (len(found) < 2 or (found[1] or 0) >= 80) else None
    return found or None


def renamed_flag(flag: str) -> Any:
    """What a renamed or removed flag became, if the bundled flag list knows."""
    try:
        from .flags import renamed
    except ImportError:
        return None
    return renamed(hyphen(flag))


def plural(n: float, word: str) -> str:
    """'1 request', '2 requests'."""
    return f"{n:g} {word}" + ("" if n == 1 else "s")


def tp_to_fit(weights_gib: float, gpu_gib: float, current_tp: int = 1, headroom: float = 0.85) -> int:
    """Smallest power-of-two tensor-parallel size above the current one whose weight share fits.

    A rank's weights should take at most `headroom` of its GPU, leaving room for activations and cache.
    """
    tp = max(1, int(current_tp or 1)) * 2
    while tp < 64 and weights_gib / tp > gpu_gib * headroom:
        tp *= 2
    return tp
