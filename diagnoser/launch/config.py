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


def _find(config: str, base: Path | None) -> tuple[Path | None, str | None]:
    """The file `--config` names, resolved only inside the launch file's own folder tree `base`: (path, None),
    or (None, why not). An absolute path, `~`, a `..` or a symlink that leads out of it is never opened: a launch
    file from a pull request must not make the doctor read (and print) ~/.docker/config.json."""
    config = config.strip("'\"")
    if base is None:
        return None, "no folder to resolve it in"
    if config.startswith("~") or Path(config).is_absolute():
        return None, "outside the launch file's folder (an absolute or home path), so it was not read"
    root = base.resolve()
    target = (root / config).resolve()  # symlinks and `..` resolved: where the open would really land
    if not target.is_relative_to(root):
        return None, "outside the launch file's folder (through `..` or a symlink), so it was not read"
    if not target.is_file():
        return None, f"not found here, so its settings are not planned (plan it too: --from-file {config})"
    return target, None


def merge_config(args: list[str], config: str, base: Path | None, notes: list[str]) -> list[str]:
    """`--config FILE`: its settings under the command line's `args` (vLLM: the command line wins)."""
    path, why = _find(config, base)
    if path is None:
        notes.append(f"--config {config}: {why}")
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

    known = {k: v for k, v in data.items() if lookup(_flag_key(k)) is not None}
    extra, _ = config_tokens({k: v for k, v in known.items() if not overridden(k)})
    # a key vLLM does not know makes it refuse to start: named as the flag it becomes, never with its value
    # (the file may be a credential store that only looks like a config)
    extra += [_flag_key(k) for k in data if k not in known]
    notes.extend(config_tokens(known)[1])
    notes.append(f"settings of --config {config} included (the command line's win)")
    return [*args, *extra]
