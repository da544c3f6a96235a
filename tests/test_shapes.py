"""Shipper shapes: every fixture, re-encoded the way Docker, Kubernetes, journald, Cloud Logging, Loki, an
OpenTelemetry collector, syslog or vLLM's own JSON formatter would deliver it, diagnoses the same.

The encoders below build each shape from the plain fixtures (the fields and layouts of each shipper's real
output); a few hand-written samples in fixtures/shapes/ check the decoder on complete real-shape records.
"""

from __future__ import annotations

import io
import json
import re

import pytest
import yaml

from diagnoser.analysis.pipeline import diagnose
from diagnoser.ingest.reader import read_lines
from diagnoser.ingest.wrappers import Decoder

from .conftest import FIXTURES
from .matrix import sample

#: pastes (hard-wrapped, flattened, quoted in chat) were shaped by a person after shipping, not by a shipper
CASES = [c for c in yaml.safe_load((FIXTURES / "expected.yaml").read_text())
         if not re.search(r"wrapped|flattened|quoted", c["file"])]
STAMP = "2025-03-04T05:06:{:02d}.{:09d}Z"
HEADER = re.compile(
    r"^(?:\((?P<proc>[\w ]+?) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[?(?P<file>[\w./-]+):(?P<lineno>\d+)\] (?P<msg>.*)$")


def _ts(i: int) -> str:
    return STAMP.format(i % 60, i * 7919 % 10**9)


def docker_json(lines: list[str]) -> str:
    """Docker's json-file driver; a line over 16 KiB is split into partial records, as Docker does."""
    out = []
    for i, line in enumerate(lines):
        pieces = [line[j:j + 16384] for j in range(0, len(line), 16384)] or [""]
        pieces[-1] += "\n"
        out.extend(json.dumps({"log": p, "stream": "stderr", "time": _ts(i)}) for p in pieces)
    return "\n".join(out) + "\n"


def docker_timestamps(lines: list[str]) -> str:
    return "".join(f"{_ts(i)} {line}\n" for i, line in enumerate(lines))


def kubectl_prefix(lines: list[str]) -> str:
    """`kubectl logs --timestamps --prefix`: the pod/container prefix, then the RFC 3339 time."""
    return "".join(f"[pod/vllm-7d9f8b6c4-x2lqp/vllm] {_ts(i)} {line}\n" for i, line in enumerate(lines))


def cri_partial(lines: list[str]) -> str:
    """The kubelet's CRI log files (/var/log/pods): long lines split into `P` pieces, the last one `F`."""
    out = []
    for i, line in enumerate(lines):
        pieces = [line[j:j + 16384] for j in range(0, len(line), 16384)] or [""]
        for k, piece in enumerate(pieces):
            out.append(f"{_ts(i)} stderr {'F' if k == len(pieces) - 1 else 'P'} {piece}")
    return "\n".join(out) + "\n"


def journal_json(lines: list[str]) -> str:
    """`journalctl -o json`: one object per entry, MESSAGE with the line (bytes array when not UTF-8)."""
    out = []
    for i, line in enumerate(lines):
        rec = {"__CURSOR": f"s=8a1f;i={i:x};b=3c2e;m={i * 13:x};t=6104c;x=9e1", "__REALTIME_TIMESTAMP":
               str(1741064766000000 + i), "__MONOTONIC_TIMESTAMP": str(98123456 + i), "_BOOT_ID": "3c2e",
               "PRIORITY": "6", "SYSLOG_FACILITY": "3", "_UID": "1000", "_GID": "1000", "_COMM": "python3",
               "_EXE": "/usr/bin/python3.12", "_CMDLINE": "/usr/bin/python3 -m vllm.entrypoints.openai.api_server",
               "_SYSTEMD_UNIT": "vllm.service", "SYSLOG_IDENTIFIER": "vllm", "_PID": "4242",
               "_TRANSPORT": "stdout", "_HOSTNAME": "gpu-node-3",
               "MESSAGE": line if "\x1b" not in line else list(line.encode())}
        out.append(json.dumps(rec))
    return "\n".join(out) + "\n"


def journal_short_iso(lines: list[str]) -> str:
    return "".join(f"2025-03-04T05:06:{i % 60:02d}+0000 gpu-node-3 vllm[4242]: {line}\n"
                   for i, line in enumerate(lines))


def gcp_export(lines: list[str]) -> str:
    """Cloud Logging (GKE) as exported to a sink: textPayload for unstructured container output."""
    return "".join(json.dumps({
        "insertId": f"qm4x{i:06d}", "textPayload": line + "\n", "resource": {"type": "k8s_container", "labels": {
            "project_id": "acme-ml", "location": "us-central1", "cluster_name": "gpu", "namespace_name": "llm",
            "pod_name": "vllm-0", "container_name": "vllm"}}, "timestamp": _ts(i), "severity": "ERROR",
        "labels": {"k8s-pod/app": "vllm"}, "logName": "projects/acme-ml/logs/stderr",
        "receiveTimestamp": _ts(i)}) + "\n" for i, line in enumerate(lines))


def gcloud_read_json(lines: list[str]) -> str:
    """`gcloud logging read --format=json`: one pretty-printed array (keys sorted, two-space indent)."""
    return json.dumps([{
        "insertId": f"qm4x{i:06d}", "labels": {"k8s-pod/app": "vllm"}, "logName": "projects/acme-ml/logs/stderr",
        "receiveTimestamp": _ts(i), "resource": {"labels": {"container_name": "vllm", "pod_name": "vllm-0"},
                                                  "type": "k8s_container"},
        "severity": "ERROR", "textPayload": line + "\n", "timestamp": _ts(i)} for i, line in enumerate(lines)],
        indent=2, sort_keys=True) + "\n"


def loki_jsonl(lines: list[str]) -> str:
    """`logcli query --output=jsonl`: {"labels", "line", "timestamp"} (Go sorts the keys)."""
    return "".join(json.dumps({"labels": {"app": "vllm", "namespace": "llm", "pod": "vllm-0"}, "line": line,
                               "timestamp": _ts(i).replace("Z", "+00:00")}) + "\n" for i, line in enumerate(lines))


def otel_file(lines: list[str]) -> str:
    """The collector's file exporter: one ExportLogsServiceRequest per line, here 10 records each."""
    out = []
    for start in range(0, len(lines), 10):
        records = [{"timeUnixNano": str(1741064766000000000 + i), "observedTimeUnixNano": str(1741064766000000000 + i),
                    "severityNumber": 9, "severityText": "INFO", "body": {"stringValue": line},
                    "attributes": [{"key": "log.file.name", "value": {"stringValue": "vllm.log"}}],
                    "traceId": "", "spanId": ""} for i, line in enumerate(lines[start:start + 10], start)]
        out.append(json.dumps({"resourceLogs": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "vllm"}}]}, "scopeLogs": [
            {"scope": {}, "logRecords": records}]}]}))
    return "\n".join(out) + "\n"


def syslog_3164(lines: list[str]) -> str:
    return "".join(f"<30>Mar  4 05:06:{i % 60:02d} gpu-node-3 vllm[4242]: {line}\n" for i, line in enumerate(lines))


def syslog_5424(lines: list[str]) -> str:
    return "".join(f"<30>1 {_ts(i)} gpu-node-3 vllm 4242 - - {line}\n" for i, line in enumerate(lines))


def vllm_json_formatter(lines: list[str]) -> str:
    """vLLM with a python-json-logger formatter: headers become records, a traceback after an ERROR record
    goes into its exc_info (logger.exception), other raw lines (prints, tqdm) stay plain: mixed shapes."""
    out: list[dict | str] = []
    for line in lines:
        m = HEADER.match(line)
        if m:
            rec = {"asctime": f"2025-{m['ts']},123", "name": "vllm." + m["file"].rsplit(".", 1)[0].replace("/", "."),
                   "levelname": m["level"], "message": m["msg"], "filename": m["file"].rsplit("/", 1)[-1],
                   "lineno": int(m["lineno"]), "process": int(m["pid"] or 777),
                   "processName": "MainProcess", "vllm_process_name": m["proc"] or "APIServer"}
            out.append(rec)
            continue
        last = out[-1] if out else None
        if isinstance(last, dict) and last["levelname"] in ("ERROR", "CRITICAL") and line.strip():
            last["exc_info"] = (last.get("exc_info", "") + "\n" + line).lstrip("\n")
            continue
        out.append(line)
    return "".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in out)


SHAPES = {f.__name__: f for f in (docker_json, docker_timestamps, kubectl_prefix, cri_partial, journal_json,
                                   journal_short_iso, gcp_export, loki_jsonl, otel_file, syslog_3164, syslog_5424,
                                   vllm_json_formatter)}


#: facts that are line numbers: a shape that puts several lines in one record numbers them as the records
LINE_FACTS = {"first_line", "last_line", "cause_line"}


def _summary(data: bytes) -> list[tuple]:
    report = diagnose(io.BytesIO(data), "-")
    return [(f.rule.id, f.severity, f.stage, tuple(sorted((k, str(v)) for k, v in f.facts.items()
                                                      if k not in LINE_FACTS)))
            for f in report.findings if f.severity in ("error", "warning")]


@pytest.fixture(scope="module")
def plain():
    cache = {}

    def get(name):
        if name not in cache:
            raw = (FIXTURES / name).read_bytes()
            cache[name] = (raw.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n"), _summary(raw))
        return cache[name]
    return get


SHAPE_PAIRS = sample(CASES, sorted(SHAPES), per_row=2)


@pytest.mark.parametrize(("case", "shape"), SHAPE_PAIRS, ids=[f"{c['file']}-{s}" for c, s in SHAPE_PAIRS])
def test_each_shape_gives_the_same_findings(case, shape, plain):
    lines, want = plain(case["file"])
    if lines and lines[-1] == "":
        lines = lines[:-1]
    got = _summary(SHAPES[shape](lines).encode("utf-8"))
    assert got == want


@pytest.mark.parametrize("name", ["kv-cache-too-small-v1-0.16.log", "weights-oom-v1-0.9-tp2.log",
                                  "preemption-v1-0.12.log", "healthy-v1-0.31.log", "warmup-oom-cudagraph-0.10.log"])
def test_pretty_printed_gcloud_export(name, plain):
    """`gcloud logging read --format=json` spreads a record over ~15 lines, so a message's continuation line
    is no longer the next line (facts read from such a line may be missing): the findings and stages stay."""
    lines, want = plain(name)
    got = _summary(gcloud_read_json(lines[:-1] if lines[-1] == "" else lines).encode())
    assert [(r, sev, stage) for r, sev, stage, _ in got] == [(r, sev, stage) for r, sev, stage, _ in want]
    assert [dict(f) for *_, f in got] == [dict(f) for *_, f in want]


def test_mixed_shapes_in_one_input():
    lines = (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_text().split("\n")[:-1]
    third = len(lines) // 3
    mixed = docker_json(lines[:third]) + loki_jsonl(lines[third:2 * third]) + kubectl_prefix(lines[2 * third:])
    assert _summary(mixed.encode()) == _summary("\n".join(lines).encode() + b"\n")


def test_evidence_shows_the_message_not_the_wrapper():
    lines = (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_text().split("\n")[:-1]
    for shape in ("docker_json", "journal_json", "gcp_export", "loki_jsonl", "otel_file", "vllm_json_formatter"):
        report = diagnose(io.BytesIO(SHAPES[shape](lines).encode()), "-")
        text = report.findings[0].evidence[0].text if hasattr(report.findings[0].evidence[0], "text") \
            else str(report.findings[0].evidence[0])
        assert "{" not in text[:3] and '"log"' not in text and "textPayload" not in text, (shape, text)
        assert "To serve at least one request" in text or "KV cache" in text, (shape, text)


def test_line_numbers_are_the_physical_records():
    """A record's lines keep its physical line number (the original numbering of the shipped file)."""
    data = (json.dumps({"log": "INFO 01-02 03:04:05 [core.py:1] starting\n", "stream": "stdout", "time": "t"}) + "\n"
            + json.dumps({"asctime": "2025-01-02 03:04:05,1", "levelname": "ERROR", "message": "boom",
                          "process": 7, "vllm_process_name": "EngineCore_DP0", "filename": "core.py", "lineno": 9,
                          "exc_info": "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                                      "ValueError: bad"}) + "\n")
    got = [(ln.number, ln.process, ln.pid, ln.level, ln.timestamp, ln.text) for ln in read_lines(io.BytesIO(data.encode()))]
    assert got == [
        (1, None, None, "INFO", "01-02 03:04:05", "starting"),
        (2, "EngineCore_DP0", 7, "ERROR", "01-02 03:04:05", "boom"),
        (2, "EngineCore_DP0", 7, None, None, "Traceback (most recent call last):"),
        (2, "EngineCore_DP0", 7, None, None, '  File "x.py", line 1, in f'),
        (2, "EngineCore_DP0", 7, None, None, "ValueError: bad"),
    ]


def test_docker_partial_records_are_joined_across_blocks():
    dec = Decoder()
    first = json.dumps({"log": "ERROR 01-02 03:04:05 [core.py:1] To serve at le", "stream": "stderr", "time": "t"})
    second = json.dumps({"log": "ast one request\n", "stream": "stderr", "time": "t"})
    assert dec.decode_block(first.encode() + b"\n") == (b"", [])
    block, line_map = dec.decode_block(second.encode() + b"\n")
    assert block == b"ERROR 01-02 03:04:05 [core.py:1] To serve at least one request\n" and line_map == [0]


def test_not_a_record_is_left_alone():
    dec = Decoder()
    for text in (b'{"model": "x", "max_tokens": 5}\n', b'{"broken json\n', b"plain INFO line\n", b'[1, 2]\n'):
        assert dec.decode_block(text) == (text, None)


def test_journal_message_as_bytes_array():
    dec = Decoder()
    rec = {"__REALTIME_TIMESTAMP": "1", "MESSAGE": list("\x1b[1;36m(EngineCore_DP0 pid=9)\x1b[0;0m hi \xff".encode(
        "latin-1")), "_PID": "9"}
    block, _ = dec.decode_block(json.dumps(rec).encode() + b"\n")
    assert block.startswith(b"\x1b[1;36m(EngineCore_DP0 pid=9)") and block.endswith(b"\n")


SAMPLES = sorted((FIXTURES / "shapes").glob("*.jsonl")) + sorted((FIXTURES / "shapes").glob("*.log"))


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_hand_written_real_shape_samples(path):
    want = yaml.safe_load((FIXTURES / "shapes" / "expected.yaml").read_text())[path.name]
    with open(path, "rb") as fh:
        report = diagnose(fh, path.name)
    assert report.findings[0].rule.id == want["rule"]
    assert report.findings[0].stage == want["stage"]
    for name, value in (want.get("facts") or {}).items():
        assert str(report.findings[0].facts.get(name)) == str(value), name


@pytest.mark.parametrize("prefix", ["2025-03-04T05:06:07.123456789Z stderr F ",
                                    "2025-03-04T05:06:07+0000 gpu-node-3 vllm[4242]: ",
                                    "<30>Mar  4 05:06:07 gpu-node-3 vllm[4242]: "])
def test_a_shipper_prefix_before_a_process_tag_is_not_a_flattened_record(prefix):
    """The prefix ends in a space that splitting would strip: the line stays one record, its text intact."""
    data = (prefix + "\x1b[1;36m(EngineCore_0 pid=7311)\x1b[0;0m ERROR 06-20 16:02:52 [core.py:515] "
            "torch._inductor.exc.InductorError: RuntimeError: PassManager::run failed\n").encode()
    (line,) = list(read_lines(io.BytesIO(data)))
    assert (line.process, line.level, line.text) == (
        "EngineCore_0", "ERROR", "torch._inductor.exc.InductorError: RuntimeError: PassManager::run failed")


def test_access_lines_inside_one_otlp_record_count_per_stats_interval():
    """An OTLP record holds many lines: each stats line closes the interval of the access lines before it."""
    stats = ("INFO 05-19 11:31:{:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg "
             "generation throughput: 50.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, "
             "Prefix cache hit rate: 0.0%")
    access = 'INFO:     10.0.0.7:5123 - "POST /v1/chat/completions HTTP/1.1" {}'
    lines = [stats.format(0), access.format(200), access.format(503), stats.format(10), access.format(500),
             stats.format(20)]
    series = diagnose(io.BytesIO(otel_file(lines).encode()), "-").series
    (track,) = series.tracks.values()
    got = [(p["requests"]["max"], p["errors"]["max"]) for p in track.buckets.points(series.clock)]
    assert got == [(0, 0), (2, 1), (1, 1)]


SERVING = FIXTURES / "serving-v1-0.12-3h.log"


@pytest.mark.parametrize("shape", ["plain", "gcloud_read_json", *sorted(SHAPES)])
def test_one_search_of_a_plain_block_past_the_paste_start_reports_what_decoding_first_does(shape, monkeypatch):
    """Past the paste-sized start, a block the decoder would leave alone is searched once for the keywords,
    the pretty-export markers and the failed statuses: the report (findings, series, counts) is the one the
    decode-then-search path gives, whether the block is plain, a shipper's records, or a pretty export."""
    from diagnoser.ingest import reader
    from diagnoser.report.model import report_dict

    lines = SERVING.read_text().split("\n")[:-1] + (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_text().split(
        "\n")[:-1]
    text = "\n".join(lines) + "\n" if shape == "plain" else (
        gcloud_read_json(lines) if shape == "gcloud_read_json" else SHAPES[shape](lines))
    data = text.encode()
    monkeypatch.setattr(reader, "PASTE_MAX", 0)  # every block is past the start
    monkeypatch.setattr(reader, "BLOCK", 1 << 14)  # many blocks
    once = report_dict(diagnose(io.BytesIO(data), "x"), series=True)
    monkeypatch.setattr(reader, "_plain", lambda *a: None)
    decoded_first = report_dict(diagnose(io.BytesIO(data), "x"), series=True)
    assert once == decoded_first
    assert "kv-cache-too-small" in [f["rule"] for f in once["findings"]]


def test_a_pretty_marker_only_a_prompt_quotes_still_sends_the_block_to_the_decoder(monkeypatch):
    """The one search skips request-logger lines, so a PRETTY marker inside one is looked for there apart."""
    from diagnoser.ingest import reader
    from diagnoser.report.model import report_dict

    api = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m "
    prompt = (api + "INFO 05-01 10:00:00 [logger.py:39] Received request chatcmpl-1: prompt: '{\\n  \"textPayload\": "
              "\"x\"}', params: SamplingParams(n=1).")
    failed = api + 'INFO:     10.0.3.7:51234 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable'
    data = ("\n".join([*SERVING.read_text().split("\n")[:-1], prompt, failed] * 3) + "\n").encode()
    monkeypatch.setattr(reader, "PASTE_MAX", 0)
    calls = []
    original = reader._plain
    monkeypatch.setattr(reader, "_plain", lambda *a: calls.append(r := original(*a)) or r)
    once = report_dict(diagnose(io.BytesIO(data), "x"), series=True)
    assert None in calls  # the block with the quoted marker went to the decoder
    monkeypatch.setattr(reader, "_plain", lambda *a: None)
    assert once == report_dict(diagnose(io.BytesIO(data), "x"), series=True)
