"""Where logs come from: a compressed or plain file opened as one byte stream, and text or lines as a stream.

Compression is recognised by its magic bytes, not the file name (a rotated `server.log.1` may be gzip):
gzip and bzip2 and xz from the standard library; zstandard when the optional `zstandard` package is
installed (`pip install 'vllm-log-doctor[zstd]'`), else a one-line error that says so. Everything streams:
nothing is decompressed to memory or disk as a whole.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from diagnoser.errors import InputError

GZIP = b"\x1f\x8b"
BZIP2 = b"BZh"
XZ = b"\xfd7zXZ\x00"
ZSTD = b"\x28\xb5\x2f\xfd"
#: file-name endings that mark a compressed log (for listing folders)
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd")
#: top-level modules of the decompressors' own exception types (zlib.error, lzma.LZMAError, zstandard.ZstdError)
CODEC_MODULES = ("zlib", "_lzma", "zstd", "zstandard")


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
    if kind == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        import bz2

        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    if kind == "xz":
        import lzma

        return lzma.LZMAFile(raw, "rb")  # type: ignore[return-value]
    if kind == "zstd":
        return _zstd_reader(raw, name)
    return raw


def is_codec_error(exc: BaseException) -> bool:
    """A decompressor's complaint about its input: corrupt or truncated data, not a bug of the doctor."""
    return isinstance(exc, EOFError) or type(exc).__module__.split(".")[0] in CODEC_MODULES


def read_error(name: str, exc: BaseException) -> InputError | None:
    """A failure while reading a (compressed) log as the one-line error a user sees; None for any other error.

    >>> str(read_error("a.log.gz", EOFError("Compressed file ended before the end-of-stream marker")))
    'a.log.gz: cannot read (truncated: Compressed file ended before the end-of-stream marker)'
    """
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
