"""`--format otel`: OTLP JSON log records (Logs Data Model), parsed back with the official protobuf schema."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from click.testing import CliRunner

from diagnoser.cli.main import main
from diagnoser.report.otel import any_value, exception_of, time_of
from tests.conftest import FIXTURES

K8S = FIXTURES / "kv-cache-too-small-v1-0.24-k8s.log"
WEIGHTS = FIXTURES / "weights-oom-v1-0.15.log"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def attrs(items: list[dict]) -> dict:
    out = {}
    for kv in items:
        (kind, value), = kv["value"].items()
        out[kv["key"]] = int(value) if kind == "intValue" else value
    return out


def requests(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_one_request_per_log_one_record_per_finding(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.log"  # no finding: no request at all
    quiet.write_text("INFO 05-01 10:00:00 [api_server.py:1] hello\n")
    code, out = run("--format", "otel", str(K8S), str(quiet), str(WEIGHTS))
    docs = [json.loads(run("--format", "json", str(p))[1]) for p in (K8S, WEIGHTS)]
    assert json.loads(run("--format", "json", str(quiet))[1])["findings"] == []
    reqs = requests(out)
    assert code == 1 and len(reqs) == 2
    for req, doc in zip(reqs, docs, strict=True):
        (rl,) = req["resourceLogs"]
        (sl,) = rl["scopeLogs"]
        assert sl["scope"] == {"name": "vllm-doctor", "version": doc["tool"]["version"]}
        records = sl["logRecords"]
        assert len(records) == len(doc["findings"])
        res = attrs(rl["resource"]["attributes"])
        assert res["service.name"] == "vllm" and res["log.file.path"] == doc["input"]["path"]
        assert res["service.version"] == doc["context"]["version"]
        for rec, f in zip(records, doc["findings"], strict=True):
            a = attrs(rec["attributes"])
            assert a["vllm_doctor.rule"] == f["rule"] and a["vllm_doctor.stage"] == f["stage"]
            assert a["vllm_doctor.line"] == f["line"]
            assert rec["severityText"] == {"error": "ERROR", "warning": "WARN", "info": "INFO"}[f["severity"]]
            assert rec["severityNumber"] == {"error": 17, "warning": 13, "info": 9}[f["severity"]]
            assert rec["body"]["stringValue"].startswith(f["title"])
            for key, value in f["facts"].items():
                got = a[f"vllm_doctor.fact.{key}"]
                assert got == value or (isinstance(got, dict) and "values" in got), key
            assert rec["observedTimeUnixNano"].isdigit()


def test_kv_cache_record_carries_the_numbers_exception_and_time() -> None:
    (req,) = requests(run("--format", "otel", str(K8S))[1])
    rec = req["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    a = attrs(rec["attributes"])
    assert a["vllm_doctor.rule"] == "kv-cache-too-small"
    assert a["vllm_doctor.fact.max_model_len"] == 40960
    assert a["vllm_doctor.fact.available_gib"] == 5.72
    assert a["exception.type"] == "ValueError"
    assert a["exception.message"].startswith("To serve at least one request")
    # the Kubernetes timestamp of the evidence line, as nanoseconds since the epoch
    assert rec["timeUnixNano"] == str(time_of("2026-05-11T22:48:22.003864366Z"))
    assert a["vllm_doctor.command"].startswith("vllm serve Qwen/Qwen3-32B")


# The OTLP JSON mapping of opentelemetry-proto's logs.proto / common.proto: field names (lowerCamelCase),
# int64 as decimal strings, AnyValue as exactly one of its cases. (The opentelemetry-proto package itself
# is not a test dependency: its namespace package makes Ray's dashboard agent import a missing module.)
LOG_RECORD_FIELDS = {"timeUnixNano", "observedTimeUnixNano", "severityNumber", "severityText", "body", "attributes",
                     "droppedAttributesCount", "flags", "traceId", "spanId", "eventName"}
ANY_VALUE_CASES = {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue"}


def check_any_value(value: dict) -> None:
    assert len(value) == 1 and set(value) <= ANY_VALUE_CASES, value
    (kind, v), = value.items()
    if kind == "intValue":
        assert isinstance(v, str) and v.lstrip("-").isdigit()
    elif kind == "doubleValue":
        assert isinstance(v, float | int)
    elif kind == "boolValue":
        assert isinstance(v, bool)
    elif kind == "stringValue":
        assert isinstance(v, str)
    elif kind == "arrayValue":
        assert set(v) == {"values"}
        for item in v["values"]:
            check_any_value(item)
    elif kind == "kvlistValue":
        check_key_values(v["values"])


def check_key_values(items: list) -> None:
    for kv in items:
        assert set(kv) == {"key", "value"} and isinstance(kv["key"], str)
        check_any_value(kv["value"])


def test_the_output_follows_the_otlp_json_mapping() -> None:
    code, out = run("--format", "otel", str(K8S), str(WEIGHTS), str(FIXTURES / "preemption-v1-0.12.log"))
    lines = out.splitlines()
    assert len(lines) == 3
    for line in lines:
        req = json.loads(line)
        assert set(req) == {"resourceLogs"}
        for rl in req["resourceLogs"]:
            assert set(rl) <= {"resource", "scopeLogs", "schemaUrl"}
            assert set(rl["resource"]) <= {"attributes", "droppedAttributesCount"}
            check_key_values(rl["resource"]["attributes"])
            for sl in rl["scopeLogs"]:
                assert set(sl) <= {"scope", "logRecords", "schemaUrl"}
                assert set(sl["scope"]) <= {"name", "version", "attributes", "droppedAttributesCount"}
                for rec in sl["logRecords"]:
                    assert set(rec) <= LOG_RECORD_FIELDS, set(rec) - LOG_RECORD_FIELDS
                    assert isinstance(rec["severityNumber"], int) and 1 <= rec["severityNumber"] <= 24
                    for key in ("timeUnixNano", "observedTimeUnixNano"):
                        if key in rec:
                            assert isinstance(rec[key], str) and rec[key].isdigit()
                    check_any_value(rec["body"])
                    check_key_values(rec["attributes"])


def test_scan_otel_has_pod_resources_and_error_records(tmp_path: Path) -> None:
    a, b = K8S.read_text().splitlines(), WEIGHTS.read_text().splitlines()
    (tmp_path / "pods.log").write_text("".join(f"[pod/vllm-0/vllm] {ln}\n" for ln in a)
                                       + "".join(f"[pod/vllm-1/vllm] {ln}\n" for ln in b))
    (tmp_path / "zz-cut.log.gz").write_bytes(gzip.compress(b.__repr__().encode())[:100])
    code, out = runner_scan(tmp_path)
    reqs = requests(out)
    pods = [attrs(r["resourceLogs"][0]["resource"]["attributes"]) for r in reqs[:2]]
    assert [p["k8s.pod.name"] for p in pods] == ["vllm-0", "vllm-1"]
    assert pods[0]["k8s.container.name"] == "vllm" and pods[0]["log.file.path"] == str(tmp_path / "pods.log")
    bad = reqs[2]["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert bad["severityText"] == "ERROR" and attrs(bad["attributes"])["vllm_doctor.error.type"] == "corrupt"
    assert code == 1


def runner_scan(folder: Path) -> tuple[int, str]:
    return run("scan", "--format", "otel", str(folder))


def test_any_value_mapping() -> None:
    assert any_value(True) == {"boolValue": True}
    assert any_value(2**40) == {"intValue": str(2**40)}
    assert any_value({"a": 1}) == {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}}
    assert any_value(None) == {"stringValue": "None"}


def test_time_and_exception_parsing() -> None:
    assert time_of("2026-05-11T22:48:22Z x") == 1778539702 * 10**9
    assert time_of("2026-05-11 22:48:22.5+02:00 x") == (1778539702 - 7200) * 10**9 + 500_000_000
    assert time_of("INFO 05-11 22:48:22 [core.py:1] x") is None  # vLLM's own stamp has no year
    assert exception_of({"evidence": [{"text": "torch.OutOfMemoryError: CUDA out of memory. Tried"}]}) == (
        "torch.OutOfMemoryError", "CUDA out of memory. Tried")
    assert exception_of({"evidence": [{"text": "INFO loading weights"}]}) is None
