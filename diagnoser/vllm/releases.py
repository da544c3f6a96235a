"""vLLM releases: the one version parser, and the defaults each release applied (data/releases.yaml).

Every question "what did vLLM X default to" goes through `default()`, so the planner, the advice and
`compare` can never disagree about a release, and a default that changes in a new release is one data line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from diagnoser import datafiles
from diagnoser.errors import UsageError
from diagnoser.vllm import versions

Version = tuple[int, int, int]


def parse_version(version: str | tuple[int, ...] | None) -> Version:
    """'0.7.3' -> (0, 7, 3); '0.8.5.post1' -> (0, 8, 5); 'v0.10' -> (0, 10, 0); 'latest' or None -> latest().

    Lenient, for versions read from logs: the first three numbers count, text without numbers is (0, 0, 0).
    """
    if version is None or version == "latest":
        return latest()
    if isinstance(version, tuple):
        parts = [int(p) for p in version[:3]]
    else:
        parts = [int(p) for p in re.findall(r"\d+", str(version))[:3]]
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def parse_release(text: str) -> Version:
    """A release a user typed (`--vllm-version 0.8.2`, or what a build prints: `0.26.1rc1.dev156+g0eec856cc`,
    `v0.10.1.1`, `0.10.1+cu128`): the release whose data applies (release_note says why, in words); UsageError
    naming what to write for anything that is not a version."""
    text = str(text).strip()
    if text == "latest":
        return latest()
    ref = versions.parse(text)
    if ref is None:
        raise UsageError(f"--vllm-version {text!r}: not a vLLM release (write 0.8.5, 0.10.1.1, "
                         "0.26.1rc1.dev156+g0eec856cc or latest)")
    return ref.release


def release_note(text: str) -> str:
    """Why the data of another release stands for `text`, in words ('' when it is a release the data knows).

    >>> release_note("0.8.5"), release_note("v0.10.1.1")
    ('', "0.10.1.1 is a patch of 0.10.1: planned with 0.10.1's defaults")
    """
    ref = versions.parse(str(text).strip())
    if ref is None:
        return ""
    notes = [ref.note()] if ref.note() else []
    if ref.release > latest():
        notes.append(f"vLLM {ref.release_str} is newer than the releases this planner has data for (up to "
                     f"{version_str(latest())}): planned with {version_str(latest())}'s defaults, which may have "
                     "changed since")
    return "; ".join(notes)


def version_str(version: Version) -> str:
    """(0, 8, 0) -> '0.8.0'."""
    return ".".join(str(p) for p in version)


@dataclass(frozen=True)
class Entry:
    """One default: its value from release `since` on, under its conditions."""

    since: Version
    value: Any
    engine: str | None = None
    tier: str | None = None
    chunked: bool | None = None
    floor_len: bool = False
    source: str = ""
    runner: str | None = None
    entry: str | None = None  # 'llm': only for the Python LLM class (UsageContext.LLM_CLASS)


@dataclass(frozen=True)
class Releases:
    """The parsed data file."""

    latest: Version
    long_context: int
    tiers: dict[str, tuple[dict[str, Any], ...]]
    settings: dict[str, tuple[Entry, ...]]
    shown: tuple[str, ...]
    vllm_serve_since: Version = (0, 5, 2)


@lru_cache(maxsize=1)
def load() -> Releases:
    """data/releases.yaml, parsed once."""
    raw = datafiles.load("releases.yaml")
    settings = {}
    for name, entries in raw["settings"].items():
        settings[name] = tuple(
            Entry(since=parse_version(str(e["since"])), value=e.get("value"), engine=e.get("engine"),
                  tier=e.get("tier"), chunked=e.get("chunked"), floor_len=bool(e.get("floor_len")),
                  source=e.get("source", ""), runner=e.get("runner"), entry=e.get("entry"))
            for e in entries)
    tiers = {name: tuple({**r, "since": parse_version(str(r["since"]))} for r in rules)
             for name, rules in raw["tiers"].items()}
    return Releases(latest=parse_version(str(raw["latest"])), long_context=int(raw["long_context"]), tiers=tiers,
                    settings=settings, shown=tuple(raw["shown"]),
                    vllm_serve_since=parse_version(str(raw.get("vllm_serve_since", "0.5.2"))))


def latest() -> Version:
    """The newest release the data file describes ('latest')."""
    return load().latest


def has_vllm_serve(version: str | Version | None) -> bool:
    """Whether a release has the `vllm serve` command (unknown: assume it does, as every release since 2024).

    >>> has_vllm_serve("0.4.3"), has_vllm_serve("0.5.2"), has_vllm_serve(None)
    (False, True, True)
    """
    if version is None or version == "latest":
        return True
    return parse_version(version) >= load().vllm_serve_since


def _tier_rule(rules: tuple[dict[str, Any], ...], version: Version) -> dict[str, Any] | None:
    live = [r for r in rules if r["since"] <= version]
    return live[-1] if live else None


def _matches(rule: dict[str, Any] | None, gpu_gib: float, gpu_name: str) -> bool:
    if rule is None:
        return False
    name = (gpu_name or "").lower()
    if "names" in rule and not any(n in name for n in rule["names"]):
        return False
    if "min_gib" in rule and gpu_gib < rule["min_gib"]:
        return False
    return not any(n in name for n in rule.get("exclude_names", ()))


def gpu_tiers(version: Version, gpu_gib: float, gpu_name: str = "") -> frozenset[str]:
    """The GPU classes a GPU is in for a release: {'small'}, {'large'} or {'large', 'xl'}.

    >>> sorted(gpu_tiers((0, 9, 0), 79.2, "NVIDIA A100-SXM4-80GB"))
    ['small']
    """
    data = load()
    if _matches(_tier_rule(data.tiers["xl"], version), gpu_gib, gpu_name):
        return frozenset({"xl", "large"})
    if _matches(_tier_rule(data.tiers["large"], version), gpu_gib, gpu_name):
        return frozenset({"large"})
    return frozenset({"small"})


def engine_for(version: Version, engine: str | None = None) -> str:
    """The engine a release runs unless told otherwise: V0 through 0.7.3, V1 from 0.8.0 (engine_choice adds
    what the GPU, the dtype and VLLM_USE_V1 change)."""
    if engine in ("V0", "V1"):
        return engine
    return str(_lookup("engine", version, None, frozenset({"small"}), False).value)


@dataclass(frozen=True)
class EngineChoice:
    """The engine a start-up runs, and why, in words ('' when it is simply the release's default)."""

    engine: str
    reason: str = ""


def engine_choice(version: Version, *, use_v1: str | None = None, compute_capability: float | None = None,
                  dtype: str | None = None, explicit: str | None = None) -> EngineChoice:
    """The engine vLLM `version` runs: its default (settings.engine), VLLM_USE_V1 where the release reads it
    (settings.engine_env), and V1's fallback to V0 below compute capability 8.0 and for float32 in 0.8.0 ..
    0.10.1.1 (settings.v1_min_compute_capability, v1_supports_fp32: EngineArgs._is_v1_supported_oracle). One
    function for the planner, the log tracker and `compare`.

    >>> [engine_choice(v, compute_capability=7.5).engine for v in ((0, 7, 3), (0, 8, 2), (0, 10, 2))]
    ['V0', 'V0', 'V1']
    >>> engine_choice((0, 11, 0), use_v1="0").reason
    'VLLM_USE_V1=0 is not read from vLLM 0.11.0 (V0 is removed): V1'
    """
    if explicit in ("V0", "V1"):
        return EngineChoice(explicit)
    v = version_str(version)
    if default("v1_only", version):
        return EngineChoice("V1", f"VLLM_USE_V1=0 is not read from vLLM {version_str(_since('v1_only', version))} "
                                  "(V0 is removed): V1" if use_v1 == "0" else "")
    if use_v1 in ("0", "1") and default("engine_env", version):
        return EngineChoice("V1" if use_v1 == "1" else "V0", f"VLLM_USE_V1={use_v1}")
    base = engine_for(version)
    if base != "V1":
        return EngineChoice(base)
    floor = default("v1_min_compute_capability", version)
    if floor is not None and compute_capability is not None and compute_capability < float(floor):
        return EngineChoice("V0", f"vLLM {v} falls back to V0 (XFormers) below compute capability {float(floor):g} "
                                  f"(this GPU: {compute_capability:g})")
    if str(dtype or "").replace("torch.", "") in ("float32", "float", "fp32") and \
            not default("v1_supports_fp32", version):
        return EngineChoice("V0", f"vLLM {v} falls back to V0 for --dtype float32")
    return EngineChoice("V1")


def _since(name: str, version: Version) -> Version:
    return _lookup(name, version, None, frozenset({"small"}), False).since


def is_chunked_v0(max_model_len: int, version: Version | None = None) -> bool:
    """V0 turns chunked prefill on by itself for long-context models (from the release in
    settings.long_context_chunked: vllm-project/vllm#6666, first in 0.5.4)."""
    if version is not None and not _lookup("long_context_chunked", version, "V0", frozenset({"small"}),
                                           False).value:
        return False
    return max_model_len > load().long_context


def _lookup(name: str, version: Version, engine: str | None, tiers: frozenset[str], chunked: bool,
            runner: str | None = None, entry: str = "serve") -> Entry:
    entries = load().settings[name]
    fits = [e for e in entries
            if (e.engine is None or e.engine == engine) and (e.tier is None or e.tier in tiers)
            and (e.chunked is None or e.chunked == chunked) and (e.runner is None or e.runner == runner)
            and (e.entry is None or e.entry == entry)]
    if not fits:
        raise KeyError(f"releases.yaml: settings.{name}: no entry for engine {engine}")
    live = [e for e in fits if e.since <= version]
    if not live:
        return min(fits, key=lambda e: e.since)  # older than the data: the earliest known default
    # the newest applies; among equal releases one for this entry point beats one for both, else the first listed
    newest = max(e.since for e in live)
    same = [e for e in live if e.since == newest]
    return next((e for e in same if e.entry == entry), same[0])


@dataclass(frozen=True)
class Default:
    """A default as it applied to one deployment: value, the release it took effect in, where it is from."""

    name: str
    value: Any
    since: Version
    source: str


def default_entry(name: str, version: Version, *, engine: str | None = None, gpu_gib: float = 0.0,
                  gpu_name: str = "", max_model_len: int = 0, max_num_seqs: int | None = None,
                  max_num_batched_tokens: int | None = None, runner: str | None = None,
                  entry_point: str = "serve", chunked: bool | None = None) -> Default:
    """The default `name` had for this release, engine, GPU, length and entry point ('serve' for `vllm serve`,
    'llm' for the Python LLM class; and, for the planner's coefficients, model runner), with the release it
    changed in. `chunked` says whether V0's chunked prefill is on when the command sets it."""
    engine = engine_for(version, engine)
    tiers = gpu_tiers(version, gpu_gib, gpu_name) if engine == "V1" else frozenset({"small"})
    if chunked is None:
        chunked = is_chunked_v0(max_model_len, version)
    chunked = engine == "V0" and chunked
    entry = _lookup(name, version, engine, tiers, chunked, runner, entry_point)
    value = entry.value
    if entry.floor_len:
        value = max(int(value), int(max_model_len))
    if name == "cudagraph_capture_sizes":
        seqs = max_num_seqs or default_entry("max_num_seqs", version, engine=engine, gpu_gib=gpu_gib,
                                             gpu_name=gpu_name).value
        batched = max_num_batched_tokens or default_entry(
            "max_num_batched_tokens", version, engine=engine, gpu_gib=gpu_gib, gpu_name=gpu_name,
            max_model_len=max_model_len).value
        value = capture_sizes(value, int(seqs), int(batched))
    return Default(name, value, entry.since, entry.source)


def default(name: str, version: Version, **kwargs: Any) -> Any:
    """The value of `default_entry`.

    >>> default("max_num_seqs", (0, 8, 2), gpu_gib=22.0, gpu_name="L4")
    1024
    >>> default("max_num_seqs", (0, 7, 3), gpu_gib=22.0, gpu_name="L4")
    256
    """
    return default_entry(name, version, **kwargs).value


def capture_sizes(rule: dict[str, Any] | None, max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """The batch sizes CUDA graphs are captured for, from a capture rule of the data file.

    >>> capture_sizes({"step8_upto": 8192, "cut_at_max_num_seqs": True}, 256, 8192)[-3:]
    [240, 248, 256]
    """
    if not rule:
        return []
    top = int(rule.get("step8_upto", 512))
    sizes = [1, 2, 4, *range(8, top + 1, 8)]
    if "seqs_times" in rule:
        limit = min(int(rule["seqs_times"]) * max_num_seqs, int(rule.get("max_size", 512)))
        sizes = [1, 2, 4, *range(8, min(top, limit) + 1, 8)]
        if "step16_from" in rule:
            sizes += list(range(int(rule["step16_from"]), limit + 1, 16))
    if rule.get("cut_at_max_num_seqs"):
        cut = next((s for s in sizes if s >= max_num_seqs), sizes[-1])
        sizes = [s for s in sizes if s <= cut]
    if rule.get("cut_at_batched_tokens"):
        sizes = [s for s in sizes if s <= max_num_batched_tokens] or [1]
    return sizes


def effective_settings(version: Version, *, engine: str | None = None, gpu_gib: float = 0.0, gpu_name: str = "",
                       max_model_len: int = 0, explicit: dict[str, Any] | None = None,
                       entry_point: str = "serve") -> dict[str, dict[str, Any]]:
    """The shown settings for one start: each with its value and whether the user set it or the release did.

    `explicit` holds what the command line or log set (vLLM's field names); a None there means "not set".
    """
    explicit = {k: v for k, v in (explicit or {}).items() if v is not None}
    engine = engine_for(version, engine)
    out: dict[str, dict[str, Any]] = {}
    for name in load().shown:
        if name in explicit:
            out[name] = {"value": explicit[name], "source": "explicit"}
            continue
        if name == "engine":
            out[name] = {"value": engine, "source": "default", "since": version_str(
                default_entry("engine", version).since)}
            continue
        d = default_entry(name, version, engine=engine, gpu_gib=gpu_gib, gpu_name=gpu_name,
                          max_model_len=max_model_len, max_num_seqs=explicit.get("max_num_seqs"),
                          max_num_batched_tokens=explicit.get("max_num_batched_tokens"), entry_point=entry_point)
        out[name] = {"value": d.value, "source": "default", "since": version_str(d.since)}
    return out


def describe(name: str, value: Any) -> str:
    """A setting's value as a person reads it: capture lists as 'N sizes, up to M'."""
    if name == "cudagraph_capture_sizes" and isinstance(value, list):
        return f"{len(value)} sizes up to {max(value)}" if value else "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    return str(value)
