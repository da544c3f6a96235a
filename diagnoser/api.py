"""The library API: `diagnose` a log and `plan` a configuration from Python, no command line involved.

This module is the stable surface (`from diagnoser import diagnose, plan`): it never prints, never exits and
never raises click's exceptions; every error a caller can cause is a `diagnoser.errors.DoctorError`
(UsageError for a wrong argument, InputError for an input that cannot be read). The built-in rules load
once per process and are shared by every call; an extra rule pack loads once per set of paths.
"""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import import_module
from pathlib import Path
from typing import IO, Any, Union

from diagnoser.analysis.pipeline import Report
from diagnoser.errors import DoctorError, InputError, UsageError
from diagnoser.lazyre import lazy
from diagnoser.rules.loader import builtin_rules, load_rules
from diagnoser.rules.model import Rule, RuleError

#: What `diagnose` reads: a path (os.PathLike, or a str naming an existing file), the log's bytes, its text
#: (a str with a newline, or one that is not a file), a binary file object, or an iterable of lines.
Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes], Iterable[str], Iterable[bytes]]
#: Which rules: None (the built-in rules), rule objects, or extra rule files/folders added to the built-ins.
Rules = Union[None, Sequence[Rule], str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]

__all__ = ["Plan", "Report", "Rules", "Source", "diagnose", "plan", "resolve_rules"]


#: a one-line str that can only be meant as a file name: no spaces, and a folder or a log-like suffix
_LOOKS_LIKE_PATH = lazy(r"[^\s]*(?:/|\\)[^\s]*|[^\s]+\.(?:log|txt|out|err|gz|bz2|xz|zst|jsonl?)")


@lru_cache(maxsize=16)
def _rule_pack(paths: tuple[str, ...]) -> tuple[Rule, ...]:
    try:
        return tuple(load_rules(tuple(Path(p) for p in paths)))
    except RuleError as exc:
        raise InputError(str(exc)) from None


def resolve_rules(rules: Rules = None) -> tuple[Rule, ...]:
    """The rule set a call uses: loaded once per process (per set of extra paths), then reused."""
    if rules is None:
        return builtin_rules()
    if isinstance(rules, str | os.PathLike):
        rules = [rules]
    items = list(rules)
    if all(isinstance(r, Rule) for r in items):
        return tuple(items)  # type: ignore[arg-type]
    if any(isinstance(r, Rule) for r in items):
        raise UsageError("rules: pass either Rule objects or rule file/folder paths, not both")
    paths = []
    for p in items:
        if not isinstance(p, str | os.PathLike):
            raise UsageError(f"rules: {p!r} is neither a Rule nor a path to a rule file or folder")
        if not os.path.exists(p):
            raise InputError(f"{os.fspath(p)}: no such rule file or folder")
        paths.append(os.path.abspath(os.fspath(p)))
    return _rule_pack(tuple(paths))


def diagnose(source: Source, *, rules: Rules = None, redact: bool = True, name: str | None = None) -> Report:
    """Diagnose one vLLM log and return its Report (`report.to_dict()` is the `--format json` contract).

    A `str` is a path when it names an existing file and holds no newline, else the log's text; pass a
    `pathlib.Path` to insist on a file. Compressed files (gzip, bzip2, xz, zstd) are read transparently.
    `name` is the path shown in the report (default: the file's path, or "-").
    """
    from diagnoser.ingest import sources

    ruleset = resolve_rules(rules)
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and source
                                           and os.path.isfile(source)):
        path = os.fspath(source)
        with sources.open_log(path) as stream:
            return _run(stream, name or path, ruleset, redact)
    if isinstance(source, str) and _LOOKS_LIKE_PATH.fullmatch(source):
        raise InputError(f"{source}: no such file (pass a log's text with its newlines, or fix the path)")
    if isinstance(source, str):
        stream = io.BytesIO(source.encode("utf-8", "surrogateescape"))
    elif isinstance(source, bytes | bytearray | memoryview):
        stream = io.BytesIO(bytes(source))
    elif hasattr(source, "read") and not isinstance(source, io.TextIOBase):
        stream = source  # type: ignore[assignment]
    elif isinstance(source, Iterable):
        stream = sources.lines_stream(source)
    else:
        raise UsageError(f"diagnose: cannot read a {type(source).__name__}; pass a path, bytes, text, a binary "
                         "file object or an iterable of lines")
    return _run(stream, name or "-", ruleset, redact)


def _run(stream: Any, name: str, ruleset: tuple[Rule, ...], redact: bool) -> Report:
    from diagnoser.analysis import pipeline as engine
    from diagnoser.ingest import sources

    try:
        return engine.diagnose(stream, name, ruleset, redact=redact)
    except DoctorError:
        raise
    except Exception as exc:  # a corrupt or truncated archive, or a read error mid-file
        error = sources.read_error(name, exc)
        if error is None:
            raise
        raise error from None


@dataclass
class Plan:
    """A planned configuration: `to_dict()` is exactly `vllm-doctor plan --format json`."""

    data: dict[str, Any]
    text: str
    starts: bool
    ok: bool
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `plan --format json` (a fresh copy: mutate it freely)."""
        import copy

        return copy.deepcopy(self.data)


def plan(model: str | None = None, *, gpu: str | None = None, gpu_memory: str | float | None = None,
         command: str | Sequence[str] | None = None, log: str | os.PathLike[str] | None = None,
         vllm_version: str | None = None, gpu_memory_utilization: float | None = None,
         max_model_len: int | str | None = None, kv_cache_dtype: str | None = None, dtype: str | None = None,
         quantization: str | None = None, tensor_parallel_size: int | None = None,
         pipeline_parallel_size: int | None = None, max_num_seqs: int | None = None,
         max_num_batched_tokens: int | None = None, enforce_eager: bool | None = None,
         weights: str | float | None = None, overhead: str | float | None = None,
         min_concurrency: float | None = None, entry: str = "serve") -> Plan:
    """Predict whether a vLLM configuration starts, as `vllm-doctor plan` does, and return the Plan.

    `model` is a preset name, a Hugging Face repo id or a config.json path; `gpu` a preset name, or
    `gpu_memory` a size ("24GiB", "80GB"; a number is GiB). `command` is a whole `vllm serve ...` command
    line (a string or its tokens). Keyword names and defaults are vLLM's flags with underscores.
    Sizes (weights, overhead) take the same spellings as the command line. Without `vllm_version` (and no log
    naming one) the plan is for the newest release and its notes give the range over the releases the model runs
    on; `entry` is 'serve' (`vllm serve`) or 'llm' (the Python LLM class, whose batch defaults differ).
    """
    # the planner module by its import path: `from . import plan` would give this function (see __init__)
    planner = import_module(f"{__package__}.plan")

    opts: dict[str, Any] = {
        "model_ref": model, "gpu_name": gpu, "gpu_memory": None if gpu_memory is None else str(gpu_memory),
        "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": None if max_model_len is None else str(max_model_len),
        "kv_cache_dtype": kv_cache_dtype, "dtype": dtype, "quantization": quantization,
        "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
        "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
        "enforce_eager": enforce_eager, "weights": None if weights is None else str(weights),
        "overhead": None if overhead is None else str(overhead), "vllm_version": vllm_version,
        "log_path": None if log is None else os.fspath(log), "fmt": "text", "check": False,
        "min_concurrency": min_concurrency, "from_file": False, "command": (), "entry": entry,
    }
    tokens = shlex.split(command) if isinstance(command, str) else list(command or ())
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    if opts["log_path"] is not None and not os.path.isfile(opts["log_path"]):
        raise InputError(f"{opts['log_path']}: no such log file")
    planned = planner.plan_config(opts, tokens)
    return Plan(data=planned.data, text=planned.text, starts=bool(planned.verdict.starts), ok=bool(planned.ok),
                notes=list(planned.data.get("notes") or []))
