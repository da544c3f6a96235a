"""Reading ahead in a second process: the reader's block-level work on a big file runs beside its line work.

On a quiet serving log about half of the reader's time is passes over every byte (the keyword search, the
newline and access-line counts, which lines to decode) and the other half is Python work on the few keyword
lines; one process does them one after the other. On a big regular file, `Ahead` forks a helper that reads each
block of whole lines itself (os.pread: its own position in the file) and runs the reader's scan of it
(reader.AheadScan); the reader reads the same block and takes the scan, so on two cores the two halves overlap.

The helper runs exactly the reader's own functions on the same bytes, and the reader checks what only it knows
(its decoder's state, the follow lines the block before owes) before taking an answer, so a report is the same
with or without it. The helper stops at
the end of the input, at a block with no newline (an enormous line) or on any error; the reader then goes on by
itself from the first block the helper did not scan, and after a block of whole lines asks for another helper
(up to MAX_HELPERS a read). The pipe's buffer bounds how far ahead the helper runs.
It is used only where forking is safe and cheap: Linux, one thread, a regular file, and enough left to read.
"""

from __future__ import annotations

import contextlib
import io
import marshal
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

# (signal, struct and threading are imported when a helper may be wanted: a small log never pays for them)

#: Bytes still to read for a helper to pay for itself (a fork and a message a block cost about 5 ms in all).
MIN_REST = 32 << 20
#: Helpers one read forks at most (one stops for good at a line longer than a block; the next starts after it).
MAX_HELPERS = 4
#: The environment variable that keeps the reader in one process (a non-empty value other than "0").
SERIAL_ENV = "VLLM_DOCTOR_SERIAL"

_HEADER = 8  #: each message: its length (8 bytes, little-endian), then a marshalled (length of the block, scan)


def supported() -> bool:
    """Whether a helper may be forked here: Linux (fork without exec is safe), no other thread, Python's or a
    native library's (a fork copies none of them, and a lock one of them holds would stay held in the child:
    a Ray worker has many), not turned off."""
    import threading

    if not sys.platform.startswith("linux") or not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    if os.environ.get(SERIAL_ENV, "") not in ("", "0"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc (a sandbox): the threads cannot be counted
        return False


def regular_file(stream: BinaryIO) -> tuple[int, int, int] | None:
    """(descriptor, offset of the stream's next byte, file size) of a plain file read as it is (not a pipe, not
    a decompressor over a file); else None."""
    if type(stream) is not io.BufferedReader or not isinstance(stream.raw, io.FileIO):
        return None
    try:
        fd = stream.fileno()
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return fd, stream.tell(), info.st_size
    except (OSError, ValueError):
        return None


class Ahead:
    """Blocks of whole lines of a file from `offset` on, each with `scan(block)` as the helper computed it.

    `next()` gives (block, scan result) until the helper stops, then None; `offset` is then where the reader
    goes on, with `read1` (os.pread from there). `close()` ends the helper (always call it: a finally).
    """

    def __init__(self, fd: int, offset: int, block: int, scan: Callable[[bytes], Any]) -> None:
        self.fd, self.offset = fd, offset
        self.blocks = 0  #: blocks taken with the helper's scan
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            raise
        if pid == 0:  # the helper: never returns (whatever happens, it must not go on as the reader)
            try:
                os.close(r)
                _helper(fd, offset, block, scan, w)
            finally:
                os._exit(1)
        os.close(w)
        self.pid = pid  #: the helper's process id (kept once it has ended)
        self._pid: int | None = pid  #: while it may still run
        self._pipe: io.BufferedReader | None = open(r, "rb")  # noqa: SIM115 - closed by close()

    def next(self) -> tuple[bytes, Any] | None:
        """The next block and its scan; None once the helper has stopped (for good)."""
        message = self._message()
        if message is None:
            self.close()
            return None
        length, scan = message
        block = os.pread(self.fd, length, self.offset) if isinstance(length, int) and length > 0 else b""
        if len(block) != length:  # the file changed under us (truncated): the reader reads what is there now
            self.close()
            return None
        self.offset += length
        self.blocks += 1
        return block, scan

    def read1(self, n: int = -1) -> bytes:
        """The file from `offset` on, as a stream's read1 (once the helper has stopped)."""
        chunk = os.pread(self.fd, n if n > 0 else 1 << 20, self.offset)
        self.offset += len(chunk)
        return chunk

    def _message(self) -> tuple[int, Any] | None:
        if self._pipe is None:
            return None
        try:
            head = self._pipe.read(_HEADER)
            if len(head) != _HEADER:
                return None
            size = int.from_bytes(head, "little", signed=True)
            if size <= 0:
                return None  # the helper's own end: input ended, an enormous line, or an error
            body = self._pipe.read(size)
            if len(body) != size:
                return None  # the helper died mid-message
            # the helper is this program, forked: its marshalled tuple of plain values is as trusted as our memory
            message = marshal.loads(body)
            return message if isinstance(message, tuple) and len(message) == 2 else None
        except (OSError, ValueError, EOFError, TypeError):
            return None

    def close(self) -> None:
        """End the helper and reap it (no zombie, whatever state it is in)."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if self._pid is not None:
            import signal

            pid, self._pid = self._pid, None
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _helper(fd: int, offset: int, block: int, scan: Callable[[bytes], Any], w: int) -> None:
    """The helper process: scan block after block, send each (length, scan), then an end; exit without running
    any of the parent's exit handlers or flushing its buffers (os._exit)."""
    code = 0
    try:
        import gc
        import signal

        gc.disable()  # (a collection would write to every object, copying the parent's pages for nothing)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends the parent and the helper at once, quietly
        out = open(w, "wb", buffering=1 << 16)  # noqa: SIM115 - os._exit below
        while True:
            chunk = os.pread(fd, block, offset)
            cut = chunk.rfind(b"\n")
            if cut == -1:  # the input's end, its last line without a newline, or a line longer than a block
                break
            length = cut + 1
            body = marshal.dumps((length, scan(chunk if length == len(chunk) else chunk[:length])))
            out.write(len(body).to_bytes(_HEADER, "little", signed=True))
            out.write(body)
            out.flush()
            offset += length
        out.write(bytes(_HEADER))
        out.flush()
    except BaseException:  # noqa: BLE001 - a closed pipe (the reader is done), Ctrl-C, anything: the reader goes on
        code = 1
    os._exit(code)
