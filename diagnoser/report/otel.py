"""`--format otel`: findings as OpenTelemetry log records, in OTLP JSON (the Logs Data Model).

One line per log, each an `ExportLogsServiceRequest` (`{"resourceLogs": [...]}`): the shape the
collector's `otlpjson` connector / `otlpjsonfile` receiver, Vector and Fluent Bit read line by line. The
resource is the source log (`log.file.path`, `k8s.pod.name` / `k8s.container.name` / `k8s.namespace.name`
when a scan cut it from a multi-pod file, `service.name` "vllm" and `service.version` the vLLM release, the
model and GPU); the scope is the doctor; each finding is one record:

- `severityText` ERROR / WARN / INFO with `severityNumber` 17 / 13 / 9 (the data model's ranges);
- `body.stringValue`: the title, the advice and the command to run;
- `attributes`: `vllm_doctor.rule`, `vllm_doctor.stage`, `vllm_doctor.fine_stage`, `vllm_doctor.line`,
  `vllm_doctor.occurrences`, `vllm_doctor.fact.<name>` per fact (int, double, string, bool, array),
  `vllm_doctor.command`, and `exception.type` / `exception.message` when the evidence holds a Python
  exception line (semantic conventions);
- `timeUnixNano` from the evidence line's own date-time stamp when it has one (docker, Kubernetes, CI);
  `observedTimeUnixNano` is when the doctor read it. Integers are strings, as OTLP JSON maps int64.

A clean log writes nothing; a file a scan could not read is one ERROR record with `vllm_doctor.error.type`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, TextIO

from diagnoser.analysis.contract import TOOL, report_dict
from diagnoser.analysis.pipeline import Report
from diagnoser.lazyre import lazy

SEVERITY = {"error": ("ERROR", 17), "warning": ("WARN", 13), "info": ("INFO", 9)}
EXCEPTION = lazy(
    r"(?:^|[\s:])(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|OutOfMemory\w*))"
    r": (?P<message>\S.*)$")
ISO = lazy(r"^\s*\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?")
CONTEXT_RESOURCE = (("model", "vllm.model"), ("engine", "vllm.engine"), ("platform", "vllm.platform"))
LABEL_RESOURCE = {"namespace": "k8s.namespace.name", "pod": "k8s.pod.name", "container": "k8s.container.name",
                  "node": "k8s.node.name", "host": "host.name"}


def any_value(value: Any) -> dict[str, Any]:
    """A Python value as an OTLP AnyValue.

    >>> any_value(3), any_value(0.5), any_value([1, "a"])
    ({'intValue': '3'}, {'doubleValue': 0.5}, {'arrayValue': {'values': [{'intValue': '1'}, {'stringValue': 'a'}]}})
    """
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": attributes(value)}}
    return {"stringValue": str(value)}


def attributes(items: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in items.items() if v is not None]


def time_of(text: str) -> int | None:
    """Unix nanoseconds of a line's leading ISO date-time ('2026-05-11T22:47:03.118Z ...'), else None."""
    m = ISO.match(text)
    if not m:
        return None
    frac = (m.group(2) or ".0")[1:]
    zone = m.group(3) or "Z"
    zone = "+00:00" if zone == "Z" else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
    try:
        stamp = datetime.fromisoformat(f"{m.group(1).replace(' ', 'T')}{zone}")
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp()) * 1_000_000_000 + int(frac[:9].ljust(9, "0"))


def exception_of(finding: dict[str, Any]) -> tuple[str, str] | None:
    """(exception.type, exception.message) from the first evidence line that is a Python exception line."""
    for ev in finding.get("evidence") or []:
        m = EXCEPTION.search(str(ev.get("text", "")))
        if m:
            return m["type"], m["message"].strip()
    return None


def resource(doc: dict[str, Any]) -> dict[str, Any]:
    from diagnoser.report.rows import gpu_label, source_of

    ctx = doc.get("context") or {}
    labels = doc["input"].get("labels") or {}
    res: dict[str, Any] = {"service.name": "vllm", "service.version": ctx.get("version"),
                           "log.file.path": source_of(doc)}
    for key, name in CONTEXT_RESOURCE:
        res[name] = ctx.get(key)
    res["vllm.gpu"] = gpu_label(ctx)
    if doc["input"].get("stream"):
        res["vllm_doctor.stream"] = doc["input"]["stream"]
    for key, value in labels.items():
        res[LABEL_RESOURCE.get(key, f"loki.label.{key}")] = value
    return res


def records(doc: dict[str, Any], observed: int) -> list[dict[str, Any]]:
    """The log records of one report (or error) document."""
    from diagnoser.report.sarif import message_text

    if "error" in doc:
        return [{"observedTimeUnixNano": str(observed), "severityNumber": 17, "severityText": "ERROR",
                 "body": {"stringValue": doc["error"]["message"]},
                 "attributes": attributes({"vllm_doctor.error.type": doc["error"]["type"]})}]
    out = []
    for f in doc["findings"]:
        text, number = SEVERITY.get(f["severity"], ("INFO", 9))
        attrs: dict[str, Any] = {
            "vllm_doctor.rule": f["rule"], "vllm_doctor.title": f["title"], "vllm_doctor.stage": f["stage"],
            "vllm_doctor.fine_stage": f["fine_stage"], "vllm_doctor.line": f["line"],
            "vllm_doctor.occurrences": f["occurrences"], "vllm_doctor.ranks": f["ranks"] or None,
        }
        for key, value in (f.get("facts") or {}).items():
            attrs[f"vllm_doctor.fact.{key}"] = value
        attrs["vllm_doctor.command"] = f.get("command")
        exc = exception_of(f)
        if exc:
            attrs["exception.type"], attrs["exception.message"] = exc
        record: dict[str, Any] = {}
        anchor = next((e for e in f["evidence"] if e["line"] == f["line"]), None)
        stamp = time_of(anchor["text"]) if anchor else None
        if stamp is not None:
            record["timeUnixNano"] = str(stamp)
        record.update({"observedTimeUnixNano": str(observed), "severityNumber": number, "severityText": text,
                       "body": {"stringValue": message_text(f)}, "attributes": attributes(attrs)})
        out.append(record)
    return out


def request(doc: dict[str, Any], observed: int | None = None) -> dict[str, Any] | None:
    """One ExportLogsServiceRequest for one log, or None when it has nothing to say."""
    recs = records(doc, time.time_ns() if observed is None else observed)
    if not recs:
        return None
    return {"resourceLogs": [{
        "resource": {"attributes": attributes(resource(doc))},
        "scopeLogs": [{"scope": {"name": TOOL["name"], "version": TOOL["version"]}, "logRecords": recs}],
    }]}


def _line(doc: dict[str, Any], opts: dict[str, Any]) -> str:
    req = request(doc, opts.get("observed_time_ns"))
    return "" if req is None else json.dumps(req, ensure_ascii=False, default=str, separators=(",", ":")) + "\n"


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    """Scan: one line per log that has findings (or could not be read)."""
    opts = opts or {}
    for doc in docs:
        out.write(_line(doc, opts))


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    opts = opts or {}
    return "".join(_line(report_dict(r), opts) for r in reports)
