"""The command line: `vllm-doctor [FILE...]`, `rules`, `explain ID`, `check`, `plan`.

Exit codes: 0 no finding at or above --fail-on, 1 at least one, 2 usage, input or internal error. Every
error a user can cause is one line on stderr that names what to change.

Each command imports what it needs when it runs: `--version` and `--help` load no rule machinery, and
`plan` is imported only when it is the command.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from diagnoser import __version__
from diagnoser.errors import DoctorError
from diagnoser.ingest.redact import Redactor
from diagnoser.report import FORMATS
from diagnoser.report.sanitize import OutputFilter, clean

if TYPE_CHECKING:
    from collections.abc import Iterable

    from diagnoser.analysis.pipeline import Report
    from diagnoser.rules.model import Rule

FAIL_ON = ("error", "warning", "info", "never")


#: Commands imported only when invoked: name -> (module, attribute, the one-line help `--help` lists).
LAZY_COMMANDS = {
    "plan": ("diagnoser.cli.main", "plan_command",
             "Predict whether a vLLM configuration starts, and size its KV cache."),
    "scan": ("diagnoser.cli.scan", "scan_cmd",
             "Diagnose many logs: files, folders (recursive) and globs; .gz/.bz2/.xz/.zst read transparently."),
}


class DoctorGroup(click.Group):
    """A group whose default command is `diagnose`: `vllm-doctor server.log` needs no subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands and args[0] not in LAZY_COMMANDS \
                and args[0] not in ("--help", "-h", "--version"):
            args = ["diagnose", *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in LAZY_COMMANDS:
            module, attr, _ = LAZY_COMMANDS[name]
            command = getattr(import_module(module), attr)
            self.add_command(command if isinstance(command, click.Command) else command(), name)
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, without importing a lazy command for its one-line help."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in self.commands:
                if self.commands[name].hidden:
                    continue
                rows.append((name, self.commands[name].get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=LAZY_COMMANDS[name][2]).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=DoctorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-doctor")
def main() -> None:
    """Diagnose a vLLM server log: what failed, at which stage, the numbers, and the computed fix.

    \b
      vllm-doctor server.log            diagnose a file
      vllm serve ... 2>&1 | vllm-doctor diagnose a live or piped log
      vllm-doctor                       paste a log, end with Ctrl-D
      vllm-doctor rules / explain ID    the rules and what each means
      vllm-doctor plan --help           predict whether a configuration starts
      vllm-doctor compare OLD NEW       what changed between two starts, and the fix
    """


def _format_choices() -> list[str]:
    return ["auto", *FORMATS]


def _open_inputs(files: tuple[str, ...], errors: list[str] | None = None) -> list[tuple[str, BinaryIO]]:
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
            stdin = click.get_binary_stream("stdin") if name == "-" else None
            out.append((name, open_log(name) if stdin is None else
                        decompressed(stdin, "-") if hasattr(stdin, "peek") else stdin))
        except DoctorError as exc:
            if errors is None:
                raise click.UsageError(str(exc)) from None
            errors.append(str(exc))
    return out


def _refuse_compressed(name: str, option: str) -> None:
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
    from diagnoser.rules.model import SEVERITY_RANK  # loaded by the diagnosis anyway; imported late for start-up time

    limit = SEVERITY_RANK[fail_on]
    hit = any(SEVERITY_RANK[f.severity] <= limit for r in reports for f in r.findings if not f.rule.context)
    return 1 if hit else 0


def _diagnose_options(func: Any, files: bool = True) -> Any:
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


def builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules (a seam: tests swap in their own)."""
    from diagnoser.rules.loader import builtin_rules as shipped

    return shipped()


def diagnose(*args: Any, **kwargs: Any) -> Report:
    """engine.diagnose, imported when a log is read (a seam: tests swap in their own)."""
    from diagnoser.analysis.pipeline import diagnose as run

    return run(*args, **kwargs)


def renderer(name: str) -> Any:
    """The render function of one format, imported when the report is written."""
    from diagnoser.report import renderer as pick

    return pick(name)


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


def _write(text: str, output: str | None, color: bool | None = None) -> None:
    """A report to -o FILE, or to stdout (`color`: --color keeps the colour in a pipe)."""
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.UsageError(f"{output}: cannot write ({exc.strerror or exc})") from None
    else:
        click.echo(text, nl=False, color=color)


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
                                       *(("-",) if not files and not follow and not command else ())))
    copy = None
    if tee and not follow and not command and len(files) <= 1:
        from diagnoser.live import tee as tee_mod  # the copy starts before the rules load: the first bytes pass at once

        copy = tee_mod.start(files[0] if files else "-", sys.stdout.fileno())
        if copy is not None:
            copy.give_way()
    rules = _rules_with(rule_paths)
    if config_file and not Path(config_file).is_file():
        raise click.UsageError(f"--config-file {config_file}: no such file; give the launch config that set the "
                               "flags, or leave the option out")
    if no_redact:
        click.echo("vllm-doctor: warning: --no-redact: secrets in the log will appear in the output", err=True)
    fmt = pick_format(fmt)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, OutputFilter):
            # the report was redacted while reading (and counts what it removed): only stderr is filtered again
            stream.redact = None if no_redact or stream is sys.stdout else stream.redact
            stream.allow_commands = fmt == "github" and stream is sys.stdout
    if tee or follow or until or timeout is not None or command:
        return _run_live(files, fmt, fail_on, exit_zero, rules, no_redact, color, config_file, output, tee, follow,
                         until, timeout, update_every, command, kill_on_failure, copy)
    reports = []
    errors: list[str] = []
    for name, stream in _open_inputs(files, errors):
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
    if errors and not reports:
        raise click.UsageError("; ".join(errors))
    opts: dict[str, Any] = {"config_file": config_file, "fail_on": fail_on, "series": with_series}
    if color is not None:
        opts["color"] = color
    elif output:
        opts["color"] = False
    text = renderer(fmt)(reports, opts)
    _write(text, output, color)
    for r in reports:
        if not r.vllm_seen:
            label = "stdin" if r.path == "-" else r.path
            click.echo(f"vllm-doctor: {'error' if gate else 'note'}: no vLLM log found in {label}"
                       + ("; check that the file is the server's log" if gate else ""), err=True)
            if gate:
                errors.append(f"no vLLM log found in {label}")
    for message in errors:
        if not message.startswith("no vLLM log"):
            click.echo(f"vllm-doctor: error: {clean(message)}", err=True)
    return 2 if errors else exit_code(reports, fail_on, exit_zero)


def _run_live(files: tuple[str, ...], fmt: str, fail_on: str, exit_zero: bool, rules: Any, no_redact: bool,
              color: bool | None, config_file: str | None, output: str | None, tee: bool, follow: str | None,
              until: str | None, timeout: float | None, update_every: float, command: list[str] | None,
              kill_on_failure: bool, copy: Any) -> int:
    """run_diagnosis for the live modes (--tee, --follow, --until, --timeout, `run`): one input, read as it grows."""
    from diagnoser.live.watch import LiveOptions, run_live

    if len(files) > 1 or (files and (follow or command)):
        raise click.UsageError("live modes read one input: a FILE, --follow FILE, stdin or `run -- CMD`")
    if follow:
        _refuse_compressed(follow, "--follow")
    elif files and files[0] != "-":
        _refuse_compressed(files[0], "--tee/--until/--timeout")
    opts = LiveOptions(until=until, timeout=timeout, tee=tee, fmt="jsonl" if fmt == "jsonl" else "text",
                       update_every=update_every, fail_on=fail_on)
    out_opts: dict[str, Any] = {"config_file": config_file, "fail_on": fail_on}
    if color is not None:
        out_opts["color"] = color
    elif output or tee:
        out_opts["color"] = False

    def render(report: Report) -> str:
        return renderer(pick_format(fmt))([report], out_opts)

    return run_live(opts, rules, render, files[0] if files else "-", follow=follow, command=command,
                    redact=not no_redact, output=output, kill_on_failure=kill_on_failure,
                    exit_code=lambda r: exit_code([r], fail_on, exit_zero), tee=copy)


@main.command("diagnose")
@_diagnose_options
def diagnose_cmd(**kwargs: Any) -> None:
    """Diagnose vLLM log FILES (or stdin)."""
    sys.exit(run_diagnosis(**kwargs))


@main.command("check")
@_diagnose_options
def check_cmd(**kwargs: Any) -> None:
    """CI gate: like diagnose, meant for a log captured from a smoke-test start of vLLM."""
    sys.exit(run_diagnosis(**kwargs, gate=True))


def _rules_with(rule_paths: tuple[str, ...]) -> list[Rule] | tuple[Rule, ...]:
    """Shipped rules plus --rules files (fully validated); a bad file is a usage error naming it."""
    from diagnoser.rules.loader import load_rules
    from diagnoser.rules.model import RuleError

    if not rule_paths:
        return builtin_rules()
    try:
        return load_rules(tuple(Path(p) for p in rule_paths))
    except RuleError as exc:
        raise click.UsageError(str(exc)) from None


@main.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--kill-on-failure", is_flag=True, help="Stop the command (SIGTERM, then SIGKILL) on a failure.")
@functools.partial(_diagnose_options, files=False)
def run_cmd(command: tuple[str, ...], kill_on_failure: bool, **kwargs: Any) -> None:
    """Run COMMAND (after --), diagnose its output live; the exit code is the verdict.

    \b
      vllm-doctor run --tee --until ready --timeout 900 -- vllm serve meta-llama/Llama-3.1-8B-Instruct
    Signals are forwarded to the command. 0 ready / exited cleanly, 1 failure, 3 timeout.
    """
    sys.exit(run_diagnosis(files=(), command=list(command), kill_on_failure=kill_on_failure, **kwargs))


@main.command("rules")
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
@click.option("--test", "test_paths", multiple=True, type=click.Path(exists=True),
              help="Run the cases of the rules in this file or folder (repeatable): exit 1 if one fails.")
def rules_cmd(fmt: str, rule_paths: tuple[str, ...], test_paths: tuple[str, ...]) -> None:
    """List the rules: id, severity, stage, title (or, with --test, run a rule pack's cases)."""
    rules = sorted(_rules_with(rule_paths + test_paths), key=lambda r: r.id)
    if test_paths:
        sys.exit(_test_rules(rules, test_paths))
    if fmt == "json":
        import json

        click.echo(json.dumps([{"id": r.id, "severity": r.severity, "stage": r.stage, "title": r.title}
                               for r in rules], indent=2))
        return
    width = max(len(r.id) for r in rules)
    for r in rules:
        click.echo(f"{r.id:<{width}}  {r.severity:<7}  {(r.stage or 'any'):<7}  {r.title}")


def _test_rules(rules: list[Rule], test_paths: tuple[str, ...]) -> int:
    """`rules --test`: one line per case (ok / FAIL and why), a summary, exit 1 when any case fails."""
    from diagnoser.rules.selftest import case_results

    wanted = {str(q.resolve()) for p in test_paths
              for q in (sorted(Path(p).glob("*.yaml")) if Path(p).is_dir() else [Path(p)])}
    passed = failed = 0
    for rule in rules:
        if str(Path(rule.path).resolve()) not in wanted:
            continue
        for name, failure in case_results(rule, rules):
            if failure:
                failed += 1
                click.echo(f"FAIL  {rule.id}: {name}")
                for msg in failure.splitlines():
                    click.echo(f"      {msg}")
            else:
                passed += 1
                click.echo(f"ok    {rule.id}: {name}")
    click.echo(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


@main.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
def explain_cmd(rule_id: str, rule_paths: tuple[str, ...]) -> None:
    """Print a rule's page: what it means, why it happens, how the fix is computed (or `compare`'s, `scan`'s,
    `plan`'s)."""
    rules = {r.id: r for r in _rules_with(rule_paths)}
    rule = rules.get(rule_id)
    command = click.get_current_context().find_root().command
    if rule is None and rule_id in ("compare", "scan", "plan") and isinstance(command, click.Group):
        # a command's page: its help (what it reads, prints, and its exit codes)
        sub = command.get_command(click.get_current_context(), rule_id)
        if sub is not None:
            with click.Context(sub, info_name=f"vllm-doctor {rule_id}") as ctx:
                click.echo(sub.get_help(ctx))
            return
    if rule is None:
        from rapidfuzz import process

        guess = process.extractOne(rule_id, list(rules))
        hint = f" Did you mean {guess[0]!r}?" if guess and guess[1] >= 60 else ""
        raise click.UsageError(f"unknown rule {rule_id!r}.{hint} `vllm-doctor rules` lists them.")
    click.echo(f"{rule.id}  ({rule.severity}, stage: {rule.stage or 'from the log'})")
    click.echo(rule.title)
    click.echo("")
    import textwrap  # only `rules explain` needs it

    click.echo(textwrap.dedent(rule.explanation).strip())
    phrases = [p.phrase for p in rule.patterns if p.phrase]
    if phrases:
        click.echo("\nRecognised messages (fuzzy-matched, so rewordings still count):")
        for ph in phrases:
            click.echo(f"  - {ph}")
    if rule.fixes:
        click.echo("\nFixes it can compute:")
        for fx in rule.fixes:
            click.echo(f"  - {fx.flag or fx.env}")
    if rule.references:
        click.echo("\nReferences:")
        for ref in rule.references:
            click.echo(f"  - {ref}")


@main.command("compare")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=True, allow_dash=True))
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True, help="html: one self-contained page, the budgets as bars side by side.")
@click.option("--max-kv-loss", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="Exit 1 when the last log lost more than this fraction of the first log's KV tokens.")
@click.option("--gpu", "gpu_name", help="GPU preset, for logs that do not print the GPU total (V1 0.8-0.25).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None)
@click.option("--no-redact", is_flag=True, help="Keep secrets in the output.")
def compare_cmd(logs: tuple[str, ...], fmt: str, max_kv_loss: float, gpu_name: str | None, output: str | None,
                no_redact: bool) -> None:
    """Compare start-ups: BEFORE AFTER [MORE...] (each against the first).

    \b
      vllm-doctor compare vllm-0.7.3.log vllm-0.8.2.log
      vllm-doctor compare --format markdown old.log new.log    for an issue or a chat prompt
      vllm-doctor compare --format html -o upgrade.html old.log new.log
      vllm-doctor compare --max-kv-loss 0.1 old.log new.log    the upgrade gate in CI

    For each log: the start-up budget vLLM measured (figures it did not print are derived or estimated for
    that release, marked ~), the effective settings (explicit and release defaults). Then what moved, the
    settings that changed, and the flags that give the old KV cache back, with the corrected command.
    Exit 1 when the last log failed to start or lost more than --max-kv-loss of the KV tokens; 0 otherwise;
    2 on a usage or input error. See docs/compare.md.
    """
    from diagnoser.analysis.pipeline import diagnose
    from diagnoser.compare.comparison import compare_reports
    from diagnoser.report.compare import renderer as compare_renderer

    if len(logs) < 2:
        raise click.UsageError("compare needs two logs or more: vllm-doctor compare BEFORE.log AFTER.log")
    if list(logs).count("-") > 1:
        raise click.UsageError("only one of the logs can be '-' (stdin)")
    refuse_output_over_inputs(output, logs)
    total = None
    if gpu_name:
        from diagnoser.vllm.modelspec import load_gpu

        gpu = load_gpu(gpu_name)
        total, gpu_name = gpu.memory_bytes / (1 << 30), gpu.name
    reports = []
    for name, stream in _open_inputs(logs):
        try:
            reports.append(diagnose(stream, name, builtin_rules(), redact=not no_redact))
        except Exception as exc:  # a corrupt or truncated archive: one line naming the file
            from diagnoser.ingest.sources import read_error

            error = read_error(name, exc)
            if error is None:
                raise
            raise click.UsageError(str(error)) from None
        finally:
            if name != "-":
                stream.close()
    comparison = compare_reports(reports, max_kv_loss, total, gpu_name or "")
    text = compare_renderer(fmt)(comparison, {})
    _write(text, output)
    sys.exit(1 if comparison.primary.gate_failed else 0)


def run() -> None:
    """Entry point with the one-line error contract: usage errors exit 2, crashes exit 2, never 0.

    stdout and stderr go through sanitize.OutputFilter for every command: no terminal escape, no workflow
    command and no secret (unless --no-redact) reaches them, whatever a log, rule pack or launch file holds.
    """
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (OutputFilter(saved[0], Redactor(output=True)),
                              OutputFilter(saved[1], Redactor(output=True)))
    try:
        _run()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = saved


def _run() -> None:
    try:
        main.main(standalone_mode=False, prog_name="vllm-doctor")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"vllm-doctor: error: {clean(exc.format_message())}", err=True)
        sys.exit(2)
    except DoctorError as exc:
        click.echo(f"vllm-doctor: error: {clean(str(exc))}", err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("vllm-doctor: aborted", err=True)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - an internal error must never exit 0, and says how to report it
        click.echo(f"vllm-doctor: internal error: {type(exc).__name__}: {clean(str(exc))} "
                   "(please report it with the log that caused it)", err=True)
        sys.exit(2)


# --- plan: built when it is the command (its options and the planner load only then) -------------------------

def _batched_tokens(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """--max-num-batched-tokens: vLLM's integer with suffixes (8k = 8000, 8K = 8192), at least 1."""
    from diagnoser.plan.resolve import parse_token_count

    if value is None:
        return None
    try:
        return parse_token_count(value)
    except DoctorError as exc:
        raise click.BadParameter(str(exc)) from None


@functools.cache
def plan_command() -> click.Command:
    """`vllm-doctor plan`: the options of vLLM's flags; the body is diagnoser.plan.run.run_plan."""
    from diagnoser.plan.resolve import KV_DTYPES

    @click.command("plan", context_settings={"ignore_unknown_options": False, "help_option_names": ["-h", "--help"]})
    @click.option("--model", "-m", "model_ref", help="config.json path, a folder with one, a repo id or a preset name.")
    @click.option("--gpu", "gpu_name", help="GPU preset (T4, L4, A10G, RTX 3090, RTX 4090, L40S, A100-40GB, "
                  "A100-80GB, H100, H200, B200, MI300X, ...).")
    @click.option("--gpu-memory", "gpu_memory", help="GPU memory instead of a preset: 24GB (10^9), 24GiB (2^30), "
                  "24G (= GiB), 22528MiB.")
    @click.option("--gpu-memory-utilization", type=float, help="vLLM's flag (default 0.92 from 0.20, 0.9 before).")
    @click.option("--max-model-len", help="vLLM's flag (default: the model's maximum); 16384 or 16K.")
    @click.option("--kv-cache-dtype", type=click.Choice(KV_DTYPES), help="vLLM's flag (default auto = model dtype).")
    @click.option("--dtype", type=click.Choice(["auto", "half", "float16", "bfloat16", "float", "float32"]),
                  help="vLLM's flag (default auto).")
    @click.option("--quantization", "-q", help="vLLM's flag (awq, gptq, fp8, compressed-tensors, bitsandbytes, ...).")
    @click.option("--tensor-parallel-size", "-tp", type=click.IntRange(1), help="vLLM's flag (default 1).")
    @click.option("--pipeline-parallel-size", "-pp", type=click.IntRange(1), help="vLLM's flag (default 1).")
    @click.option("--max-num-seqs", type=click.IntRange(1), help="vLLM's flag (default: per release and GPU).")
    @click.option("--max-num-batched-tokens", callback=_batched_tokens,
                  help="vLLM's flag (default: per release); 8192 or 8K.")
    @click.option("--enforce-eager", is_flag=True, default=None, help="vLLM's flag: no CUDA graphs.")
    @click.option("--kv-cache-memory-bytes", help="vLLM's flag (0.10.2+): a fixed KV cache per GPU, in bytes or a size "
                  "(8GiB); the utilization share no longer caps it.")
    @click.option("--weights", help="Weight memory per GPU (replaces the estimate), e.g. 16GB.")
    @click.option("--overhead", help="Activations + CUDA graphs + non-torch memory (replaces the estimate).")
    @click.option("--vllm-version", default="latest", show_default=True,
                  help="Release whose defaults and formulas to use (e.g. 0.7.3); a list (0.7.3,0.8.2) plans each "
                  "release side by side with what moved and the fix.")
    @click.option("--log", "log_path", type=click.Path(dir_okay=False), help="A startup log: its measured numbers "
                  "replace the estimates.")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @click.option("--check", is_flag=True, help="CI gate: exit 1 when it will not start or concurrency is below "
                  "--min-concurrency; 0 otherwise.")
    @click.option("--min-concurrency", type=float, default=None, help="Requests of --max-model-len that must fit "
                  "at once (with --check).")
    @click.option("--from-file", "from_file", is_flag=True, help="The arguments are launch config files: shell "
                  "scripts running `vllm serve` (also Dockerfiles, compose files, Kubernetes manifests) or vLLM YAML "
                  "configs (`vllm serve --config`). A comment `# vllm-doctor: gpu=L4` in a file pins its GPU.")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    def plan(**opts: Any) -> None:
        """Predict whether a vLLM configuration starts, and size its KV cache.

        \b
          vllm-doctor plan --model llama-3.1-8b --gpu L4 --max-model-len 16384
          vllm-doctor plan --gpu L4 -- vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384
          vllm-doctor plan --log server.log          measured numbers replace the estimates
          vllm-doctor plan --check --gpu L4 --from-file deploy/serve-vllm.sh deploy/vllm.yaml
        """
        from diagnoser.plan.run import run_plan

        try:
            code = run_plan(opts, click.echo)
        except DoctorError as exc:   # the library's own errors become click's usage errors only here (exit 2)
            raise click.UsageError(str(exc)) from None
        sys.exit(code)

    return plan
