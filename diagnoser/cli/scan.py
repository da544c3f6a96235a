"""`vllm-doctor scan PATH...`: the command line of the scan (click lives in cli/ only)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import click

from diagnoser.rules.model import SEVERITY_RANK

ENGINES = ("local", "ray")
SEVERITY_ORDER = SEVERITY_RANK   # the one severity order (rules.py)


class Tally:
    """Counts what the exit code needs while the documents stream to the writer."""

    def __init__(self, fail_on: str) -> None:
        self.limit = SEVERITY_ORDER.get(fail_on, -1)
        self.logs = self.bad = self.failing = 0

    def count(self, docs: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for doc in docs:
            self.logs += 1
            if "error" in doc:
                self.bad += 1
            elif any(SEVERITY_ORDER.get(f["severity"], 9) <= self.limit for f in doc["findings"]):
                self.failing += 1
            yield doc

    def exit_code(self, exit_zero: bool) -> int:
        """1 when a log has a finding at or above --fail-on; else 2 when a file could not be read; else 0."""
        if self.failing and not exit_zero:
            return 1
        return 2 if self.bad else 0


@click.command("scan", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True)
@click.option("--jobs", "-j", type=click.IntRange(0), default=None,
              help="Worker processes (0: one per CPU; default 1). With --engine ray: the local Ray's CPUs "
              "(default all).")
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "jsonl", "markdown", "csv", "otel", "html"]),
              default="text", show_default=True,
              help="text/markdown/html: fleet summary; jsonl: one report per log; csv: one row per finding; "
              "otel: OTLP JSON.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info", "never"]), default="error",
              show_default=True, help="Exit 1 when a log has a finding at or above this severity.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings reach --fail-on.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
@click.option("--no-redact", is_flag=True, help="Keep secrets in the output (warns on stderr).")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="Worst logs listed (text, markdown, html).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to this file, not stdout.")
@click.option("--progress/--no-progress", default=None,
              help="Progress line on stderr (default: when it is a terminal).")
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
              help="local: this machine (--jobs); ray: Ray Data (pip install 'vllm-log-doctor[ray]').")
@click.option("--ray-address", default=None, help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray).")
def scan_cmd(paths: tuple[str, ...], jobs: int | None, fmt: str, fail_on: str, exit_zero: bool,
             rule_paths: tuple[str, ...], no_redact: bool, top: int, output: str | None,
             progress: bool | None, engine: str,
             ray_address: str | None) -> None:
    """Diagnose many logs: files, folders (recursive) and globs; .gz/.bz2/.xz/.zst read transparently.

    \b
      vllm-doctor scan /var/log/vllm/                     fleet summary
      vllm-doctor scan 'logs/**/*.log.gz' -j 0 -f jsonl   one JSON report per log
      vllm-doctor scan pods.txt -f csv -o findings.csv    one row per finding
      vllm-doctor scan /var/log/vllm/ -f html -o fleet.html   the summary as a page
      vllm-doctor scan --engine ray s3://bucket/vllm/     on a Ray cluster
    """
    from diagnoser.api import resolve_rules
    from diagnoser.fleet.discover import check_targets, iter_paths
    from diagnoser.fleet.progress import Progress, tracked
    from diagnoser.fleet.run import ScanOptions, scan
    from diagnoser.report import scan_writer

    if no_redact:
        click.echo("vllm-doctor: warning: --no-redact: secrets in the logs will appear in the output", err=True)
    from diagnoser.errors import DoctorError

    try:
        resolve_rules(list(rule_paths) or None)  # a broken rule pack is one error before any file is read
        if engine == "local":
            check_targets(paths)
            if output:
                from diagnoser.cli.files import refuse_output_over_inputs

                refuse_output_over_inputs(output, (*paths, *iter_paths(paths)))
    except DoctorError as exc:
        raise click.UsageError(str(exc)) from None
    opts = ScanOptions(rule_paths=tuple(os.path.abspath(p) for p in rule_paths), redact=not no_redact)
    if engine == "ray":
        from diagnoser.fleet.ray import scan_paths

        docs: Iterator[dict[str, Any]] = scan_paths(list(paths), opts, address=ray_address, num_cpus=jobs or None)
        total = None
    else:
        show = progress if progress is not None else sys.stderr.isatty()
        total = sum(1 for _ in iter_paths(paths)) if show else None
        docs = scan(iter_paths(paths), opts, jobs=1 if jobs is None else jobs or (os.cpu_count() or 1))
    bar = Progress(total, enabled=progress)
    tally = Tally(fail_on)
    stream = tally.count(tracked(docs, bar))
    try:
        if output:
            try:
                out = open(output, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed below
            except OSError as exc:
                raise click.UsageError(f"{output}: cannot write ({exc.strerror or exc})") from None
            with out:
                scan_writer(fmt)(stream, out, {"top": top})
        else:
            scan_writer(fmt)(stream, sys.stdout, {"top": top})
            sys.stdout.flush()
    finally:
        bar.close()
    if tally.logs == 0:
        raise click.UsageError("no log files found in " + ", ".join(paths))
    sys.exit(tally.exit_code(exit_zero))
