"""The planner's inputs: each setting chosen from the planner's option > the `vllm serve` command > the --log
> vLLM's default, by one table that records where each effective value came from.

Also the value spellings the planner reads (sizes, lengths) and the bounds it refuses, so that every input
check is here and `command.py` only orchestrates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diagnoser.errors import InputError, UsageError
from diagnoser.vllm import memory as mem
from diagnoser.vllm import releases, serve_args
from diagnoser.vllm.coefficients import graphs_budgeted
from diagnoser.vllm.modelspec import GpuSpec, ModelSpec, load_gpu

KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
SIZE_UNITS = {
    "": mem.GIB, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
}
SIZE_NOTE = "sizes: 24GB = 24 x 10^9 bytes, 24GiB = 24 x 2^30, 24G (and a bare 24) are read as GiB like nvidia-smi"

#: Bounds a GPU's memory must fall in to be planned (a GiB to well above any accelerator sold).
GPU_GIB_RANGE = (1.0, 4096.0)
#: --max-model-len bounds: one token to far beyond any context window.
MAX_LEN_RANGE = (1, 1 << 31)
#: config.json numbers that must be positive for any transformer.
ARCH_POSITIVE = ("layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size")

NO_MODEL = ("no model: give --model NAME (a preset, repo id or config.json), a `-- vllm serve MODEL ...` "
            "command, or a --log that names it")
NO_GPU = "no GPU: give --gpu NAME (e.g. L4, A100-80GB, H100) or --gpu-memory SIZE (e.g. 24GiB)"


class VllmRejects(UsageError):
    """What vLLM itself would refuse at the command line (argparse errors, invalid values): exit 2 for a command
    given on the planner's command line, "will not start" (exit 1 with --check) for a launch config file."""


class MissingInput(UsageError):
    """No model or no GPU to plan for (exit 2)."""


# --- value spellings --------------------------------------------------------------------------------------------

def parse_size(text: str | float | None) -> float | None:
    """'24GB' -> 24e9, '24GiB' / '24G' / '24' -> 24 x 2^30, '22528MiB' -> 22528 x 2^20."""
    if text is None:
        return None
    if isinstance(text, int | float):
        return float(text) * mem.GIB
    m = re.fullmatch(r"\s*([\d.]+(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in SIZE_UNITS:
        raise UsageError(f"{text!r} is not a size; write 24GB (10^9), 24GiB (2^30) or 22528MiB")
    return float(m.group(1)) * SIZE_UNITS[m.group(2).lower()]


def parse_len(text: str) -> int:
    """--max-model-len value: '16384', '16k' (x1000), '16K' (x1024), as vLLM 0.8.4+ accepts; 'auto' and '-1'
    (vLLM fits the length to memory) -> -1."""
    if str(text).strip().lower() in ("auto", "-1"):
        return -1
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)([kKmMgG]?)\s*", str(text))
    if not m:
        raise UsageError(f"--max-model-len: {text!r} is not a length (write 16384 or 16K)")
    mult = {"": 1, "k": 1000, "m": 10**6, "g": 10**9, "K": 1024, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    return int(float(m.group(1)) * mult)


def parse_token_count(value: str | int) -> int:
    """--max-num-batched-tokens: an integer with vLLM's suffixes (8k = 8000, 8K = 8192), at least 1."""
    try:
        n = parse_len(str(value))
    except UsageError:
        raise UsageError(f"{value!r} is not a token count (write 8192 or 8K)") from None
    if n < 1:
        raise UsageError(f"{value!r}: at least 1 token")
    return n


def _bytes_or_size(text: str) -> float | None:
    """--kv-cache-memory-bytes: a bare integer is bytes, anything else a size ('4G')."""
    return float(text) if re.fullmatch(r"\d+", str(text)) else parse_size(text)


# --- bounds -----------------------------------------------------------------------------------------------------

def check_gpu_bytes(size: float, option: str) -> float:
    """A GPU size between GPU_GIB_RANGE (24GiB yes; 0 and 1e30 no)."""
    low, high = GPU_GIB_RANGE
    if not math.isfinite(size) or not low * mem.GIB <= size <= high * mem.GIB:
        raise UsageError(f"{option}: {size / mem.GIB:.6g} GiB is not a GPU's memory; give a size between "
                         f"{low:g} GiB and {high:g} GiB, e.g. 24GiB")
    return size


def check_max_len(value: int | None, option: str = "--max-model-len") -> int | None:
    """A length between MAX_LEN_RANGE; -1 (vLLM 0.14+'s 'auto') is kept for the caller."""
    low, high = MAX_LEN_RANGE
    if value is not None and value != -1 and not low <= value <= high:
        raise UsageError(f"{option} {value}: not a context length; give a number of tokens from {low} to "
                         f"{high:,} (or -1 to let vLLM 0.14+ fit it)")
    return value


def check_utilization(util: float | None, error: type[UsageError] = UsageError) -> None:
    """--gpu-memory-utilization: above 0 and at most 1 (`error`: VllmRejects for a launch's own value)."""
    if util is not None and not 0 < util <= 1:
        raise error(f"--gpu-memory-utilization {util}: must be above 0 and at most 1")


def check_arch(spec: ModelSpec, ref: str) -> None:
    """The model's config numbers a plan divides by or multiplies with must be positive."""
    arch = spec.arch
    for name in ARCH_POSITIVE:
        value = getattr(arch, name)
        if not isinstance(value, int) or value <= 0:
            raise InputError(f"{ref}: {name} is {value!r}; a model's config.json needs a positive whole number "
                             "there (check the file)")
    if arch.num_attention_heads % arch.num_key_value_heads:
        raise InputError(f"{ref}: num_key_value_heads {arch.num_key_value_heads} does not divide "
                         f"num_attention_heads {arch.num_attention_heads}; check the file")


# --- the log ----------------------------------------------------------------------------------------------------

def log_context(path: str) -> Any:
    """The tracker's Context of a start-up log: the settings and figures vLLM printed."""
    from diagnoser.analysis.tracker import Tracker
    from diagnoser.ingest.reader import read_lines

    tracker = Tracker()
    try:
        with open(path, "rb") as fh:
            for line in read_lines(fh):
                tracker.observe(line)
    except OSError as exc:
        raise UsageError(f"--log {path}: cannot read ({exc.strerror or exc})") from None
    return tracker.context


# --- the table --------------------------------------------------------------------------------------------------

OPTION, COMMAND, LOG, DEFAULT = "option", "command", "log", "default"

#: A getter of a value from the log: (the log's Context, the values resolved so far, the release) -> value.
LogGetter = Callable[[Any, dict[str, Any], releases.Version], Any]
#: A getter of a value from the command: (the parsed command, the release) -> raw value.
CommandGetter = Callable[[serve_args.ServeArgs, releases.Version], Any]


@dataclass(frozen=True)
class Row:
    """One setting: where to look for it, in the order option > command > log > default.

    `flags` are looked up in the command in this order (the first given wins); `parse` reads an option's or
    a flag's text; `invalid` is vLLM's message for a flag value `parse` refuses; `cast` is applied to the
    chosen value whatever its source."""

    name: str
    option: str | None = None
    flags: tuple[str, ...] = ()
    log: str | LogGetter | None = None
    default: Any = None
    parse: Callable[[Any], Any] | None = None
    cast: Callable[[Any], Any] | None = None
    invalid: str = "argument {flag}: invalid value: {raw!r}"
    command: CommandGetter | None = None     #: instead of `flags`: a value the command implies another way
    log_first: bool = False                  #: the log's value is a fact that beats what the command asks for


def _log_weights(ctx: Any, _got: dict[str, Any], _v: releases.Version) -> float | None:
    return None if ctx.weights_gib is None else float(ctx.weights_gib) * mem.GIB


def _log_overhead(ctx: Any, _got: dict[str, Any], v: releases.Version) -> float | None:
    """The measured activation peak + non-torch memory (+ CUDA graphs from the release that budgets them)."""
    if ctx.activation_peak_gib is None:
        return None
    gib = float(ctx.activation_peak_gib) + float(ctx.non_torch_gib or 0)
    if graphs_budgeted(v) and ctx.cuda_graph_gib:
        gib += float(ctx.cuda_graph_gib)
    return gib * mem.GIB


def _log_kv_cache(ctx: Any, got: dict[str, Any], _v: releases.Version) -> float | None:
    """The KV memory vLLM measured, valid only for the utilization the log ran with."""
    if ctx.available_kv_cache_gib is None or got["gpu_memory_utilization"] != ctx.gpu_memory_utilization:
        return None
    return float(ctx.available_kv_cache_gib) * mem.GIB


def _command_engine(cmd: serve_args.ServeArgs, v: releases.Version) -> str | None:
    """VLLM_USE_V1=0/1 before the command, in the releases that read it."""
    use_v1 = cmd.env.get("VLLM_USE_V1")
    if use_v1 in ("0", "1") and releases.default("engine_env", v):
        return "V1" if use_v1 == "1" else "V0"
    return None


def _log_engine(ctx: Any, _got: dict[str, Any], _v: releases.Version) -> str | None:
    return ctx.engine if ctx.engine in ("V0", "V1") else None


def _dtype(value: Any) -> str:
    text = str(value)
    return {"half": "float16", "float": "float32"}.get(text, text)


#: Resolved top to bottom: a log getter may read the rows above it (the measured KV memory needs the utilization).
TABLE: tuple[Row, ...] = (
    Row("model", "model_ref", log="model", command=lambda cmd, _v: cmd.model),
    Row("gpu_memory_utilization", "gpu_memory_utilization",
        ("--gpu-memory-utilization", "--device-memory-utilization"), "gpu_memory_utilization", parse=float),
    Row("max_model_len", "max_model_len", ("--max-model-len",), "max_model_len", parse=parse_len,
        invalid="argument {flag}: invalid value: {raw!r} (write 16384 or 16K)"),
    Row("kv_cache_dtype", "kv_cache_dtype", ("--kv-cache-dtype",), "kv_cache_dtype", "auto", cast=str),
    Row("dtype", "dtype", ("--dtype",), "dtype", "auto", cast=_dtype),
    Row("quantization", "quantization", ("--quantization",), "quantization"),
    Row("tensor_parallel_size", "tensor_parallel_size", ("--tensor-parallel-size",), "tensor_parallel_size", 1,
        parse=int, cast=int),
    Row("pipeline_parallel_size", "pipeline_parallel_size", ("--pipeline-parallel-size",),
        "pipeline_parallel_size", 1, parse=int, cast=int),
    Row("enforce_eager", "enforce_eager", ("--enforce-eager",), "enforce_eager", False, cast=bool),
    Row("max_num_seqs", "max_num_seqs", ("--max-num-seqs",), "max_num_seqs", parse=int),
    Row("max_num_batched_tokens", "max_num_batched_tokens", ("--max-num-batched-tokens",),
        "max_num_batched_tokens", parse=parse_len),
    Row("weights", "weights", log=_log_weights, parse=parse_size),
    Row("overhead", "overhead", log=_log_overhead, parse=parse_size),
    Row("kv_cache", "kv_cache_memory_bytes", ("--kv-cache-memory-bytes",), log=_log_kv_cache, parse=_bytes_or_size,
        invalid="{exc}"),
    Row("cpu_offload", flags=("--cpu-offload-gb",), default=0.0, parse=parse_size, invalid="{exc}"),
    Row("engine", command=_command_engine, log=_log_engine, log_first=True),
)


@dataclass
class Resolved:
    """The effective settings and, for each, where it came from (OPTION, COMMAND, LOG or DEFAULT)."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def came_from(self, name: str) -> str:
        return self.sources.get(name, DEFAULT)


def _from_command(row: Row, cmd: serve_args.ServeArgs, values: dict[str, Any], v: releases.Version) -> Any:
    """The row's raw value in the command (the first of its flags given), read with `parse`."""
    if row.command is not None:
        return row.command(cmd, v)
    for flag in row.flags:
        raw = values.get(flag)
        if raw is None:
            continue
        if row.parse is None:
            return raw
        try:
            return row.parse(raw)
        except (ValueError, UsageError) as exc:
            raise VllmRejects(f"{cmd.prog}: error: " + row.invalid.format(flag=flag, raw=raw, exc=exc)) from None
    return None


def _from_log(row: Row, ctx: Any, got: dict[str, Any], v: releases.Version) -> Any:
    if ctx is None or row.log is None:
        return None
    return getattr(ctx, row.log, None) if isinstance(row.log, str) else row.log(ctx, got, v)


def resolve(opts: dict[str, Any], cmd: serve_args.ServeArgs, ctx: Any, version: releases.Version) -> Resolved:
    """Every row of TABLE: the first value found, in the order option > command > log > default (the log
    first for rows that say so), cast, with its source."""
    out = Resolved()
    values = cmd.values()
    for row in TABLE:
        option = opts.get(row.option) if row.option else None
        if option == "":
            option = None
        if option is not None and row.parse is not None and not isinstance(option, bool):
            option = row.parse(option)
        found = [(OPTION, option), (COMMAND, _from_command(row, cmd, values, version)),
                 (LOG, _from_log(row, ctx, out.values, version))]
        if row.log_first:
            found = [found[2], found[0], found[1]]
        source, value = next(((s, x) for s, x in found if x is not None), (DEFAULT, row.default))
        out.values[row.name] = row.cast(value) if row.cast is not None and value is not None else value
        out.sources[row.name] = source
    return out


def resolve_gpu(opts: dict[str, Any], ctx: Any) -> tuple[GpuSpec, str]:
    """The GPU: --gpu or --gpu-memory (not both), else the total memory the log printed; and its source."""
    if opts["gpu_name"] and opts["gpu_memory"]:
        raise UsageError("give --gpu or --gpu-memory, not both")
    if opts["gpu_name"]:
        return load_gpu(opts["gpu_name"]), OPTION
    if opts["gpu_memory"]:
        size = check_gpu_bytes(parse_size(opts["gpu_memory"]) or 0.0, f"--gpu-memory {opts['gpu_memory']}")
        return GpuSpec(f"{opts['gpu_memory']} GPU", size, None, "given with --gpu-memory"), OPTION
    total = getattr(ctx, "gpu_total_gib", None) if ctx is not None else None
    if total:
        return GpuSpec(f"{total} GiB GPU (from the log)", float(total) * mem.GIB, None,
                       "measured: total_gpu_memory in the log"), LOG
    raise MissingInput(NO_GPU)
