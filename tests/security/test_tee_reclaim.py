"""`--tee` from a pipe: the spill file gives back what the diagnosis has read (issue 29, item 9).

The spill file is unlinked at once, so `du` never shows it, and on a tmpfs `/tmp` it is RAM: a long piped log
held whole until exit (232 MB in the report) is memory nobody can see. What the diagnosis has read (and the
copy has long passed on) is reclaimed behind it: the disk in use stays near the distance between the copy and
the diagnosis, not the log's size. Every byte still arrives, in order, on both sides.
"""

from __future__ import annotations

import os
import threading

from diagnoser.live.tee import PipeTee

CHUNK = 1 << 20
TOTAL = 48  # MiB through the pipe


def allocated(fd: int) -> int:
    return os.fstat(fd).st_blocks * 512


def test_the_spill_file_is_reclaimed_behind_the_reader(tmp_path):
    read_fd, write_fd = os.pipe()
    consumed = threading.Semaphore(2)  # the writer stays at most two chunks ahead of the reader
    payload = [bytes([65 + i % 26]) * (CHUNK - 1) + b"\n" for i in range(TOTAL)]

    def writer() -> None:
        for chunk in payload:
            consumed.acquire()
            os.write(write_fd, chunk)
        os.close(write_fd)

    with open(tmp_path / "copy", "wb") as out:
        tee = PipeTee(read_fd, out.fileno())
        assert tee.spill is not None
        spill = tee.spill.fileno()
        thread = threading.Thread(target=writer)
        thread.start()
        got = bytearray()
        peak = 0
        released = 0
        while True:
            data = tee.read(1.0)
            if data is None:
                continue
            if not data:
                break
            got += data
            peak = max(peak, allocated(spill))
            while released < len(got) // CHUNK:
                consumed.release()
                released += 1
        thread.join()
        end = allocated(spill)
        tee.finish()
        tee.close()
        os.close(read_fd)
    assert bytes(got) == b"".join(payload)
    assert (tmp_path / "copy").read_bytes() == b"".join(payload)
    # the distance between copy and diagnosis is a few MiB: so is the disk in use, never the 48 MiB read
    assert peak <= 16 * CHUNK, peak
    assert end <= 16 * CHUNK, end
