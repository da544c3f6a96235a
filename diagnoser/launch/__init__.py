"""Find the vLLM launch in a config file, for `vllm-doctor plan --from-file` (and the pre-commit hook).

A launch config is one of the KINDS below, tried in order (the first whose `claims` accepts the file reads it):

- a vLLM YAML config as `vllm serve --config FILE` reads it, a docker compose service, a Kubernetes
  container, or any YAML string that holds a shell command (manifests.py, config.py);
- a Dockerfile (`ENTRYPOINT` / `CMD`, exec or shell form; `FROM vllm/vllm-openai` supplies `vllm serve`),
  read with dockerfile-parse (dockerfile.py);
- a shell script (or any text run by a shell: a Makefile recipe, a CI `run:` block) holding `vllm serve MODEL
  ...` or `python -m vllm.entrypoints.openai.api_server ...`, also behind `exec`, `nohup`, `env VAR=1`, `uv
  run`, `bash -c '...'` or `docker run ... vllm/vllm-openai ARGS` (shell.py lexes, command.py detects,
  docker.py reads `docker run`).

Nothing is expanded: a `$VAR`, `${VAR:-x}`, `$(cmd)` or `` `cmd` `` value is unknown, and the setting it was
meant for falls back to vLLM's default, with a note. Shell text is read the way the shell reads it: backslash
continuations are joined, comments dropped — and a comment *inside* a continued command ends it, as it does for
the shell, which the notes point out.

A comment `# vllm-doctor: gpu=L4` (also `gpu-memory=24GiB`, `model=NAME`, `vllm-version=0.8.5`, `skip`)
pins per-file settings (pins.py).

To add a kind of launch file, write its reader `(text, folder) -> list[Launch]` and add one `Kind` to KINDS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diagnoser.launch.detect import from_shell
from diagnoser.launch.dockerfile import from_dockerfile, is_dockerfile
from diagnoser.launch.manifests import from_yaml
from diagnoser.launch.model import Launch, LaunchFile
from diagnoser.launch.pins import image_version, parse_pins
from diagnoser.launch.shell import LaunchFileError, Word, shell_words, simple_commands

__all__ = ["KINDS", "Kind", "Launch", "LaunchFile", "LaunchFileError", "Word", "image_version", "parse_pins",
           "read_launch_file", "shell_words", "simple_commands"]


@dataclass(frozen=True)
class Kind:
    """One kind of launch file: which files it claims (lower-case file name, text) and how it reads them."""

    name: str
    claims: Callable[[str, str], bool]
    read: Callable[[str, Path | None], list[Launch]]


#: Tried in order; the last claims every file.
KINDS: tuple[Kind, ...] = (
    Kind("yaml", lambda name, text: name.endswith((".yaml", ".yml")), from_yaml),
    Kind("dockerfile", is_dockerfile, from_dockerfile),
    Kind("shell", lambda name, text: True, from_shell),
)

NO_LAUNCH = "no vLLM launch (`vllm serve ...`, the OpenAI api_server, or a vLLM YAML config) in it"


def _text(path: Path) -> str | None:
    """The file's text as the server reads it; None for a binary file."""
    if path.is_dir():
        raise LaunchFileError("is a directory, not a launch config")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LaunchFileError(f"cannot read ({exc.strerror or exc})") from None
    if b"\0" in data[:8192]:
        return None
    # CRLF: a Windows checkout of an LF file (git autocrlf); the server reads the LF original
    return data.decode("utf-8", errors="replace").lstrip("\ufeff").replace("\r\n", "\n")


def read_launch_file(path: str) -> LaunchFile:
    """Every vLLM launch in the file; LaunchFileError when it cannot be read or parsed."""
    p = Path(path)
    text = _text(p)
    if text is None:
        return LaunchFile(path, [], skip_reason="a binary file")
    pins, skip = parse_pins(text)
    if skip:
        return LaunchFile(path, [], pins, skip_reason="'# vllm-doctor: skip' in the file")
    name = p.name.lower()
    kind = next(k for k in KINDS if k.claims(name, text))
    launches = kind.read(text, p.parent)
    return LaunchFile(path, launches, pins, skip_reason=None if launches else NO_LAUNCH)
