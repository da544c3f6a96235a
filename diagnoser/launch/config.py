"""vLLM YAML configs, as `vllm serve --config FILE` reads them: recognising one, turning it into `--flag=value`
tokens, and merging one named by `--config` under the command line's flags (vLLM: the command line wins)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from diagnoser import safeyaml
from diagnoser.launch.model import DYNAMIC_RE, Launch
from diagnoser.launch.shell import LaunchFileError
from diagnoser.vllm import serve_args
from diagnoser.vllm.flags import lookup


def _flag_key(key: Any) -> str:
    return "--" + str(key).strip().replace("_", "-")


def is_vllm_config(data: Any) -> bool:
    """A flat mapping whose keys are mostly `vllm serve` flags (and not a manifest)."""
    if not isinstance(data, dict) or not data:
        return False
    keys = [str(k) for k in data]
    if {"apiVersion", "kind"} <= set(keys) or "services" in keys:
        return False
    known = [k for k in keys if lookup(_flag_key(k)) is not None]
    has_model = any(_flag_key(k) == "--model" for k in keys)
    return bool(known) and 2 * len(known) >= len(keys) and (has_model or len(known) >= 2)


def config_tokens(data: dict[Any, Any]) -> tuple[list[str], list[str]]:
    """A vLLM YAML config -> `--flag value` tokens the way vLLM's --config reader builds them."""
    out: list[str] = []
    notes: list[str] = []
    for key, value in data.items():
        flag = _flag_key(key)
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif lookup("--no-" + flag[2:]) is not None:
                out.append("--no-" + flag[2:])
            continue
        if isinstance(value, dict):
            out.append(f"{flag}={json.dumps(value)}")
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            text = json.dumps(item) if isinstance(item, dict | list) else str(item)
            if DYNAMIC_RE.search(text):
                notes.append(f"{key}: {text}: not expanded here (nor by vLLM), so the value is unknown; planned "
                             "with vLLM's default for that setting")
                continue
            out.append(f"{flag}={text}")
    return out, notes


def from_config(data: dict[Any, Any], line: int) -> Launch:
    """A whole vLLM YAML config (a file, or a ConfigMap's value) as the launch it configures."""
    tokens, notes = config_tokens(data)
    return Launch(line, "vllm-config", ["vllm", "serve", *tokens], notes)


def _find(config: str, base: Path | None) -> Path | None:
    """vLLM opens the path from its working directory; a script usually runs beside its config."""
    if Path(config).is_absolute():
        candidates = [Path(config)]
    else:
        candidates = [p for p in ((base / config) if base else None, Path(config)) if p is not None]
    return next((p for p in candidates if p.is_file()), None)


def merge_config(args: list[str], config: str, base: Path | None, notes: list[str]) -> list[str]:
    """`--config FILE`: its settings under the command line's `args` (vLLM: the command line wins)."""
    path = _find(config, base)
    if path is None:
        notes.append(f"--config {config}: not found here, so its settings are not planned (plan it too: "
                     f"--from-file {config})")
        return args
    try:
        data = safeyaml.load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise LaunchFileError(f"--config {config}: not a readable YAML config ({exc})") from None
    if not isinstance(data, dict):
        raise LaunchFileError(f"--config {config}: not a YAML mapping of flag names to values")
    given = serve_args.parse_arguments(args)
    names = given.given()

    def overridden(key: Any) -> bool:
        name = _flag_key(key)
        flag = lookup(name)
        return (flag is not None and flag.name in names) or (name == "--model" and given.model is not None)

    extra, _ = config_tokens({k: v for k, v in data.items() if not overridden(k)})
    notes.extend(config_tokens(data)[1])
    notes.append(f"settings of --config {config} included (the command line's win)")
    return [*args, *extra]
