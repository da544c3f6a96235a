"""`docker run [options] IMAGE [args]` (also podman, nerdctl, `docker container run`): what the container runs.

Only the options are read here (which take a value, `-e VAR=x`, `--entrypoint`); what the container's words
mean is the command detector's job (command.py).
"""

from __future__ import annotations

import re

from diagnoser.launch.shell import Word

RUNTIMES = ("docker", "podman", "nerdctl")
#: `docker run` options that take no value (every other option takes the next word).
SWITCHES = {"--rm", "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--privileged", "--init",
            "-P", "--publish-all", "--read-only", "-q", "--quiet", "--sig-proxy", "--no-healthcheck",
            "--oom-kill-disable"}


def program(word: str) -> str:
    """'/usr/bin/docker' -> 'docker'."""
    return word.rsplit("/", 1)[-1]


def docker_run(words: list[Word]) -> tuple[list[Word], dict[str, str], str] | None:
    """`docker run [opts] IMAGE [args]` -> (entry + args as the container runs them, env, image), else None."""
    for j, w in enumerate(words[:-1]):
        if program(w.text) in RUNTIMES and words[j + 1].text in ("run", "container"):
            k = j + 2 if words[j + 1].text == "run" else j + 3
            env: dict[str, str] = {}
            entry: list[Word] = []
            while k < len(words):
                t = words[k].text
                if not t.startswith("-") or t == "-":
                    break
                name, eq, val = t.partition("=")
                if name in SWITCHES or re.fullmatch(r"-[dit]{2,3}", name) or eq:
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
            return entry + words[k + 1:], env, words[k].text
    return None
