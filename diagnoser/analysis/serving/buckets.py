"""The points kept for charts: a bounded, downsampled series per engine (min/max/mean per bucket).

Memory stays flat on a log of any length: at most MAX_BUCKETS buckets; when full, neighbours merge in pairs
and each bucket then holds twice as many raw points.
"""

from __future__ import annotations

from typing import Any

from diagnoser.analysis.serving.clock import Clock

MAX_BUCKETS = 600        #: points kept per engine for charts (each a bucket of raw points)


class Buckets:
    """A bounded, downsampled series: at most MAX_BUCKETS buckets; when full, neighbours merge in pairs."""

    def __init__(self, capacity: int = MAX_BUCKETS) -> None:
        self.capacity = capacity
        self.width = 1  #: raw points per bucket
        self.items: list[dict[str, Any]] = []

    def add(self, t: float, values: dict[str, float]) -> None:
        last = self.items[-1] if self.items else None
        if last is None or last["n"] >= self.width:
            last = {"t0": t, "t1": t, "n": 0, "f": {}}
            self.items.append(last)
            if len(self.items) > self.capacity:
                self._halve()
                last = self.items[-1]
        last["t1"] = t
        last["n"] += 1
        f = last["f"]
        for name, v in values.items():
            if v is None or v - v != 0:  # not math.isfinite(v), without the call: inf - inf and nan are nan
                continue
            agg = f.get(name)
            if agg is None:
                f[name] = [v, v, v, 1]
            else:  # min() and max() without the calls: the first of equals stays, as they keep it
                if v < agg[0]:
                    agg[0] = v
                if v > agg[1]:
                    agg[1] = v
                agg[2] += v
                agg[3] += 1

    def _halve(self) -> None:
        # each pair merges into its first bucket, in place (nothing else holds a bucket or its lists)
        items = self.items
        for a, b in zip(items[0::2], items[1::2], strict=False):
            f = a["f"]
            for k, v in b["f"].items():
                agg = f.get(k)
                if agg is None:
                    f[k] = v
                    continue
                if v[0] < agg[0]:  # min() and max() without the calls, as in add()
                    agg[0] = v[0]
                if v[1] > agg[1]:
                    agg[1] = v[1]
                agg[2] += v[2]
                agg[3] += v[3]
            a["t1"] = b["t1"]
            a["n"] += b["n"]
        self.items = items[0::2]
        self.width *= 2

    def points(self, clock: Clock) -> list[dict[str, Any]]:
        out = []
        for b in self.items:
            p: dict[str, Any] = {"t": round(b["t0"], 3), "time": clock.label(b["t0"]), "n": b["n"]}
            for k, (lo, hi, total, n) in b["f"].items():
                p[k] = {"min": _r(lo), "max": _r(hi), "mean": _r(total / n)}
            out.append(p)
        return out


def _r(v: float) -> float:
    return round(v, 2) if abs(v) < 1e6 else round(v)

