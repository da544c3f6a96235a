"""The `vllm-doctor` group: its default command (`vllm-doctor server.log` is `diagnose`), the table of its
commands, and the entry point that turns every error into one line on stderr and exit code 2.

Exit codes: 0 no finding at or above --fail-on, 1 at least one, 2 usage, input or internal error. Every
error a user can cause is one line on stderr that names what to change.

Each command is in its own module, imported only when it is the command: `--version` and `--help` load no
command, no rule machinery and no planner.
"""

from __future__ import annotations

import contextlib
import sys
from importlib import import_module

import click

from diagnoser import __version__
from diagnoser.errors import DoctorError
from diagnoser.ingest.redact import Redactor
from diagnoser.report.sanitize import OutputFilter, clean

#: Commands imported only when invoked: name -> (module, attribute, the one-line help `--help` lists).
LAZY_COMMANDS = {
    "diagnose": ("diagnoser.cli.diagnose", "diagnose_cmd", "Diagnose vLLM log FILES (or stdin)."),
    "check": ("diagnoser.cli.diagnose", "check_cmd",
              "CI gate: like diagnose, meant for a log captured from a smoke-test start of vLLM."),
    "run": ("diagnoser.cli.run", "run_cmd",
            "Run COMMAND (after --), diagnose its output live; the exit code is the verdict."),
    "rules": ("diagnoser.cli.rules", "rules_cmd",
              "List the rules: id, severity, stage, title (or, with --test, run a rule pack's cases)."),
    "explain": ("diagnoser.cli.rules", "explain_cmd",
                "Print a rule's page: what it means, why it happens, how the fix is computed (or `compare`'s, "
                "`scan`'s, `plan`'s)."),
    "compare": ("diagnoser.cli.compare", "compare_cmd",
                "Compare start-ups: BEFORE AFTER [MORE...] (each against the first)."),
    "plan": ("diagnoser.cli.plan", "plan_command",
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
