"""When the release is not known (no --vllm-version, no image tag, no log): the range of releases it could run on.

A configuration's KV cache moves with the release: V0 or V1, the batch defaults, the sampler's working memory,
CUDA graphs inside or outside the budget. Planning for the newest release alone would hide that, so the
configuration is planned on every release where one of those changes (the `since` of each entry of
data/releases.yaml), from the first release that runs the model to the newest, and the plan shows the range:
the least and the most KV cache, and on which releases it does not start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from diagnoser import datafiles
from diagnoser.vllm import releases, sizing
from diagnoser.vllm.memory import GIB

Version = tuple[int, int, int]


def turning_points(floor: Version) -> list[Version]:
    """Every release from `floor` on where a default or formula of data/releases.yaml changes, and the newest.

    >>> pts = turning_points((0, 8, 0)); pts[0], pts[-1] == releases.latest(), all(a < b for a, b in zip(pts, pts[1:]))
    ((0, 8, 0), True, True)
    """
    data = releases.load()
    points = {e.since for entries in data.settings.values() for e in entries}
    points |= {r["since"] for rules in data.tiers.values() for r in rules}
    points |= {floor, data.latest}
    return sorted(p for p in points if floor <= p <= data.latest)


def model_floor(model_id: str) -> tuple[Version, str]:
    """The first release that runs a model (data/releases.yaml `model_floors`, matched on the model id), else the
    oldest release the planner has been measured against; with the reason in words."""
    raw = datafiles.load("releases.yaml")
    for rule in raw.get("model_floors", ()):
        if re.search(rule["match"], model_id, re.IGNORECASE):
            return releases.parse_version(str(rule["since"])), f"{rule['family']} runs from vLLM {rule['since']}"
    since = str(raw.get("range_floor", "0.6.0"))
    return releases.parse_version(since), f"the oldest release planned without a version is {since}"


@dataclass(frozen=True)
class ReleaseSpan:
    """One configuration planned on each turning point of its release range."""

    plans: tuple[tuple[Version, sizing.PlanResult], ...]
    floor_reason: str

    @property
    def oldest(self) -> str:
        return releases.version_str(self.plans[0][0])

    @property
    def newest(self) -> str:
        return releases.version_str(self.plans[-1][0])

    def least(self) -> tuple[Version, sizing.PlanResult]:
        return min(self.plans, key=lambda p: p[1].kv_cache_bytes)

    def most(self) -> tuple[Version, sizing.PlanResult]:
        return max(self.plans, key=lambda p: p[1].kv_cache_bytes)

    def failing(self) -> list[str]:
        """The releases of the range on which the configuration does not fit."""
        return [releases.version_str(v) for v, r in self.plans if not r.fits]

    def as_json(self) -> dict[str, Any]:
        lo, hi = self.least(), self.most()
        return {
            "oldest": self.oldest, "newest": self.newest, "floor": self.floor_reason,
            "kv_cache_bytes": {"min": int(lo[1].kv_cache_bytes), "max": int(hi[1].kv_cache_bytes),
                               "min_release": releases.version_str(lo[0]),
                               "max_release": releases.version_str(hi[0])},
            "does_not_fit_on": self.failing(),
            "releases": [{"vllm_version": releases.version_str(v), "engine": r.engine,
                          "kv_cache_bytes": int(r.kv_cache_bytes), "kv_cache_tokens": r.kv_cache_tokens,
                          "fits": r.fits} for v, r in self.plans],
        }

    def sentence(self) -> str:
        """The range in words, for the plan's notes."""
        lo, hi = self.least(), self.most()
        text = (f"no release given: planned for vLLM {self.newest}, the newest; on releases {self.oldest} to "
                f"{self.newest} ({self.floor_reason}) the KV cache ranges from {lo[1].kv_cache_bytes / GIB:.2f} GiB "
                f"(vLLM {releases.version_str(lo[0])}) to {hi[1].kv_cache_bytes / GIB:.2f} GiB "
                f"(vLLM {releases.version_str(hi[0])}); give --vllm-version for one release")
        fails = self.failing()
        if fails:
            text += f"; it does not fit on {', '.join(fails[:6])}{' ...' if len(fails) > 6 else ''}"
        return text


def release_span(inp: sizing.PlanInput) -> ReleaseSpan:
    """`inp` planned on every turning point from its model's first release to the newest."""
    floor, reason = model_floor(inp.arch.name)
    plans = tuple((v, sizing.plan_memory(replace(inp, version=v))) for v in turning_points(floor))
    return ReleaseSpan(plans, reason)
