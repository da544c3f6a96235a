"""`vllm-doctor plan`: predict before launch whether a vLLM configuration starts, and size it.

Inputs and outputs only: every figure comes from memory.py (plan_memory / what_if), the model and GPU from
modelspec.py, the flag list from flags.py. A startup log (--log) replaces estimates with what vLLM measured.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import click
import jinja2

from . import memory as mem
from . import releases
from .errors import DoctorError, InputError, UsageError
from .flags import by_prefix, closest_flag, lookup, normalize
from .modelspec import GpuSpec, ModelSpec, load_gpu, load_model

KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
SIZE_UNITS = {
    "": mem.GIB, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
}
SIZE_NOTE = "sizes: 24GB = 24 x 10^9 bytes, 24GiB = 24 x 2^30, 24G (and a bare 24) are read as GiB like nvidia-smi"


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


# --- values the planner refuses (one line each, exit 2) ---------------------------------------------------------

#: Bounds a GPU's memory must fall in to be planned (a GiB to well above any accelerator sold).
GPU_GIB_RANGE = (1.0, 4096.0)
#: --max-model-len bounds: one token to far beyond any context window.
MAX_LEN_RANGE = (1, 1 << 31)
#: config.json numbers that must be positive for any transformer.
ARCH_POSITIVE = ("layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size")


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


def _batched_tokens(value: str | None) -> int | None:
    """--max-num-batched-tokens: an integer with vLLM's suffixes (8k = 8000, 8K = 8192), at least 1."""
    if value is None:
        return None
    try:
        n = parse_len(value)
    except Exception:  # noqa: BLE001 - click's or the project's UsageError, whichever parse_len raises
        raise click.BadParameter(f"{value!r} is not a token count (write 8192 or 8K)") from None
    if n < 1:
        raise click.BadParameter(f"{value!r}: at least 1 token")
    return n


# --- a whole `vllm serve ...` command line ----------------------------------------------------------------------

@dataclass
class ServeCommand:
    """What a `vllm serve` command line says, flag by flag, and what a real vLLM would say about it."""

    model: str | None = None
    values: dict[str, Any] = field(default_factory=dict)    # long flag -> value (True for switches)
    order: list[tuple[str, str | None]] = field(default_factory=list)  # (long flag, raw value) as given
    prog: str = "vllm serve"
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)    # VAR=value words before the command


class VllmRejects(UsageError):
    """What vLLM itself would refuse at the command line (argparse errors, invalid values): exit 2 for a command
    given on the planner's command line, "will not start" (exit 1 with --check) for a launch config file."""


class MissingInput(UsageError):
    """No model or no GPU to plan for (exit 2)."""


#: Unknown arguments named in the error (and looked up for a "did you mean"): the rest are counted.
MAX_UNKNOWN_SHOWN = 20


def parse_serve(tokens: list[str], version: tuple[int, int, int]) -> ServeCommand:
    """Parse `vllm serve MODEL --flag value --flag=value ...`; unknown flags fail like argparse would."""
    cmd = ServeCommand()
    toks = list(tokens)
    while toks and (toks[0] == "env" or re.fullmatch(r"[A-Za-z_]\w*=.*", toks[0])):
        if toks[0] != "env":
            key, _, val = toks[0].partition("=")
            cmd.env[key] = val
        toks = toks[1:]
    if toks and toks[0] in ("vllm", "vllm.exe") or toks and toks[0].endswith("/vllm"):
        toks = toks[1:]
        if toks and toks[0] == "serve":
            toks = toks[1:]
    elif toks and toks[0].startswith("python") and len(toks) >= 3 and toks[1] == "-m":
        cmd.prog = "api_server.py"
        toks = toks[3:]
    unknown: list[str] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            if cmd.model is None:
                cmd.model = tok
            else:
                unknown.append(tok)
            continue
        name, eq, raw = tok.partition("=")
        flag = lookup(name)
        if flag is None:
            flag = by_prefix(name)
            if flag is not None:
                cmd.notes.append(f"{name} is an abbreviation argparse accepts for {flag.name}")
        if flag is None:
            unknown.append(tok)
            continue
        if "_" in name.split(".", 1)[0] and name.startswith("--"):
            hyphen = normalize(name)
            if version < (0, 5, 1):
                cmd.notes.append(f"vLLM {'.'.join(map(str, version))} rejects {name}: "
                                 f"'{cmd.prog}: error: unrecognized arguments: {name}'; write {hyphen}")
                unknown.append(tok)
                continue
            cmd.notes.append(f"{name}: vLLM 0.1-0.5.0 would fail with '{cmd.prog}: error: unrecognized "
                             f"arguments: {name}'; from 0.5.1 vLLM accepts it as {hyphen}. Write {hyphen}.")
        if flag.until and version >= mem.version_tuple(flag.until):
            became = f"; use {flag.renamed_to}" if flag.renamed_to else ""
            raise VllmRejects(
                f"{cmd.prog}: error: unrecognized arguments: {name} ({flag.name} was removed in vLLM "
                f"{flag.until}{became}; planning for vLLM {'.'.join(map(str, version))}, see --vllm-version)")
        if flag.since and version < mem.version_tuple(flag.since):
            cmd.notes.append(f"{flag.name} only exists from vLLM {flag.since}")
        if flag.value:
            if not eq:
                if i >= len(toks):
                    raise VllmRejects(f"{cmd.prog}: error: argument {name}: expected one argument")
                raw = toks[i]
                i += 1
            value: Any = raw
        else:
            value = not name.startswith("--no-")
            raw = None
        if flag.name == "--model":
            cmd.model = str(value)
            continue
        cmd.values[flag.name] = value
        cmd.order.append((flag.name, raw))
    if unknown:
        shown = unknown[:MAX_UNKNOWN_SHOWN]
        more = f" ... and {len(unknown) - len(shown)} more" if len(unknown) > len(shown) else ""
        msg = f"{cmd.prog}: error: unrecognized arguments: {' '.join(shown)}{more}"
        hints = []
        for tok in shown:
            if tok.startswith("--"):
                guess, score = closest_flag(tok.split("=", 1)[0])
                if guess and score >= 70:
                    hints.append(f"did you mean {guess}?")
        raise VllmRejects(msg + (" (" + "; ".join(hints) + ")" if hints else ""))
    return cmd


def render_command(model: str, order: list[tuple[str, str | None]], changes: dict[str, str | None]) -> str:
    """The corrected `vllm serve` command: the given flags (hyphen spelling) with `changes` applied."""
    parts = ["vllm", "serve", shlex.quote(model)]
    done: set[str] = set()
    for flag, raw in order:
        if flag in changes:
            if flag in done:
                continue
            done.add(flag)
            raw = changes[flag]
            if raw == "":
                continue
        parts.append(flag if raw is None else f"{flag} {shlex.quote(str(raw))}")
    for flag, raw in changes.items():
        if flag not in done and raw != "":
            parts.append(flag if raw is None else f"{flag} {shlex.quote(str(raw))}")
    return " ".join(parts)


# --- messages vLLM would print -----------------------------------------------------------------------------------

@dataclass
class Verdict:
    starts: bool
    stage: str | None
    message: str | None
    why: str


def _ver(v: tuple[int, int, int]) -> str:
    return ".".join(str(x) for x in v)


def kv_message(res: mem.PlanResult, v: tuple[int, int, int]) -> str:
    """A1/A2 wording of the release planned for."""
    ml, need, avail = res.max_model_len, res.request_kv_bytes, res.kv_cache_bytes
    if avail <= 0:
        tail = ""
        if (0, 13, 0) <= v <= (0, 21, 0):
            tail = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        elif v >= (0, 22, 0):
            tail = (" (this flag also controls CPU memory reservation on the CPU backend, despite its name)."
                    " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
            return ("ValueError: No available memory for the cache blocks. Try increasing "
                    "`gpu_memory_utilization` when initializing the engine" + tail)
        return ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine." + tail)
    est = mem.max_model_len_for(res.inp.arch, avail, ml, tp=res.inp.tensor_parallel_size,
                                pp=res.inp.pipeline_parallel_size, kv_bytes=res.kv_value_bytes,
                                max_num_batched_tokens=res.max_num_batched_tokens)
    if mem.engine_for(v, res.inp.engine) == "V0":
        return (f"ValueError: The model's max seq len ({ml}) is larger than the maximum number of tokens that "
                f"can be stored in KV cache ({res.kv_cache_tokens}). Try increasing `gpu_memory_utilization` "
                f"or decreasing `max_model_len` when initializing the engine.")
    docs = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    if v < (0, 14, 0):
        unit = "GB" if v < (0, 8, 3) else "GiB"
        est_msg = (f" Based on the available memory, the estimated maximum model length is {est}."
                   if est >= 1 and v >= (0, 9, 1) else "")
        return (f"ValueError: To serve at least one request with the models's max seq len ({ml}), "
                f"({need / mem.GIB:.2f} {unit} KV cache is needed, which is larger than the available KV cache "
                f"memory ({avail / mem.GIB:.2f} {unit}).{est_msg} Try increasing `gpu_memory_utilization` or "
                f"decreasing `max_model_len` when initializing the engine." + (docs if v >= (0, 13, 0) else ""))
    est_msg = f"Based on the available memory, the estimated maximum model length is {est}. " if est >= 1 else ""
    whose, cpu = ("models's", "") if v < (0, 22, 0) else ("model's", " (which also controls CPU memory on the "
                                                                        "CPU backend)")
    return (f"ValueError: To serve at least one request with the {whose} max seq len ({ml}), "
            f"({mem.format_gib(need)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({mem.format_gib(avail)} GiB). {est_msg}Try increasing `gpu_memory_utilization`{cpu} or "
            f"decreasing `max_model_len` when initializing the engine." + docs)


def verdict_for(res: mem.PlanResult, gpu: GpuSpec, v: tuple[int, int, int], dtype: str,
                max_len_given: bool) -> Verdict:
    """Does it start? The first check vLLM would fail, in start-up order."""
    arch = res.inp.arch
    tp = res.inp.tensor_parallel_size
    limit = arch.max_position_embeddings
    if max_len_given and limit and res.max_model_len > limit:
        return Verdict(False, "config", (
            f"ValueError: User-specified max_model_len ({res.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={limit} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. ..."),
            f"--max-model-len {res.max_model_len} is above the model's {limit} positions")
    if arch.num_attention_heads % tp:
        return Verdict(False, "config", (
            f"ValueError: Total number of attention heads ({arch.num_attention_heads}) must be divisible by "
            f"tensor parallel size ({tp})."), f"{arch.num_attention_heads} heads do not split over {tp} GPUs")
    cc = gpu.compute_capability
    bf16 = dtype == "bfloat16" or (dtype == "auto" and v < (0, 9, 1) and mem.dtype_bytes(arch.torch_dtype) == 2
                                   and "bf" in arch.torch_dtype)
    if gpu.platform == "cuda" and cc and bf16 and mem.version_tuple(cc) < (8, 0, 0):
        return Verdict(False, "worker_init", (
            f"ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
            f"{gpu.name} GPU has compute capability {cc}. You can use float16 instead by explicitly setting "
            "the `dtype` flag in CLI, for example: --dtype=half."), f"{gpu.name} (sm {cc}) has no bfloat16")
    if res.weights_bytes > gpu.memory_bytes:
        return Verdict(False, "weight_loading", (
            "torch.OutOfMemoryError: CUDA out of memory. (while loading weights: "
            f"{res.weights_bytes / mem.GIB:.2f} GiB of weights on a {gpu.memory_bytes / mem.GIB:.2f} GiB GPU)"),
            "the weights alone are larger than the GPU")
    if not res.fits:
        why = ("weights and overhead use the whole share, nothing is left for the KV cache"
               if res.kv_cache_bytes <= 0 else
               f"one request of {res.max_model_len:,} tokens needs {res.request_kv_bytes / mem.GIB:.2f} GiB of KV "
               f"cache; only {res.kv_cache_bytes / mem.GIB:.2f} GiB is left")
        return Verdict(False, "kv_cache_allocation", kv_message(res, v), why)
    return Verdict(True, None, None, f"{res.max_concurrency:.2f} requests of {res.max_model_len:,} tokens fit at once")


# --- the command -----------------------------------------------------------------------------------------------

def _template() -> jinja2.Template:
    text = resources.files("diagnoser").joinpath("templates/plan.txt.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["gb"] = lambda b: f"{b / mem.GB:,.2f}"
    env.filters["gib"] = lambda b: f"{b / mem.GIB:,.2f}"
    env.filters["tokens"] = mem.human_tokens
    from . import templatecache  # the compiled report is cached across runs: its compilation is most of a plan

    return templatecache.from_string(env, text, (__file__,))


def _from_log(path: str) -> Any:
    from .reader import read_lines
    from .tracker import Tracker

    tracker = Tracker()
    try:
        with open(path, "rb") as fh:
            for line in read_lines(fh):
                tracker.observe(line)
    except OSError as exc:
        raise click.UsageError(f"--log {path}: cannot read ({exc.strerror or exc})") from None
    return tracker.context


def _pick(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


@click.command("plan", context_settings={"ignore_unknown_options": False, "help_option_names": ["-h", "--help"]})
@click.option("--model", "-m", "model_ref", help="config.json path, a folder with one, a repo id or a preset name.")
@click.option("--gpu", "gpu_name", help="GPU preset (T4, L4, A10G, RTX 3090, RTX 4090, L40S, A100-40GB, "
              "A100-80GB, H100, H200, B200, MI300X, ...).")
@click.option("--gpu-memory", "gpu_memory", help="GPU memory instead of a preset: 24GB (10^9), 24GiB (2^30), "
              "24G (= GiB), 22528MiB.")
@click.option("--gpu-memory-utilization", type=float, help="vLLM's flag (default 0.92 from 0.20, 0.9 before).")
@click.option("--max-model-len", help="vLLM's flag (default: the model's maximum); 16384 or 16K.")
@click.option("--kv-cache-dtype", type=click.Choice(KV_DTYPES), help="vLLM's flag (default auto = model dtype).")
@click.option("--dtype", type=click.Choice(["auto", "half", "float16", "bfloat16", "float", "float32"]),
              help="vLLM's flag (default auto).")
@click.option("--quantization", "-q", help="vLLM's flag (awq, gptq, fp8, compressed-tensors, bitsandbytes, ...).")
@click.option("--tensor-parallel-size", "-tp", type=click.IntRange(1), help="vLLM's flag (default 1).")
@click.option("--pipeline-parallel-size", "-pp", type=click.IntRange(1), help="vLLM's flag (default 1).")
@click.option("--max-num-seqs", type=click.IntRange(1), help="vLLM's flag (default: per release and GPU).")
@click.option("--max-num-batched-tokens", callback=lambda _c, _p, v: _batched_tokens(v),
              help="vLLM's flag (default: per release); 8192 or 8K.")
@click.option("--enforce-eager", is_flag=True, default=None, help="vLLM's flag: no CUDA graphs.")
@click.option("--weights", help="Weight memory per GPU (replaces the estimate), e.g. 16GB.")
@click.option("--overhead", help="Activations + CUDA graphs + non-torch memory (replaces the estimate).")
@click.option("--vllm-version", default="latest", show_default=True,
              help="Release whose defaults and formulas to use (e.g. 0.7.3); a list (0.7.3,0.8.2) plans each "
              "release side by side with what moved and the fix.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), help="A startup log: its measured numbers "
              "replace the estimates.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--check", is_flag=True, help="CI gate: exit 1 when it will not start or concurrency is below "
              "--min-concurrency; 0 otherwise.")
@click.option("--min-concurrency", type=float, default=None, help="Requests of --max-model-len that must fit "
              "at once (with --check).")
@click.option("--from-file", "from_file", is_flag=True, help="The arguments are launch config files: shell "
              "scripts running `vllm serve` (also Dockerfiles, compose files, Kubernetes manifests) or vLLM YAML "
              "configs (`vllm serve --config`). A comment `# vllm-doctor: gpu=L4` in a file pins its GPU.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def plan(**opts: Any) -> None:
    """Predict whether a vLLM configuration starts, and size its KV cache.

    \b
      vllm-doctor plan --model llama-3.1-8b --gpu L4 --max-model-len 16384
      vllm-doctor plan --gpu L4 -- vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384
      vllm-doctor plan --log server.log          measured numbers replace the estimates
      vllm-doctor plan --check --gpu L4 --from-file deploy/serve-vllm.sh deploy/vllm.yaml
    """
    try:
        code = run_plan(opts)
    except DoctorError as exc:   # the library's own errors become click's usage errors only here (exit 2)
        raise click.UsageError(str(exc)) from None
    sys.exit(code)


def run_plan(opts: dict[str, Any]) -> int:
    """The plan command's body; returns the exit code."""
    if opts.get("from_file"):
        if "," in str(opts["vllm_version"]):
            raise click.UsageError("--vllm-version with a list of releases plans one configuration; "
                                   "give one release with --from-file")
        return run_from_files(opts)
    tokens = list(opts["command"] or ())
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    first = next((t for t in tokens if not re.fullmatch(r"[A-Za-z_]\w*=.*|env", t)), "")
    if tokens and not (first in ("vllm", "python", "python3") or first.endswith("/vllm")):
        raise click.UsageError(f"unexpected argument {first!r}; put a vLLM command after '--' "
                               "(vllm-doctor plan --gpu L4 -- vllm serve MODEL ...), or plan launch config "
                               "files with --from-file")
    if "," in str(opts["vllm_version"]):
        return run_release_plans(opts, tokens)
    planned = plan_config(opts, tokens)
    if opts["fmt"] == "json":
        click.echo(json.dumps(planned.data, indent=2))
    else:
        click.echo(planned.text, nl=False)
    if opts["check"]:
        return 0 if planned.ok else 1
    return 0


def run_release_plans(opts: dict[str, Any], tokens: list[str]) -> int:
    """`--vllm-version 0.7.3,0.8.2`: one plan per release, side by side, with what moved and the fix."""
    from .compare import compare_plans
    from .report.compare import renderer as compare_renderer

    versions = [v.strip() for v in str(opts["vllm_version"]).split(",") if v.strip()]
    for v in versions:
        releases.parse_release(v)
    planned = [plan_config({**opts, "vllm_version": v}, tokens) for v in versions]
    comparison = compare_plans(planned)
    notes = []
    for one, last in zip(comparison.pairs, planned[1:], strict=True):
        if not one.fixes:
            continue
        changes = {f.flag: f.value for f in one.fixes}
        if tokens:
            cmd = parse_serve(tokens, last.res.inp.version)
            one.command = render_command(cmd.model or last.data["model"], list(cmd.order), changes)
        else:
            one.command = render_command(last.data["model"], _order_from(last.res.inp, last.res, opts), changes)
        # the fix checked by the planner itself: the same release with the fixed flags
        cleared = {**opts, "vllm_version": last.data["vllm_version"],
                   **{f.flag.lstrip("-").replace("-", "_"): None for f in one.fixes}}
        again = plan_config(cleared, shlex.split(one.command))
        notes.append(f"Planned again with the fix: vLLM {last.data['vllm_version']} "
                     + (f"starts, {again.res.kv_cache_bytes / mem.GIB:.2f} GiB of KV cache "
                        f"({again.res.kv_cache_tokens:,} tokens)." if again.verdict.starts
                        else f"still does not start ({again.verdict.why})."))
    if opts["fmt"] == "json":
        doc = comparison.as_json()
        click.echo(json.dumps({"schema_version": 1, "plans": [p.data for p in planned],
                               **{k: doc[k] for k in ("changes", "summary", "fixes", "command", "alternatives")},
                               "checked": notes}, indent=2))
    else:
        click.echo(compare_renderer("text")(comparison, {}), nl=False)
        for note in notes:
            click.echo(note)
    if opts["check"]:
        return 0 if all(p.ok for p in planned) else 1
    return 0


@dataclass
class Planned:
    """One planned configuration: the JSON data, the text report, and whether --check passes."""

    data: dict[str, Any]
    text: str
    ok: bool
    verdict: Verdict
    res: mem.PlanResult


def plan_config(opts: dict[str, Any], tokens: list[str], extra_notes: list[str] | tuple[str, ...] = ()
                ) -> Planned:
    """Plan one configuration: the planner's options, and a `vllm serve ...` command line (may be empty)."""
    version = releases.parse_release(opts["vllm_version"])
    cmd = parse_serve(tokens, version) if tokens else ServeCommand()
    cv = cmd.values
    ctx = _from_log(opts["log_path"]) if opts["log_path"] else None
    if ctx is not None and opts["vllm_version"] == "latest" and ctx.version:
        version = mem.version_tuple(ctx.version)
    lg = (lambda name: getattr(ctx, name, None)) if ctx is not None else (lambda name: None)

    model_ref = _pick(opts["model_ref"], cmd.model, lg("model"))
    if not model_ref:
        raise MissingInput("no model: give --model NAME (a preset, repo id or config.json), a "
                           "`-- vllm serve MODEL ...` command, or a --log that names it")
    spec: ModelSpec = load_model(str(model_ref))
    check_arch(spec, str(model_ref))
    if opts["gpu_name"] and opts["gpu_memory"]:
        raise click.UsageError("give --gpu or --gpu-memory, not both")
    if opts["gpu_name"]:
        gpu = load_gpu(opts["gpu_name"])
    elif opts["gpu_memory"]:
        gpu = GpuSpec(f"{opts['gpu_memory']} GPU", check_gpu_bytes(parse_size(opts["gpu_memory"]) or 0.0,
                                                                    f"--gpu-memory {opts['gpu_memory']}"),
                      None, "given with --gpu-memory")
    elif lg("gpu_total_gib"):
        gpu = GpuSpec(f"{lg('gpu_total_gib')} GiB GPU (from the log)", float(lg("gpu_total_gib")) * mem.GIB, None,
                      "measured: total_gpu_memory in the log")
    else:
        raise MissingInput("no GPU: give --gpu NAME (e.g. L4, A100-80GB, H100) or --gpu-memory SIZE (e.g. 24GiB)")

    def num(flag: str, conv: Any) -> Any:
        raw = cv.get(flag)
        if raw is None:
            return None
        try:
            return conv(raw)
        except (ValueError, UsageError):
            raise VllmRejects(f"{cmd.prog}: error: argument {flag}: invalid value: {raw!r}") from None

    util = _pick(opts["gpu_memory_utilization"], num("--gpu-memory-utilization", float),
                 num("--device-memory-utilization", float), lg("gpu_memory_utilization"))
    max_len_raw = _pick(opts["max_model_len"], cv.get("--max-model-len"))
    try:
        max_len = parse_len(max_len_raw) if max_len_raw is not None else lg("max_model_len")
    except UsageError:
        if opts["max_model_len"] is None:
            raise VllmRejects(f"{cmd.prog}: error: argument --max-model-len: invalid value: {max_len_raw!r} "
                              "(write 16384 or 16K)") from None
        raise
    check_max_len(max_len)
    auto_len = str(max_len_raw).strip().lower() in ("auto", "-1") if max_len_raw is not None else False
    if max_len is not None and max_len <= 0:
        max_len = None  # -1 / auto: vLLM fits the length to memory (mem.PlanInput.max_model_len_auto)
    kv_dtype = _pick(opts["kv_cache_dtype"], cv.get("--kv-cache-dtype"), lg("kv_cache_dtype"), "auto")
    dtype = str(_pick(opts["dtype"], cv.get("--dtype"), lg("dtype"), "auto"))
    dtype = {"half": "float16", "float": "float32"}.get(dtype, dtype)
    quant = _pick(opts["quantization"], cv.get("--quantization"), lg("quantization"))
    tp = int(_pick(opts["tensor_parallel_size"], num("--tensor-parallel-size", int), lg("tensor_parallel_size"), 1))
    pp = int(_pick(opts["pipeline_parallel_size"], num("--pipeline-parallel-size", int),
                   lg("pipeline_parallel_size"), 1))
    eager = bool(_pick(opts["enforce_eager"], cv.get("--enforce-eager"), lg("enforce_eager"), False))
    seqs = _pick(opts["max_num_seqs"], num("--max-num-seqs", int), lg("max_num_seqs"))
    batched = _pick(opts["max_num_batched_tokens"], num("--max-num-batched-tokens", parse_len),
                    lg("max_num_batched_tokens"))
    if isinstance(batched, str):
        batched = parse_len(batched)
    engine = None
    use_v1 = cmd.env.get("VLLM_USE_V1")
    if use_v1 in ("0", "1") and releases.default("engine_env", version):
        engine = "V1" if use_v1 == "1" else "V0"
    if ctx is not None and ctx.engine in ("V0", "V1"):
        engine = ctx.engine
    weights = parse_size(opts["weights"]) if opts["weights"] else None
    overhead = parse_size(opts["overhead"]) if opts["overhead"] else None
    try:
        kv_fixed = parse_size(cv["--kv-cache-memory-bytes"]) if cv.get("--kv-cache-memory-bytes") else None
        if kv_fixed is not None and re.fullmatch(r"\d+", str(cv["--kv-cache-memory-bytes"])):
            kv_fixed = float(cv["--kv-cache-memory-bytes"])
        offload = parse_size(cv["--cpu-offload-gb"]) if cv.get("--cpu-offload-gb") else 0.0
    except UsageError as exc:
        raise VllmRejects(f"{cmd.prog}: error: {exc}") from None
    measured: dict[str, float] = {}
    if ctx is not None:
        if weights is None and lg("weights_gib") is not None:
            weights = float(lg("weights_gib")) * mem.GIB
            measured["weights"] = weights
        if overhead is None and lg("activation_peak_gib") is not None:
            overhead = (float(lg("activation_peak_gib")) + float(lg("non_torch_gib") or 0)) * mem.GIB
            if mem.graphs_budgeted(version) and lg("cuda_graph_gib"):
                overhead += float(lg("cuda_graph_gib")) * mem.GIB
            measured["overhead"] = overhead
        if lg("available_kv_cache_gib") is not None and util == lg("gpu_memory_utilization"):
            measured["kv_cache"] = float(lg("available_kv_cache_gib")) * mem.GIB
    if not (0 < (util if util is not None else 0.5) <= 1):
        raise VllmRejects(f"--gpu-memory-utilization {util}: must be above 0 and at most 1")
    if quant and spec.arch.quantization and quant != spec.arch.quantization:
        spec.notes.append(f"--quantization {quant} replaces the checkpoint's {spec.arch.quantization}")
    inp = mem.PlanInput(
        arch=spec.arch, gpu_bytes=gpu.memory_bytes, gpu_name=gpu.name, gpu_memory_utilization=util,
        max_model_len=max_len, kv_cache_dtype=str(kv_dtype), dtype=dtype, quantization=quant,
        quant_bits=None,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, max_num_seqs=seqs,
        max_num_batched_tokens=batched, enforce_eager=eager, weights=weights, overhead=overhead,
        kv_cache_bytes=kv_fixed if kv_fixed is not None else measured.get("kv_cache"),
        kv_cache_fixed=kv_fixed is not None, cpu_offload_bytes=offload or 0.0, version=version, engine=engine,
        **mem.serve_extras(cv, cmd.env, auto_len),
    )
    if quant and quant == spec.arch.quantization:
        inp.quant_bits = spec.arch.quant_bits
    res = mem.plan_memory(inp)
    for key in ("weights", "overhead", "kv_cache"):
        if key in measured and res.sources.get(key) in ("given", "measured"):
            res.sources[key] = "measured (log)"
    verdict = verdict_for(res, gpu, version, dtype, max_len is not None)
    min_conc = opts["min_concurrency"]
    rows = mem.what_if(inp, res)
    lengths = mem.length_table(inp, res)
    changes, fix_note = suggest_changes(res, verdict, rows, min_conc)
    model_for_cmd = cmd.model or (str(model_ref) if spec.source.startswith("config.json") else spec.arch.name)
    order = list(cmd.order)
    if not order:
        order = _order_from(inp, res, opts)
    # a suggestion that changes nothing would repeat the failing command: say what to do instead
    command = render_command(model_for_cmd, order, changes) if changes or fix_note == "no change needed" else None
    assumptions = assumptions_for(spec, gpu, res, inp, version, measured, kv_fixed, cmd, max_len is None)
    ok = verdict.starts and (min_conc is None or res.max_concurrency >= min_conc)
    data = {
        "model": spec.arch.name, "model_source": spec.source, "gpu": gpu.name,
        "gpu_memory_bytes": int(gpu.memory_bytes), "vllm_version": _ver(version),
        "engine": mem.engine_for(version, engine),
        "gpu_memory_utilization": res.gpu_memory_utilization, "max_model_len": res.max_model_len,
        "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "kv_cache_dtype": kv_dtype, "dtype": dtype,
        "quantization": quant or spec.arch.quantization, "max_num_seqs": res.max_num_seqs,
        "max_num_batched_tokens": res.max_num_batched_tokens, "enforce_eager": eager,
        "kv_bytes_per_token": res.kv_bytes_per_token, "budget_bytes": int(res.budget_bytes),
        # what vLLM's own figures leave between the share and weights + overhead + KV: the table adds up
        "other_bytes": int(res.budget_bytes - res.weights_bytes - res.overhead_bytes - res.kv_cache_bytes),
        "weights_bytes": int(res.weights_bytes), "overhead_bytes": int(res.overhead_bytes),
        "overhead_parts": {"activations": int(res.activation_bytes), "non_torch": int(res.non_torch_bytes),
                           "cuda_graphs": int(res.cuda_graph_bytes),
                           "cuda_graphs_in_budget": res.graphs_in_budget},
        "kv_cache_bytes": int(res.kv_cache_bytes), "kv_cache_tokens": res.kv_cache_tokens,
        "request_kv_bytes": res.request_kv_bytes, "fits": res.fits and verdict.starts,
        "starts": verdict.starts, "stage": verdict.stage, "vllm_message": verdict.message, "why": verdict.why,
        "max_model_len_that_fits": res.max_model_len_that_fits,
        "max_concurrency": round(res.max_concurrency, 4), "min_concurrency": min_conc,
        "check_passed": ok, "sources": res.sources,
        "measured": {"kv_cache_tokens": lg("kv_cache_tokens") or (lg("num_gpu_blocks") or 0) * (lg("block_size") or 16)
                     or None, "max_concurrency": lg("max_concurrency"),
                     "available_kv_cache_gib": lg("available_kv_cache_gib"), "weights_gib": lg("weights_gib")}
        if ctx is not None else None,
        "assumptions": assumptions, "what_if": rows, "lengths": lengths, "command": command,
        "command_note": fix_note, "notes": [*extra_notes, *cmd.notes, *spec.notes],
    }
    text = ""
    if opts["fmt"] != "json":
        text = _template().render(d=data, res=res, inp=inp, arch=spec.arch, gpu=gpu, verdict=verdict,
                                  formula=kv_formula(res, inp), mem=mem)
    return Planned(data, text, ok, verdict, res)


# --- --from-file: launch config files (the pre-commit hook) -----------------------------------------------------

NO_GPU_HINT = ("give --gpu NAME or --gpu-memory SIZE on the command line (in the pre-commit hook: "
               "args: [--gpu, L4]), or pin it in the file with a comment '# vllm-doctor: gpu=L4'")


def _file_opts(opts: dict[str, Any], pins: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The planner's options for one file: its `# vllm-doctor:` pins win over the command line."""
    out = dict(opts)
    source = "command line"
    if "gpu" in pins or "gpu-memory" in pins:
        if "gpu" in pins and "gpu-memory" in pins:
            raise click.UsageError("the vllm-doctor comment pins both gpu= and gpu-memory=; keep one")
        out["gpu_name"], out["gpu_memory"] = pins.get("gpu"), pins.get("gpu-memory")
        source = "pinned in the file"
        if out["gpu_name"]:
            load_gpu(out["gpu_name"])
        else:
            parse_size(out["gpu_memory"])
    if "model" in pins:
        out["model_ref"] = pins["model"]
    if "vllm-version" in pins:
        if not re.fullmatch(r"\d+(\.\d+){0,2}|latest", pins["vllm-version"]):
            raise click.UsageError(f"vllm-version={pins['vllm-version']} in the vllm-doctor comment is not a "
                                   "release number (write vllm-version=0.8.5)")
        out["vllm_version"] = pins["vllm-version"]
    return out, source


def _summary_line(label: str, entry: dict[str, Any]) -> str:
    """`path: starts, 1.87 requests of 16,384 at once (L4)` / `path: will not start: why (L4)`."""
    gpu = f" ({entry['gpu']})" if entry.get("gpu") else ""
    if not entry["starts"]:
        return f"{label}: will not start: {entry['why']}{gpu}"
    conc, length = entry["max_concurrency"], entry["max_model_len"]
    if not entry["check_passed"]:
        return (f"{label}: starts, but only {conc:.2f} requests of {length:,} at once, below --min-concurrency "
                f"{entry['min_concurrency']:g}{gpu}")
    return f"{label}: starts, {conc:.2f} requests of {length:,} at once{gpu}"


def _message(exc: Exception) -> str:
    """One line for a file's error, whichever layer raised it."""
    return exc.format_message() if isinstance(exc, click.ClickException) else str(exc)


def run_from_files(opts: dict[str, Any]) -> int:
    """`plan --from-file FILE...`: plan every vLLM launch in the files; exit 2 > 1 > 0 over all of them."""
    from .launch import LaunchFileError, read_launch_file

    paths = [p for p in (opts["command"] or ()) if p != "--"]
    if not paths:
        raise click.UsageError("--from-file: give one or more launch config files (a `vllm serve` script, "
                               "a vLLM YAML config, ...)")
    if opts["gpu_name"] and opts["gpu_memory"]:
        raise click.UsageError("give --gpu or --gpu-memory, not both")
    if opts["gpu_name"]:
        load_gpu(opts["gpu_name"])                  # an unknown name: one error, not one per file
    if opts["gpu_memory"]:
        parse_size(opts["gpu_memory"])
    util = opts["gpu_memory_utilization"]
    if util is not None and not 0 < util <= 1:
        raise click.UsageError(f"--gpu-memory-utilization {util}: must be above 0 and at most 1")
    if opts["max_model_len"] is not None:
        parse_len(opts["max_model_len"])

    entries: list[dict[str, Any]] = []
    reports: list[str] = []
    summaries: list[str] = []
    errors = failed = False
    text, check = opts["fmt"] != "json", opts["check"]

    def error(label: str, message: str) -> None:
        nonlocal errors
        errors = True
        click.echo(f"vllm-doctor: error: {label}: {message}", err=True)
        entries.append({"file": label, "error": message})

    for path in paths:
        try:
            lf = read_launch_file(path)
        except LaunchFileError as exc:
            error(path, str(exc))
            continue
        if lf.skip_reason:
            click.echo(f"vllm-doctor: {path}: skipped: {lf.skip_reason}", err=True)
            entries.append({"file": path, "skipped": lf.skip_reason})
            continue
        try:
            fopts, gpu_source = _file_opts(opts, lf.pins)
        except (click.ClickException, DoctorError) as exc:
            error(path, _message(exc))
            continue
        if not (fopts["gpu_name"] or fopts["gpu_memory"] or fopts["log_path"]):
            error(path, f"no GPU to plan for: {NO_GPU_HINT}")
            continue
        for launch in lf.launches:
            label = path if len(lf.launches) == 1 else f"{path}:{launch.line}"
            where = {"file": path, "line": launch.line, "kind": launch.kind, "gpu_source": gpu_source}
            lopts, notes = fopts, list(launch.notes)
            if launch.image_version and fopts["vllm_version"] == "latest":
                lopts = {**fopts, "vllm_version": launch.image_version}
                notes.append(f"planned for vLLM {launch.image_version}, the release of the image {launch.image}")
            try:
                planned = plan_config(lopts, launch.tokens, notes)
            except VllmRejects as exc:
                entry = {**where, "starts": False, "fits": False, "stage": "cli", "check_passed": False,
                         "vllm_message": str(exc), "why": str(exc),
                         "notes": notes, "gpu": fopts["gpu_name"] or fopts["gpu_memory"]}
                failed = True
                entries.append(entry)
                summaries.append(_summary_line(label, entry))
                reports.append("\n".join([summaries[-1], *(f"  note: {n}" for n in notes)]) +
                               ("" if check else "\n"))
                continue
            except MissingInput as exc:
                msg = str(exc)
                if msg.startswith("no model"):
                    msg = ("no model to plan: the launch names none, or only a variable; pin it with a comment "
                           "'# vllm-doctor: model=NAME' (a preset, repo id or config.json path) or give --model")
                error(label, msg)
                continue
            except (click.ClickException, DoctorError) as exc:
                msg = _message(exc)
                if msg.startswith("unknown model"):
                    msg += " Or pin the architecture with a comment '# vllm-doctor: model=NAME'."
                error(label, msg)
                continue
            entry = {**where, **planned.data}
            entries.append(entry)
            failed = failed or not planned.ok
            if not text:
                continue
            line = _summary_line(label, entry)
            summaries.append(line)
            if check:
                extra = []
                if not planned.ok and planned.data["command_note"] != "no change needed":
                    extra.append(f"  fix ({planned.data['command_note']})" +
                                 (f": {planned.data['command']}" if planned.data["command"] else ""))
                extra += [f"  note: {n}" for n in notes]
                reports.append("\n".join([line, *extra]))
            else:
                reports.append(f"== {line}\n\n{planned.text.rstrip()}\n")
    if not text:
        click.echo(json.dumps(entries, indent=2))
    elif reports:
        click.echo("\n".join(reports))
        if not check and len(summaries) > 1:
            click.echo("Summary:\n" + "\n".join(f"  {line}" for line in summaries))
    if errors:
        return 2
    return 1 if check and failed else 0


def _order_from(inp: mem.PlanInput, res: mem.PlanResult, opts: dict[str, Any]) -> list[tuple[str, str | None]]:
    """Flags for a command built from the planner's own options."""
    out: list[tuple[str, str | None]] = []
    if inp.tensor_parallel_size > 1:
        out.append(("--tensor-parallel-size", str(inp.tensor_parallel_size)))
    if inp.pipeline_parallel_size > 1:
        out.append(("--pipeline-parallel-size", str(inp.pipeline_parallel_size)))
    if inp.gpu_memory_utilization is not None:
        out.append(("--gpu-memory-utilization", f"{inp.gpu_memory_utilization:g}"))
    if inp.max_model_len is not None:
        out.append(("--max-model-len", str(inp.max_model_len)))
    if inp.kv_cache_dtype != "auto":
        out.append(("--kv-cache-dtype", inp.kv_cache_dtype))
    if inp.dtype != "auto":
        out.append(("--dtype", inp.dtype))
    if inp.quantization:
        out.append(("--quantization", inp.quantization))
    if opts.get("max_num_seqs"):
        out.append(("--max-num-seqs", str(opts["max_num_seqs"])))
    if opts.get("max_num_batched_tokens"):
        out.append(("--max-num-batched-tokens", str(opts["max_num_batched_tokens"])))
    if inp.enforce_eager:
        out.append(("--enforce-eager", None))
    return out


#: A quantization fix is another checkpoint, never a flag on this one (vLLM reads the method from its config).
QUANTIZED_CHECKPOINT_NOTE = ("load a 4-bit checkpoint of this model instead (on the Hub usually ORG/NAME-AWQ, "
                             "NAME-GPTQ-Int4 or NAME-AWQ-INT4); vLLM reads the method from its config, so no "
                             "--quantization flag is added to this one")


def suggest_changes(res: mem.PlanResult, verdict: Verdict, rows: list[dict[str, Any]],
                    min_conc: float | None) -> tuple[dict[str, str | None], str]:
    """Flag changes that make the configuration start (and reach --min-concurrency)."""
    want = min_conc or 1.0
    if verdict.starts and res.max_concurrency >= want:
        return {}, "no change needed"
    if verdict.stage == "config" and "max_model_len" in (verdict.message or "") and \
            res.inp.arch.max_position_embeddings:
        return {"--max-model-len": str(res.inp.arch.max_position_embeddings)}, "the model's own maximum length"
    if verdict.stage == "config":
        return {}, "pick a --tensor-parallel-size that divides the attention heads"
    if verdict.stage == "worker_init":
        return {"--dtype": "half"}, "float16 instead of bfloat16 on this GPU"
    if res.kv_cache_bytes > 0 and verdict.stage != "weight_loading":
        length = mem.len_for_concurrency(res, want)
        if length >= mem.LEN_STEP:
            return {"--max-model-len": str(length)}, (
                f"largest --max-model-len (multiple of 1024) with {want:g} request(s) at once")
    for row in rows:
        if row["fits"] and row["max_concurrency"] >= want and row.get("flags"):
            return dict(row["flags"]), f"what-if '{row['label']}'"
        if row["fits"] and row["max_concurrency"] >= want and row["label"].startswith("4-bit"):
            return {}, QUANTIZED_CHECKPOINT_NOTE
    return {}, "no single change in the what-if table is enough: see the table"


def kv_formula(res: mem.PlanResult, inp: mem.PlanInput) -> str:
    """The bytes-per-token product, spelled out."""
    a = inp.arch
    tp, pp = inp.tensor_parallel_size, inp.pipeline_parallel_size
    layers = sum(1 for k in mem.stage_kinds(a, pp) if k != "linear")
    vb = f"{res.kv_value_bytes:g} byte{'s' if res.kv_value_bytes != 1 else ''}"
    if a.is_mla:
        return (f"MLA: {layers} layers x ({a.kv_lora_rank} kv_lora_rank + {a.qk_rope_head_dim} rope dim) x {vb}"
                f"; one latent per layer, the same on every TP rank")
    heads = mem.kv_heads_per_rank(a.num_key_value_heads, tp)
    split = ""
    if tp > 1:
        split = (f" ({a.num_key_value_heads} KV heads / TP {tp}" +
                 (", replicated: fewer KV heads than ranks)" if a.num_key_value_heads < tp else ")"))
    return f"2 x {layers} layers x {heads} KV heads{split} x {a.head_size} head dim x {vb}"


def assumptions_for(spec: ModelSpec, gpu: GpuSpec, res: mem.PlanResult, inp: mem.PlanInput,
                    v: tuple[int, int, int], measured: dict[str, float], kv_fixed: float | None,
                    cmd: ServeCommand, default_len: bool) -> list[str]:
    """Every assumption behind the figures, in words."""
    a = inp.arch
    out = [f"model: {spec.source}", f"GPU: {gpu.name}, {gpu.memory_bytes / mem.GIB:.2f} GiB as vLLM sees it"
           + (f" ({gpu.basis})" if gpu.basis else ""),
           f"vLLM {_ver(v)} ({mem.engine_for(v, inp.engine)} engine) defaults and formulas; "
           f"budget = GPU memory x {res.gpu_memory_utilization:g}, KV room = budget - weights - overhead",
           SIZE_NOTE]
    if default_len:
        out.append(f"--max-model-len not given: the model's maximum, {res.max_model_len:,}")
    if "weights" in measured:
        out.append("weights: measured in the log")
    elif res.sources.get("weights") == "given":
        out.append("weights: given with --weights")
    else:
        fmt = res.quant_format
        out.append(f"weights: {mem.param_count(a) / 1e9:.2f}B parameters x "
                   + (f"{fmt} for the quantized layers "
                      f"({mem.quantized_weight_bytes(fmt, res.inp.quant_bits or a.quant_bits):.3f} bytes/weight"
                      f"{', MXFP4 experts padded to 256' if fmt == 'mxfp4' else ''}), "
                      + (f"{res.model_dtype_bytes:g} bytes for norms" if fmt == "gguf" else
                         f"{res.model_dtype_bytes:g} bytes for embeddings and norms") if fmt
                      else f"{res.model_dtype_bytes:g} bytes") +
                   (f", split over TP {inp.tensor_parallel_size}" if inp.tensor_parallel_size > 1 else "") +
                   (f" and PP {inp.pipeline_parallel_size}" if inp.pipeline_parallel_size > 1 else ""))
    if "overhead" in measured:
        out.append("overhead: measured in the log (activation peak + non-torch memory"
                   + (" + CUDA graphs)" if mem.graphs_budgeted(v) else ")"))
    elif res.sources.get("overhead") == "given":
        out.append("overhead: given with --overhead (activations + CUDA graphs + non-torch memory)")
    else:
        out.append(
            f"overhead: activations {res.activation_bytes / mem.GIB:.2f} GiB (the larger of the forward pass over "
            f"max_num_batched_tokens={res.max_num_batched_tokens} and the sampler over max_num_seqs="
            f"{res.max_num_seqs} x {a.vocab_size:,} vocabulary x {mem.sampler_bytes_per_logit(v):g} bytes, the "
            f"coefficient of vLLM {_ver(v)}) + non-torch {res.non_torch_bytes / mem.GIB:.2f} GiB "
            f"({mem.non_torch_rule(inp.tensor_parallel_size, v)})" +
            (f" + CUDA graphs {res.cuda_graph_bytes / mem.GIB:.2f} GiB (budgeted from vLLM 0.20)"
             if res.graphs_in_budget and res.cuda_graph_bytes else
             " (no CUDA graphs: --enforce-eager)" if inp.enforce_eager else
             f"; CUDA graphs (~{res.cuda_graph_bytes / mem.GIB:.2f} GiB) come after the KV cache in this release "
             "and must fit outside the share"))
    if kv_fixed is not None:
        out.append("KV cache size fixed by --kv-cache-memory-bytes: --gpu-memory-utilization is ignored")
    elif "kv_cache" in measured:
        out.append("KV cache memory: measured in the log ('Available KV cache memory' / profiling summary)")
    if a.is_mla:
        out.append("multi-head latent attention: one latent (kv_lora_rank + qk_rope_head_dim) per layer, "
                   "not split by tensor parallelism")
    if a.sliding_window:
        n_slide = a.kinds().count("sliding")
        out.append(f"sliding window {a.sliding_window} tokens on {n_slide} of {a.layers} layers: those layers keep "
                   f"at most window - 1 + max_num_batched_tokens tokens per request; the token count vLLM logs "
                   "counts every layer")
    if res.kv_value_bytes == 1:
        out.append("fp8 KV cache: 1 byte per value")
    if inp.tensor_parallel_size > a.num_key_value_heads and not a.is_mla:
        out.append(f"{a.num_key_value_heads} KV heads on {inp.tensor_parallel_size} ranks: each rank keeps one "
                   "(replicated)")
    out.append("one vLLM instance alone on the GPU (other processes' memory is not subtracted)")
    if a.extra_params and not a.vision:
        out.append("multimodal: the vision tower's weights are counted; its profiling activations are not")
    out.extend(mem.physics_assumptions(res))
    return out
