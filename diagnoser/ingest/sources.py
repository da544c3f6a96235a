"""Where logs come from: a compressed or plain file opened as one byte stream, and text or lines as a stream.

Compression is recognised by its magic bytes, not the file name (a rotated `server.log.1` may be gzip):
gzip and bzip2 and xz from the standard library; zstandard when the optional `zstandard` package is
installed (`pip install 'vllm-log-doctor[zstd]'`), else a one-line error that says so. Everything streams:
nothing is decompressed to memory or disk as a whole.

A compressed log expands to at most MAX_DECOMPRESSED bytes, and past its first RATIO_AFTER bytes to at most
MAX_RATIO times the compressed bytes read so far: a decompression bomb (a 785-byte .bz2 of 1 GB of zeros) is a
one-line error after a second, not minutes of work. `--max-decompressed SIZE` (VLLM_DOCTOR_MAX_DECOMPRESSED, which
the CLI sets so that scan's workers see it too) sets the byte cap and lifts the ratio cap: the user vouches for
the file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from diagnoser.errors import InputError, LimitError, UsageError

GZIP = b"\x1f\x8b"
BZIP2 = b"BZh"
XZ = b"\xfd7zXZ\x00"
ZSTD = b"\x28\xb5\x2f\xfd"
#: file-name endings that mark a compressed log (for listing folders)
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd")
#: top-level modules of the decompressors' own exception types (zlib.error, lzma.LZMAError, zstandard.ZstdError)
CODEC_MODULES = ("zlib", "_lzma", "zstd", "zstandard")
#: bytes a compressed log may expand to (real logs compress 10-40x; a 16 GiB log takes minutes to read)
MAX_DECOMPRESSED = 16 << 30
#: past RATIO_AFTER bytes out, at most this many bytes out per compressed byte in (gzip's own limit is ~1032)
MAX_RATIO = 1000
RATIO_AFTER = 32 << 20
#: the environment variable that carries --max-decompressed (to scan's worker processes too)
CAP_ENV = "VLLM_DOCTOR_MAX_DECOMPRESSED"
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10**3, "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
               "g": 1 << 30, "gib": 1 << 30, "gb": 10**9, "t": 1 << 40, "tib": 1 << 40, "tb": 10**12}


def parse_cap(text: str) -> int:
    """A --max-decompressed size in bytes: a number with an optional unit (K/M/G/T = KiB/MiB/GiB/TiB, KB/MB/GB
    are powers of ten).

    >>> parse_cap("256KiB"), parse_cap("1G"), parse_cap("1000")
    (262144, 1073741824, 1000)
    """
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _SIZE_UNITS or float(m.group(1)) * _SIZE_UNITS[unit] < 1:
        raise UsageError(f"--max-decompressed {text}: not a size; give bytes or a size such as 20GiB or 500MB")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def human_size(n: int) -> str:
    """A byte count in the largest binary unit that divides it.

    >>> human_size(262144), human_size(16 << 30), human_size(1000)
    ('256 KiB', '16 GiB', '1000 bytes')
    """
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def decompression_cap() -> tuple[int, int | None]:
    """(byte cap, ratio cap or None): the defaults, or what --max-decompressed set (no ratio cap then)."""
    given = os.environ.get(CAP_ENV)
    if given:
        return parse_cap(given), None
    return MAX_DECOMPRESSED, MAX_RATIO


class _Counted(io.RawIOBase):
    """The compressed bytes as read by a decompressor, counted."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(b))
        n = len(data)
        b[:n] = data
        self.count += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Capped(io.RawIOBase):
    """A decompressed stream that stops with a LimitError (one line, the file and the flag) past the caps."""

    def __init__(self, stream: BinaryIO, counted: _Counted, name: str) -> None:
        self._stream, self._counted, self._name = stream, counted, name
        self._cap, self._ratio = decompression_cap()
        self.out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._stream.read(len(b))
        n = len(data)
        b[:n] = data
        self.out += n
        if self.out > self._cap:
            raise LimitError(f"{self._name}: decompresses to more than {human_size(self._cap)}; if the log is "
                             "really that big, raise the cap with --max-decompressed SIZE")
        if self._ratio is not None and self.out > RATIO_AFTER and self.out > self._ratio * max(1, self._counted.count):
            raise LimitError(f"{self._name}: decompresses to more than {self._ratio} times its size (a "
                             "decompression bomb?); if it is a real log, allow it with --max-decompressed SIZE")
        return n

    def close(self) -> None:
        self._stream.close()
        super().close()


def compression_of(head: bytes) -> str | None:
    """The compression a file's first bytes announce: 'gzip', 'bzip2', 'xz', 'zstd', or None (plain).

    >>> compression_of(b"\\x1f\\x8b\\x08\\x00"), compression_of(b"INFO 08-21 ...")
    ('gzip', None)
    """
    if head.startswith(GZIP):
        return "gzip"
    if head.startswith(BZIP2) and len(head) >= 4 and head[3:4].isdigit():
        return "bzip2"
    if head.startswith(XZ):
        return "xz"
    if head.startswith(ZSTD):
        return "zstd"
    return None


def file_compression(path: str) -> str | None:
    """The compression of a file from its first bytes, else from its name (a file that does not exist yet).

    >>> file_compression("/nonexistent/server.log.zst"), file_compression("/nonexistent/server.log")
    ('zstd', None)
    """
    try:
        with open(path, "rb") as fh:
            kind = compression_of(fh.read(8))
            if kind or fh.tell():
                return kind
    except OSError:
        pass
    suffix = os.path.splitext(path)[1].lower()
    return {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}.get(suffix)


def _zstd_reader(raw: BinaryIO, name: str) -> BinaryIO:
    try:
        import zstandard
    except ImportError:
        raise InputError(f"{name}: is zstandard-compressed; install the optional extra to read it: "
                         "pip install 'vllm-log-doctor[zstd]' (or decompress it with `zstd -d`)") from None
    return io.BufferedReader(_ZstdFrames(raw, zstandard), buffer_size=1 << 20)  # type: ignore[return-value]


class _ZstdFrames(io.RawIOBase):
    """zstd frames one after another; a stream that ends inside a frame raises EOFError (truncated), as gzip does.

    (zstandard's own stream_reader returns what it has and says nothing when the file was cut short.)
    """

    def __init__(self, raw: BinaryIO, zstandard: Any) -> None:
        self._raw, self._zstd = raw, zstandard
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._out = b""
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._out:
            chunk = self._raw.read(1 << 18)
            if not chunk:
                if self._in_frame:
                    raise EOFError("zstd stream ended inside a frame (truncated file)")
                return 0
            while chunk:
                self._in_frame = True
                self._out += self._dobj.decompress(chunk)
                if not self._dobj.eof:
                    break
                chunk = self._dobj.unused_data
                self._in_frame = False
                self._dobj = self._zstd.ZstdDecompressor().decompressobj()
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def decompressed(raw: BinaryIO, name: str) -> BinaryIO:
    """`raw` as a stream of its decompressed bytes (itself when it is not compressed, buffered when it cannot
    peek: the first bytes are looked at without being consumed)."""
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)  # type: ignore[arg-type,type-var]
    head = raw.peek(8)[:8]  # type: ignore[attr-defined]
    kind = compression_of(head)
    if kind is None:
        return raw
    counted = _Counted(raw)
    source: BinaryIO = counted  # type: ignore[assignment]
    if kind == "gzip":
        import gzip

        stream: BinaryIO = gzip.GzipFile(fileobj=source, mode="rb")  # type: ignore[assignment]
    elif kind == "bzip2":
        import bz2

        stream = bz2.BZ2File(source, "rb")  # type: ignore[assignment]
    elif kind == "xz":
        import lzma

        stream = lzma.LZMAFile(source, "rb")  # type: ignore[assignment]  # noqa: SIM115 - closed by _Capped
    else:
        stream = _zstd_reader(source, name)
    return io.BufferedReader(_Capped(stream, counted, name), buffer_size=1 << 20)  # type: ignore[return-value]


def is_codec_error(exc: BaseException) -> bool:
    """A decompressor's complaint about its input: corrupt or truncated data, not a bug of the doctor."""
    return isinstance(exc, EOFError) or type(exc).__module__.split(".")[0] in CODEC_MODULES


def read_error(name: str, exc: BaseException) -> InputError | None:
    """A failure while reading a (compressed) log as the one-line error a user sees; None for any other error.

    >>> str(read_error("a.log.gz", EOFError("Compressed file ended before the end-of-stream marker")))
    'a.log.gz: cannot read (truncated: Compressed file ended before the end-of-stream marker)'
    """
    if isinstance(exc, InputError):
        return exc  # already one line naming the file (a decompression cap)
    if isinstance(exc, EOFError):
        return InputError(f"{name}: cannot read (truncated: {exc})")
    if isinstance(exc, OSError) or is_codec_error(exc):
        detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return InputError(f"{name}: cannot read ({detail})")
    return None


def open_log(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a log file for reading as bytes, decompressing it transparently; InputError names what is wrong."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise InputError(f"{name}: is a directory; pass the log file inside it (`vllm-doctor scan` reads folders)")
    try:
        raw = open(name, "rb")  # noqa: SIM115 - the caller closes the returned stream
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror or exc}); check the path") from None
    try:
        return decompressed(raw, name)  # peeks at the first bytes: a read can fail here already (EIO, EISDIR)
    except BaseException as exc:
        raw.close()
        error = read_error(name, exc)
        if error is None:
            raise
        raise error from None


class IterStream(io.RawIOBase):
    """A binary stream over an iterable of lines (str or bytes): diagnose a generator without joining it."""

    def __init__(self, lines: Iterable[str | bytes]) -> None:
        self._it: Iterator[str | bytes] = iter(lines)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buf:
            try:
                item = next(self._it)
            except StopIteration:
                return 0
            data = item.encode("utf-8", "surrogateescape") if isinstance(item, str) else bytes(item)
            if data and not data.endswith(b"\n"):
                data += b"\n"
            self._buf = data
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def lines_stream(lines: Iterable[str | bytes]) -> BinaryIO:
    """An iterable of lines as a buffered binary stream (each item is one line; a missing newline is added)."""
    return io.BufferedReader(IterStream(lines), buffer_size=1 << 16)  # type: ignore[return-value]


class _Prepended(io.RawIOBase):
    """`head` then the rest of `stream`: read a file's first bytes to sniff it without losing them."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


def sniff(stream: BinaryIO, size: int = 1 << 16) -> tuple[bytes, BinaryIO]:
    """The stream's first `size` bytes, and a stream that still yields every byte from the start."""
    head = b""
    while len(head) < size:
        chunk = stream.read(size - len(head))
        if not chunk:
            break
        head += chunk
    return head, io.BufferedReader(_Prepended(head, stream), buffer_size=1 << 20)  # type: ignore[return-value]
