"""Where a live diagnosis reads its bytes from, and the stream the reader pulls them through.

- PipeSource: a pipe, a terminal or a file on stdin, or a child's output (select(), then read).
- FollowSource: `--follow`, `tail -F` style (a file that may not exist yet, be truncated or rotated).
- Feed: the binary stream the reader pulls from: every byte tee'd the moment it comes (`--tee`), and the
  watch's clock ticked between polls while the input is idle.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from diagnoser.ingest.reader import BLOCK
from diagnoser.live.tee import write_all

POLL = 0.1           #: seconds between looks at an idle input (watch.py polls faster while the matcher holds lines)


class PipeSource:
    """A pipe, a terminal or a file on stdin, or a child's output: select() then read."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, timeout: float) -> bytes | None:
        """Bytes, b"" at the end, None when nothing came within `timeout`."""
        try:
            ready, _, _ = select.select([self.fd], [], [], timeout)
        except (OSError, ValueError):
            ready = [self.fd]
        if not ready:
            return None
        try:
            return os.read(self.fd, BLOCK)
        except BlockingIOError:
            return None
        except OSError:
            return b""


class FollowSource:
    """`tail -F`: the file may not exist yet, may be truncated (read again from the start) or rotated (the
    rest of the old file is read, then the new file from its start). Never ends by itself."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh: BinaryIO | None = None
        self.ino: int | None = None

    def read(self, timeout: float) -> bytes | None:
        if self.fh is None and not self._open():
            time.sleep(timeout)
            return None
        assert self.fh is not None
        data = self.fh.read(BLOCK)
        if data:
            return data
        try:
            st = os.stat(self.path)
        except OSError:
            time.sleep(timeout)  # rotated away and not recreated yet: keep the old handle
            return None
        if st.st_ino != self.ino:
            self.fh.close()
            self.fh = None
            return self.read(0) or None if self._open() else None
        if st.st_size < self.fh.tell():
            self.fh.seek(0)  # truncated (copytruncate, `> file`)
            return None
        time.sleep(timeout)
        return None

    def _open(self) -> bool:
        try:
            self.fh = open(self.path, "rb")  # noqa: SIM115 - held across reads
        except OSError:
            return False
        self.ino = os.fstat(self.fh.fileno()).st_ino
        return True


class Feed:
    """The binary stream the reader pulls from: tee'd byte for byte, and the Watch's clock between polls."""

    def __init__(self, source: Any, tick: Callable[[bool], None], tee_fd: int | None,
                 poll: Callable[[], float] = lambda: POLL) -> None:
        self.source = source
        self.tick = tick
        self.poll = poll
        self.tee_fd = tee_fd
        self.last_data = time.monotonic()
        self.eof, self.newlines, self.partial = False, 0, False  # lines delivered: the reader counts at its end

    def read1(self, size: int = BLOCK) -> bytes:
        while True:
            data = self.source.read(self.poll())
            if data is None:
                self.tick(True)
                continue
            if data and self.tee_fd is not None:
                write_all(self.tee_fd, data)
            self.last_data = time.monotonic()
            if data:
                self.newlines, self.partial = self.newlines + data.count(b"\n"), not data.endswith(b"\n")
                self.tick(False)
            else:
                self.eof = True
            return data

    read = read1

