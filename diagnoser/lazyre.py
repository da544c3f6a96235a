"""`lazy(pattern, flags)`: a module's `re` pattern compiled on first use, not at import.

A short diagnosis or a `plan` uses a fraction of the ~100 patterns its modules define (the redactor's secret
shapes, the serve-args reader, the stats-line fields...), and `re` compiles in Python: compiling them all at
import was a good part of the start-up. A `LazyPattern` answers `search`, `match`, `sub`... like the compiled
pattern; on the first attribute asked it compiles and keeps the compiled pattern's methods as its own, so later
calls go straight to them. It is not an `re.Pattern`: pass `.compiled` where one is required (`re.sub(p, ...)`,
`isinstance`).
"""

from __future__ import annotations

import re
from typing import Any

#: the compiled pattern's attributes copied onto the LazyPattern when it compiles (later lookups skip __getattr__)
_KEPT = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "scanner", "pattern", "flags",
         "groups", "groupindex")


class LazyPattern:
    """`re.compile(pattern, flags)`, done the first time any attribute of the pattern is read."""

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self._source = (pattern, flags)

    @property
    def compiled(self) -> re.Pattern[Any]:
        """The compiled pattern (compiled now if it was not yet)."""
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = re.compile(*self._source)
            for name in _KEPT:
                setattr(self, name, getattr(compiled, name))
            self._compiled = compiled
        return compiled

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_source", "_compiled"):  # copy, pickle and friends probe for these
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"lazy({self._source[0]!r})"


def lazy(pattern: str | bytes, flags: int = 0) -> Any:
    """A LazyPattern (typed Any: it stands in for the compiled `re.Pattern` wherever its methods are called)."""
    return LazyPattern(pattern, flags)
