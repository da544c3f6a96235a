"""Helpers for the attack regression tests: run the installed command as a user (or an attacker) would."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rulepack import demo_rule

#: A log line that every test rule below matches.
TRIGGER = "ERROR 08-21 14:04:41 [core.py:700] the demo engine exploded loudly with 3 sparks\n"


def rule_text(advice: str = "boom", **extra: str) -> str:
    """A valid rule file (id demo-attack) with the given advice and extra top-level YAML."""
    return demo_rule("demo-attack", advice, **extra)


def run_doctor(*args: str, stdin: bytes | str = b"", cwd: Path | None = None, timeout: float = 60,
               env: dict[str, str] | None = None, max_gib: float | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command's entry point, in a subprocess (the whole error contract, exit code included);
    `max_gib` caps its address space, so an attack that would build gigabytes fails there, not on the host."""
    data = stdin.encode() if isinstance(stdin, str) else stdin

    def cap() -> None:
        if max_gib is not None:
            import resource

            limit = int(max_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "diagnoser", *args], input=data, capture_output=True,
                          cwd=cwd, timeout=timeout, env=env, preexec_fn=cap)  # noqa: PLW1509 - no threads here
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                       proc.stderr.decode("utf-8", "replace"))


def run_inline(*args: str, stdin: bytes | str = b"", cwd: Path | None = None, timeout: float = 60,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The same entry point (cli.run) in this process: the same exit codes and streams, without the start-up."""
    from diagnoser.cli.main import run

    data = stdin.encode() if isinstance(stdin, str) else stdin
    out, err = io.BytesIO(), io.BytesIO()
    saved = sys.stdin, sys.stdout, sys.stderr, sys.argv, os.getcwd()
    streams = (io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"),
               io.TextIOWrapper(out, encoding="utf-8", write_through=True),
               io.TextIOWrapper(err, encoding="utf-8", write_through=True))
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.argv = ["vllm-doctor", *args]
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.stdin, sys.stdout, sys.stderr, sys.argv, cwd_before = saved
        os.chdir(cwd_before)
        for s in streams:
            s.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
        for s in streams:
            s.detach()
    return subprocess.CompletedProcess(list(args), code, stdout.decode("utf-8", "replace"),
                                       stderr.decode("utf-8", "replace"))


@pytest.fixture
def doctor():
    return run_inline


@pytest.fixture
def rule_file(tmp_path):
    def make(text: str, name: str = "demo-attack.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p
    return make
