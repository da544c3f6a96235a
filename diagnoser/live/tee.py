"""--tee: pass the input to stdout byte for byte, as fast as it comes, while the diagnosis reads it.

The copy runs in a thread that spends its time in system calls (which release the GIL), so the diagnosis
in the main thread never slows it down: a regular file is copied by sendfile() and read again by the
diagnosis (pread, behind the copy); a pipe is copied chunk by chunk as read, and each chunk is appended to
an anonymous temporary file that the diagnosis reads behind the copy the same way (the copy never waits for
the diagnosis; no temporary file, or a full disk: the chunks are queued in memory instead, at most
MAX_BEHIND bytes, then the copy waits: memory stays bounded, nothing is lost).
The diagnosis never reads a byte before it has been copied. What it has read of the temporary file is given
back (a hole punched behind it, RECLAIM bytes at a time), so the disk (RAM, on a tmpfs `/tmp`) holds the
distance between the copy and the diagnosis, not the whole log until exit.

Light to import (the standard library only): the CLI starts the copy before the rules load, so the first
bytes pass at once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import sys
import threading
import time
from collections import deque

BLOCK = 1 << 20        #: bytes read at a time (the reader's BLOCK; not imported: its regexes compile on import)
POLL = 0.1             #: seconds the copier waits for input before it looks whether it should stop


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data` (a non-blocking descriptor waits until writable; a closed reader is ignored)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        except BrokenPipeError:
            return  # whoever read our stdout went away: the diagnosis goes on
        view = view[n:]


MAX_BEHIND = 8 << 20   #: bytes a pipe's copy may run ahead of the diagnosis (then it waits: bounded memory)
SEND_CHUNK = 4 << 20   #: bytes one sendfile() call copies from a regular file
STALL = 0.05           #: a file's copy that made no progress this long waits for its reader: diagnose meanwhile
HEAD_START = 2.0       #: seconds a file's copy runs alone at most (then the diagnosis reads beside it)
BURST = 1 << 20        #: bytes a pipe's copy must be ahead before the diagnosis gives way to it (a log written
                       #: line by line never is: its findings are not delayed)
RECLAIM = 4 << 20      #: bytes of the spill file read by the diagnosis before they are given back (a punched hole)


class Tee:
    """Copies an input descriptor to `out` in a thread, as fast as the input and `out` allow, while the
    diagnosis reads the same bytes at its own pace through `read()` (the source interface), never ahead of
    the copy. The thread spends its time in system calls, which release the GIL, so the diagnosis running in
    the main thread does not slow it down.

    With `close_out`, `out` is replaced by /dev/null once the input has been copied: whoever reads our
    stdout sees its end then, while the diagnosis finishes (its report goes to stderr).
    """

    def __init__(self, fd: int, out: int, close_out: bool = False) -> None:
        self.fd, self.out, self.close_out = fd, out, close_out
        self.cond = threading.Condition()
        self.done = False        #: the input has been copied to its end
        self.stopped = False     #: stop copying (an early verdict: a drainer takes over)
        self.error: BaseException | None = None
        self.owns_fd = False     #: close `fd` when done (a file the tee opened)
        self.progress_at = time.monotonic()           #: when the copy last moved
        self.alone_until = self.progress_at + HEAD_START
        self.thread = threading.Thread(target=self._run, name="vllm-doctor-tee", daemon=True)
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, 0.0005))  # the copier gets the GIL back soon after each call
        self.thread.start()

    def _run(self) -> None:
        ended = True
        try:
            ended = self._copy()
        except BaseException as exc:  # noqa: BLE001 - handed to the reading side, never lost in the thread
            self.error = exc
        with self.cond:
            self.done = ended  # not after stop(): the rest is in the input, for a drainer
            self.cond.notify_all()
        if self.close_out and not self.stopped:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self.out)
                os.close(null)

    def _copy(self) -> bool:
        """Copy until the end of the input (True) or until stopped (False)."""
        raise NotImplementedError

    def _give_way(self) -> None:
        """While the copy moves, the diagnosis waits for it, for HEAD_START seconds at most (on two busy cores
        they would slow each other down); a copy that stalls (a slow reader, `| less`) lets it go on."""
        while not self.done and time.monotonic() < self.alone_until and \
                time.monotonic() - self.progress_at < STALL:
            self.cond.wait(STALL)

    def give_way(self) -> None:
        """Before the rules load: a burst at the start (`cat big.log |`) is copied first, at full speed (the
        rules' loading would hold the GIL the copier needs); a log written line by line is not waited for."""
        with self.cond:
            deadline = time.monotonic() + STALL  # the copier's first chunks, if they come at once
            while not self.done and self.copied - self.pos < BURST and time.monotonic() < deadline:
                self.cond.wait(max(0.0, deadline - time.monotonic()))
            if self.copied - self.pos >= BURST:
                self._give_way()

    def stop(self) -> None:
        """Stop copying and wait for the thread: what it read is copied; the rest is left in the input."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self.thread.join()
        sys.setswitchinterval(self._switch)

    def finish(self) -> None:
        """Wait until the whole input has been copied."""
        self.thread.join()
        sys.setswitchinterval(self._switch)

    def close(self) -> None:
        if self.owns_fd:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.owns_fd = False


def spill_write(fd: int, data: memoryview) -> int:
    """One write to the spill file (a name of its own: the tests make it fail, as a full disk would)."""
    return os.write(fd, data)


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Give the file system back `length` bytes of the file from `offset` (Linux fallocate with
    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: ext4, xfs, btrfs, tmpfs); False where that is not possible."""
    fallocate = _fallocate()
    if fallocate is None:
        return False
    return fallocate(fd, 0x01 | 0x02, offset, length) == 0


_FALLOCATE: list = []


def _fallocate():  # noqa: ANN202 - a ctypes function, or None
    """libc's fallocate(2) (Python's os module has only posix_fallocate, which cannot punch holes)."""
    if not _FALLOCATE:
        found = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(Exception):
                import ctypes
                import ctypes.util

                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                found = libc.fallocate
                found.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
                found.restype = ctypes.c_int
        _FALLOCATE.append(found)
    return _FALLOCATE[0]


def spill_splice(src: int, fd: int, count: int) -> int:
    """Move up to `count` bytes from the input pipe into the spill file in the kernel (no copy through
    Python, one trip through the GIL; a name of its own for the tests, as spill_write)."""
    return os.splice(src, fd, count)


class PipeTee(Tee):
    """A pipe, a terminal, a socket, a child's output: each chunk is written to `out` the moment it is read,
    then appended to an anonymous temporary file (unlinked at once, in $TMPDIR) that the diagnosis reads
    behind the copy, as FileTee reads its file: memory stays bounded and the copy never waits for the
    diagnosis; the disk holds what the diagnosis has yet to read, up to the log's size.

    When that file cannot be made or a write to it fails (a full disk), the rest is queued in memory
    instead, at most MAX_BEHIND bytes; past that the copy waits for the diagnosis (back-pressure: memory
    stays bounded and nothing is lost)."""

    def __init__(self, fd: int, out: int, close_out: bool = False) -> None:
        self.chunks: deque[bytes] = deque()
        self.queued = 0
        self.pos = self.copied = 0   #: the spill file: read up to `pos`, written up to `copied`
        self.reclaimed = 0           #: the spill file's first bytes given back (a hole), read long ago
        self.spill = None
        with contextlib.suppress(OSError, ImportError):
            import tempfile  # here, not at the top: only a piped --tee pays for its import

            self.spill = tempfile.TemporaryFile(prefix="vllm-doctor-tee-")  # noqa: SIM115 - closed in close()
        self.spilling = self.spill is not None
        self.sendfile = True         #: `out` takes sendfile() (not an O_APPEND file)
        with contextlib.suppress(OSError, ImportError):
            import fcntl

            fcntl.fcntl(fd, 1031, BLOCK)  # F_SETPIPE_SZ: longer reads, fewer trips through the GIL
        super().__init__(fd, out, close_out)

    def _copy(self) -> bool:
        spill = self.spill.fileno() if self.spill is not None else -1
        buf = bytearray(BLOCK)  # read into one buffer: no megabyte allocated (and faulted in) per chunk
        view = memoryview(buf)
        splice = hasattr(os, "splice")  # a pipe: into the spill file, then sendfile() from it to `out`
        while not self.stopped:
            try:
                ready, _, _ = select.select([self.fd], [], [], POLL)
            except (OSError, ValueError):
                ready = [self.fd]
            if not ready:
                continue
            if splice and self.spilling:
                try:
                    n = spill_splice(self.fd, spill, BLOCK)
                except BlockingIOError:
                    continue
                except OSError as exc:  # not a pipe (EINVAL): read and write; else a full disk: the queue
                    splice, self.spilling = False, exc.errno == errno.EINVAL
                    continue
                if not n:
                    return True
                self._send(spill, self.copied, n)
                with self.cond:
                    self.copied += n
                    self.progress_at = time.monotonic()
                    self.cond.notify_all()
                continue
            try:
                got = os.readv(self.fd, [buf])
            except BlockingIOError:
                continue
            except OSError:
                got = 0
            data = view[:got]
            if got:
                write_all(self.out, data)
            n = 0
            if self.spilling and got:
                n = self._spill(spill, data)
                with self.cond:
                    self.copied += n
                    self.progress_at = time.monotonic()
                    self.spilling = n == len(data)
                    self.cond.notify_all()
                if self.spilling:
                    continue
            elif self.spilling:
                return True  # the end: `done` tells the reader
            data = bytes(data[n:] if got else b"")  # no spill file, a full disk: to the queue
            with self.cond:
                while self.queued >= MAX_BEHIND and not self.stopped:
                    self.cond.wait(POLL)
                self.chunks.append(data)
                self.queued += len(data)
                self.cond.notify_all()
            if not data:
                return True
        return False

    def _send(self, spill: int, off: int, n: int) -> None:
        """Copy `n` bytes of the spill file from `off` to `out` (sendfile(); read and write where `out`
        refuses it, an O_APPEND file)."""
        end = off + n
        while off < end:
            if self.sendfile:
                try:
                    off += os.sendfile(self.out, spill, off, end - off)
                except BlockingIOError:
                    select.select([], [self.out], [], 1.0)
                except BrokenPipeError:
                    return  # whoever read our stdout went away: the diagnosis goes on
                except OSError:
                    self.sendfile = False
                continue
            data = os.pread(spill, min(BLOCK, end - off), off)
            write_all(self.out, data)
            off += len(data)

    @staticmethod
    def _spill(fd: int, data: memoryview) -> int:
        """Append `data` to the spill file: how many bytes went in before a write failed."""
        n = 0
        with contextlib.suppress(OSError):
            while n < len(data):
                n += spill_write(fd, data[n:])
        return n

    def read(self, timeout: float) -> bytes | None:
        with self.cond:
            if self.pos >= self.copied and not self.chunks and not self.done:
                self.cond.wait(timeout)
            if self.copied - self.pos >= BURST:
                self._give_way()  # a burst (`cat big.log |`): the copy goes first, as from a file
            if self.pos < self.copied:
                size = min(BLOCK, self.copied - self.pos)
            elif self.chunks:
                data = self.chunks[0]
                if data:  # the end (b"") stays: every later read sees it too
                    self.chunks.popleft()
                    self.queued -= len(data)
                    self.cond.notify_all()
                return data
            else:
                if self.error is not None:
                    raise self.error
                return b"" if self.done else None
        assert self.spill is not None
        data = os.pread(self.spill.fileno(), size, self.pos)
        self.pos += len(data)
        if self.pos - self.reclaimed >= RECLAIM:
            self._reclaim()
        return data

    def _reclaim(self) -> None:
        """Punch a hole over what the diagnosis has read (the copy has sent it on before it counted it as copied),
        in whole pages; where holes cannot be punched, nothing is tried again."""
        assert self.spill is not None
        end = self.pos & ~0xFFFF
        if end > self.reclaimed:
            if punch_hole(self.spill.fileno(), self.reclaimed, end - self.reclaimed):
                self.reclaimed = end
            else:
                self.reclaimed = 1 << 62

    def stop(self) -> None:
        """Stop copying (an early verdict) and drop the spill file: a drainer forked next must not hold it."""
        super().stop()
        self._drop_spill()

    def close(self) -> None:
        super().close()
        self._drop_spill()

    def _drop_spill(self) -> None:
        if self.spill is not None:
            with contextlib.suppress(OSError):
                self.spill.close()
            self.spill = None


class FileTee(Tee):
    """A regular file (`vllm-doctor --tee < server.log`): sendfile() copies it in the kernel, and the
    diagnosis reads the file itself (pread, behind the copy), so nothing is held in memory.

    The whole file is there at once, so while the copy moves the diagnosis waits for it (on two busy cores
    they would slow each other down), for HEAD_START seconds at most: the reader of the copy gets a file of
    a gigabyte or two at `cat`'s pace, and the findings come after it. A copy that stalls (a slow reader,
    `| less`) lets the diagnosis go on meanwhile.
    """

    def __init__(self, fd: int, out: int, close_out: bool = False) -> None:
        self.pos = self.copied = os.lseek(fd, 0, os.SEEK_CUR)
        super().__init__(fd, out, close_out)

    def _copy(self) -> bool:
        off = self.copied
        send = True
        while not self.stopped:
            n = 0
            if send:
                try:
                    n = os.sendfile(self.out, self.fd, off, SEND_CHUNK)
                except BlockingIOError:
                    select.select([], [self.out], [], 1.0)
                    continue
                except BrokenPipeError:
                    n = os.fstat(self.fd).st_size - off  # nobody reads the copy: the diagnosis goes on
                    if n <= 0:
                        return True
                except OSError:
                    send = False  # an O_APPEND file, an old kernel: read and write
                    continue
            else:
                data = os.pread(self.fd, BLOCK, off)
                write_all(self.out, data)
                n = len(data)
            if n <= 0:
                return True
            off += n
            with self.cond:
                self.copied = off
                self.progress_at = time.monotonic()
                self.cond.notify_all()
        return False

    def read(self, timeout: float) -> bytes | None:
        with self.cond:
            if self.pos >= self.copied and not self.done:
                self.cond.wait(timeout)
                if self.pos >= self.copied and not self.done:
                    return None
            self._give_way()
            if self.pos >= self.copied:
                if self.error is not None:
                    raise self.error
                return b"" if self.done else None
            size = min(BLOCK, self.copied - self.pos)
        data = os.pread(self.fd, size, self.pos)
        self.pos += len(data)
        return data


def tee_source(fd: int, out: int, close_out: bool = False) -> Tee:
    """The copier for an input descriptor: FileTee for a regular file, else PipeTee."""
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    return FileTee(fd, out, close_out) if regular else PipeTee(fd, out, close_out)


def start(path: str, out: int) -> Tee | None:
    """Start copying stdin (`-`) or a file to `out` now, closing `out` at the end of the input; None when
    the file cannot be opened (the caller reports that)."""
    if path == "-":
        return tee_source(sys.stdin.fileno(), out, close_out=True)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    tee = tee_source(fd, out, close_out=True)
    tee.owns_fd = True
    return tee
