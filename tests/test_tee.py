"""--tee from a pipe: the copy spills to an anonymous temporary file that the diagnosis reads behind it, so
the copy never waits for the diagnosis; without that file (none could be made, the disk filled up) the
chunks are queued in memory, bounded, and nothing is lost either way.

No timing assertions: the slowed diagnosis is held on an Event until the copier has reached the end.
"""

from __future__ import annotations

import errno
import os
import random
import tempfile
import threading

import pytest

from diagnoser.live import tee as tee_mod
from diagnoser.live.sources import PipeSource
from diagnoser.live.tee import MAX_BEHIND, PipeTee
from diagnoser.live.watch import LiveOptions, Watch
from diagnoser.rules.loader import builtin_rules

from .conftest import FIXTURES

HANG = 120  # seconds: a guard against a hang, never a measure


def _produce(data: bytes) -> tuple[int, threading.Thread]:
    """A pipe fed with `data` in odd-sized writes by a thread; returns the reading end."""
    read_fd, write_fd = os.pipe()

    def produce():
        with os.fdopen(write_fd, "wb", buffering=0) as w:
            view, rng = memoryview(data), random.Random(7)
            while view:
                n = rng.randint(1, 300_000)
                w.write(view[:n])
                view = view[n:]

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    return read_fd, producer


def _log(size: int) -> bytes:
    """A real start-up's lines repeated to `size` bytes or more (well past MAX_BEHIND)."""
    raw = (FIXTURES / "healthy-v1-0.10.log").read_bytes()
    return raw * (size // len(raw) + 1)


def test_the_pipe_copy_ends_while_the_diagnosis_is_held(tmp_path):
    """The diagnosis is stuck on its first line until the copier reports the end of the input: the copy of
    three times MAX_BEHIND must finish meanwhile (with the old bounded queue it waited for the diagnosis
    forever), then the diagnosis reads every byte from the spill file."""
    stream = _log(3 * MAX_BEHIND)
    read_fd, producer = _produce(stream)
    copy = tmp_path / "copy"
    copied = threading.Event()
    held = []
    with copy.open("w+b") as out:
        watch = Watch(builtin_rules(), LiveOptions(tee=True), emit=lambda s: None, tee_fd=out.fileno())
        feed = watch.matcher.feed

        def slowed(line, context):
            if not held:
                held.append(line.number)

                def report_eof():
                    watch.tee.thread.join()
                    copied.set()

                threading.Thread(target=report_eof, daemon=True).start()
                assert copied.wait(HANG), "the copy waited for the diagnosis"
                held.append(out.seek(0, os.SEEK_END))  # how much the reader of the copy had then
            return feed(line, context)

        watch.matcher.feed = slowed
        verdict, _ = watch.run(PipeSource(read_fd))
        producer.join()
        os.close(read_fd)
    assert isinstance(watch.tee, PipeTee) and watch.tee.spill is not None
    assert held == [1, len(stream)]            # the whole input was copied while the diagnosis was held
    assert copy.read_bytes() == stream
    assert watch.stats.bytes == len(stream)    # and the diagnosis read all of it afterwards
    assert watch.stats.lines == stream.count(b"\n")
    watch.tee.close()
    assert watch.tee.spill is None


def _drain(tee: PipeTee) -> bytes:
    got = bytearray()
    while (data := tee.read(1.0)) != b"":
        if data is not None:
            got += data
    return bytes(got)


def test_no_temporary_file_falls_back_to_the_bounded_queue(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    stream = _log(2 * MAX_BEHIND + 12345)
    read_fd, producer = _produce(stream)
    with (tmp_path / "copy").open("w+b") as out:
        tee = PipeTee(read_fd, out.fileno())
        assert tee.spill is None and not tee.spilling
        assert _drain(tee) == stream
        tee.finish()
        producer.join()
        os.close(read_fd)
    assert (tmp_path / "copy").read_bytes() == stream
    assert tee.queued == 0


@pytest.mark.parametrize("fail_after", [0, 1, 5 * 1024 * 1024 + 17])
def test_a_full_disk_mid_copy_moves_the_rest_to_the_queue(tmp_path, monkeypatch, fail_after):
    """A spill write fails (ENOSPC) after `fail_after` bytes, partway through a chunk: what reached the file
    is read from it, the rest of that chunk and everything after come through the queue, in order."""
    written = [0]
    real = tee_mod.spill_write

    def filling(fd, data):
        room = fail_after - written[0]
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, data[:room])
        written[0] += n
        return n

    real_splice = tee_mod.spill_splice

    def filling_splice(src, fd, count):
        room = fail_after - written[0]
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_splice(src, fd, min(room, count))
        written[0] += n
        return n

    monkeypatch.setattr(tee_mod, "spill_write", filling)
    monkeypatch.setattr(tee_mod, "spill_splice", filling_splice)
    stream = random.Random(fail_after).randbytes(2 * MAX_BEHIND + 999)
    read_fd, producer = _produce(stream)
    with (tmp_path / "copy").open("w+b") as out:
        tee = PipeTee(read_fd, out.fileno())
        assert tee.spill is not None
        assert _drain(tee) == stream
        tee.finish()
        producer.join()
        os.close(read_fd)
    assert not tee.spilling and tee.copied == fail_after
    assert (tmp_path / "copy").read_bytes() == stream


def test_an_early_stop_drops_the_spill_file_and_keeps_the_rest_in_the_pipe(tmp_path):
    """An early verdict stops the copier: what it read was copied; the rest stays in the pipe for the drainer,
    and the spill file is closed before a drainer is forked (it must not hold the disk space)."""
    read_fd, write_fd = os.pipe()
    with (tmp_path / "copy").open("w+b") as out:
        tee = PipeTee(read_fd, out.fileno())
        os.write(write_fd, b"INFO first line\n")
        assert tee.read(HANG) == b"INFO first line\n"
        tee.stop()
        assert tee.spill is None and not tee.done
        os.write(write_fd, b"INFO after the verdict\n")
        os.close(write_fd)
        assert os.read(read_fd, 100) == b"INFO after the verdict\n"
        os.close(read_fd)
    assert (tmp_path / "copy").read_bytes() == b"INFO first line\n"
