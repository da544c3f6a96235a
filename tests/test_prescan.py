"""The reader's helper process (prescan.py): a big file's report is the same with it and without it, whatever
the helper meets (shipper records, a CRI line cut in pieces, an enormous line, its own death), and it never
outlives the read."""

from __future__ import annotations

import gzip
import io
import os
import threading

import pytest

from diagnoser import prescan, reader
from diagnoser.engine import diagnose
from diagnoser.reader import read_lines
from diagnoser.report.model import report_dict
from diagnoser.sources import open_log

from .conftest import FIXTURES
from .test_shapes import cri_partial, docker_json

pytestmark = pytest.mark.skipif(not prescan.supported(), reason="the helper is forked on Linux only")

SERVING = (FIXTURES / "serving-v1-0.12-3h.log").read_text().split("\n")[:-1]
FAILURE = (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_text().split("\n")[:-1]
API = "\x1b[1;36m(APIServer pid=7)\x1b[0;0m "
REQUEST = (API + "INFO 05-19 11:{m:02d}:00 [logger.py:39] Received request cmpl-{i}: prompt: 'why does vLLM say CUDA "
           "out of memory and Avg prompt throughput: 9.0 tokens/s here? " + "lorem ipsum " * 40 + "', params: "
           "SamplingParams(n=1, temperature=0.7, max_tokens=512), prompt_token_ids: None, lora_request: None.")
FAILED = API + 'INFO:     10.0.3.{i}:51234 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable'


def _log(tmp_path, enormous: bool = True):
    """A serving log of every kind of block: plain ones with request-logger and failed access lines, Docker
    json-file records, CRI lines with a 40 KB one in pieces, then an enormous line (longer than a block), more
    serving, and the failure, its last line without a newline."""
    plain = []
    for i, line in enumerate(SERVING * 2):
        plain.append(line)
        if i % 37 == 0:
            plain.append(REQUEST.format(m=i % 60, i=i))
        if i % 53 == 0:
            plain.append(FAILED.format(i=i % 250))
    long = "INFO 05-19 12:00:00 [loggers.py:118] Engine 000: Avg prompt throughput: ".ljust(54_000, "x")
    # CRI pieces of 9 KB (CRI-O and containerd cut at their buffer's size), a block each: the block of the last
    # piece holds no partial marker, only the reader's decoder knows it ends a line
    pieces = [f"2025-05-19T12:00:00.{i:06d}Z stderr {'F' if i == 5 else 'P'} {long[i * 9000:(i + 1) * 9000]}"
              for i in range(6)]
    stats = next(line for line in SERVING if "Avg prompt throughput" in line)
    routes = [f"INFO 05-19 10:00:00 [launcher.py:36] Route: {r}, Methods: GET" for r in ("/health", "/v1/models")]
    # Docker records end with a stats line and the CRI lines after them start with lines of no keyword: the
    # reader decodes the records, then owes follow lines to a CRI block the helper scanned
    text = "\n".join(plain) + "\n" + docker_json([*SERVING[:300], stats]) + cri_partial([*routes * 40,
                                                                                    *SERVING[300:600]])
    text += "\n".join(pieces) + "\n" + cri_partial(SERVING[600:700])
    text += "\n".join(plain) + "\n"
    # a keyword-dense stretch (every line a stats line: blocks the reader builds shape by shape)
    text += "\n".join(line for line in SERVING * 3 if "Avg prompt throughput" in line) + "\n"
    if enormous:
        text += "WARNING 05-19 12:30:00 [serving.py:9] " + "y" * 100_000 + "\n" + "\n".join(SERVING[:900]) + "\n"
    text += "\n".join(FAILURE)  # no newline at the end: a truncated log
    path = tmp_path / "serving.log"
    path.write_text(text)
    return path


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 16 KiB past a 32 KiB paste start, and a helper for any size: a few MB take every path."""
    monkeypatch.setattr(reader, "BLOCK", 1 << 14)
    monkeypatch.setattr(reader, "PASTE_MAX", 1 << 15)
    monkeypatch.setattr(prescan, "MIN_REST", 0)
    made: list[prescan.Ahead] = []

    class Counted(prescan.Ahead):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(prescan, "Ahead", Counted)
    return made


def _report(path, monkeypatch, serial: bool):
    if serial:
        monkeypatch.setenv(prescan.SERIAL_ENV, "1")
    else:
        monkeypatch.delenv(prescan.SERIAL_ENV, raising=False)
    with open_log(path) as stream:
        got = report_dict(diagnose(stream, str(path)), series=True)
    monkeypatch.delenv(prescan.SERIAL_ENV, raising=False)
    return got


def _lines(path, monkeypatch, serial: bool):
    """What the reader yields, as the engine reads (the series counting access lines, the helper unless serial)."""
    from diagnoser.engine import _ahead, _Sniffer, prefilter_for
    from diagnoser.rules import builtin_rules
    from diagnoser.series import Series, access_counts

    if serial:
        monkeypatch.setenv(prescan.SERIAL_ENV, "1")
    with open_log(path) as stream:
        sniffer = _Sniffer(stream)
        got = [(line.number, line.text, line.follow) for line in read_lines(
            sniffer, prefilter_for(builtin_rules()), on_block=Series().access_block, prepass=access_counts,
            ahead=_ahead(stream, sniffer))]
    monkeypatch.delenv(prescan.SERIAL_ENV, raising=False)
    return got


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_report_is_the_same_with_the_helper_as_without(tmp_path, monkeypatch, small_blocks):
    path = _log(tmp_path)
    alone = _report(path, monkeypatch, serial=True)
    assert small_blocks == []  # (serial: no helper was made)
    helped = _report(path, monkeypatch, serial=False)
    # the first helper stops at the enormous line, the second starts after it and scans to the end
    assert len(small_blocks) == 2 and small_blocks[0].blocks > 50 and small_blocks[1].blocks > 5
    assert helped == alone
    assert "kv-cache-too-small" in [f["rule"] for f in helped["findings"]]
    assert helped["input"]["lines"] == path.read_bytes().count(b"\n") + 1
    points = helped["series"]["engines"]["0"]["points"]
    assert sum(p["errors"]["mean"] * p["n"] for p in points) >= 60  # the failed access lines were counted
    assert _gone(small_blocks[0].pid) and _gone(small_blocks[1].pid)
    # the lines themselves, follow lines included (the ones a CRI block owes a plain block the helper scanned)
    assert _lines(path, monkeypatch, serial=False) == _lines(path, monkeypatch, serial=True)
    assert [a.blocks for a in small_blocks[2:]] == [a.blocks for a in small_blocks[:2]]


def test_a_hard_wrapped_paste_at_the_start_is_unwrapped_with_the_helper_too(tmp_path, monkeypatch, small_blocks):
    """A terminal's hard wraps (80 columns) over the first blocks: within the paste-sized start the reader
    rejoins them, so the helper leaves such a block to it."""
    wrapped = [line[i:i + 80] for line in SERVING[:700] for i in range(0, max(len(line), 1), 80)]
    path = tmp_path / "pasted.log"
    path.write_text("\n".join([*wrapped, *SERVING * 2, *FAILURE]) + "\n")
    alone = _report(path, monkeypatch, serial=True)
    helped = _report(path, monkeypatch, serial=False)
    assert small_blocks and small_blocks[0].blocks > 20
    assert helped == alone
    assert _lines(path, monkeypatch, serial=False) == _lines(path, monkeypatch, serial=True)


def test_each_line_longer_than_a_block_stops_a_helper_and_the_next_starts_after_it(tmp_path, monkeypatch,
                                                                                    small_blocks):
    huge = (API + "INFO 05-19 11:00:00 [logger.py:39] Received request cmpl-9: prompt: '" + "why " * 10_000
            + "', params: SamplingParams(n=1).")  # a 40 KB prompt: longer than a block
    path = tmp_path / "prompts.log"
    path.write_text("\n".join([*SERVING, *[line for _ in range(6) for line in (huge, *SERVING[:500])],
                               *FAILURE]) + "\n")
    alone = _report(path, monkeypatch, serial=True)
    assert _report(path, monkeypatch, serial=False) == alone
    assert len(small_blocks) == prescan.MAX_HELPERS and all(a.blocks >= 2 for a in small_blocks)


def test_a_helper_that_dies_midway_leaves_the_reader_to_finish(tmp_path, monkeypatch, small_blocks):
    path = _log(tmp_path, enormous=False)
    alone = _report(path, monkeypatch, serial=True)
    original = reader.AheadScan.__call__
    calls = [0]

    def dies(self, block):  # runs in the helper: its 40th block is its last
        calls[0] += 1
        if calls[0] == 40:
            os._exit(3)
        return original(self, block)

    monkeypatch.setattr(reader.AheadScan, "__call__", dies)
    helped = _report(path, monkeypatch, serial=False)
    assert small_blocks[0].blocks == 39
    assert helped == alone


def test_a_reader_stopped_early_ends_its_helper(tmp_path, monkeypatch, small_blocks):
    from diagnoser.engine import _ahead, _Sniffer, prefilter_for
    from diagnoser.rules import builtin_rules

    path = _log(tmp_path)
    with open_log(path) as stream:
        sniffer = _Sniffer(stream)
        lines = read_lines(sniffer, prefilter_for(builtin_rules()), ahead=_ahead(stream, sniffer))
        for line in lines:
            if small_blocks and line.number > 4000:
                break
        assert small_blocks and small_blocks[0].blocks > 0
        assert not _gone(small_blocks[0].pid)  # still running (or a zombie) while the reader is open
        lines.close()
    assert _gone(small_blocks[0].pid)


def test_no_helper_for_pipes_compressed_files_threads_or_when_turned_off(tmp_path, monkeypatch, small_blocks):
    path = _log(tmp_path)
    assert prescan.regular_file(io.BytesIO(path.read_bytes())) is None
    packed = tmp_path / "serving.log.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    with open_log(packed) as stream:
        assert prescan.regular_file(stream) is None
        diagnose(stream, str(packed))
    r, w = os.pipe()
    with open(r, "rb") as pipe, open(w, "wb"):
        assert prescan.regular_file(pipe) is None
    with open_log(path) as stream:
        fd, offset, size = prescan.regular_file(stream)
        assert (offset, size) == (0, path.stat().st_size) and fd == stream.fileno()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not prescan.supported()  # a fork would copy no thread, and any lock one holds stays held
        with monkeypatch.context() as m:  # a thread Python does not know of (a native library's, Ray's) counts too
            m.setattr(threading, "active_count", lambda: 1)
            assert not prescan.supported()
        with open_log(path) as stream:
            diagnose(stream, str(path))
    finally:
        stop.set()
        other.join()
    monkeypatch.setenv(prescan.SERIAL_ENV, "1")
    assert not prescan.supported()
    assert small_blocks == []


def test_a_file_cut_short_under_the_helper_is_read_as_it_is_now(tmp_path):
    path = tmp_path / "growing.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(4000)))
    with open(path, "rb") as stream:
        ahead = prescan.Ahead(stream.fileno(), 0, 4096, len)
        try:
            block, scan = ahead.next()
            assert block.endswith(b"\n") and scan == len(block) and len(block) > 4000
            os.truncate(path, len(block) + 100)  # mid-line: what the helper measured is no longer there
            assert ahead.next() is None  # the reader goes on by itself, from the end of the first block
            assert ahead.offset == len(block)
            assert ahead.read1(1 << 20) == path.read_bytes()[len(block):]
        finally:
            ahead.close()


def test_the_helper_s_lines_are_taken_only_when_it_knew_what_the_block_before_owed():
    """A block after one the reader decoded itself (the helper said nothing of it): the helper chose its lines
    owing nothing, the reader knows the block before owes three follow lines, and yields them."""
    from diagnoser.engine import prefilter_for
    from diagnoser.reader import AheadScan, Decoder, ReadStats, _whole_block
    from diagnoser.rules import builtin_rules

    prefilter = prefilter_for(builtin_rules())
    prefilter.searched_elsewhere(1 << 30)  # past the small input: hyperscan searches, as past the paste start
    routes = "".join(f"INFO 05-19 10:00:0{i} [launcher.py:36] Route: /r{i}, Methods: GET\n" for i in range(5))
    block = (routes + "\n".join(SERVING[200:400]) + "\n").encode()
    answer = AheadScan(prefilter, None, -1, 1 << 30)(block)  # (-1: the block before was not the helper's)

    def lines(ahead):
        got = _whole_block(block, 100, 3, prefilter, None, ReadStats(), Decoder(), None, ahead)
        return [(line.number, line.text, line.follow) for line in got]

    alone = lines(None)
    assert alone[:3] == [(101 + i, f"Route: /r{i}, Methods: GET", True) for i in range(3)]
    assert lines(answer) == alone
    knew = AheadScan(prefilter, None, 3, 1 << 30)(block)  # a helper that knew: its lines are taken, and are the same
    assert knew[7][1][:3] == [True, True, True] and lines(knew) == alone
