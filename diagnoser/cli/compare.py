"""`vllm-doctor compare BEFORE AFTER [MORE...]`: start-ups side by side, what moved, the fix; diagnoser/compare/
builds the comparison and report/compare/ renders it.
"""

from __future__ import annotations

import sys

import click

from diagnoser.cli import files
from diagnoser.cli.files import MAX_DECOMPRESSED


@click.command("compare")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=True, allow_dash=True))
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True, help="html: one self-contained page, the budgets as bars side by side.")
@click.option("--max-kv-loss", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="Exit 1 when the last log lost more than this fraction of the first log's KV tokens.")
@click.option("--gpu", "gpu_name", help="GPU preset, for logs that do not print the GPU total (V1 0.8-0.25).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None)
@click.option("--no-redact", is_flag=True, help="Keep secrets in the output.")
@MAX_DECOMPRESSED
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
    2 on a usage or input error. See docs/comparing.md.
    """
    from diagnoser.analysis.pipeline import diagnose
    from diagnoser.compare.comparison import compare_reports
    from diagnoser.report.compare import renderer as compare_renderer

    if len(logs) < 2:
        raise click.UsageError("compare needs two logs or more: vllm-doctor compare BEFORE.log AFTER.log")
    if list(logs).count("-") > 1:
        raise click.UsageError("only one of the logs can be '-' (stdin)")
    files.refuse_output_over_inputs(output, logs)
    total = None
    if gpu_name:
        from diagnoser.vllm.modelspec import load_gpu

        gpu = load_gpu(gpu_name)
        total, gpu_name = gpu.memory_bytes / (1 << 30), gpu.name
    reports = []
    for name, stream in files.open_inputs(logs):
        try:
            reports.append(diagnose(stream, name, files.builtin_rules(), redact=not no_redact))
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
    files.write_report(text, output)
    sys.exit(1 if comparison.primary.gate_failed else 0)
