"""Small helpers that advice templates call as `fn.NAME(...)`.

Arithmetic lives in memory.py (`mem.` in templates); these are the non-arithmetic pieces a fix needs:
flag spellings, divisors, the closest real flag to a typo.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rapidfuzz import fuzz, process

from diagnoser import datafiles
from diagnoser.lazyre import lazy
from diagnoser.vllm import flags, memory, releases, serve_args, units, weights
from diagnoser.vllm.modelspec import SpecError, load_model, model_names
from diagnoser.vllm.timestamps import later_time, vllm_time_seconds


def hyphen(flag: str) -> str:
    """'--max_model_len' -> '--max-model-len' (the part before a '.' only, as vLLM rewrites it)."""
    head, dot, tail = flag.partition(".")
    if head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    return head + dot + tail


def first_known(*values: Any) -> Any:
    """The first value that is known (not none): a fact read under one of several names or wordings.

    >>> first_known(None, 0.0, 3.5)
    0.0
    >>> first_known(None, None) is None
    True
    """
    return next((v for v in values if v is not None), None)


def underscore(flag: str) -> str:
    """'--max-model-len' -> 'max_model_len' (the Python/LLM(...) spelling)."""
    return flag.lstrip("-").replace("-", "_")


#: Above this, divisors() answers [] (no model has that many heads; a hostile log must not hang it).
MAX_DIVISOR_INPUT = 10**12


def divisors(n: int) -> list[int]:
    """All divisors of n, ascending, in O(sqrt n); [] for n <= 0 or n > MAX_DIVISOR_INPUT.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    n = int(n)
    if n <= 0 or n > MAX_DIVISOR_INPUT:
        return []
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def divisors_near(n: int, target: int, count: int = 3) -> list[int]:
    """Divisors of n closest to target (valid tensor-parallel sizes), ascending."""
    ds = divisors(n)
    near = sorted(ds, key=lambda d: (abs(d - int(target)), d))[:count]
    return sorted(near)


def closest_flag(flag: str) -> str | None:
    """The real vLLM flag a typo most likely meant (None when nothing is close)."""
    found = flags.closest_flag(hyphen(flag))
    if isinstance(found, tuple):
        found = found[0] if found and (len(found) < 2 or (found[1] or 0) >= 80) else None
    return found or None


def renamed_flag(flag: str) -> Any:
    """What a renamed or removed flag became, if the bundled flag list knows."""
    return flags.renamed(hyphen(flag))



def tp_to_fit(weights_gib: float, gpu_gib: float, current_tp: int = 1, headroom: float = 0.85) -> int:
    """Smallest power-of-two tensor-parallel size above the current one whose weight share fits.

    A rank's weights should take at most `headroom` of its GPU, leaving room for activations and cache.
    """
    tp = max(1, int(current_tp or 1)) * 2
    while tp < 64 and weights_gib / tp > gpu_gib * headroom:
        tp *= 2
    return tp


# -- command-line mistakes (unrecognized-argument) ---------------------------------------------------------

#: Tokens that name a vLLM sub-command or the program itself when they turn up among the bad arguments.
SUBCOMMANDS = ("serve", "chat", "complete", "bench", "run-batch", "collect-env")


def bad_arguments(text: str | None) -> dict[str, Any]:
    """Split argparse's 'unrecognized arguments: ...' tail into flags (with their values) and positionals.

    Returns {"flags": [(flag, value_or_None)], "positionals": [...], "subcommand": "serve" | None,
    "model": the positional that looks like a model (org/name or a path) or None}. Arity comes from the flag
    list (serve_args): a known switch never takes the next word.
    """
    tokens = [t for t in (w.strip("'\",;") for w in (text or "").split()) if t]
    sub = next((t for t in tokens if t in SUBCOMMANDS), None)
    # the program itself, repeated by a wrapper (docker image entrypoint, script), and the sub-command
    kept = [t for t in tokens if t not in ("vllm", "python", "python3", "-m") and not t.endswith("api_server")]
    if sub is not None:
        kept.remove(sub)
    parsed = serve_args.parse(["vllm", "serve", *kept])
    flags = [(it.spelled, it.words[0] if it.words else None) for it in parsed.items]
    positionals = ([parsed.model] if parsed.model else []) + parsed.positionals
    model = next((p for p in positionals if "/" in p or p.startswith((".", "~"))), None)
    if model is None and len(positionals) == 1:
        model = positionals[0]
    return {"flags": flags, "positionals": positionals, "subcommand": sub, "model": model}


def flag_fix(flag: str) -> dict[str, Any]:
    """What a rejected flag should have been: {"flag", "to", "why"} ("to" None when nothing is known)."""
    hy = hyphen(flag)
    info = renamed_flag(flag)
    if isinstance(info, dict):
        to, until, note = info.get("renamed_to"), info.get("until"), info.get("note")
        extra = f" ({note})" if note else ""
        if to:
            when = f" in {until}" if until else ""
            return {"flag": flag, "to": to, "why": f"{hy} was renamed to {to}{when}{extra}"}
        if until:
            return {"flag": flag, "to": None, "why": f"{hy} was removed in vLLM {until}{extra}; drop it"}
    elif isinstance(info, str) and info and info != hy:
        return {"flag": flag, "to": info, "why": f"{hy} was renamed to {info}"}
    known = _known_flag(flag)
    if not known and flag.startswith("--") and len(flag) <= 6:
        short = _known_flag(flag[1:])  # '--tp' for the short alias '-tp'
        if short:
            return {"flag": flag, "to": flag[1:], "why": f"the short form of {short} takes one dash"}
    if known and hy != flag:
        return {"flag": flag, "to": known, "why": "vLLM before 0.5.1 accepts only the hyphen spelling"}
    if known:
        since = _flag_since(known)
        added = f"it was added in vLLM {since}, so upgrade or drop it" if since else "check `vllm serve --help`"
        return {"flag": flag, "to": known, "why": f"{known} exists, but not in the release you ran: {added}"}
    close = closest_flag(flag)
    if close and close != flag:
        return {"flag": flag, "to": close, "why": f"the closest real flag to {flag}"}
    return {"flag": flag, "to": None, "why": "not a vLLM flag; see `vllm serve --help`"}


def _flag_since(flag: str) -> str | None:
    return getattr(flags.lookup(flag), "since", None)


def _known_flag(flag: str) -> str | None:
    """The canonical spelling of a flag the bundled list knows ('--max_model_len' -> '--max-model-len')."""
    try:
        found = flags.lookup(flag)
    except Exception:  # noqa: BLE001 - a helper from another module must not break the advice
        return None
    if found is None:
        return None
    if "." in flag:
        return hyphen(flag)
    return hyphen(flag) if flag.startswith("--") else getattr(found, "name", None)


def corrected_args(text: str | None, model: str | None = None, prog: str | None = None,
                   version: str | None = None) -> str:
    """The rejected arguments rewritten: flags respelled, a model moved to the `vllm serve MODEL` place (or to
    `--model` after `python -m vllm.entrypoints.openai.api_server`, when that is how the server was started,
    `prog` api_server.py, or the release has no `vllm serve`).

    Quoted like every suggested command (serve_args); ORG/MODEL stands in when the log never names the model.
    """
    parsed = bad_arguments(text)
    settings: dict[str, Any] = {}
    for flag, value in parsed["flags"]:
        fix = flag_fix(flag)
        if fix["to"] is not None:
            known = flags.lookup(fix["to"])
            settings[serve_args.key_of(known.name if known else fix["to"])] = True if value is None else value
    module = bool(prog) and "api_server" in str(prog)
    return serve_args.render_serve(parsed["model"] or model or "ORG/MODEL", settings, version, module=module).text or ""


# -- memory held by other processes (gpu-memory-in-use) ---------------------------------------------------

_PROC_USE = lazy(r"(?:Process (?P<pid>\d+)|(?P<me>this process)) has (?P<size>[\d.]+ ?[KMGT]?i?B) memory in use")
def process_memory(text: str | None, torch_allocated_gib: float | None = None) -> dict[str, Any]:
    """PyTorch's OOM process list -> {"this_gib", "this_pid", "others": [(pid, gib)], "others_gib"}.

    PyTorch names this process ("Including non-PyTorch memory, this process has ...") only when NVML reports
    the same pid; in a container every process is listed as "Process N". Then this process is the entry
    closest above what PyTorch says it allocated ("Of the allocated memory X is allocated by PyTorch").
    """
    this: float | None = None
    this_pid: int | None = None
    others: list[tuple[int, float]] = []
    for m in _PROC_USE.finditer(text or ""):
        size = units.log_size_gib(m.group("size"))
        if size is None:
            continue
        if m.group("me"):
            this = size
        else:
            others.append((int(m.group("pid")), size))
    if this is None and torch_allocated_gib and others:
        mine = [o for o in others if o[1] >= torch_allocated_gib * 0.98]
        if mine:
            this_pid, this = min(mine, key=lambda o: o[1])
            others = [o for o in others if o[0] != this_pid]
    return {"this_gib": this, "this_pid": this_pid, "others": others, "others_gib": sum(g for _, g in others)}


def others_gib(total_gib: float | None, free_gib: float | None, this_gib: float | None,
               listed_gib: float | None = None) -> float | None:
    """GiB of the GPU held by processes other than this one (None when the message cannot tell)."""
    if total_gib is not None and free_gib is not None and this_gib is not None:
        return max(0.0, total_gib - free_gib - this_gib)
    if listed_gib:
        return listed_gib
    return None


# -- GPU capabilities (quantization-unsupported, bf16-unsupported, kv-cache-dtype-unsupported) -----------

#: Minimum compute capability (major*10+minor) of vLLM's common quantization methods on CUDA.
QUANT_MIN_CAPABILITY = {
    "gptq": 60, "gguf": 60, "aqlm": 60, "bitsandbytes": 70, "squeezellm": 70, "awq": 75, "gptq_marlin": 80,
    "awq_marlin": 80, "marlin": 80, "fp8": 80, "fbgemm_fp8": 80, "experts_int8": 80, "compressed-tensors": 75,
    "modelopt": 89, "mxfp4": 80, "nvfp4": 100,
}


def capability(value: Any) -> str | None:
    """75 -> '7.5'; '8.0' -> '8.0' (vLLM prints capabilities both ways)."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if f >= 10 and float(f).is_integer():
        return f"{int(f) // 10}.{int(f) % 10}"
    return f"{f:.1f}"


def capability_int(value: Any) -> int | None:
    """'7.5' -> 75; 75 -> 75."""
    text = capability(value)
    if text is None:
        return None
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor or 0)


def quant_methods_for(cap: Any) -> list[str]:
    """Quantization methods whose minimum capability the GPU meets, most compact first."""
    c = capability_int(cap)
    if c is None:
        return []
    order = ["awq_marlin", "gptq_marlin", "fp8", "awq", "gptq", "bitsandbytes", "gguf"]
    return [m for m in order if QUANT_MIN_CAPABILITY.get(m, 999) <= c]


def closest_choice(value: str | None, choices: Any) -> str | None:
    """The listed choice nearest to a rejected value ('fp8_e4m3fn' among "['auto', 'fp8', ...]")."""
    if not value:
        return None
    if isinstance(choices, str):
        choices = re.findall(r"[\w.+-]+", choices)
    options = [str(c) for c in (choices or []) if str(c)]
    if not options:
        return None
    found = process.extractOne(str(value), options, scorer=fuzz.ratio)
    return found[0] if found and found[1] >= 50 else None


def model_weights_gib(model: str | None, dtype: str | None = None, quantization: str | None = None) -> float | None:
    """Whole-model weight GiB for a model the bundled presets (or a local config.json) know; else None.

    The same arithmetic as `vllm-doctor plan`, so advice and plan agree.
    """
    if not model:
        return None
    try:
        spec = load_model(str(model))
    except (SpecError, OSError, ValueError):
        return None
    arch = spec.arch
    quant = quantization if quantization and quantization != "None" else arch.quantization
    size = weights.weight_bytes(arch, weights.resolve_dtype_bytes(arch, dtype), quant,
                               arch.quant_bits if quant == arch.quantization else None)
    return round(size / memory.GIB, 2)


def closest_model(model: str | None) -> str | None:
    """A known Hugging Face repo id (the planner's presets) that a mistyped one most likely meant."""
    if not model or "/" not in model or model.startswith(("/", ".", "~")):
        return None
    names = [n for n in model_names() if "/" in n]
    if not names or model in names:
        return None
    digits = re.findall(r"\d+", model)
    # a typo in the letters; a different version or size (other digits) is another model, not a typo
    same = [n for n in names if re.findall(r"\d+", n) == digits]
    found = process.extractOne(model, same, scorer=fuzz.ratio, processor=str.lower) if same else None
    return str(found[0]) if found and found[1] >= 88 else None


def tp_sizes(heads: int, tp: int) -> dict[str, int | None]:
    """Valid tensor-parallel sizes around a rejected one: {"below": the largest divisor of the attention heads
    up to tp, "above": the smallest one above it}, each a power of two when one qualifies (a model's other
    dimensions divide by those too)."""
    ds = divisors(heads)
    below = [d for d in ds if d <= int(tp)]
    above = [d for d in ds if d > int(tp)]

    def pick(choices: list[int], last: bool) -> int | None:
        pow2 = [d for d in choices if d & (d - 1) == 0 and d > 1]
        pool = pow2 or choices
        if not pool:
            return None
        return pool[-1] if last else pool[0]

    return {"below": pick(below, True), "above": pick(above, False)}


def size_for_peak(peak_running: float | None, peak_waiting: float | None, kv_cache_tokens: float | None = None,
                  available_gib: float | None = None, gpu_total_gib: float | None = None,
                  utilization: float | None = None, peak_kv_pct: float | None = None) -> dict[str, Any]:
    """What holds the observed peak (running + waiting at once) instead of queueing or preempting it.

    The running requests filled the cache, so each needs about `kv_cache_tokens x usage / running` tokens;
    holding the queue too takes `(running + waiting) / running` times the cache: that much more KV memory
    (a utilization, fp8 when twice is enough), or that many replicas.

    >>> d = size_for_peak(40, 40, kv_cache_tokens=160000, available_gib=20.0, gpu_total_gib=80.0,
    ...                   utilization=0.9, peak_kv_pct=100)
    >>> d["factor"], d["tokens_per_request"], d["extra_gib"], d["utilization"], d["fp8_enough"], d["replicas"]
    (2.0, 4000, 20.0, None, True, 2)
    """
    out: dict[str, Any] = {"factor": None, "tokens_per_request": None, "extra_gib": None, "utilization": None,
                           "fp8_enough": None, "replicas": None}
    if not peak_running or peak_running <= 0:
        return out
    factor = (peak_running + (peak_waiting or 0)) / peak_running
    out["factor"] = round(factor, 2)
    out["replicas"] = max(1, math.ceil(factor - 1e-9))
    out["fp8_enough"] = factor <= 2.0
    if kv_cache_tokens:
        out["tokens_per_request"] = int(kv_cache_tokens * (peak_kv_pct or 100.0) / 100.0 / peak_running)
    if available_gib:
        out["extra_gib"] = round(available_gib * (factor - 1), 2)
        if gpu_total_gib and utilization:
            wanted = math.ceil((utilization + out["extra_gib"] / gpu_total_gib) * 100) / 100
            out["utilization"] = wanted if wanted <= 0.98 else None
    return out


def _longtail() -> dict[str, Any]:
    """diagnoser/data/longtail.yaml: driver minimums, module -> pip package, LoRA ranks (the one data loader)."""
    return datafiles.load("longtail.yaml")  # type: ignore[no-any-return]


def seconds_between(start: str | None, end: str | None) -> int | None:
    """Seconds from one vLLM timestamp to a later one: ('01-18 20:15:59', '01-18 20:33:11') -> 1032.

    vLLM prints MM-DD HH:MM:SS without a year; read as the serving series' clock reads it (vllm/timestamps.py:
    an end far before the start is in the next year, a log across New Year).
    """
    a = vllm_time_seconds((start or "")[:14])
    b, _ = later_time((end or "")[:14], 2000, a)
    if a is None or b is None:
        return None
    delta = int(b - a)
    return delta if delta >= 0 else None


def duration(seconds: Any) -> str | None:
    """1032 -> '17 min 12 s'; 45 -> '45 s'; 7384 -> '2 h 3 min'."""
    try:
        s = int(seconds)
    except (TypeError, ValueError):
        return None
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def cuda_of_driver(version: Any) -> str | None:
    """The CUDA version a driver API number stands for, as torch prints it: 11040 -> '11.4', 12020 -> '12.2'."""
    try:
        n = int(str(version).strip())
    except (TypeError, ValueError):
        return None
    return f"{n // 1000}.{(n % 1000) // 10}" if n >= 1000 else None


def driver_for_cuda(cuda: Any) -> str | None:
    """Minimum Linux driver for a CUDA version: '12.4' -> '550.54.14' ('12.5' -> the 12.6 row's, rounding up)."""
    table = _longtail()["cuda_min_driver"]
    try:
        want = tuple(int(p) for p in str(cuda).split(".")[:2])
    except ValueError:
        return None
    rows = sorted((tuple(int(p) for p in k.split(".")), v) for k, v in table.items())
    for key, driver in rows:
        if key >= want:
            return driver
    return None


def pip_package(module: str | None) -> str | None:
    """The pip package for a module: 'cv2.dnn' -> 'opencv-python-headless'; 'pyarrow' -> 'pyarrow'."""
    if not module:
        return None
    table = _longtail()["pip_packages"]
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if name in table:
            return str(table[name])
    return parts[0].replace("_", "-")


def lora_rank_for(rank: Any) -> int | None:
    """The smallest --max-lora-rank vLLM accepts that holds an adapter of this rank: 40 -> 64."""
    try:
        r = int(rank)
    except (TypeError, ValueError):
        return None
    return next((x for x in _longtail()["lora_ranks"] if x >= r), None)


def version_at_least(version: str | None, minimum: str) -> bool | None:
    """Whether a vLLM version is `minimum` or newer: ('0.11.0', '0.11') -> True; unknown -> None."""
    if not version:
        return None
    return releases.parse_version(version) >= releases.parse_version(minimum)
