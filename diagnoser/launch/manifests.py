"""YAML launch files: a vLLM config (config.py), a docker compose service (`entrypoint` / `command` /
`environment`), a Kubernetes or Helm-rendered container (`command` / `args` / `env`, also `sh -c "vllm serve
..."`), a ConfigMap holding a vLLM config, and any YAML string that holds a shell command (SkyPilot `run:`,
CI steps). Every document goes through safeyaml (alias and size bounds) before it is walked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from diagnoser import safeyaml
from diagnoser.launch.config import from_config, is_vllm_config
from diagnoser.launch.detect import SHELLS, find_program, from_shell, launch_from_words, shell_script
from diagnoser.launch.docker import program
from diagnoser.launch.model import Launch, literal_env, literal_word, with_image
from diagnoser.launch.pins import vllm_image
from diagnoser.launch.shell import MAX_WORDS, LaunchFileError, Word, shell_words, too_many_words

#: YAML keys whose string values are shell commands (CI steps, SkyPilot, GitLab, Procfile-like configs);
#: block scalars (`|`, `>`) are read as shell under any key.
SCRIPT_KEYS = {"run", "script", "scripts", "command", "commands", "cmd", "args", "entrypoint", "exec", "setup",
               "before_script", "after_script", "start", "launch", "serve", "shell", "startup", "execute"}
#: Where a container's entry point, its arguments and its environment are, per manifest kind.
CONTAINER_FIELDS = {"kubernetes": ("command", "args", "env"), "compose": ("entrypoint", "command", "environment")}
_STR = "tag:yaml.org,2002:str"


def from_yaml(text: str, base: Path | None) -> list[Launch]:
    """Every launch in a YAML file (all its documents); LaunchFileError for YAML that does not parse."""
    try:
        docs = [d for d in safeyaml.compose_all(text) if d is not None]
    except yaml.YAMLError as exc:
        if "vllm" not in text.lower():
            return []
        if "{{" in text or "{%" in text:
            return []       # a template (Helm, Jinja): nothing to plan until it is rendered
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise LaunchFileError(f"not valid YAML ({where}{problem})") from None
    out: list[Launch] = []
    for doc in docs:
        try:
            value = safeyaml.construct(doc)
        except yaml.YAMLError as exc:
            raise LaunchFileError(f"not valid YAML ({str(exc).splitlines()[0]})") from None
        if is_vllm_config(value):
            out.append(from_config(value, doc.start_mark.line + 1))
            continue
        k8s = isinstance(value, dict) and "apiVersion" in value and "kind" in value
        _walk(doc, "kubernetes" if k8s else "compose", base, out)
    return out


def _scalar_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1 + (1 if getattr(node, "style", None) in ("|", ">") else 0)


def _walk(node: yaml.Node, kind: str, base: Path | None, out: list[Launch], key: str = "") -> None:
    if isinstance(node, yaml.MappingNode):
        pairs = [(k.value if isinstance(k, yaml.ScalarNode) else "", v) for k, v in node.value]
        keys = {k for k, _ in pairs}
        skip: set[str] = set()
        if keys & {"image", "build"} and keys & {"command", "args", "entrypoint"}:
            launch = _container(node, kind, base)
            if launch is not None:
                out.append(launch)
            skip = {"command", "args", "entrypoint", "env", "environment"}
        for k, v in pairs:
            if k not in skip:
                _walk(v, kind, base, out, k)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _walk(item, kind, base, out, key)
    elif isinstance(node, yaml.ScalarNode) and isinstance(node.value, str) and "vllm" in node.value:
        _scalar(node, key, base, out)


def _scalar(node: yaml.ScalarNode, key: str, base: Path | None, out: list[Launch]) -> None:
    """A string value: a ConfigMap's vLLM config, or a shell command under a script key."""
    if key.endswith((".yaml", ".yml")):
        try:
            data = safeyaml.load(node.value)
        except yaml.YAMLError:
            data = None
        if is_vllm_config(data):
            out.append(from_config(data, _scalar_line(node)))
            return
    if node.tag == _STR and (key.lower() in SCRIPT_KEYS or node.style in ("|", ">")):
        out.extend(from_shell(node.value, base, _scalar_line(node), kind="yaml", strict=True))


def _yaml_words(node: yaml.Node | None) -> list[Word]:
    """A command given as a YAML list (no shell: literal words) or a string (split like compose does)."""
    if node is None:
        return []
    if isinstance(node, yaml.SequenceNode):
        if len(node.value) > MAX_WORDS:
            raise too_many_words(node.start_mark.line + 1, "words in one command")
        out = []
        for item in node.value:
            value = safeyaml.construct(item)
            text = str(value) if isinstance(item, yaml.ScalarNode) else json.dumps(value)
            out.append(literal_word(text, _scalar_line(item)))
        return out
    if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null":
        return [w for w in shell_words(str(safeyaml.construct(node)), _scalar_line(node)) if not w.op]
    return []


def _env(raw: Any) -> dict[str, str]:
    """`env:` / `environment:` as a list of {name, value}, of "K=V" strings, or a mapping; known values only."""
    env: dict[str, str] = {}
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict) and "name" in item and isinstance(item.get("value"), str | int | float):
                env[str(item["name"])] = str(item["value"])
            elif isinstance(item, str) and "=" in item:
                k, _, v = item.partition("=")
                env[k] = v
    elif isinstance(raw, dict):
        env = {str(k): str(v) for k, v in raw.items() if v is not None}
    return literal_env(env)


def _container(node: yaml.MappingNode, kind: str, base: Path | None) -> Launch | None:
    data = safeyaml.construct(node)
    if not isinstance(data, dict):
        return None
    entry_key, args_key, env_key = CONTAINER_FIELDS[kind]
    nodes = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
    line = node.start_mark.line + 1
    image = str(data.get("image") or "")
    entry = _yaml_words(nodes.get(entry_key))
    rest = _yaml_words(nodes.get(args_key))
    env = _env(data.get(env_key))
    words = entry + rest
    if words and program(words[0].text) in SHELLS:
        script = shell_script(words)
        found = from_shell(script.text, base, script.line, kind=kind, env=env) if script is not None else []
        return with_image(found, image)[0] if found else None
    if not entry and vllm_image(image) and find_program(rest) is None:
        words = [Word("vllm", line), Word("serve", line), *rest]
    got = launch_from_words(words, base, env, image)
    if got is None:
        return None
    return Launch(line, kind, got[0], got[1], got[2] or image)
