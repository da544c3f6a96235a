"""Fuzzing (hypothesis): arbitrary bytes and arbitrary argument dicts through the reader, the tracker, the
matcher, the advisor and every renderer never crash, never emit a control or bidi character, never emit a
line that starts a GitHub workflow command outside the github format's own, each example within a deadline.

(The `run:` line's shell round trip is fuzzed with the command builder, not here.)
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnoser.analysis.pipeline import diagnose
from diagnoser.analysis.tracker import Tracker
from diagnoser.ingest.line import parse_line
from diagnoser.ingest.reader import read_lines
from diagnoser.report import FORMATS, renderer

from .test_output_escapes import UNSAFE, assert_inert

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_LINES = [ln.encode() for p in sorted((ROOT / "fixtures").glob("*.log"))
                 for ln in p.read_text(encoding="utf-8").splitlines()[:60]]
HOSTILE = [b"\x1b]52;c;SGVsbG8=\x07", b"\x1b[2J", "\u009b31m".encode(), "\u202e".encode(), b"\r", b"\x00",
           b"::add-mask::x", b"\n::error::x\n", b"  ::stop-commands::t", b"\\x1b", b"$(touch /tmp/PWNED)",
           b"\xff\xfe", b"`", b"%0A", b"\t", b"hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"]
FUZZ = settings(max_examples=20, deadline=10_000, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)

piece = st.one_of(st.sampled_from(FIXTURE_LINES), st.sampled_from(HOSTILE), st.binary(max_size=40),
                  st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
log_bytes = st.lists(st.tuples(piece, st.sampled_from([b"\n", b"", b" ", b"\r\n"])), max_size=40).map(
    lambda parts: b"".join(p + sep for p, sep in parts))


def render_all(report) -> None:
    for fmt in FORMATS:
        out = renderer(fmt)([report], {"color": False, "step_summary": ""})
        assert_inert(out, fmt)


@FUZZ
@given(log_bytes)
def test_arbitrary_bytes_through_every_format(data):
    report = diagnose(io.BytesIO(data), "fuzz.log")
    render_all(report)


@FUZZ
@given(log_bytes)
def test_reader_and_tracker_on_arbitrary_bytes(data):
    tracker = Tracker()
    for line in read_lines(io.BytesIO(data)):
        assert isinstance(line.text, str)
        tracker.observe(line)
    tracker.finish()


scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30),
                   st.sampled_from(["x\n::add-mask::y", "\x1b]0;t\x07", "a'b\"c", "$(id)", "`id`", "\u202e",
                                    "--x $(touch /tmp/PWNED) #", "seed=__import__('os').system('id'),x"]))
arg_value = st.one_of(scalar, st.lists(scalar, max_size=3), st.dictionaries(st.text(max_size=8), scalar, max_size=2))
arg_dicts = st.dictionaries(st.one_of(st.sampled_from(["max_model_len", "gpu_memory_utilization", "model",
                                                       "served_model_name", "api_key", "tensor_parallel_size"]),
                                      st.text(max_size=20)), arg_value, max_size=6)
KV_TAIL = (b"(EngineCore_0 pid=22010) ERROR 08-21 14:04:41 [core.py:700] ValueError: To serve at least one "
           b"request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than "
           b"the available KV cache memory (4.62 GiB). Based on the available memory, the estimated maximum model "
           b"length is 37840. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
           b"initializing the engine.\n")


@FUZZ
@given(arg_dicts)
def test_arbitrary_argument_dicts_through_every_format(args):
    head = b"(APIServer pid=21873) INFO 08-21 14:02:14 [utils.py:326] non-default args: "
    data = head + repr(args).encode("utf-8", "surrogatepass") + b"\n" + KV_TAIL
    report = diagnose(io.BytesIO(data), "args.log")
    render_all(report)


@FUZZ
@given(st.text(max_size=200))
def test_parse_line_never_keeps_unsafe_characters_in_output(text):
    line = parse_line(1, text)
    assert isinstance(line.text, str)
    from diagnoser.report.sanitize import clean

    assert not UNSAFE.search(clean(line.raw))
    assert not re.search(r"^\s*::", clean(line.raw), re.M)
