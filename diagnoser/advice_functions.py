"""Small helpers that advice templates call as `fn.NAME(...)`.

Arithmetic lives in memory.py (`mem.` in templates); these are the non-arithmetic pieces a fix needs:
flag spellings, divisors, the closest real flag to a typo.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rapidfuzz import fuzz, process

from . import flags, memory, serve_args
from .modelspec import SpecError, load_model, model_names


def hyphen(flag: str) -> str:
    """'--max_model_len' -> '--max-model-len' (the part before a '.' only, as vLLM rewrites it)."""
    head, dot, tail = flag.partition(".")
    if head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    return head + dot + tail


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


def corrected_args(text: str | None, model: str | None = None) -> str:
    """The rejected arguments rewritten: flags respelled, a model moved to the `vllm serve MODEL` place.

    Quoted like every suggested command (serve_args); ORG/MODEL stands in when the log never names the model.
    """
    parsed = bad_arguments(text)
    settings: dict[str, Any] = {}
    for flag, value in parsed["flags"]:
        fix = flag_fix(flag)
        if fix["to"] is not None:
            known = flags.lookup(fix["to"])
            settings[serve_args.key_of(known.name if known else fix["to"])] = True if value is None else value
    return serve_args.render_serve(parsed["model"] or model or "ORG/MODEL", settings).text or ""


# -- memory held by other processes (gpu-memory-in-use) ---------------------------------------------------

_PROC_USE = re.compile(r"(?:Process (?P<pid>\d+)|(?P<me>this process)) has (?P<size>[\d.]+ ?[KMGT]?i?B) memory in use")
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
        size = memory.log_size_gib(m.group("size"))
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
    size = memory.weight_bytes(arch, memory.resolve_dtype_bytes(arch, dtype), quant,
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
