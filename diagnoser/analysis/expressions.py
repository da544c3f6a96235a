"""The rules' jinja2 expressions (`when:`, `derive:`) evaluated over a hit's facts, leniently.

`Evaluator` compiles each expression once per process (in the sandbox) and treats a missing or odd fact as
"no value" rather than an error; `template_names` is what every template and expression sees (the facts, the
log's context, the `mem` and `fn` helper namespaces); `derive_facts` adds a rule's derived facts in order.
"""

from __future__ import annotations

import math
from typing import Any

from diagnoser.rules.model import Rule

#: compiled expressions by source, shared by every Evaluator: a scan of many logs compiles each once
_EXPRESSIONS: dict[str, Any] = {}


class Evaluator:
    """Compiled jinja2 expressions (when:, derive:), evaluated leniently: a missing fact means no value."""

    def __init__(self) -> None:
        self.env: Any = None   # the sandbox (and jinja2) load on the first expression a log needs
        self._cache = _EXPRESSIONS

    def value(self, source: str, names: dict[str, Any]) -> Any:
        expr = self._cache.get(source)
        if expr is None:
            from diagnoser.rules.sandbox import expression, template_env

            if self.env is None:
                self.env = template_env()
            expr = self._cache[source] = expression(self.env, source)
        try:
            result = expr(**names)
        except Exception:  # noqa: BLE001 - an expression over missing or odd facts simply has no value
            return None
        if hasattr(result, "_undefined_name"):
            return None
        if isinstance(result, float) and not math.isfinite(result):
            return None
        return result

    def truth(self, source: str, names: dict[str, Any]) -> bool:
        return bool(self.value(source, names))


def template_names(facts: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """What templates and expressions see: facts by name, plus ctx and the sandbox's `mem` and `fn` namespaces."""
    from diagnoser.rules.sandbox import FN, MEM

    return {**facts, "facts": facts, "ctx": ctx, "mem": MEM, "fn": FN}


def derive_facts(rule: Rule, facts: dict[str, Any], ctx: dict[str, Any], ev: Evaluator,
                 stage: str | None = None) -> dict[str, Any]:
    """Add the rule's derived facts, in order; each sees the ones before it (and the stage of the failure)."""
    out = dict(facts)
    for name, source in rule.derive.items():
        value = ev.value(source, {**template_names(out, ctx), "stage": stage})
        if value is not None or name not in out:
            out[name] = value  # None: known to be unknown, so templates can test it without failing
    return out
