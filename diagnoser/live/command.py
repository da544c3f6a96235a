"""`vllm-doctor run -- vllm serve ...`: the command started in its own session, signals forwarded to it,
and what becomes of it and its output once the watch has a verdict (waited for, stopped, or drained).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from diagnoser.errors import InputError
from diagnoser.ingest.reader import BLOCK
from diagnoser.live.sources import PipeSource
from diagnoser.live.tee import write_all

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Child:
    """The command, in its own session (a terminal's Ctrl-C reaches it once, through us), stdout+stderr."""

    def __init__(self, argv: list[str]) -> None:
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise InputError(f"{argv[0]}: cannot run ({exc.strerror or exc}); check the command") from None
        assert self.proc.stdout is not None
        self.source = PipeSource(self.proc.stdout.fileno())
        self.signalled: int | None = None
        for sig in FORWARDED:
            signal.signal(sig, self._forward)

    def _forward(self, signum: int, _frame: Any) -> None:
        """To the command's whole process group (its session): a wrapper's children (`sh -c 'vllm serve ...'`,
        a launcher's workers) get it too, as they would from a terminal, instead of being orphaned."""
        self.signalled = signum
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (the whole session: workers too)."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def wait(self) -> int:
        return self.proc.wait()

    def exited(self) -> bool:
        return self.proc.poll() is not None


def drain_in_background(fd: int, tee: bool) -> None:
    """Keep reading a producer's output after we exit early, so it is not killed by a closed pipe.

    A forked child copies the rest (to stdout with --tee, else nowhere) until the producer closes it.
    """
    if not hasattr(os, "fork"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:
        return
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 2)  # whoever waits for our stderr (or, without --tee, stdout) to close is not kept waiting
        if not tee:
            os.dup2(null, 1)
        out = sys.stdout.fileno() if tee else None
        while True:
            data = os.read(fd, BLOCK)
            if not data:
                break
            if out is not None:
                write_all(out, data)
    except BaseException:  # noqa: BLE001 - the drainer must never raise into the caller's code
        pass
    finally:
        os._exit(0)


def after_command(child: Child, verdict: str, code: int, more: bool, tee: bool, kill_on_failure: bool) -> int:
    """`run`: wait for the command that exited (its status decides when its output did not), stop it on a
    failure with --kill-on-failure, or leave it running with its output drained; returns the exit code."""
    if verdict == "exit":
        if child.signalled is not None:
            # we were told to stop: what the forwarded signal did not end goes too (a non-interactive shell starts
            # its background jobs ignoring SIGINT), and no drainer outlives us
            child.stop(grace=2.0)
        elif more:
            drain_in_background(child.source.fd, tee)  # a worker of the command still holds the pipe
        rc = child.wait()
        if child.signalled is not None and code == 0:
            return 128 + child.signalled
        if rc != 0 and code == 0:
            print(f"vllm-doctor: the command exited with status {rc}; no known failure in its output",
                  file=sys.stderr, flush=True)
            return 1
    elif kill_on_failure and verdict in ("failure", "timeout"):
        child.stop()
    elif more:
        drain_in_background(child.source.fd, tee)
    return code

