"""Reading: bytes -> clean lines, whatever the input looks like, in constant memory."""

from __future__ import annotations

import io

from diagnoser.ingest import reader
from diagnoser.ingest.clean import clean_text, split_flattened
from diagnoser.ingest.line import parse_line
from diagnoser.ingest.prefilter import Prefilter
from diagnoser.ingest.reader import ReadStats, read_lines


def lines_of(data: bytes, keywords=None):
    st = ReadStats()
    out = list(read_lines(io.BytesIO(data), Prefilter(keywords) if keywords else None, stats=st))
    return out, st


def test_vllm_header_and_process_prefix_are_stripped_and_recorded():
    raw = ("\x1b[1;36m(VllmWorker rank=3 pid=4242)\x1b[0;0m ERROR 05-10 16:00:15 "
           "[multiproc_executor.py:470] RuntimeError: boom")
    line = lines_of(raw.encode() + b"\n")[0][0]
    assert line.text == "RuntimeError: boom"
    assert (line.process, line.pid, line.rank) == ("VllmWorker rank=3", 4242, 3)
    assert (line.level, line.timestamp, line.source) == ("ERROR", "05-10 16:00:15", "multiproc_executor.py:470")


def test_old_header_without_bracket():
    line = parse_line(1, "INFO 04-27 10:11:03 llm_engine.py:70] Initializing an LLM engine with config: model='x'")
    assert line.text.startswith("Initializing an LLM engine") and line.source == "llm_engine.py:70"


def test_formatter_level_process_tag_031():
    line = parse_line(1, "(EngineCore pid=77) WARNING 03-06 01:34:23 [core.py:12] careful")
    assert (line.process, line.pid, line.level, line.text) == ("EngineCore", 77, "WARNING", "careful")


def test_docker_k8s_ci_and_quote_prefixes():
    assert parse_line(1, "vllm-1  | INFO 07-21 04:58:58 [api.py:1] up").text == "up"
    assert parse_line(1, "2025-03-02T10:11:12.123456789Z stdout F [rank0]: RuntimeError: x").text == "RuntimeError: x"
    assert parse_line(1, "2025-03-02T10:11:12.123Z [rank1]: boom").rank == 1
    assert parse_line(1, "> > INFO 04-27 10:11:03 [a.py:1] quoted").text == "quoted"
    assert parse_line(1, "2024-04-27 10:13:05 | ERROR | stderr | Traceback (most recent call last):").text.startswith(
        "Traceback")
    assert parse_line(1, "(RayWorkerWrapper pid=812, ip=10.0.0.2) INFO 01-01 00:00:00 [w.py:1] hi").text == "hi"


def test_ray_daemon_tags_are_stripped():
    # Ray relays its daemons' lines to the driver's output tagged without a pid
    assert parse_line(1, "(raylet) ray.exceptions.OutOfMemoryError: Task was killed due to the node running low "
                         "on memory.").text.startswith("ray.exceptions.OutOfMemoryError: ")
    assert parse_line(1, "(raylet, ip=10.0.0.5) A worker died or was killed").text == "A worker died or was killed"
    assert parse_line(1, "(raylet is here) text").text == "(raylet is here) text"


def test_caret_ansi_and_lost_escape_are_stripped():
    line = lines_of(b"^[[31mERROR^[[0m fine\n")[0][0]
    assert line.text == "ERROR fine"
    assert lines_of(b"[1;36m(APIServer pid=9)[0;0m INFO 01-01 00:00:00 [a.py:1] ok\n")[0][0].text == "ok"


def test_crlf_and_tqdm_frames_keep_line_numbers():
    data = b"first\r\nLoading: 10%\rLoading: 50%\rLoading: 100%\r\nthird\n"
    out, st = lines_of(data)
    assert [(ln.number, ln.text) for ln in out] == [
        (1, "first"), (2, "Loading: 10%"), (2, "Loading: 50%"), (2, "Loading: 100%"), (3, "third")]
    assert st.lines == 3


def test_invalid_utf8_and_binary_never_crash():
    out, st = lines_of(b"\xff\xfe\x00\x01 ValueError: bad \xc3\x28 bytes\n\x00\x00\x00")
    assert any("ValueError: bad" in ln.text for ln in out)
    assert all("\x00" not in ln.text for ln in out)
    assert st.lines == 2


def test_empty_input():
    out, st = lines_of(b"")
    assert out == [] and st.lines == 0


def test_truncated_last_line_is_read():
    out, _ = lines_of(b"a\nValueError: cut off mid-li")
    assert out[-1].text == "ValueError: cut off mid-li" and out[-1].number == 2


def test_prefilter_keeps_keyword_lines_and_followers_only():
    body = b"".join(b"noise %d\n" % i for i in range(50))
    data = body + b"ValueError: KV cache is needed\nwrapped tail\nmore\nmore2\nlast\n" + body
    out, st = lines_of(data, ["kv cache is needed"])
    texts = [ln.text for ln in out]
    assert texts[0] == "ValueError: KV cache is needed" and out[0].number == 51
    assert texts[1:4] == ["wrapped tail", "more", "more2"] and all(ln.follow for ln in out[1:4])
    assert "last" not in texts and st.lines == 105


def test_past_the_follow_lines_only_pieces_of_a_hard_wrap_are_kept(monkeypatch):
    """A terminal cuts a long message into pieces as wide as its first line: past FOLLOW lines, a line is kept
    while the one before it is that wide; the last piece (shorter) still belongs, the line after it does not.
    (Past the paste-sized start, where wrapped pieces are not joined beforehand.)"""
    monkeypatch.setattr(reader, "PASTE_MAX", 0)
    body = b"".join(b"noise %d\n" % i for i in range(20))
    first = b"ValueError: KV cache is needed " + b"w" * 49  # 80 columns
    pieces = [b"%d" % i + b"p" * 79 for i in range(5)] + [b"short tail"]
    data = body + first + b"\n" + b"\n".join(pieces) + b"\nnext line\nanother\n" + body
    out, _ = lines_of(data, ["kv cache is needed"])
    texts = [ln.text for ln in out]
    assert texts == [first.decode(), *(p.decode() for p in pieces)]
    # the FOLLOW-th line is short: the message ended there, the wide line after it is another one
    data = body + first + b"\n" + b"\n".join([*pieces[:2], b"end", pieces[3]]) + b"\n" + body
    out, _ = lines_of(data, ["kv cache is needed"])
    assert [ln.text for ln in out][1:] == [pieces[0].decode(), pieces[1].decode(), "end"]
    # a keyword line too short to be a wrapped piece keeps its FOLLOW lines only, however wide they are
    data = body + b"ValueError: KV cache is needed\n" + b"\n".join(pieces) + b"\n" + body
    out, _ = lines_of(data, ["kv cache is needed"])
    assert [ln.text for ln in out][1:] == [p.decode() for p in pieces[:3]]
    # at most WRAP_MAX pieces of one message
    data = body + first + b"\n" + b"\n".join([b"q" * 80] * 20) + b"\n" + body
    out, _ = lines_of(data, ["kv cache is needed"])
    assert len(out) == 1 + 12


def test_huge_single_line_is_read_in_pieces(monkeypatch):
    import diagnoser.ingest.reader as reader

    monkeypatch.setattr(reader, "MAX_LINE", 1 << 16)
    monkeypatch.setattr(reader, "BLOCK", 1 << 14)
    data = b"x" * (1 << 18) + b" ValueError: tail\n"
    out, st = lines_of(data, ["valueerror"])
    assert any("ValueError: tail" in ln.text for ln in out)
    assert st.lines == 1
    assert max(len(ln.text) for ln in out) <= (1 << 17)


def test_flattened_log_is_split_at_prefixes():
    flat = ('(APIServer pid=2960)   File "/x.py", line 3, in f(APIServer pid=2960)     g()'
            "(APIServer pid=3041) INFO 03-06 01:34:23 [utils.py:287] hello INFO 03-06 01:34:24 [a.py:2] again")
    assert split_flattened(flat) == [
        '(APIServer pid=2960)   File "/x.py", line 3, in f', "(APIServer pid=2960)     g()",
        "(APIServer pid=3041) INFO 03-06 01:34:23 [utils.py:287] hello", "INFO 03-06 01:34:24 [a.py:2] again"]


def test_request_log_lines_are_marked_user_content():
    line = parse_line(1, "INFO 01-01 00:00:00 [logger.py:43] Received request chatcmpl-1: prompt: "
                         "'why do I get CUDA out of memory?', params: SamplingParams(n=1)")
    assert line.user_content


def test_request_logger_lines_are_blanked_before_the_prefilter():
    from diagnoser.ingest.request_lines import blank_user_content

    block = (b"INFO 01-01 00:00:00 [a.py:1] ok\n"
             b"(APIServer pid=1) INFO 01-01 00:00:01 [logger.py:43] Received request c1: prompt: 'CUDA out of memory "
             b"error Traceback', params: SamplingParams(n=1), prompt_token_ids: [1, 2]\n"
             b"ValueError: real error\n")
    out = blank_user_content(block)
    assert out.count(b"\n") == block.count(b"\n")
    assert b"prompt" not in out and b"ValueError: real error" in out
    # deep inside a line (a flattened paste), the marker does not blank it
    flat = b"x" * 300 + b"] Received request c2: prompt: 'hi'\n"
    assert blank_user_content(flat) == flat


def test_secret_at_a_piece_boundary_of_an_enormous_line_is_redacted(monkeypatch):
    """An enormous line is cut into pieces where no secret straddles the cut, and each piece is redacted."""
    import diagnoser.ingest.reader as reader
    from diagnoser.ingest.redact import Redactor

    monkeypatch.setattr(reader, "MAX_LINE", 1 << 16)
    monkeypatch.setattr(reader, "BLOCK", 1 << 14)
    head = "INFO 05-01 10:00:00 [logger.py:43] Received request chatcmpl-1: prompt: {"
    secrets = ["Zq8r2Lm" + "X9vTb4Nc" + str(i) for i in range(1000)]
    items = [f"'api_key': '{s}', 'content': '{'lorem ipsum ' * 20}'" for s in secrets]
    # the first key and its value on either side of byte 65536, where a piece used to end
    pad = 65536 - 4 - len(head + "'content': '" + "', " + "'api_key': '")
    items[0] = "'content': '" + ("lorem " * 20000)[:pad] + "', " + items[0]
    data = (head + ", ".join(items) + "}\n").encode()
    assert data.index(b"'api_key'") < 65536 < data.index(secrets[0].encode()) + 8
    red = Redactor()
    out = list(read_lines(io.BytesIO(data), None, redact=red))
    text = "".join(ln.text for ln in out)
    assert {ln.number for ln in out} == {1} and len(out) > 3
    assert not any(s[:12] in text for s in secrets) and red.counts["api_key"] == len(secrets)  # each by its key


def test_piece_of_an_enormous_line_never_cuts_a_utf8_character():
    import diagnoser.ingest.reader as reader

    data = ("é" * 50_000).encode()  # no separator to cut at
    end = reader._piece_end(data + b"\xc3")  # a character's first byte at the end
    assert end == len(data) and data[:end].decode() == "é" * 50_000


def test_pieces_of_an_enormous_line_are_cleaned_like_a_short_line(monkeypatch):
    """A long piece is checked for control bytes in one pass first: with or without any, it comes out as
    clean_text makes a short line (ANSI, the caret and lost-ESC forms and control characters gone)."""
    import diagnoser.ingest.reader as reader

    monkeypatch.setattr(reader, "MAX_LINE", 1 << 16)
    monkeypatch.setattr(reader, "BLOCK", 1 << 14)
    words = "some words [1;36m error a[0m here\x07 ^[[31m ok \x1b[0m done, "
    for body in (words * 8000, words.replace("\x07", "").replace("\x1b", "") * 8000):
        out, st = lines_of((body + "\n").encode(), ["error"])
        assert st.lines == 1 and len(out) > 3
        assert all(ln.text == clean_text(ln.text) for ln in out)
        text = " ".join(ln.text for ln in out)
        assert "\x07" not in text and "\x1b" not in text and "[1;36m" not in text and "[31m" not in text
        assert "a[0m here" in text and text.count("error") == 8000  # `a[0m`: no lost escape after a word


def test_a_long_text_is_split_and_marked_as_a_short_one_is():
    """split_flattened and the user-content test look for their words in one pass over a long text."""
    pad = "x" * 70_000
    flat = f"(APIServer pid=1) INFO 03-06 01:34:23 [a.py:1] {pad} INFO 03-06 01:34:24 [b.py:2] again"
    assert split_flattened(flat) == [flat[: flat.rindex(" INFO")], "INFO 03-06 01:34:24 [b.py:2] again"]
    assert split_flattened(f"(APIServer pid=1) INFO 03-06 01:34:23 [a.py:1] {pad} info again") == [
        f"(APIServer pid=1) INFO 03-06 01:34:23 [a.py:1] {pad} info again"]
    assert parse_line(1, f"{pad} \"POST /v1/completions HTTP/1.1\" 200 OK").user_content
    assert not parse_line(1, f"{pad} post /v1/completions").user_content


class _CountingBlock(bytes):
    """A block that records the ranges its newlines are counted over."""

    scanned: list[tuple[int, int]]

    def count(self, sub, start=0, end=None):  # type: ignore[override]
        self.scanned.append((start, len(self) if end is None else end))
        return bytes.count(self, sub, start, end)


def test_line_index_answers_questions_in_any_order_counting_each_byte_once() -> None:
    """The access-line counts ask about the block's end first, then the hits ask in increasing order: each
    question resumes from the nearest offset asked before, so the block is counted over once in all (the old
    index recounted from the start for every hit: a block of thousands of keyword lines was quadratic)."""
    from diagnoser.ingest.selection import LineIndex

    raw = b"".join(b"line %d\n" % i for i in range(2000))
    block = _CountingBlock(raw)
    block.scanned = []
    index = LineIndex(block)
    offsets = [i for i in range(len(raw)) if raw[i - 1:i] == b"\n" or i == 0]
    assert index.at(len(raw)) == 2000
    for k, off in enumerate(offsets):
        assert index.at(off) == k
    assert index.at(offsets[1500]) == 1500  # asked again: answered, not recounted wrongly
    assert sum(end - start for start, end in block.scanned) <= 2 * len(raw)


def test_a_sparse_block_has_its_lines_counted_once() -> None:
    """Keyword lines among access lines: the dense-block test must not count the block's lines before the hits'
    line numbers count them again (two passes over every block of a quiet serving log)."""
    from diagnoser.analysis.pipeline import prefilter_for
    from diagnoser.ingest.reader import ReadStats
    from diagnoser.ingest.request_lines import is_user_content
    from diagnoser.ingest.selection import LineIndex, block_lines
    from diagnoser.rules.loader import builtin_rules

    access = b'INFO:     10.0.3.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    stats = (b"INFO 05-01 10:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 120.3 tokens/s, Avg "
             b"generation throughput: 88.1 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV cache usage: 97.2%\n")
    block = _CountingBlock((access * 40 + stats) * 50)
    block.scanned = []
    prefilter = prefilter_for(builtin_rules())
    lines = list(block_lines(block, 0, prefilter, None, 0, ReadStats(), blank=is_user_content,
                             starts=prefilter.hit_lines(block), index=LineIndex(block)))
    assert [ln.number for ln in lines] == [41 * k for k in range(1, 51)]
    assert sum(end - start for start, end in block.scanned) <= len(block)
