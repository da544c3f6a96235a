"""`scan` reads regular files only (issue 29, item 8): a folder holding a symlink to /dev/zero or /dev/urandom,
a FIFO or a symlink to one, or a socket, never hangs it (with one worker or several); the logs beside them
are reported. Named on the command line, such a file is a one-line error, exit 2."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from .conftest import run_doctor

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"


def hostile_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    (folder / "sub").mkdir(parents=True)
    (folder / "good.log").write_bytes(EXAMPLE.read_bytes())
    (folder / "zero.log").symlink_to("/dev/zero")
    (folder / "random.log").symlink_to("/dev/urandom")
    os.mkfifo(folder / "fifo.log")
    (folder / "sub" / "fifo-link.log").symlink_to(folder / "fifo.log")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock.log"))
    sock.close()
    (folder / "sub" / "dir-link").symlink_to("/dev")  # a link to a folder of devices: not followed
    return folder


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("how", ["folder", "glob"])
def test_scan_skips_devices_fifos_and_sockets(tmp_path, jobs, how):
    folder = hostile_folder(tmp_path)
    target = str(folder) if how == "folder" else str(folder / "**" / "*.log")
    res = run_doctor("scan", "--no-progress", "-j", jobs, "--format", "jsonl", target, timeout=60)
    assert res.returncode == 1, res.stderr  # the good log's error finding
    docs = res.stdout.splitlines()
    assert len(docs) == 1 and "good.log" in docs[0] and "kv-cache-too-small" in docs[0], res.stdout


@pytest.mark.parametrize("name", ["zero.log", "fifo.log", "sock.log"])
def test_a_special_file_named_on_the_command_line_is_an_error(tmp_path, name):
    folder = hostile_folder(tmp_path)
    res = run_doctor("scan", "--no-progress", str(folder / "good.log"), str(folder / name), timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and name in res.stderr and "regular file" in res.stderr, res.stderr
