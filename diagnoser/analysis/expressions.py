"""The rules' jinja2 expressions (`when:`, `derive:`) evaluated over a hit's facts, leniently.

`Evaluator` compiles each expression once per process (in the sandbox) and treats a missing or odd fact as
"no value" rather than an error; `template_names` is what every template and expression sees (the facts, the
log's context, the `mem` and `fn` helper namespaces); `derive_facts` adds a rule's derived facts in order.
"""

from __future__ import annotations

import math
import time
from typing import Any

from diagnoser.rules.model import Rule

#: compiled expressions by source, shared by every Evaluator: a scan of many logs compiles each once
_EXPRESSIONS: dict[str, Any] = {}


#: seconds of expression time one rule (or one expression, when no rule is named) may spend on one log, in
#: total: 30 hits of a slow `derive:` are bounded together, not 2 s each
RULE_SECONDS = 4.0


class Evaluator:
    """Compiled jinja2 expressions (when:, derive:), evaluated leniently: a missing fact means no value.

    One Evaluator serves one log: it keeps what each rule has spent of its RULE_SECONDS there; past it, the
    rule's expressions have no value (its advice then says it could not be computed)."""

    def __init__(self) -> None:
        self.env: Any = None   # the sandbox (and jinja2) load on the first expression a log needs
        self._cache = _EXPRESSIONS
        self._left: dict[str, float] = {}

    def value(self, source: str, names: dict[str, Any], owner: str | None = None) -> Any:
        """The expression's value over `names`; None when a fact is missing or odd, or `owner`'s budget is spent."""
        expr = self._cache.get(source)
        if expr is None:
            from diagnoser.rules.sandbox import expression, template_env

            if self.env is None:
                self.env = template_env()
            expr = self._cache[source] = expression(self.env, source)
        key = owner or source
        left = self._left.get(key, RULE_SECONDS)
        if left <= 0:
            return None
        start = time.monotonic()
        try:
            result = expr(names, left)
        except Exception:  # noqa: BLE001 - an expression over missing or odd facts simply has no value
            return None
        finally:
            self._left[key] = left - (time.monotonic() - start)
        if hasattr(result, "_undefined_name"):
            return None
        if isinstance(result, float) and not math.isfinite(result):
            return None
        return result

    def truth(self, source: str, names: dict[str, Any], owner: str | None = None) -> bool:
        return bool(self.value(source, names, owner))


def template_names(facts: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """What templates and expressions see: facts by name, plus ctx and the sandbox's `mem` and `fn` namespaces."""
    from diagnoser.rules.sandbox import FN, MEM

    return {**facts, "facts": facts, "ctx": ctx, "mem": MEM, "fn": FN}


class ContextOrNone(dict[str, Any]):
    """The log's context as `derive` reads it: what the log did not show is none, like an absent fact.

    >>> ContextOrNone({"model": "m"})["max_model_len"] is None
    True
    """

    def __missing__(self, key: str) -> None:
        return None


def derive_facts(rule: Rule, facts: dict[str, Any], ctx: dict[str, Any], ev: Evaluator,
                 stage: str | None = None) -> dict[str, Any]:
    """Add the rule's derived facts, in order; each sees the ones before it (and the stage of the failure).

    A fact the rule can produce but this hit did not, and a context value the log did not show (`ctx.x`), is
    `none`: expressions pass it on (`fn.f(x)`), test it (`x is known`) or fail to a value of none (`x * 2`),
    with no `x if x is known else none` ceremony."""
    out = dict(facts)
    absent = dict.fromkeys(rule.produces() - facts.keys()) if rule.derive else {}
    ctx = ContextOrNone(ctx)
    for name, source in rule.derive.items():
        value = ev.value(source, {**absent, **template_names(out, ctx), "stage": stage}, rule.id)
        if value is not None or name not in out:
            out[name] = value  # None: known to be unknown, so templates can test it without failing
    return out
