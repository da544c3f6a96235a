"""Command detection: which shell command starts vLLM, and the tokens the planner's parser gets from it.

A launch is `vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server ...` or `python -m
vllm.entrypoints.cli.main serve ...`, also behind `exec`, `nohup`, `env VAR=1`, `uv run`, `bash -c '...'` or
`docker run ... IMAGE ARGS` (docker.py), and the bare arguments of a container whose image is vLLM's. Values
the shell would expand (`$VAR`, `$(cmd)`) are left out with a note, `--config FILE` is merged (config.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from diagnoser.launch.config import merge_config
from diagnoser.launch.docker import docker_run, program
from diagnoser.launch.model import Launch
from diagnoser.launch.pins import vllm_image
from diagnoser.launch.shell import LaunchFileError, Word, shell_words, simple_commands
from diagnoser.lazyre import lazy
from diagnoser.vllm import serve_args

API_SERVER = "vllm.entrypoints.openai.api_server"
CLI_MAIN = "vllm.entrypoints.cli.main"
SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh"}
NOT_A_LAUNCH = {"echo", "printf", "print", "cat", "grep", "egrep", "fgrep", "which", "type", "man", "log",
                "info", "warn", "pgrep", "pkill", "kill", "killall", "ps", "test", "[", "[[", ":", "pip", "pip3",
                "tee", "sed", "awk", "logger", "hash", "alias", "unalias", "export", "local", "readonly",
                "declare", "help", "vllm-doctor", "unset", "source", "."}
WRAPPERS = {"exec", "nohup", "env", "sudo", "time", "nice", "uv", "uvx", "poetry", "pipenv", "pixi", "run",
            "stdbuf", "numactl", "taskset", "timeout", "setsid", "command", "-u", "-E"}
KEYWORDS = {"{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "time", "exec", "nohup",
            "command", "builtin"}
_ASSIGNMENT = lazy(r"[A-Za-z_]\w*=.*", re.S)
_SHELL_C = lazy(r"-[a-z]*c[a-z]*")


def _is_python(word: str) -> bool:
    return bool(re.fullmatch(r"python(\d(\.\d+)?)?", program(word)))


def find_program(words: list[Word]) -> tuple[int, list[str], int] | None:
    """(index of the program word, normalized program tokens, index of its first argument)."""
    for j, w in enumerate(words):
        if w.dynamic:
            continue
        if program(w.text) in ("vllm", "vllm.exe") and j + 1 < len(words) and words[j + 1].text == "serve":
            return j, ["vllm", "serve"], j + 2
        if _is_python(w.text):
            k = j + 1
            while k < len(words) and words[k].text.startswith("-") and words[k].text != "-m":
                k += 1
            if k + 1 < len(words) and words[k].text == "-m" and words[k + 1].text == API_SERVER:
                return j, ["python3", "-m", API_SERVER], k + 2
            if k + 2 < len(words) and words[k].text == "-m" and words[k + 1].text == CLI_MAIN \
                    and words[k + 2].text == "serve":
                return j, ["vllm", "serve"], k + 3
    return None


def shell_script(words: list[Word]) -> Word | None:
    """The script of `sh [-opts] -c SCRIPT` (also bash -lc, -ec, ...), else None."""
    if not words or program(words[0].text) not in SHELLS:
        return None
    for n, w in enumerate(words[1:], 1):
        if _SHELL_C.fullmatch(w.text):
            return words[n + 1] if n + 1 < len(words) else None
    return None


def launch_from_words(words: list[Word], base: Path | None, env: dict[str, str] | None = None,
                      image: str = "", strict: bool = False) -> tuple[list[str], list[str], str] | None:
    """A single command's words -> (tokens for the parser, notes, image), or None when it is no launch.

    strict (text inside a YAML file, which may be prose): the program must start the command (after `VAR=x`
    words and wrappers such as exec, nohup, env, uv run) and take at most one positional argument.
    """
    while words and words[0].text in KEYWORDS and not words[0].dynamic:
        words = words[1:]
    if not words or program(words[0].text) in NOT_A_LAUNCH:
        return None
    env = dict(env or {})
    docker = docker_run(words)
    if docker is not None:
        inner, denv, img = docker
        env.update(denv)
        if find_program(inner) is not None:
            got = launch_from_words(inner, base, env, strict=strict)
            return None if got is None else (got[0], got[1], img)
        if vllm_image(img):
            return (*_tokens(["vllm", "serve"], inner, env, base), img)
        return None
    found = find_program(words)
    if found is None:
        if image and vllm_image(image) and words[0].text.startswith("-"):
            return (*_tokens(["vllm", "serve"], words, env, base), image)
        return None
    j, prog, k = found
    if strict and not _command_like(words[:j], words[k:]):
        return None
    for w in words[:j]:
        if _ASSIGNMENT.fullmatch(w.text) and not w.dynamic:
            key, _, v = w.text.partition("=")
            env[key] = v
    return (*_tokens(prog, words[k:], env, base), image)


def _command_like(prefix: list[Word], args: list[Word]) -> bool:
    for w in prefix:
        if not (w.text in WRAPPERS or w.text.startswith("-") or _ASSIGNMENT.fullmatch(w.text)):
            return False
    parsed = serve_args.parse_arguments([w.text for w in args])
    return len(parsed.positionals) + (parsed.model is not None and not parsed.model_flag) <= 1


def _tokens(prog: list[str], args: list[Word], env: dict[str, str], base: Path | None
            ) -> tuple[list[str], list[str]]:
    """Program + arguments -> parser tokens; unknown ($VAR) values are left out with a note.

    Which words are a known option's value is serve_args' decision (the flag list's arity: one word, or all up
    to the next option for nargs '+', never an option); this walk keeps the Words because only they know what
    the shell would expand. A list with one unknown element is left out whole (a partial list is not planned).
    """
    notes: list[str] = []
    out: list[str] = []
    have_model = False
    config: str | None = None
    texts = [w.text for w in args]
    i = 0
    while i < len(args):
        w = args[i]
        i += 1
        if _is_option(w):
            vals = args[i:i + _value_count(w.text, texts, i)]
            i += len(vals)
            have_model = have_model or w.text.partition("=")[0] == "--model"
            given = _take_option(w, vals, out, notes)
            config = config if given is None else given
            continue
        _take_argument(w, have_model, out, notes)
        have_model = True
    if config is not None:
        out = merge_config(out, config, base, notes)
    env_words = [f"{k}={v}" for k, v in env.items() if re.fullmatch(r"VLLM_\w*", k)]   # what the planner reads
    return env_words + prog + out, notes


def _is_option(w: Word) -> bool:
    """An option word: starts with '-' (not '-' alone); an expansion only when it is `--flag=$VALUE`."""
    t = w.text
    return t.startswith("-") and t != "-" and not (w.dynamic and "=" not in t)


def _value_count(option: str, texts: list[str], i: int) -> int:
    """How many of the words from texts[i] are the option's values (none with `--flag=value`)."""
    name, eq, _ = option.partition("=")
    flag = serve_args.resolve(name)[0]
    # an unknown flag goes on as written, for the planner to report; the words after it stand alone
    return 0 if eq or flag is None else serve_args.value_count(flag, texts, i)


def _take_option(w: Word, vals: list[Word], out: list[str], notes: list[str]) -> str | None:
    """An option and its values: kept as parser tokens, or noted when the shell would expand them; returns the
    file `--config` names (merged at the end), else None."""
    t = w.text
    name, eq, value = t.partition("=")
    unknown = [v for v in vals if v.dynamic]
    if w.dynamic:
        notes.append(_unknown_note(w.raw or t, w.line))
    elif unknown and name == "--model":
        notes.append(_unknown_model_note(unknown[0].raw or unknown[0].text, unknown[0].line))
    elif unknown:
        spelled = " ".join(v.raw or v.text for v in vals)
        notes.append(_unknown_note(f"{name} {spelled}", unknown[0].line))
    elif name == "--config" and (eq or vals):
        return value if eq else vals[0].text
    else:
        out.extend([t, *(v.text for v in vals)])
    return None


def _take_argument(w: Word, have_model: bool, out: list[str], notes: list[str]) -> None:
    """A positional word: kept, or noted when the shell would expand it (the model, when it comes first)."""
    if w.dynamic:
        what = w.raw or w.text
        notes.append(_unknown_model_note(what, w.line) if not have_model else
                     f"line {w.line}: {what} is not expanded here; whatever it adds to the command is not planned")
    else:
        out.append(w.text)


def _unknown_model_note(what: str, line: int) -> str:
    return (f"line {line}: the model is {what}, which is not expanded here, so it is unknown; pin it with "
            "'# vllm-doctor: model=NAME'")


def _unknown_note(what: str, line: int) -> str:
    return (f"line {line}: {what}: the value is not expanded here, so it is unknown; planned with vLLM's "
            "default for that setting")


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
        if program(cmd_words[0].text) in SHELLS:
            script = shell_script(cmd_words)
            if script is not None and not script.dynamic:
                out.extend(from_shell(script.text, base, script.line, kind, env, strict))
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
