"""What the commands read and write: the logs (files, compressed files or stdin), the rule packs (`--rules`),
and the report (`-o FILE` or stdout). Every mistake a user can make here is a one-line usage error naming
the file and what to change.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from diagnoser.errors import DoctorError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from diagnoser.rules.loader import Rule


#: what a command says when it would read stdin and the process has none (started with `<&-`)
NO_STDIN = "stdin is closed: give a log FILE, or pipe the log in (`vllm serve ... 2>&1 | vllm-doctor`)"


def refuse_unusable_stdin(files: tuple[str, ...], follow: str | None = None, command: list[str] | None = None) -> None:
    """A usage error, before anything waits on it: `--follow -` (stdin is read live without --follow), or
    reading stdin when the process has none (started with stdin closed, `<&-`)."""
    if follow == "-":
        raise click.UsageError("--follow reads a file as it grows; stdin is read live without it "
                               "(`vllm serve ... 2>&1 | vllm-doctor diagnose --until ready`)")
    if sys.stdin is None and not follow and not command and (not files or "-" in files):
        raise click.UsageError(NO_STDIN)


def open_inputs(files: tuple[str, ...], errors: list[str] | None = None) -> list[tuple[str, BinaryIO]]:
    """Files or stdin; an unreadable path is a usage error naming it (collected in `errors` when given)."""
    refuse_unusable_stdin(files)
    if not files:
        if sys.stdin is not None and sys.stdin.isatty():
            click.echo("Paste the vLLM log, then press Ctrl-D (Ctrl-Z Enter on Windows) to diagnose it.",
                       err=True)
        files = ("-",)
    from diagnoser.ingest.sources import decompressed, open_log

    out = []
    for name in files:
        try:
            # compressed logs (gzip, bzip2, xz, zstd) are read transparently, as `scan` and the library read them;
            # stdin only when it can be peeked at (a real one can), never wrapped in a reader that would close it
            stdin = sys.stdin.buffer if name == "-" else None
            out.append((name, open_log(name) if stdin is None else
                        decompressed(stdin, "-") if hasattr(stdin, "peek") else stdin))
        except DoctorError as exc:
            if errors is None:
                raise click.UsageError(str(exc)) from None
            errors.append(str(exc))
    return out


def refuse_compressed(name: str, option: str) -> None:
    """Live modes read a file as it is written: a compressed one cannot be, so it is a usage error."""
    from diagnoser.ingest.sources import file_compression

    kind = file_compression(name)
    if kind:
        raise click.UsageError(f"{name}: is {kind}-compressed, which {option} cannot read as it grows; diagnose it "
                               f"without {option} (`vllm-doctor {name}`)")


def _same_file(a: str, b: str) -> bool:
    """Whether paths a and b are one file ("-": stdin when it is a file, as `< a.log` makes it)."""
    try:
        if a == "-":
            stdin = os.fstat(sys.stdin.fileno())
            out = os.stat(b)
            return (stdin.st_dev, stdin.st_ino) == (out.st_dev, out.st_ino)
        return Path(a).resolve() == Path(b).resolve() or (Path(b).exists() and os.path.samefile(a, b))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def refuse_output_over_inputs(output: str | None, inputs: Iterable[str], rule_paths: Iterable[str] = (),
                              config_file: str | None = None) -> None:
    """-o naming one of the inputs (also through a symlink, a hard link or stdin's redirection) would replace
    the log with its report: a usage error, before anything is read or written. Every command with -o. So would
    -o naming the --config-file, a --rules file or any file inside a --rules folder (a report there is also read
    as a rule pack next time)."""
    if not output:
        return
    if any(_same_file(f, output) for f in inputs):
        raise click.UsageError(f"-o {output}: is one of the inputs; write the report to another file")
    if config_file and _same_file(config_file, output):
        raise click.UsageError(f"-o {output}: is the --config-file; write the report to another file")
    for rules in rule_paths:
        if _same_file(rules, output) or (os.path.isdir(rules) and _inside(output, rules)):
            raise click.UsageError(f"-o {output}: is in the --rules {rules}; write the report to another file")
        if os.path.isdir(rules) and any(_same_file(str(p), output) for p in Path(rules).rglob("*.y*ml")):
            raise click.UsageError(f"-o {output}: is in the --rules {rules}; write the report to another file")


def _set_decompression_cap(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """--max-decompressed SIZE: checked, and handed to the readers (and scan's workers) by the environment."""
    if value is None:
        return
    from diagnoser.ingest.sources import CAP_ENV, parse_cap

    try:
        parse_cap(value)
    except DoctorError as exc:
        raise click.UsageError(str(exc)) from None
    os.environ[CAP_ENV] = value


#: the option of every command that reads logs
MAX_DECOMPRESSED = click.option(
    "--max-decompressed", metavar="SIZE", default=None, expose_value=False, callback=_set_decompression_cap,
    help="A compressed log may expand to this size (default 16GiB, and at most 1000x its size past 32 MiB; "
         "giving a size lifts the ratio cap).")


def _inside(path: str, folder: str) -> bool:
    """Whether `path` (resolved: symlinks, `..`) lies inside `folder`."""
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except (OSError, ValueError):
        return False


def write_report(text: str, output: str | None, color: bool | None = None) -> None:
    """A report to -o FILE, or to stdout (`color`: --color keeps the colour in a pipe)."""
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.UsageError(f"{output}: cannot write ({exc.strerror or exc})") from None
    else:
        click.echo(text, nl=False, color=color)


def builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules (a seam: tests swap in their own)."""
    from diagnoser.rules.loader import builtin_rules as shipped

    return shipped()


def rules_with(rule_paths: tuple[str, ...]) -> list[Rule] | tuple[Rule, ...]:
    """Shipped rules plus --rules files (fully validated); a bad file is a usage error naming it."""
    from diagnoser.rules.loader import RuleError, load_rules

    if not rule_paths:
        return builtin_rules()
    try:
        return load_rules(tuple(Path(p) for p in rule_paths))
    except RuleError as exc:
        raise click.UsageError(str(exc)) from None
