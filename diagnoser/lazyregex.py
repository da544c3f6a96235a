"""A regex compiled on first use: most patterns (a cached rule's, a module's rarer ones) never meet a line.

Compiling costs 0.1-2 ms a pattern, and a small diagnosis uses few of the hundreds the rules and modules
hold: each compiles when first searched. `compiler` is the `regex` module's (rules) or `re`'s (modules).
After the first use the compiled pattern's attributes are kept on the object, so a hot loop pays no more
than an attribute lookup.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import regex


class LazyRegex:
    """`regex.compile(pattern, flags)` (or `compiler(pattern, flags)`) on first use, then its stand-in."""

    __slots__ = ("pattern", "flags", "_compiler", "_compiled", "__dict__")  # __dict__: the kept attributes

    def __init__(self, pattern: str, flags: int = 0, compiler: Callable[[str, int], Any] = regex.compile) -> None:
        self.pattern, self.flags, self._compiler = pattern, flags, compiler
        self._compiled: Any = None

    @property
    def compiled(self) -> Any:
        if self._compiled is None:
            self._compiled = self._compiler(self.pattern, self.flags)
        return self._compiled

    def __getattr__(self, name: str) -> Any:  # search, match, finditer, sub, groupindex, ...
        if name.startswith("__"):  # copy, pickle and friends probe dunders: no compile for those
            raise AttributeError(name)
        value = getattr(self.compiled, name)
        self.__dict__[name] = value
        return value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (LazyRegex, regex.Pattern, re.Pattern)) and (other.pattern, other.flags) == (
            self.pattern, self.flags)

    def __hash__(self) -> int:
        return hash((self.pattern, self.flags))

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles hold the source, not the kept attributes
        return (LazyRegex, (self.pattern, self.flags, self._compiler))

    def __repr__(self) -> str:
        return f"LazyRegex({self.pattern!r}, {self.flags})"


def lazy(pattern: str, flags: int = 0) -> LazyRegex:
    """A module-level `re.compile(pattern, flags)` that compiles when first used."""
    return LazyRegex(pattern, flags, re.compile)
