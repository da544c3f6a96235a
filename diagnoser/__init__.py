"""vllm-doctor: diagnose vLLM server logs (what failed, at which stage, the numbers, the computed fix).

The library API is two functions (see docs/library.md):

    from diagnoser import diagnose, plan
    report = diagnose("server.log")          # -> Report; report.to_dict() is the `--format json` contract
    p = plan("llama-3.1-8b", gpu="L4", max_model_len=16384)   # -> Plan; p.to_dict() is `plan --format json`

Importing the package is cheap: the public names load on first use (the command line's `--version` and
start-up stay fast).
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "DoctorError", "InputError", "LimitError", "Plan", "Report", "UsageError", "__version__", "diagnose", "plan",
]

#: public name -> the module that defines it (imported on first access)
_LAZY = {
    "diagnose": "api", "plan": "api", "Plan": "api", "Report": "analysis.pipeline",
    "DoctorError": "errors", "UsageError": "errors", "InputError": "errors", "LimitError": "errors",
}

if TYPE_CHECKING:
    from diagnoser.analysis.pipeline import Report
    from diagnoser.api import Plan, diagnose, plan
    from diagnoser.errors import DoctorError, InputError, LimitError, UsageError


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        if name != "plan":
            globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """`diagnoser.plan` is the public function even after the planner submodule (`diagnoser/plan`) is imported.

    Importing a submodule sets an attribute of that name on its package; this property keeps the function
    there, while `import diagnoser.plan` / `from diagnoser.plan import ...` still reach the module.
    """

    @property
    def plan(self) -> Any:
        return import_module(f"{__name__}.api").plan

    @plan.setter
    def plan(self, value: Any) -> None:  # the import system records the submodule here: keep the function
        pass


sys.modules[__name__].__class__ = _Package
