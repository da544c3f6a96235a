"""What a rule's `series:` entry sees of a window: the facts each kind of window carries, computed from it.

`rules.model.SERIES_FACTS` is the contract the rule loader checks a rule's names against; `window_facts` gives
them for one window, and `LocalFacts` the same facts lazily (the series asks whether any rule may report each
window as it closes, before the clock can label it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from diagnoser.analysis.serving.clock import Clock
from diagnoser.analysis.serving.detectors import Window


class LocalFacts(Mapping[str, Any]):
    """`window_facts(w, None, {}, None)`, each fact computed when asked: the series asks whether a rule may
    report each window as it closes, and a rule's `when` reads two or three of them (the labels, which cost a
    strftime, only when asked)."""

    __slots__ = ("w", "_all")

    def __init__(self, w: Window) -> None:
        self.w = w
        self._all: dict[str, Any] | None = None

    def _facts(self) -> dict[str, Any]:
        if self._all is None:
            self._all = window_facts(self.w, None, {}, None)
        return self._all

    def __getitem__(self, name: str) -> Any:
        own = _LOCAL_FACTS.get(name)
        if own is not None:
            return own(self.w)
        if not name.startswith("_") and name in self.w.extra:
            return self.w.extra[name]
        if name not in _LABELS:  # a word of the expression that is no fact (`and`, a constant's name)
            raise KeyError(name)
        return self._facts()[name]

    def get(self, name: str, default: Any = None) -> Any:
        """Mapping.get without its KeyError for each word of an expression that is no fact."""
        if name in _LOCAL_FACTS or name in _LABELS or (not name.startswith("_") and name in self.w.extra):
            return self[name]
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._facts())

    def __len__(self) -> int:
        return len(self._facts())


#: the facts of window_facts that are a window's own figures (no clock, no listing), as it computes them
_LOCAL_FACTS: dict[str, Callable[[Window], Any]] = {
    "seconds": lambda w: round(w.seconds), "points": lambda w: w.points,
    "kv_usage_pct": lambda w: round(w.peak_kv, 1), "waiting": lambda w: int(w.max_waiting),
    "running": lambda w: int(w.max_running), "series_preemptions": lambda w: int(w.preemptions),
    "engine": lambda w: w.engine, "_finished": lambda w: w.extra.get("_finished", 0.0), "_interval": lambda w: w.step,
}
_LABELS = ("start", "end", "_window")  #: window_facts' other facts


def window_facts(w: Window, clock: Clock | None, common: dict[str, Any], listed: dict[str, Any] | None
                 ) -> dict[str, Any]:
    """What a rule's `series:` entry sees of one window (`clock` None: the labels are not known yet)."""
    d = w.as_dict(clock if clock is not None else Clock())
    return {**common, **{k: v for k, v in w.extra.items() if not k.startswith("_")},
            "_window": listed, "seconds": d["seconds"], "start": d["start"], "end": d["end"],
            "points": w.points, "kv_usage_pct": d["peak_kv_usage_pct"], "waiting": d["max_waiting"],
            "running": int(w.max_running), "series_preemptions": d["preemptions"], "engine": w.engine,
            "_finished": w.extra.get("_finished", 0.0), "_interval": w.step}
