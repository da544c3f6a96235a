"""Dockerfiles (and Containerfiles): the final stage's ENTRYPOINT + CMD, as the container runs them.

Instructions are split by the `dockerfile-parse` library (imported only here, when a Dockerfile is read): it
knows the `# escape=` directive, comments inside continued instructions and the stage boundaries, which a
hand-written splitter got wrong (a file with `# escape=\\`` lost every continued line). What the command
means is command.py's job; `FROM vllm/vllm-openai` supplies `vllm serve` to bare arguments.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnoser.launch.detect import find_program, from_shell, launch_from_words, shell_script
from diagnoser.launch.model import Launch, literal_env, literal_words, with_image
from diagnoser.launch.pins import vllm_image
from diagnoser.launch.shell import LaunchFileError, Word, shell_words
from diagnoser.lazyre import lazy

#: dockerfile-parse joins a continued instruction by repeated string concatenation: quadratic in the
#: instruction's length. Real Dockerfiles cost a few million character copies; a file over this budget is
#: refused in a linear pre-scan rather than read for minutes.
MAX_JOIN_COST = 200_000_000
_CONTINUED = lazy(r"[\\`]\s*\Z")


@dataclass
class Stage:
    """What the last `FROM` stage sets: its base image, VLLM_* environment, ENTRYPOINT and CMD (line, form)."""

    image: str = ""
    env: dict[str, str] = field(default_factory=dict)
    entry: tuple[int, Any] | None = None      # form: a list of words (exec form) or a string (shell form)
    cmd: tuple[int, Any] | None = None


def is_dockerfile(name: str, text: str) -> bool:
    """Dockerfile, Containerfile, x.dockerfile, Dockerfile.vllm; or text that starts with FROM/ARG and has a FROM."""
    if name in ("dockerfile", "containerfile") or name.startswith(("dockerfile.", "containerfile.")) \
            or name.endswith((".dockerfile", ".containerfile")):
        return True
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return bool(re.match(r"(?i)(FROM|ARG)\s+\S", s)) and bool(re.search(r"(?im)^\s*FROM\s+\S", text))
    return False


def _check_cost(text: str) -> None:
    """Refuse what dockerfile-parse would join for minutes (counting both continuation characters)."""
    cost = run = start = 0
    for no, line in enumerate(text.splitlines(), 1):
        if run == 0:
            start = no
        run += len(line)
        cost += run
        if cost > MAX_JOIN_COST:
            raise LaunchFileError(f"line {start}: an instruction continued over more lines than any real "
                                  "Dockerfile has; not read")
        if not _CONTINUED.search(line):
            run = 0


def _form(rest: str) -> Any:
    """ENTRYPOINT / CMD: the exec form's words (a JSON list), else the shell form's text."""
    if rest.startswith("["):
        try:
            return [str(x) for x in json.loads(rest)]
        except ValueError:
            pass
    return rest


def _env(value: str, line: int) -> dict[str, str]:
    """The VLLM_* settings of `ENV K=V K2="v 2"` or `ENV K V` (the only variables the planner reads).

    Split by the linear shell lexer (Docker reads ENV words the same way, quotes and all): the library's own
    splitter takes minutes on a hostile multi-megabyte ENV line.
    """
    if "VLLM_" not in value:
        return {}
    words = [w for w in shell_words(value, line) if not w.op]
    if not words:
        return {}
    if "=" not in words[0].text:          # the legacy form: one variable, the rest of the line its value
        return {words[0].text: " ".join(w.text for w in words[1:])} if not any(w.dynamic for w in words) else {}
    pairs = (w.text.partition("=") for w in words if "=" in w.text and not w.dynamic)
    return {k: v for k, _, v in pairs if k.startswith("VLLM_")}


def final_stage(text: str) -> Stage:
    """The settings the final stage runs with (a new stage starts from its base image's: nothing known)."""
    try:
        from dockerfile_parse import DockerfileParser
        from dockerfile_parse.parser import image_from
    except ImportError:  # pragma: no cover - a runtime dependency; only a broken install lacks it
        raise LaunchFileError("reading a Dockerfile needs the dockerfile-parse package: pip install "
                              "dockerfile-parse") from None
    _check_cost(text)
    stage = Stage()
    for inst in DockerfileParser(fileobj=io.BytesIO(text.encode("utf-8"))).structure:
        op, rest, line = inst["instruction"], inst["value"].strip(), inst["startline"] + 1
        if op == "FROM":
            stage = Stage(image=image_from(rest)[0] or "")
        elif op == "ENV" and rest:
            stage.env.update(_env(rest, line))
        elif op == "ENTRYPOINT":
            stage.entry = (line, _form(rest))
        elif op == "CMD":
            stage.cmd = (line, _form(rest))
    stage.env = literal_env(stage.env)
    return stage


def from_dockerfile(text: str, base: Path | None) -> list[Launch]:
    """The final stage's ENTRYPOINT + CMD as one launch (none when they start no vLLM)."""
    stage = final_stage(text)
    entry, cmd, image, env = stage.entry, stage.cmd, stage.image, stage.env

    def shell(form: tuple[int, Any]) -> list[Launch]:
        return with_image(from_shell(form[1], base, form[0], kind="dockerfile", env=env), image)

    if entry is not None and isinstance(entry[1], str):
        return shell(entry)           # a shell-form ENTRYPOINT ignores CMD
    if entry is None and cmd is not None and isinstance(cmd[1], str):
        return shell(cmd)
    line = (cmd or entry or (1, None))[0]
    words = literal_words(entry[1], entry[0]) if entry is not None else []
    if cmd is not None and isinstance(cmd[1], str):
        words += [Word(t, cmd[0], t) for t in ("/bin/sh", "-c", cmd[1])]   # exec ENTRYPOINT + shell-form CMD
    elif cmd is not None:
        words += literal_words(cmd[1], cmd[0])
    if not words:
        return []
    script = shell_script(words)
    if script is not None:
        return with_image(from_shell(script.text, base, line, kind="dockerfile", env=env), image)
    if entry is None and vllm_image(image) and find_program(words) is None:
        words = [Word("vllm", line), Word("serve", line), *words]
    got = launch_from_words(words, base, env, image)
    if got is None:
        return []
    return [Launch(line, "dockerfile", got[0], got[1], got[2] or image)]
