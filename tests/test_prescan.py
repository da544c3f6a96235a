"""The reader's helper process (prescan.py): a big file's report is the same with it and without it, whatever
the helper meets (shipper records, a CRI line cut in pieces, an enormous line, its own death), and it never
outlives the read."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import threading

import pytest

from diagnoser import prescan
from diagnoser.sources import open_log

from .conftest import FIXTURES, ROOT
from .test_shapes import cri_partial, docker_json

# (the platform only: this process's threads are no reason to skip, the driver's fresh process has none)
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "fork"),
                                reason="the helper is forked on Linux only")

DRIVER = ROOT / "tests" / "prescan_driver.py"
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


@pytest.fixture(autouse=True)
def fresh_prefilter(monkeypatch):
    """A prefilter of the tests' own: the shared one may have been built by a test that turned hyperscan off
    (VLLM_DOCTOR_PURE_PYTHON), and the helper is asked for only when hyperscan searches."""
    from diagnoser import engine

    pytest.importorskip("hyperscan")
    monkeypatch.delenv("VLLM_DOCTOR_PURE_PYTHON", raising=False)
    monkeypatch.setattr(engine, "_PREFILTERS", {})


def run(mode: str, path, *flags: str) -> dict:
    """tests/prescan_driver.py in a fresh process (one thread: this one has others, so it forks no helper)."""
    env = {k: v for k, v in os.environ.items() if k not in (prescan.SERIAL_ENV, "VLLM_DOCTOR_PURE_PYTHON")}
    done = subprocess.run([sys.executable, str(DRIVER), mode, str(path), *flags], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["supported"] and got["gone"]  # a helper could be forked there, and none outlives the read
    return got


def test_the_report_is_the_same_with_the_helper_as_without(tmp_path):
    path = _log(tmp_path)
    alone, helped = run("report", path, "--serial"), run("report", path)
    assert alone["helpers"] == []
    # the first helper stops at the enormous line, the second starts after it and scans to the end
    assert len(helped["helpers"]) == 2 and helped["helpers"][0] > 50 and helped["helpers"][1] > 5
    assert helped["report"] == alone["report"]
    report = helped["report"]
    assert "kv-cache-too-small" in [f["rule"] for f in report["findings"]]
    assert report["input"]["lines"] == path.read_bytes().count(b"\n") + 1
    points = report["series"]["engines"]["0"]["points"]
    assert sum(p["errors"]["mean"] * p["n"] for p in points) >= 60  # the failed access lines were counted
    # the lines themselves, follow lines included (the ones a CRI block owes a plain block the helper scanned)
    assert run("lines", path)["lines"] == run("lines", path, "--serial")["lines"]


def test_a_hard_wrapped_paste_at_the_start_is_unwrapped_with_the_helper_too(tmp_path):
    """A terminal's hard wraps (80 columns) over the first blocks: within the paste-sized start the reader
    rejoins them, so the helper leaves such a block to it."""
    wrapped = [line[i:i + 80] for line in SERVING[:700] for i in range(0, max(len(line), 1), 80)]
    path = tmp_path / "pasted.log"
    path.write_text("\n".join([*wrapped, *SERVING * 2, *FAILURE]) + "\n")
    helped = run("report", path)
    assert helped["helpers"][0] > 20
    assert helped["report"] == run("report", path, "--serial")["report"]
    assert run("lines", path)["lines"] == run("lines", path, "--serial")["lines"]


def test_each_line_longer_than_a_block_stops_a_helper_and_the_next_starts_after_it(tmp_path):
    huge = (API + "INFO 05-19 11:00:00 [logger.py:39] Received request cmpl-9: prompt: '" + "why " * 10_000
            + "', params: SamplingParams(n=1).")  # a 40 KB prompt: longer than a block
    path = tmp_path / "prompts.log"
    path.write_text("\n".join([*SERVING, *[line for _ in range(6) for line in (huge, *SERVING[:500])],
                               *FAILURE]) + "\n")
    helped = run("report", path)
    assert helped["report"] == run("report", path, "--serial")["report"]
    assert len(helped["helpers"]) == prescan.MAX_HELPERS and all(n >= 2 for n in helped["helpers"])


def test_a_helper_that_dies_midway_leaves_the_reader_to_finish(tmp_path):
    path = _log(tmp_path, enormous=False)
    helped = run("report", path, "--die-at", "40")
    assert helped["helpers"][0] == 39  # (and the next helper, after a block read alone, died likewise)
    assert helped["report"] == run("report", path, "--serial")["report"]


def test_a_reader_stopped_early_ends_its_helper(tmp_path):
    got = run("early", _log(tmp_path), "--stop-after", "4000")
    assert got["helpers"] and got["helpers"][0] > 0
    assert got["running_before_close"]  # still running (or a zombie) while the reader was open; gone after


def test_no_helper_for_pipes_compressed_files_threads_or_when_turned_off(tmp_path, monkeypatch):
    path = _log(tmp_path)
    assert prescan.regular_file(io.BytesIO(path.read_bytes())) is None
    r, w = os.pipe()
    with open(r, "rb") as pipe, open(w, "wb"):
        assert prescan.regular_file(pipe) is None
    with open_log(path) as stream:
        fd, offset, size = prescan.regular_file(stream)
        assert (offset, size) == (0, path.stat().st_size) and fd == stream.fileno()
    packed = tmp_path / "serving.log.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    with open_log(packed) as stream:
        assert prescan.regular_file(stream) is None  # the decompressor's stream, not the file's bytes
    assert run("report", packed)["helpers"] == []
    assert run("report", path, "--thread")["helpers"] == []
    assert run("report", path, "--serial")["helpers"] == []
    refused = run("report", path, "--no-fork")  # a fork refused (a sandbox, no process to spare): read alone
    assert refused["helpers"] == [] and refused["report"] == run("report", path, "--serial")["report"]
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not prescan.supported()  # a fork would copy no thread, and any lock one holds stays held
        with monkeypatch.context() as m:  # a thread Python does not know of (a native library's, Ray's) counts too
            m.setattr(threading, "active_count", lambda: 1)
            assert not prescan.supported()
    finally:
        stop.set()
        other.join()


def test_a_file_cut_short_under_the_helper_is_read_as_it_is_now(tmp_path):
    path = tmp_path / "growing.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(4000)))
    with open(path, "rb") as stream:
        ahead = prescan.Ahead(stream.fileno(), 0, 4096, len)
        try:
            block, scan = ahead.next()
            assert block.endswith(b"\n") and scan == len(block) and len(block) > 4000
            ahead._pipe.peek(1)  # (wait for the helper's next message: it measured the next block before the cut)
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
    assert prefilter.accelerated
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


def test_the_helper_leaves_a_hard_wrapped_block_of_the_paste_sized_start_to_the_reader():
    from diagnoser.engine import prefilter_for
    from diagnoser.reader import PASTE_MAX, AheadScan
    from diagnoser.rules import builtin_rules

    prefilter = prefilter_for(builtin_rules())
    prefilter.searched_elsewhere(1 << 30)
    wrapped = [line[i:i + 80] for line in SERVING[:300] for i in range(0, max(len(line), 1), 80)]
    block = ("\n".join(wrapped) + "\n").encode()
    assert AheadScan(prefilter, None, 0, 0)(block) is None  # the reader unwraps it
    assert AheadScan(prefilter, None, 0, PASTE_MAX)(block) is not None  # past the start: searched as it is
