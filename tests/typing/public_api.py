"""Type-checked by mypy in .ci/run (not collected by pytest): the public surface as a user writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import diagnoser
from diagnoser import DoctorError, InputError, Plan, Report, UsageError, diagnose, plan


def uses() -> None:
    report: Report = diagnose(Path("server.log"))
    report = diagnose("server.log", redact=False)
    report = diagnose(b"INFO ...\n", rules=["my-rules/"])
    report = diagnose(["line one", "line two"], name="pasted")
    doc: dict[str, Any] = report.to_dict()
    assert doc["schema_version"] == 1
    counts: dict[str, int] = report.counts()
    first: str = report.findings[0].rule.id if report.findings else ""
    p: Plan = plan("llama-3.1-8b", gpu="L4", max_model_len=16384, kv_cache_dtype="fp8")
    p = plan(command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192", gpu_memory="24GiB")
    ok: bool = p.starts and p.ok
    data: dict[str, Any] = p.to_dict()
    try:
        diagnose(Path("missing.log"))
    except InputError as exc:
        message: str = str(exc)
    except (UsageError, DoctorError):
        pass
    version: str = diagnoser.__version__
    print(counts, first, ok, data, message, version)
