"""`vllm-doctor [diagnose] FILE...` and `vllm-doctor check`: diagnose logs and write the report in a format,
once (files, stdin, a paste) or live as the log grows (`--tee`, `--follow`, `--until`, `--timeout`; `run`
uses the same path for a command's output). Their shared options, the exit code from `--fail-on`, and the
notes on stderr (`--live` announcements, inputs with no vLLM line) live here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from diagnoser.cli.files import (
    MAX_DECOMPRESSED,
    open_inputs,
    refuse_compressed,
    refuse_output_over_inputs,
    refuse_unusable_stdin,
    rules_with,
    write_report,
)
from diagnoser.report import FORMATS
from diagnoser.report.sanitize import OutputFilter, clean

if TYPE_CHECKING:
    from diagnoser.analysis.pipeline import Report
    from diagnoser.rules.loader import Rule

FAIL_ON = ("error", "warning", "info", "never")

LIVE_OPTIONS = [
    click.option("--tee", is_flag=True, help="Pass the input to stdout unchanged; findings go to stderr."),
    click.option("--follow", type=click.Path(dir_okay=False), default=None,
                 help="Follow FILE like tail -F (it may not exist yet, be truncated or rotated)."),
    click.option("--until", type=click.Choice(["ready", "failure", "exit"]), default=None,
                 help="Stop at: ready (exit 0), a certain failure (exit 1), or the end of the input."),
    click.option("--timeout", type=click.FloatRange(min=0), default=None,
                 help="Give up after S seconds (exit 3, with the stage it was in and for how long)."),
    click.option("--update-every", type=click.FloatRange(min=0), default=10.0, show_default=True,
                 help="Live: print a repeated finding's running count at most every S seconds."),
]


def _format_choices() -> list[str]:
    return ["auto", *FORMATS]


def diagnose_options(func: Any, files: bool = True) -> Any:
    """The options of `diagnose`, `check` and (without FILES) `run`."""
    options = [
        *([click.argument("files", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))] if files else []),
        click.option("--format", "-f", "fmt", type=click.Choice(_format_choices()), default="auto",
                      show_default=True, help="Output format (auto: github in GitHub Actions, else text)."),
        click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
                     help="Exit 1 when a finding is at or above this severity."),
        click.option("--exit-zero", is_flag=True, help="Always exit 0 when the diagnosis ran (rollouts)."),
        click.option("--rules", "rule_paths", multiple=True, type=click.Path(),
                     help="Extra rule file or folder (repeatable)."),
        click.option("--no-redact", is_flag=True, help="Keep secrets in the output (warns on stderr)."),
        MAX_DECOMPRESSED,
        click.option("--color/--no-color", default=None, help="Force colour on or off (default: on a TTY)."),
        click.option("--config-file", type=click.Path(), default=None,
                     help="The launch config that set the flags (SARIF locations point at it)."),
        click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
                     help="Write the report to this file instead of stdout."),
        click.option("--series", "with_series", is_flag=True,
                     help="JSON: add the serving phase's downsampled time series per engine (top-level `series`)."),
        click.option("--live", is_flag=True,
                     help="Announce each problem on stderr the moment it appears (for a running server)."),
        *LIVE_OPTIONS,
    ]
    for opt in reversed(options):
        func = opt(func)
    return func


def pick_format(name: str) -> str:
    """`auto` is github inside GitHub Actions when that format exists, text otherwise."""
    if name != "auto":
        return name
    if os.environ.get("GITHUB_ACTIONS") == "true" and "github" in FORMATS:
        return "github"
    return "text"


def exit_code(reports: list[Report], fail_on: str, exit_zero: bool) -> int:
    """1 when any finding is at or above --fail-on, else 0."""
    if exit_zero or fail_on == "never":
        return 0
    from diagnoser.rules.model import SEVERITY_RANK

    limit = SEVERITY_RANK[fail_on]
    hit = any(SEVERITY_RANK[f.severity] <= limit for r in reports for f in r.findings if not f.rule.context)
    return 1 if hit else 0


def diagnose(*args: Any, **kwargs: Any) -> Report:
    """engine.diagnose, imported when a log is read (a seam: tests swap in their own)."""
    from diagnoser.analysis.pipeline import diagnose as run

    return run(*args, **kwargs)


def renderer(name: str) -> Any:
    """The render function of one format, imported when the report is written."""
    from diagnoser.report import renderer as pick

    return pick(name)


def _announcer() -> Any:
    """Live mode: one stderr line per new problem (once per rule), before the full report at the end."""
    told: set[str] = set()

    def announce(hit: Any) -> None:
        if hit.rule.severity == "info" or hit.rule.id in told:
            return
        told.add(hit.rule.id)
        _say(hit)

    return announce


def _say(hit: Any) -> None:
    click.echo(f"vllm-doctor: line {hit.line.number}: {hit.rule.severity} [{hit.rule.id}] {hit.rule.title}"
               f" (stage: {hit.rule.stage or hit.stage or 'unknown'})", err=True)


def _render_options(config_file: str | None, fail_on: str, color: bool | None, plain: bool,
                    **extra: Any) -> dict[str, Any]:
    """The renderers' options; `plain`: no colour unless --color asked for it, and no terminal width (a file, or
    stdout carrying --tee)."""
    opts: dict[str, Any] = {"config_file": config_file, "fail_on": fail_on, **extra}
    if color is not None:
        opts["color"] = color
    elif plain:
        opts["color"] = False
    if plain:
        opts["width"] = 0
    return opts


def run_diagnosis(files: tuple[str, ...], fmt: str, fail_on: str, exit_zero: bool, rule_paths: tuple[str, ...],
                  no_redact: bool, color: bool | None, config_file: str | None, output: str | None,
                  live: bool = False, gate: bool = False, with_series: bool = False, tee: bool = False,
                  follow: str | None = None, until: str | None = None, timeout: float | None = None,
                  update_every: float = 10.0, command: list[str] | None = None, kill_on_failure: bool = False) -> int:
    """Shared by `diagnose`, `check` (`gate`) and `run`: returns the exit code.

    An unreadable input does not hide the others: they are reported, then each bad one is named and the
    exit code is 2. An input with no vLLM line at all is an error for `check` and a note for `diagnose`.
    """
    refuse_output_over_inputs(output, (*files, *((follow,) if follow else ()),
                                       *(("-",) if not files and not follow and not command else ())),
                              rule_paths, config_file)
    copy = _early_copy(files, tee, follow, command)
    rules = rules_with(rule_paths)
    if config_file and not Path(config_file).is_file():
        raise click.UsageError(f"--config-file {config_file}: no such file; give the launch config that set the "
                               "flags, or leave the option out")
    if no_redact:
        click.echo("vllm-doctor: warning: --no-redact: secrets in the log will appear in the output", err=True)
    fmt = pick_format(fmt)
    _filter_output(fmt, no_redact)
    if with_series and fmt != "json":
        click.echo(f"vllm-doctor: note: --series adds the serving time series to --format json only; the {fmt} "
                   "report shows it its own way (text: sparklines, html: charts)", err=True)
    if tee or follow or until or timeout is not None or command:
        return _run_live(files, fmt, fail_on, exit_zero, rules, no_redact, color, config_file, output, tee, follow,
                         until, timeout, update_every, command, kill_on_failure, copy, gate)
    reports, errors = _diagnose_each(files, rules, no_redact, live)
    if errors and not reports:
        raise click.UsageError("; ".join(errors))
    text = renderer(fmt)(reports, _render_options(config_file, fail_on, color, bool(output), series=with_series))
    write_report(text, output, color)
    _note_no_vllm(reports, gate, errors)
    for message in errors:
        if not message.startswith("no vLLM log"):
            click.echo(f"vllm-doctor: error: {clean(message)}", err=True)
    code = exit_code(reports, fail_on, exit_zero)
    if gate:
        code = max(code, *(never_started(r, fail_on, exit_zero) for r in reports), 0)
    return 2 if errors else code


def never_started(report: Report, fail_on: str, exit_zero: bool, say: bool = True) -> int:
    """`check` gates a start-up: a vLLM log that never shows the server (or engine) ready fails it.

    A missing binary or module, an image that could not be pulled, a process killed after `+ vllm serve`, a
    log cut off mid start-up: each would otherwise pass as "no problems found". 1 (said on stderr) or 0.
    """
    if not report.vllm_seen or report.started:
        return 0
    if say:
        label = "stdin" if report.path == "-" else report.path
        click.echo(f"vllm-doctor: error: vLLM did not start in {label}: the log ends before the server was "
                   "ready; capture the start-up until `Application startup complete`", err=True)
    return 0 if exit_zero or fail_on == "never" else 1


def _early_copy(files: tuple[str, ...], tee: bool, follow: str | None, command: list[str] | None) -> Any:
    """--tee of one file or stdin: the copy starts before the rules load, so the first bytes pass at once."""
    if not (tee and not follow and not command and len(files) <= 1):
        return None
    from diagnoser.live import tee as tee_mod

    copy = tee_mod.start(files[0] if files else "-", sys.stdout.fileno())
    if copy is not None:
        copy.give_way()
    return copy


def _filter_output(fmt: str, no_redact: bool) -> None:
    """The report was redacted while reading (and counts what it removed): only stderr is filtered again;
    workflow commands pass on stdout only for the github format."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, OutputFilter):
            stream.redact = None if no_redact or stream is sys.stdout else stream.redact
            stream.allow_commands = fmt == "github" and stream is sys.stdout


def _diagnose_each(files: tuple[str, ...], rules: list[Rule] | tuple[Rule, ...], no_redact: bool,
                   live: bool) -> tuple[list[Report], list[str]]:
    """A report per readable input, and one message per input that could not be read (opened or to its end)."""
    reports = []
    errors: list[str] = []
    for name, stream in open_inputs(files, errors):
        try:
            reports.append(diagnose(stream, name, rules, redact=not no_redact, on_hit=_announcer() if live else None))
        except Exception as exc:  # a read error mid-file, a corrupt or truncated archive
            from diagnoser.ingest.sources import read_error

            error = read_error(name, exc)
            if error is None:
                raise
            errors.append(f"{error}; check the file")
        finally:
            if name != "-":
                stream.close()
    return reports, errors


def _note_no_vllm(reports: list[Report], gate: bool, errors: list[str]) -> None:
    """An input without a vLLM line: a note for `diagnose`, an error (added to `errors`) for `check`."""
    for r in reports:
        if not r.vllm_seen:
            label = "stdin" if r.path == "-" else r.path
            click.echo(f"vllm-doctor: {'error' if gate else 'note'}: no vLLM log found in {label}"
                       + ("; check that the file is the server's log" if gate else ""), err=True)
            if gate:
                errors.append(f"no vLLM log found in {label}")


def _run_live(files: tuple[str, ...], fmt: str, fail_on: str, exit_zero: bool, rules: Any, no_redact: bool,
              color: bool | None, config_file: str | None, output: str | None, tee: bool, follow: str | None,
              until: str | None, timeout: float | None, update_every: float, command: list[str] | None,
              kill_on_failure: bool, copy: Any, gate: bool = False) -> int:
    """run_diagnosis for the live modes (--tee, --follow, --until, --timeout, `run`): one input, read as it grows."""
    from diagnoser.live.watch import LiveOptions, run_live

    if follow and command:
        raise click.UsageError(f"run reads the output of the command it starts, so --follow {follow} has nothing to "
                               f"do: drop --follow, or follow the file with `vllm-doctor diagnose --follow {follow}`")
    if len(files) > 1 or (files and (follow or command)):
        raise click.UsageError("live modes read one input: a FILE, --follow FILE, stdin or `run -- CMD`")
    if follow:
        refuse_compressed(follow, "--follow")
    elif files and files[0] != "-":
        refuse_compressed(files[0], "--tee/--until/--timeout")
    opts = LiveOptions(until=until, timeout=timeout, tee=tee, fmt="jsonl" if fmt == "jsonl" else "text",
                       update_every=update_every, fail_on=fail_on)
    out_opts = _render_options(config_file, fail_on, color, bool(output or tee))

    def render(report: Report) -> str:
        return renderer(pick_format(fmt))([report], out_opts)

    return run_live(opts, rules, render, files[0] if files else "-", follow=follow, command=command,
                    redact=not no_redact, output=output, kill_on_failure=kill_on_failure,
                    exit_code=lambda r: max(exit_code([r], fail_on, exit_zero),
                                            never_started(r, fail_on, exit_zero) if gate else 0), tee=copy)


@click.command("diagnose")
@diagnose_options
def diagnose_cmd(**kwargs: Any) -> None:
    """Diagnose vLLM log FILES (or stdin)."""
    refuse_unusable_stdin(kwargs["files"], kwargs["follow"])
    sys.exit(run_diagnosis(**kwargs))


@click.command("check")
@diagnose_options
def check_cmd(**kwargs: Any) -> None:
    """CI gate: like diagnose, meant for a log captured from a smoke-test start of vLLM."""
    refuse_unusable_stdin(kwargs["files"], kwargs["follow"])
    sys.exit(run_diagnosis(**kwargs, gate=True))
