"""Find the vLLM launch in a config file, for `vllm-doctor plan --from-file` (and the pre-commit hook).

A launch config is one of:

- a shell script (or any text run by a shell: a Makefile recipe, a CI `run:` block) holding
  `vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server ...`, also behind `exec`, `nohup`,
  `env VAR=1`, `uv run`, `bash -c '...'` or `docker run ... vllm/vllm-openai ARGS`;
- a vLLM YAML config as `vllm serve --config FILE` reads it (keys are flag names, hyphens or underscores);
- a Dockerfile (`ENTRYPOINT` / `CMD`, exec or shell form; `FROM vllm/vllm-openai` supplies `vllm serve`);
- a YAML manifest: a docker compose service (`entrypoint` / `command`), a Kubernetes container (`command` /
  `args`, also `sh -c "vllm serve ..."`), or any YAML string that holds a shell command (SkyPilot `run:`, CI
  steps).

Nothing is expanded: a `$VAR`, `${VAR:-x}`, `$(cmd)` or `` `cmd` `` value is unknown, and the setting it was
meant for falls back to vLLM's default, with a note. Shell text is read the way the shell reads it: backslash
continuations are joined, comments dropped — and a comment *inside* a continued command ends it, as it does for
the shell, which the notes point out.

A comment `# vllm-doctor: gpu=L4` (also `gpu-memory=24GiB`, `model=NAME`, `vllm-version=0.8.5`, `skip`)
pins per-file settings.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import safeyaml
from .flags import by_prefix, lookup
from .launch.shell import LaunchFileError, Word, shell_words

__all__ = ["LaunchFileError", "Word", "shell_words"]

PIN_KEYS = ("gpu", "gpu-memory", "model", "vllm-version")
PIN_RE = re.compile(r"(?:^|\s)#\s*vllm-doctor:\s*(.*?)\s*$")
API_SERVER = "vllm.entrypoints.openai.api_server"
SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh"}
NOT_A_LAUNCH = {"echo", "printf", "print", "cat", "grep", "egrep", "fgrep", "which", "type", "man", "log",
                "info", "warn", "pgrep", "pkill", "kill", "killall", "ps", "test", "[", "[[", ":", "pip", "pip3",
                "tee", "sed", "awk", "logger", "hash", "alias", "unalias", "export", "local", "readonly",
                "declare", "help", "vllm-doctor", "unset", "source", "."}
#: YAML keys whose string values are shell commands (CI steps, SkyPilot, GitLab, Procfile-like configs);
#: block scalars (`|`, `>`) are read as shell under any key.
SCRIPT_KEYS = {"run", "script", "scripts", "command", "commands", "cmd", "args", "entrypoint", "exec", "setup",
               "before_script", "after_script", "start", "launch", "serve", "shell", "startup", "execute"}
WRAPPERS = {"exec", "nohup", "env", "sudo", "time", "nice", "uv", "uvx", "poetry", "pipenv", "pixi", "run",
            "stdbuf", "numactl", "taskset", "timeout", "setsid", "command", "-u", "-E"}
KEYWORDS = {"{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "time", "exec", "nohup",
            "command", "builtin"}
DOCKER_SWITCHES = {"--rm", "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--privileged", "--init",
                   "-P", "--publish-all", "--read-only", "-q", "--quiet", "--sig-proxy", "--no-healthcheck",
                   "--oom-kill-disable"}
DYNAMIC_RE = re.compile(r"\$[\w{(@*#?!$-]|`")


@dataclass
class Launch:
    """One vLLM launch found in a file: the command line for the planner's parser, and what to tell."""

    line: int
    kind: str                      # shell, vllm-config, dockerfile, compose, kubernetes, yaml
    tokens: list[str]              # ['VAR=1', 'vllm', 'serve', 'MODEL', '--flag', 'value', ...]
    notes: list[str] = field(default_factory=list)
    image: str = ""                # the container image that runs it, when the file names one

    @property
    def image_version(self) -> str | None:
        """'0.8.5' for vllm/vllm-openai:v0.8.5 (a vLLM image with a release tag), else None."""
        return image_version(self.image)


def image_version(image: str) -> str | None:
    if not image or not _vllm_image(image.rsplit(":", 1)[0]):
        return None
    m = re.search(r":v?(\d+\.\d+(?:\.\d+)?)(?:[-+@].*)?$", image)
    return m.group(1) if m else None


@dataclass
class LaunchFile:
    path: str
    launches: list[Launch]
    pins: dict[str, str] = field(default_factory=dict)
    skip_reason: str | None = None   # set when the file holds no launch or asks to be skipped


# --- per-file pins ----------------------------------------------------------------------------------------------

def parse_pins(text: str) -> tuple[dict[str, str], bool]:
    """`# vllm-doctor: gpu=L4 model=llama-3.1-8b` lines -> ({'gpu': 'L4', 'model': ...}, skip?).

    A comment that names no setting (prose that mentions the tool) is not a pin; one that names a setting and
    something else is a mistake, reported with its line.
    """
    pins: dict[str, str] = {}
    skip = False
    for no, line in enumerate(text.splitlines(), 1):
        m = PIN_RE.search(line)
        if not m:
            continue
        body = m.group(1).replace(",", " ")
        try:
            items = shlex.split(body)
        except ValueError:
            items = body.split()
        keys = [it.partition("=")[0].strip().lower().replace("_", "-") for it in items]
        if not any(k in (*PIN_KEYS, "skip") for k in keys) and \
                not all(re.fullmatch(r"[\w-]+=\S+", it) for it in items):
            continue                  # prose, not a pin
        for item, key in zip(items, keys, strict=True):
            _, eq, value = item.partition("=")
            if key == "skip" and not eq:
                skip = True
                continue
            if key not in PIN_KEYS or not eq or not value.strip():
                raise LaunchFileError(
                    f"line {no}: {item!r} in the vllm-doctor comment is not a setting; write "
                    "'# vllm-doctor: gpu=L4' (also gpu-memory=24GiB, model=NAME, vllm-version=X.Y.Z, skip)")
            pins[key] = value.strip()
    return pins, skip


# --- reading files -------------------------------------------------------------------------------------------------

def read_launch_file(path: str) -> LaunchFile:
    """Every vLLM launch in the file; LaunchFileError when it cannot be read or parsed."""
    p = Path(path)
    if p.is_dir():
        raise LaunchFileError("is a directory, not a launch config")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise LaunchFileError(f"cannot read ({exc.strerror or exc})") from None
    if b"\0" in data[:8192]:
        return LaunchFile(path, [], skip_reason="a binary file")
    # CRLF: a Windows checkout of an LF file (git autocrlf); the server reads the LF original
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff").replace("\r\n", "\n")
    pins, skip = parse_pins(text)
    if skip:
        return LaunchFile(path, [], pins, skip_reason="'# vllm-doctor: skip' in the file")
    name = p.name.lower()
    base = p.parent
    if name.endswith((".yaml", ".yml")):
        launches = from_yaml(text, base)
    elif _is_dockerfile(name, text):
        launches = from_dockerfile(text, base)
    else:
        launches = from_shell(text, base)
    if not launches:
        return LaunchFile(path, [], pins, skip_reason="no vLLM launch (`vllm serve ...`, the OpenAI api_server, "
                                                      "or a vLLM YAML config) in it")
    return LaunchFile(path, launches, pins)


def _is_dockerfile(name: str, text: str) -> bool:
    if name in ("dockerfile", "containerfile") or name.startswith(("dockerfile.", "containerfile.")) \
            or name.endswith((".dockerfile", ".containerfile")):
        return True
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return bool(re.match(r"(?i)(FROM|ARG)\s+\S", s)) and bool(re.search(r"(?im)^\s*FROM\s+\S", text))
    return False


# --- shell ---------------------------------------------------------------------------------------------------------

def simple_commands(words: list[Word]) -> list[tuple[list[Word], Word | None]]:
    """Split at control operators: [(words, the operator that ended them)]."""
    out: list[tuple[list[Word], Word | None]] = []
    cur: list[Word] = []
    for w in words:
        if w.op:
            if cur:
                out.append((cur, w))
            cur = []
            continue
        cur.append(w)
    if cur:
        out.append((cur, None))
    return out


def _prog(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _is_python(word: str) -> bool:
    return bool(re.fullmatch(r"python(\d(\.\d+)?)?", _prog(word)))


def _find_program(words: list[Word]) -> tuple[int, list[str], int] | None:
    """(index of the program word, normalized program tokens, index of its first argument)."""
    for j, w in enumerate(words):
        if w.dynamic:
            continue
        if _prog(w.text) in ("vllm", "vllm.exe") and j + 1 < len(words) and words[j + 1].text == "serve":
            return j, ["vllm", "serve"], j + 2
        if _is_python(w.text):
            k = j + 1
            while k < len(words) and words[k].text.startswith("-") and words[k].text != "-m":
                k += 1
            if k + 1 < len(words) and words[k].text == "-m" and words[k + 1].text == API_SERVER:
                return j, ["python3", "-m", API_SERVER], k + 2
            if k + 2 < len(words) and words[k].text == "-m" and words[k + 1].text == "vllm.entrypoints.cli.main" \
                    and words[k + 2].text == "serve":
                return j, ["vllm", "serve"], k + 3
    return None


def _docker_run(words: list[Word]) -> tuple[list[Word], dict[str, str], str] | None:
    """`docker run [opts] IMAGE [args]` -> (entry + args as the container runs them, env, image)."""
    for j, w in enumerate(words[:-1]):
        if _prog(w.text) in ("docker", "podman", "nerdctl") and words[j + 1].text in ("run", "container"):
            k = j + 2 if words[j + 1].text == "run" else j + 3
            env: dict[str, str] = {}
            entry: list[Word] = []
            while k < len(words):
                t = words[k].text
                if not t.startswith("-") or t == "-":
                    break
                name, eq, val = t.partition("=")
                if name in DOCKER_SWITCHES or re.fullmatch(r"-[dit]{2,3}", name) or eq:
                    k += 1
                else:
                    val = words[k + 1].text if k + 1 < len(words) else ""
                    k += 2
                if name in ("-e", "--env") and "=" in val and not words[k - 1].dynamic:
                    key, _, v = val.partition("=")
                    env[key] = v
                if name == "--entrypoint" and val:
                    entry = [Word(val, words[k - 1].line)]
            if k >= len(words):
                return None
            image = words[k].text
            return entry + words[k + 1:], env, image
    return None


def _vllm_image(image: str) -> bool:
    return "vllm" in image.rsplit("/", 1)[-1].lower() or image.lower().startswith("vllm/")


def launch_from_words(words: list[Word], base: Path | None, env: dict[str, str] | None = None,
                      image: str = "", strict: bool = False) -> tuple[list[str], list[str], str] | None:
    """A single command's words -> (tokens for the parser, notes, image), or None when it is no launch.

    strict (text inside a YAML file, which may be prose): the program must start the command (after `VAR=x`
    words and wrappers such as exec, nohup, env, uv run) and take at most one positional argument.
    """
    while words and words[0].text in KEYWORDS and not words[0].dynamic:
        words = words[1:]
    if not words or _prog(words[0].text) in NOT_A_LAUNCH:
        return None
    env = dict(env or {})
    docker = _docker_run(words)
    if docker is not None:
        inner, denv, img = docker
        env.update(denv)
        if _find_program(inner) is not None:
            got = launch_from_words(inner, base, env, strict=strict)
            return None if got is None else (got[0], got[1], img)
        if _vllm_image(img):
            return (*_tokens(["vllm", "serve"], inner, env, base), img)
        return None
    found = _find_program(words)
    if found is None:
        if image and _vllm_image(image) and words[0].text.startswith("-"):
            return (*_tokens(["vllm", "serve"], words, env, base), image)
        return None
    j, prog, k = found
    if strict and not _command_like(words[:j], words[k:]):
        return None
    for w in words[:j]:
        if re.fullmatch(r"[A-Za-z_]\w*=.*", w.text, re.S) and not w.dynamic:
            key, _, v = w.text.partition("=")
            env[key] = v
    return (*_tokens(prog, words[k:], env, base), image)


def _command_like(prefix: list[Word], args: list[Word]) -> bool:
    for w in prefix:
        if not (w.text in WRAPPERS or w.text.startswith("-") or re.fullmatch(r"[A-Za-z_]\w*=.*", w.text, re.S)):
            return False
    return len(_positionals([w.text for w in args])) <= 1


def _positionals(tokens: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if t.startswith("-") and t != "-":
            f = lookup(t.partition("=")[0]) or by_prefix(t.partition("=")[0])
            if f is not None and f.value and "=" not in t:
                i += 1
            continue
        out.append(t)
    return out


def _tokens(prog: list[str], args: list[Word], env: dict[str, str], base: Path | None
            ) -> tuple[list[str], list[str]]:
    """Program + arguments -> parser tokens; unknown ($VAR) values are left out with a note."""
    notes: list[str] = []
    out: list[str] = []
    have_model = False
    config: str | None = None
    i = 0
    while i < len(args):
        w = args[i]
        i += 1
        t = w.text
        if t.startswith("-") and t != "-" and not (w.dynamic and "=" not in t):
            name, eq, value = t.partition("=")
            flag = lookup(name) or by_prefix(name)
            is_config = name == "--config"
            if name == "--model":
                have_model = True
            if (is_config or (flag is not None and flag.value)) and not eq and i < len(args):
                val = args[i]
                i += 1
                if val.dynamic and name == "--model":
                    notes.append(_unknown_model_note(val.raw or val.text, val.line))
                elif val.dynamic:
                    notes.append(_unknown_note(f"{name} {val.raw or val.text}", val.line))
                elif is_config:
                    config = val.text
                else:
                    out.extend([t, val.text])
                continue
            if w.dynamic:
                notes.append(_unknown_note(w.raw or t, w.line))
            elif is_config and eq:
                config = value
            else:
                out.append(t)
            continue
        if w.dynamic:
            what = w.raw or t
            if not have_model:
                notes.append(_unknown_model_note(what, w.line))
            else:
                notes.append(f"line {w.line}: {what} is not expanded here; whatever it adds to the command is "
                             "not planned")
            have_model = True
            continue
        have_model = True
        out.append(t)
    if config is not None:
        out = _merge_config(out, config, base, notes)
    env_words = [f"{k}={v}" for k, v in env.items() if re.fullmatch(r"VLLM_\w*", k)]   # what the planner reads
    return env_words + prog + out, notes


def _given(tokens: list[str]) -> tuple[bool, set[str]]:
    """(a positional model is given, the flags given) in `--flag value` tokens."""
    flags: set[str] = set()
    positional = False
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if t.startswith("-") and t != "-":
            name, eq, _ = t.partition("=")
            f = lookup(name) or by_prefix(name)
            if f is not None:
                flags.add(f.name)
                if f.value and not eq:
                    i += 1
            continue
        positional = True
    return positional, flags


def _unknown_model_note(what: str, line: int) -> str:
    return (f"line {line}: the model is {what}, which is not expanded here, so it is unknown; pin it with "
            "'# vllm-doctor: model=NAME'")


def _unknown_note(what: str, line: int) -> str:
    return (f"line {line}: {what}: the value is not expanded here, so it is unknown; planned with vLLM's "
            "default for that setting")


def _merge_config(out: list[str], config: str, base: Path | None, notes: list[str]) -> list[str]:
    """`--config FILE`: its settings under the command line's (vLLM: the command line wins)."""
    candidates = [Path(config)] if Path(config).is_absolute() else \
        [p for p in ((base / config) if base else None, Path(config)) if p is not None]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        notes.append(f"--config {config}: not found here, so its settings are not planned (plan it too: "
                     f"--from-file {config})")
        return out
    try:
        data = safeyaml.load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise LaunchFileError(f"--config {config}: not a readable YAML config ({exc})") from None
    if not isinstance(data, dict):
        raise LaunchFileError(f"--config {config}: not a YAML mapping of flag names to values")
    has_model, given = _given(out)
    extra, cnotes = config_tokens(data)
    notes.extend(cnotes)
    merged = list(out)
    k = 0
    while k < len(extra):
        t = extra[k]
        name = t.partition("=")[0]
        f = lookup(name)
        span = 2 if (f is not None and f.value and "=" not in t and k + 1 < len(extra)) else 1
        skip = (f is not None and f.name in given) or (name == "--model" and (has_model or "--model" in given))
        if not skip:
            merged.extend(extra[k:k + span])
        k += span
    notes.append(f"settings of --config {config} included (the command line's win)")
    return merged


# --- vLLM YAML configs ---------------------------------------------------------------------------------------------

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
    tokens, notes = config_tokens(data)
    return Launch(line, "vllm-config", ["vllm", "serve", *tokens], notes)


# --- YAML manifests ------------------------------------------------------------------------------------------------

def _construct(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def from_yaml(text: str, base: Path | None) -> list[Launch]:
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
            value = _construct(doc)
        except yaml.YAMLError as exc:
            raise LaunchFileError(f"not valid YAML ({str(exc).splitlines()[0]})") from None
        if is_vllm_config(value):
            out.append(from_config(value, doc.start_mark.line + 1))
            continue
        k8s = isinstance(value, dict) and "apiVersion" in value and "kind" in value
        _walk(doc, k8s, base, out)
    return out


def _scalar_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1 + (1 if getattr(node, "style", None) in ("|", ">") else 0)


def _walk(node: yaml.Node, k8s: bool, base: Path | None, out: list[Launch], key: str = "") -> None:
    if isinstance(node, yaml.MappingNode):
        pairs = [(k.value if isinstance(k, yaml.ScalarNode) else "", v) for k, v in node.value]
        keys = {k for k, _ in pairs}
        skip: set[str] = set()
        if keys & {"image", "build"} and keys & {"command", "args", "entrypoint"}:
            launch = _container(node, k8s, base)
            if launch is not None:
                out.append(launch)
            skip = {"command", "args", "entrypoint", "env", "environment"}
        for k, v in pairs:
            if k not in skip:
                _walk(v, k8s, base, out, k)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _walk(item, k8s, base, out, key)
    elif isinstance(node, yaml.ScalarNode) and isinstance(node.value, str) and "vllm" in node.value:
        if key.endswith((".yaml", ".yml")):      # a ConfigMap holding a vLLM config
            try:
                data = safeyaml.load(node.value)
            except yaml.YAMLError:
                data = None
            if is_vllm_config(data):
                out.append(from_config(data, _scalar_line(node)))
                return
        if node.tag == "tag:yaml.org,2002:str" and (key.lower() in SCRIPT_KEYS or node.style in ("|", ">")):
            out.extend(from_shell(node.value, base, _scalar_line(node), kind="yaml", strict=True))


def _yaml_words(node: yaml.Node | None) -> list[Word]:
    """A command given as a YAML list (no shell: literal words) or a string (split like compose does)."""
    if node is None:
        return []
    if isinstance(node, yaml.SequenceNode):
        out = []
        for item in node.value:
            text = str(_construct(item)) if isinstance(item, yaml.ScalarNode) else json.dumps(_construct(item))
            out.append(Word(text, _scalar_line(item), text, bool(DYNAMIC_RE.search(text))))
        return out
    if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null":
        return [w for w in shell_words(str(_construct(node)), _scalar_line(node)) if not w.op]
    return []


def _container(node: yaml.MappingNode, k8s: bool, base: Path | None) -> Launch | None:
    data = _construct(node)
    if not isinstance(data, dict):
        return None
    nodes = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
    line = node.start_mark.line + 1
    image = str(data.get("image") or "")
    kind = "kubernetes" if k8s else "compose"
    entry = _yaml_words(nodes.get("command") if k8s else nodes.get("entrypoint"))
    rest = _yaml_words(nodes.get("args") if k8s else nodes.get("command"))
    env: dict[str, str] = {}
    raw_env = data.get("env") if k8s else data.get("environment")
    if isinstance(raw_env, list):
        for item in raw_env:
            if isinstance(item, dict) and "name" in item and isinstance(item.get("value"), str | int | float):
                env[str(item["name"])] = str(item["value"])
            elif isinstance(item, str) and "=" in item:
                k, _, v = item.partition("=")
                env[k] = v
    elif isinstance(raw_env, dict):
        env = {str(k): str(v) for k, v in raw_env.items() if v is not None}
    env = {k: v for k, v in env.items() if not DYNAMIC_RE.search(v)}
    words = entry + rest
    if words and _prog(words[0].text) in SHELLS:
        for n, w in enumerate(words[1:], 1):
            if re.fullmatch(r"-[a-z]*c[a-z]*", w.text) and n + 1 < len(words):
                found = from_shell(words[n + 1].text, base, words[n + 1].line, kind=kind, env=env)
                return _with_image(found, image)[0] if found else None
        return None
    if not entry and _vllm_image(image) and _find_program(rest) is None:
        words = [Word("vllm", line), Word("serve", line), *rest]
    got = launch_from_words(words, base, env, image)
    if got is None:
        return None
    return Launch(line, kind, got[0], got[1], got[2] or image)


# --- Dockerfiles ---------------------------------------------------------------------------------------------------

def from_dockerfile(text: str, base: Path | None) -> list[Launch]:
    """The final stage's ENTRYPOINT + CMD."""
    logical: list[tuple[int, str]] = []
    cur: list[str] = []
    first = 0
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith("#") or (not s and not cur):
            continue             # comments (also inside a continued instruction: Docker drops them)
        if not cur:
            first = no
        if raw.rstrip().endswith("\\"):
            cur.append(raw.rstrip()[:-1])
            continue
        cur.append(raw)
        logical.append((first, " ".join(part.strip() for part in cur)))
        cur = []
    if cur:
        logical.append((first, " ".join(part.strip() for part in cur)))
    image = ""
    env: dict[str, str] = {}
    entry: tuple[int, Any] | None = None
    cmd: tuple[int, Any] | None = None
    for no, inst in logical:
        m = re.match(r"(\w+)\s*(.*)", inst, re.S)
        if not m:
            continue
        op, rest = m.group(1).upper(), m.group(2).strip()
        if op == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--")]
            image = parts[0] if parts else ""
            entry = cmd = None      # a new stage starts from its base image's settings
            env = {}
        elif op == "ENV":
            if not rest:
                continue
            if "=" in rest.split(None, 1)[0]:
                try:
                    pairs = shlex.split(rest)
                except ValueError:
                    pairs = []
                for pair in pairs:
                    k, _, v = pair.partition("=")
                    env[k] = v
            else:
                k, _, v = rest.partition(" ")
                env[k] = v.strip()
        elif op in ("ENTRYPOINT", "CMD"):
            form: Any = rest
            if rest.startswith("["):
                try:
                    form = [str(x) for x in json.loads(rest)]
                except ValueError:
                    form = rest
            if op == "ENTRYPOINT":
                entry = (no, form)
            else:
                cmd = (no, form)
    env = {k: v for k, v in env.items() if not DYNAMIC_RE.search(v)}
    if entry is not None and isinstance(entry[1], str):
        return _with_image(from_shell(entry[1], base, entry[0], kind="dockerfile", env=env), image)
    words: list[Word] = []
    line = (cmd or entry or (1, None))[0]
    if entry is not None:
        words = [Word(t, entry[0], t, bool(DYNAMIC_RE.search(t))) for t in entry[1]]
    if cmd is not None:
        if isinstance(cmd[1], str):
            if entry is None:
                return _with_image(from_shell(cmd[1], base, cmd[0], kind="dockerfile", env=env), image)
            words += [Word(t, cmd[0], t) for t in ("/bin/sh", "-c", cmd[1])]
        else:
            words += [Word(t, cmd[0], t, bool(DYNAMIC_RE.search(t))) for t in cmd[1]]
    if not words:
        return []
    if words and _prog(words[0].text) in SHELLS and len(words) > 2 and words[1].text == "-c":
        return _with_image(from_shell(words[2].text, base, line, kind="dockerfile", env=env), image)
    if entry is None and _vllm_image(image) and _find_program(words) is None:
        words = [Word("vllm", line), Word("serve", line), *words]
    got = launch_from_words(words, base, env, image)
    if got is None:
        return []
    return [Launch(line, "dockerfile", got[0], got[1], got[2] or image)]


def _with_image(launches: list[Launch], image: str) -> list[Launch]:
    for launch in launches:
        launch.image = launch.image or image
    return launches


# --- shell text ----------------------------------------------------------------------------------------------------

def from_shell(text: str, base: Path | None, first_line: int = 1, kind: str = "shell",
               env: dict[str, str] | None = None, strict: bool = False) -> list[Launch]:
    """Every launch in shell text (also `bash -c '...'` inside it); strict: see launch_from_words."""
    if "vllm" not in text:
        return []
    try:
        cmds = simple_commands(shell_words(text, first_line))
    except LaunchFileError:
        if strict:
            return []               # a YAML string that is not shell (prose with an apostrophe)
        raise
    out: list[Launch] = []
    for idx, (cmd_words, end) in enumerate(cmds):
        if cmd_words and _prog(cmd_words[0].text) in SHELLS:
            for n, w in enumerate(cmd_words[1:], 1):
                if re.fullmatch(r"-[a-z]*c[a-z]*", w.text) and n + 1 < len(cmd_words) \
                        and not cmd_words[n + 1].dynamic:
                    out.extend(from_shell(cmd_words[n + 1].text, base, cmd_words[n + 1].line, kind, env, strict))
                    break
            continue
        got = launch_from_words(cmd_words, base, env, strict=strict)
        if got is None:
            continue
        tokens, notes, image = got
        notes = _layout_notes(cmd_words, end, cmds[idx + 1:]) + notes
        out.append(Launch(cmd_words[0].line, kind, tokens, notes, image))
    return out


def _layout_notes(words: list[Word], end: Word | None, following: list[tuple[list[Word], Word | None]]
                  ) -> list[str]:
    """Flags on the lines after a command that the shell runs as commands of their own (vLLM never sees them)."""
    notes: list[str] = []
    escaped = [w for w in words if w.text[:1] in (" ", "\t") and w.raw.startswith("\\")]
    for w in escaped:
        notes.append(f"line {w.line}: a backslash followed by a space escapes the space, not the line break: "
                     f"{w.text.strip() or 'a lone space'!r} reaches vLLM as an argument and the command ends here")
    dropped: list[str] = []
    first: int | None = None
    sep = end
    for more, more_end in following:
        if sep is None or sep.text != "\n" or not more or not more[0].text.startswith("-"):
            break
        first = first or more[0].line
        dropped.extend(w.raw or w.text for w in more)
        sep = more_end
    if dropped:
        if end is not None and end.cut is not None:
            why = (f"the comment on line {end.cut} ends the backslash-continued command (a comment cannot sit "
                   "inside one: delete it or move it above the command)")
        elif escaped:
            why = f"line {escaped[-1].line} ends with a backslash followed by a space, not a line continuation"
        else:
            why = f"line {words[-1].line} does not end with a backslash"
        notes.append(f"line {first}: {' '.join(dropped)} never reaches vLLM: {why}; the shell runs it as a "
                     "command of its own")
    return notes
