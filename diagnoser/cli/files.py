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


def open_inputs(files: tuple[str, ...], errors: list[str] | None = None) -> list[tuple[str, BinaryIO]]:
    """Files or stdin; an unreadable path is a usage error naming it (collected in `errors` when given)."""
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


def refuse_output_over_inputs(output: str | None, inputs: Iterable[str]) -> None:
    """-o naming one of the inputs (also through a symlink, a hard link or stdin's redirection) would replace
    the log with its report: a usage error, before anything is read or written. Every command with -o."""
    if output and any(_same_file(f, output) for f in inputs):
        raise click.UsageError(f"-o {output}: is one of the inputs; write the report to another file")


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
