"""Which items of a list hold a keyword that occurs in a text: one pass over the distinct keywords.

The matcher (rule patterns) and the tracker (landmarks) each ask, for every line the prefilter kept, which
of a few hundred items have a literal keyword in it. Testing item by item repeats the shared keywords and
pays a generator per item; this asks each distinct keyword once. On a very long text (a piece of a 100 MB
line) the keywords are found in one hyperscan pass when the `fast` extra is installed.
"""

from __future__ import annotations

import contextlib
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
        if not self._hs_tried:
            self._hs_tried = True
            if os.environ.get("VLLM_DOCTOR_PURE_PYTHON"):
                return None
            self._hs = literal_database("hs-index", [w.encode("utf-8", "surrogatepass") for w in self.words],
                                        single_match=True)
        return self._hs


def literal_database(name: str, words: Sequence[bytes], caseless: bool = False, single_match: bool = False) -> Any:
    """`words` as a hyperscan block-mode database of literals (id = index), or None without the `fast` extra.

    Compiling one takes 100-150 ms for the prefilter's ~300 keywords, more than a whole small diagnosis, so
    the compiled form is kept in the user's cache (datafiles), keyed by the words, the flags and hyperscan's
    version, and only used if it finds every word in a probe text (a corrupt file, or a database built for
    another CPU, is compiled afresh). Callers honour VLLM_DOCTOR_PURE_PYTHON=1 (no hyperscan).
    """
    if not words:
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    from . import datafiles

    flag = (hyperscan.HS_FLAG_CASELESS if caseless else 0) | (hyperscan.HS_FLAG_SINGLEMATCH if single_match else 0)
    key = datafiles.content_key([f"hyperscan {hyperscan.__version__} {flag}".encode(), *words])
    stored = datafiles.read_blob(name, key)
    if stored is not None:
        try:
            db = hyperscan.loadb(stored, hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)  # a loaded database comes without one (compile() makes it)
            if _finds_every_word(db, words):
                return db
        except Exception:  # noqa: BLE001 - corrupt, truncated, or for another platform: compile it again
            pass
    try:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=[b"".join(b"\\x%02x" % c for c in w) for w in words],
                   ids=list(range(len(words))), elements=len(words), flags=[flag] * len(words))
    except Exception:  # noqa: BLE001 - a broken or too-old build: the pure-Python search is always there
        return None
    with contextlib.suppress(Exception):  # a database that cannot be serialized is simply not cached
        datafiles.write_blob(name, key, hyperscan.dumpb(db))
    return db


def _finds_every_word(db: Any, words: Sequence[bytes]) -> bool:
    """The database reports each word's id on a text holding every word (what a stale or foreign copy fails)."""
    found: set[int] = set()
    db.scan(b"\n".join(words), match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
    return found == set(range(len(words)))
