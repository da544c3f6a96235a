"""What a comparison of start-ups is: each start's budget figures (with where each came from), the changes
between two starts, the fixes, and the comparison as the formats render it (its JSON is in docs/comparing.md).

Budget figures use GiB names (`weights_gib`, like the log context), token counts and a utilization
fraction. Building these is the other modules' job: starts.py (a start from a log or a plan), budget.py (the
figures a start did not print), moved.py (the diff and its sentence), fix.py (the flags), comparison.py
(pairs and the gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnoser.analysis.tracker import Context
from diagnoser.vllm import releases as rel

SCHEMA_VERSION = 1

#: (key, label, unit) in display order
BUDGET = (
    ("gpu_total_gib", "GPU memory", "GiB"),
    ("gpu_memory_utilization", "gpu_memory_utilization", ""),
    ("budget_gib", "budget (GPU x utilization)", "GiB"),
    ("weights_gib", "weights", "GiB"),
    ("activation_peak_gib", "activation peak", "GiB"),
    ("non_torch_gib", "non-torch memory", "GiB"),
    ("cuda_graph_budget_gib", "CUDA graphs, inside the budget", "GiB"),
    ("cuda_graph_gib", "CUDA graphs, taken at capture", "GiB"),
    ("kv_cache_gib", "KV cache", "GiB"),
    ("kv_cache_tokens", "KV cache tokens", "tokens"),
    ("block_size", "block size", "tokens"),
    ("max_model_len", "max_model_len", "tokens"),
    ("request_kv_gib", "KV for one max_model_len request", "GiB"),
    ("max_concurrency", "concurrency at max_model_len", "x"),
)
LABELS = {k: label for k, label, _ in BUDGET}
UNITS = {k: unit for k, _, unit in BUDGET}


@dataclass
class Figure:
    """One budget figure and where it came from: 'log', 'derived' (arithmetic on printed figures),
    'estimated' (the planner) or 'other log' (the same GPU as the other start)."""

    value: float | None
    source: str = "log"

    @property
    def estimated(self) -> bool:
        return self.source in ("estimated", "other log")


@dataclass
class Start:
    """One start-up: from a log, or planned for a release."""

    input: str
    version: rel.Version
    engine: str
    failed: bool
    failure: str | None
    budget: dict[str, Figure]
    settings: dict[str, dict[str, Any]]
    context: Context | None = None
    model: str | None = None
    gpu_name: str = ""
    arch: Any = None
    #: the log printed no version: `version` is a stand-in and its defaults are not evidence
    assumed_version: bool = False
    #: a failure after the server was up: where it happened ('10-20 22:27:44, line 59'); empty for a failed start
    failed_serving: str = ""

    @property
    def outcome(self) -> str:
        """How the start ended, for sentences: 'failed to start (kv-cache-too-small)', or for a server that came
        up and died later 'started, then failed while serving at 10-20 22:27:44, line 59 (engine-dead)'."""
        if not self.failed:
            return "started"
        if self.failed_serving:
            return f"started, then failed while serving at {self.failed_serving} ({self.failure})"
        return f"failed to start ({self.failure})"

    @property
    def label(self) -> str:
        """The input as sentences and headers name it ('-' is stdin)."""
        return "stdin" if self.input == "-" else self.input

    def get(self, key: str) -> float | None:
        fig = self.budget.get(key)
        return None if fig is None else fig.value

    def as_json(self) -> dict[str, Any]:
        ctx = self.context.as_dict() if self.context is not None else {}
        ctx.pop("args", None)
        return {
            "input": self.input, "context": ctx,
            "budget": {k: _rounded(f.value) for k, f in self.budget.items()},
            "estimated": sorted(k for k, f in self.budget.items() if f.estimated and f.value is not None),
            "derived": sorted(k for k, f in self.budget.items() if f.source == "derived" and f.value is not None),
            "settings": self.settings, "failed": self.failed, "failure": self.failure,
            "failed_while_serving": bool(self.failed_serving),
            "vllm_version": None if self.assumed_version else rel.version_str(self.version), "engine": self.engine,
        }


@dataclass
class Change:
    name: str
    before: Any
    after: Any
    delta: float | None
    unit: str
    estimated: bool
    why: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = {"name": self.name, "before": _rounded(self.before), "after": _rounded(self.after),
               "delta": _rounded(self.delta), "unit": self.unit, "estimated": self.estimated}
        if self.why:
            out["why"] = self.why
        return out


@dataclass
class Fix:
    flag: str
    value: str | None
    returns_gib: float
    reason: str
    env: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "returns_gib": round(self.returns_gib, 2),
                "reason": self.reason}


@dataclass
class Comparison:
    """Each start against the first: changes, the sentence, fixes, the corrected command."""

    starts: list[Start]
    pairs: list[Pair] = field(default_factory=list)

    @property
    def primary(self) -> Pair:
        return self.pairs[-1]

    def as_json(self) -> dict[str, Any]:
        last = self.primary
        out = {
            "schema_version": SCHEMA_VERSION,
            "logs": [s.as_json() for s in self.starts],
            "changes": [c.as_json() for c in last.changes],
            "summary": last.summary,
            "fixes": [f.as_json() for f in last.fixes],
            "command": last.command,
            "alternatives": [f.as_json() for f in last.alternatives],
            "kv_tokens_lost_fraction": _rounded(last.kv_loss),
            "gate": {"failed": last.gate_failed, "reason": last.gate_reason},
        }
        if len(self.pairs) > 1:
            out["series"] = [p.as_json() for p in self.pairs]
        return out


@dataclass
class Pair:
    before: Start
    after: Start
    changes: list[Change]
    summary: str
    fixes: list[Fix]
    alternatives: list[Fix]
    command: str | None
    kv_loss: float | None
    gate_failed: bool
    gate_reason: str | None
    max_kv_loss: float = 0.2

    def as_json(self) -> dict[str, Any]:
        return {"before": self.before.input, "after": self.after.input,
                "changes": [c.as_json() for c in self.changes], "summary": self.summary,
                "fixes": [f.as_json() for f in self.fixes], "command": self.command,
                "alternatives": [f.as_json() for f in self.alternatives],
                "kv_tokens_lost_fraction": _rounded(self.kv_loss), "gate": {"failed": self.gate_failed,
                                                                            "reason": self.gate_reason}}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    return value
