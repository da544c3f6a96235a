"""Which items of a list hold a keyword that occurs in a text: one pass over the distinct keywords.

The matcher (rule patterns) and the tracker (landmarks) each ask, for every line the prefilter kept, which
of a few hundred items have a literal keyword in it. Testing item by item repeats the shared keywords and
pays a generator per item; this asks each distinct keyword once. On a very long text (a piece of a 100 MB
line) the keywords are found in one hyperscan pass when the `fast` extra is installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

#: Texts at least this long are searched in one pass (when hyperscan is there), not once per keyword.
LONG_TEXT = 4096


class KeywordIndex:
    """`matches(low)` == [i for i, kws in enumerate(keyword_lists) if any(k in low for k in kws)]."""

    def __init__(self, keyword_lists: Iterable[Sequence[str]]) -> None:
        owners: dict[str, list[int]] = {}
        for i, kws in enumerate(keyword_lists):
            for k in kws:
                ids = owners.setdefault(k, [])
                if not ids or ids[-1] != i:
                    ids.append(i)
        self._owners = owners
        self.words = list(owners)
        self._hs: Any = None
        self._hs_tried = False

    def present(self, low: str) -> list[str]:
        """The keywords that occur in `low` (lower-cased text), in index order."""
        if len(low) >= LONG_TEXT:
            db = self._db()
            if db is not None:
                found: set[int] = set()
                db.scan(low.encode("utf-8", "surrogatepass"),
                        match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
                return [self.words[i] for i in sorted(found)]
        return [w for w in self.words if w in low]

    def owners(self, words: Iterable[str]) -> list[int]:
        """Items having any of `words`, in item order."""
        words = list(words)
        if len(words) == 1:
            return self._owners[words[0]]
        return sorted({i for w in words for i in self._owners[w]})

    def matches(self, low: str) -> list[int]:
        words = self.present(low)
        return self.owners(words) if words else []

    def _db(self) -> Any:
        if self._hs_tried:
            return self._hs
        self._hs_tried = True
        if os.environ.get("VLLM_DOCTOR_PURE_PYTHON") or not self.words:
            return None
        try:
            import hyperscan

            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=[b"".join(b"\\x%02x" % c for c in w.encode("utf-8", "surrogatepass"))
                                    for w in self.words],
                       ids=list(range(len(self.words))), elements=len(self.words),
                       flags=[hyperscan.HS_FLAG_SINGLEMATCH] * len(self.words))
        except Exception:  # noqa: BLE001 - no extra, or a build that refuses: the plain loop is always right
            return None
        self._hs = db
        return db
