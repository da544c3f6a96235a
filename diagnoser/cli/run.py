"""`vllm-doctor run -- CMD`: start a command (a vLLM server) and diagnose its output live, with the options
of `diagnose`; signals reach the command, and the exit code is the verdict (diagnoser/live/ does the work).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import click

from diagnoser.cli.diagnose import diagnose_options, run_diagnosis


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--kill-on-failure", is_flag=True, help="Stop the command (SIGTERM, then SIGKILL) on a failure.")
@functools.partial(diagnose_options, files=False)
def run_cmd(command: tuple[str, ...], kill_on_failure: bool, **kwargs: Any) -> None:
    """Run COMMAND (after --), diagnose its output live; the exit code is the verdict.

    \b
      vllm-doctor run --tee --until ready --timeout 900 -- vllm serve meta-llama/Llama-3.1-8B-Instruct

    Signals are forwarded to the command. 0 ready / exited cleanly, 1 failure, 3 timeout.
    """
    sys.exit(run_diagnosis(files=(), command=list(command), kill_on_failure=kill_on_failure, **kwargs))
