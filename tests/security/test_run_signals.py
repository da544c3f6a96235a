"""`run -- CMD` passes Ctrl-C and SIGTERM on to everything it started (issue 29, item 10).

The command runs in a process group of its own (so that a terminal's Ctrl-C reaches the doctor first): the
doctor must then signal that whole group, not just its leader, or a wrapper's child (`sh -c 'vllm serve ...'`,
a launcher script) is orphaned and keeps the GPU, and the drain process that empties its output lingers.
After the doctor exits, nothing it started is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: a wrapper whose child ignores nothing and would run for five minutes
WRAPPER = ("echo '(APIServer pid=1) INFO 08-21 14:02:14 [api_server.py:1] vLLM API server version 0.10.1.1'; "
           "sleep 300 & echo $! > {pid}; wait")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _session_members(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid="], capture_output=True, text=True, check=True).stdout
    return [int(p) for p, s in (line.split() for line in out.splitlines()) if int(s) == sid]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_reaches_the_commands_whole_group(tmp_path, sig):
    pid_file = tmp_path / "child.pid"
    child = None
    proc = subprocess.Popen([sys.executable, "-m", "diagnoser", "run", "--", "sh", "-c",
                             WRAPPER.format(pid=pid_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=tmp_path, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        child = int(pid_file.read_text())
        time.sleep(0.5)
        os.kill(proc.pid, sig)
        try:
            proc.communicate(timeout=90)  # a hang detector: a loaded CI machine may take its time
        except subprocess.TimeoutExpired:
            tree = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,pgid=,sid=,stat=,args="], capture_output=True,
                                  text=True).stdout
            os.kill(proc.pid, signal.SIGABRT)  # faulthandler prints where each of its threads is
            _, err = proc.communicate(timeout=30)
            mine = [ln for ln in tree.splitlines() if str(proc.pid) in ln or str(child) in ln]
            pytest.fail("the doctor did not end after the signal:\n" + "\n".join(mine) + "\n"
                        + err.decode(errors="replace")[-4000:])
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the wrapper's child was orphaned"
        left = [p for p in _session_members(proc.pid) if _alive(p)]
        assert left == [], left  # no drain process, nothing else the doctor started
        assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _session_members(proc.pid) + ([child] if child else []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
