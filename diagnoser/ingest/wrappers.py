"""Wrappers: the wrappers log shippers put around vLLM's lines, decoded back to the lines vLLM printed.

A log rarely arrives as vLLM wrote it. Docker's json-file driver, `journalctl -o json`, Google Cloud
Logging exports, Loki's `logcli --output=jsonl`, OpenTelemetry collector file exports and vLLM's own JSON
formatter (a `--log-config` / VLLM_LOGGING_CONFIG_PATH with python-json-logger) wrap each line in a JSON
record. `decode_block` turns each such record back into plain lines, detected by content, line by line
(shapes may be mixed), before the prefilter and the matcher see them, so every rule and every number works
on them as on a plain log, and evidence shows the message, not the wrapper.

Text prefixes (docker/kubectl timestamps, `kubectl --prefix`, journald short/short-iso, syslog) are
stripped by line.py's PREFIXES table; this module only handles what needs more than a prefix strip:
records to parse, partial lines to join (Docker json-file and CRI `P` pieces), tracebacks carried in a
field, and one record that holds many lines (an OTLP export).

The check is cheap: a block with no `{"` and no CRI partial marker is returned as it came (a C-level
search over the block), so a plain log pays next to nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from diagnoser.ingest.keywords import BlockPattern
from diagnoser.lazyre import lazy

#: A line that may be a JSON record, after the text prefixes a shipper may put before it (kubectl's
#: `[pod/name/container] `, a docker/kubectl RFC 3339 timestamp, a CRI `stdout F ` tag).
JSON_LINE = lazy(
    rb"^[ \t]*(?:\[[^\]\n]{1,300}\] )?(?:\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) )?"
    rb"(?:(?:stdout|stderr) [FP] )?(?=\{\")", re.MULTILINE)
#: A CRI (containerd / CRI-O, /var/log/pods) partial line: `<time> stdout P <piece>`, continued on the next.
CRI_PARTIAL = lazy(rb"^(\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) )P (.*)$", re.MULTILINE)
CRI_MARKERS = (b" stdout P ", b" stderr P ")
CRI_HEAD = lazy(rb"\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) [FP] ")
MAX_DEPTH = 3            #: a wrapper inside a wrapper (Loki line holding a docker record holding vLLM JSON)
MAX_RECORD = 8 << 20     #: a longer JSON line is left as it is (the reader cuts it in pieces)

LEVEL_NAMES = {"WARN": "WARNING", "FATAL": "CRITICAL", "ERR": "ERROR", "CRIT": "CRITICAL", "EMERG": "CRITICAL",
               "ALERT": "CRITICAL", "NOTICE": "INFO", "INFORMATION": "INFO", "TRACE": "DEBUG"}
VLLM_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: asctime as Python's logging prints it by default (2025-01-21 14:04:41,123), ISO, or vLLM's datefmt.
_ASCTIME = lazy(r"(?:\d{4}-)?(\d\d)-(\d\d)[T ](\d\d:\d\d:\d\d)")


#: lone surrogates that a JSON `\\ud800` escape decodes to and UTF-8 cannot hold (U+DC80-U+DCFF are the bytes
#: that surrogateescape kept: those go back to their bytes)
_LONE_SURROGATE = lazy("[\ud800-\udc7f\udd00-\udfff]")


def _encoded(text: str) -> bytes:
    """A decoded record's text as bytes again: invalid bytes kept as they came, a lone surrogate as U+FFFD."""
    if _LONE_SURROGATE.search(text):
        text = _LONE_SURROGATE.sub("\ufffd", text)
    return text.encode("utf-8", errors="surrogateescape")


class Decoder:
    """Per-stream state: the piece of a line a shipper split over several records (Docker, CRI)."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}  #: stream name -> text of a partial line waiting for its end
        self.pending_cri: bytes = b""

    def decode_block(self, block: bytes) -> tuple[bytes, list[int] | None]:
        """Decode the records in a block of whole lines (each ends with a newline).

        Returns the new block and, when it changed, the index of the physical input line each output line
        comes from (the reader's line numbers stay the original ones); else the block and None.
        """
        if PRETTY.search(block):
            return _pretty(block)
        has_json, has_cri = _has_record(block), self._has_cri(block)
        if not has_json and not has_cri:
            return block, None
        lines = block.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        out: list[bytes] = []
        line_map: list[int] = []
        changed = False
        for index, raw in enumerate(lines):
            if has_cri and (self.pending_cri or b" P " in raw[:60]):
                joined = self._cri(raw)
                if joined is None:
                    changed = True
                    continue
                if joined is not raw:
                    changed = True
                raw = joined
            m = JSON_LINE.match(raw) if has_json else None
            if m is None or len(raw) > MAX_RECORD:
                if self.pending and not m:
                    pass  # a plain line between two halves of a docker record: keep both as they are
                out.append(raw)
                line_map.append(index)
                continue
            texts = self.record_lines(raw[m.end():])
            if texts is None:
                out.append(raw)
                line_map.append(index)
                continue
            changed = True
            for text in texts:
                out.append(_encoded(text))
                line_map.append(index)
        if not changed:
            return block, None
        return b"".join(part + b"\n" for part in out), line_map

    def has_records(self, block: bytes) -> bool:
        """Whether decode_block would decode any record of a block that holds no PRETTY marker."""
        return _has_record(block) or self._has_cri(block)

    def _has_cri(self, block: bytes) -> bool:
        # the kubelet writes every line of a pod's log in CRI form: a block of them starts with one
        return bool(self.pending_cri) or (CRI_HEAD.match(block) is not None and any(m in block for m in CRI_MARKERS))

    def flush(self) -> bytes:
        """What is still pending at the end of the input (a partial line whose end never came)."""
        rest = [_encoded(t) for t in self.pending.values() if t]
        if self.pending_cri:
            rest.append(self.pending_cri)
        self.pending.clear()
        self.pending_cri = b""
        return b"".join(r + b"\n" for r in rest)

    def _cri(self, raw: bytes) -> bytes | None:
        """Join CRI partial pieces: None while the line is not complete yet, else the whole line."""
        m = CRI_PARTIAL.match(raw)
        if m:
            if not self.pending_cri:
                self.pending_cri = m.group(1) + b"F "
            self.pending_cri += m.group(2)
            return None
        if self.pending_cri:
            full = re.match(rb"^\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) F (.*)$", raw)
            if full:
                joined = self.pending_cri + full.group(1)
                self.pending_cri = b""
                return joined
        return raw

    def record_lines(self, data: bytes) -> list[str] | None:
        """The plain lines one JSON record carries, or None when it is not a shipper's record."""
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        return self._lines(obj, 0)

    def _lines(self, obj: dict[str, Any], depth: int) -> list[str] | None:
        """The plain lines of one JSON object, read as the first kind of record (RECORD_KINDS) it is; None when
        it is none of them."""
        for is_kind, read in RECORD_KINDS:
            if is_kind(obj):
                return read(self, obj, depth)
        return None

    def _docker(self, obj: dict[str, Any], depth: int) -> list[str]:
        """A Docker json-file record: a partial one (no newline yet) is held until the rest of its line comes."""
        stream = str(obj.get("stream", ""))
        text = self.pending.pop(stream, "") + obj["log"]
        if not text.endswith("\n") and not obj.get("partial_done", False) and len(text) < (1 << 20):
            if obj["log"]:
                self.pending[stream] = text  # a partial record: the rest of the line follows
            return []
        return self._text(text, depth)

    def _journal(self, obj: dict[str, Any], depth: int) -> list[str]:
        return self._text(_journal_text(obj["MESSAGE"]), depth)

    def _otlp_export(self, obj: dict[str, Any], depth: int) -> list[str]:
        return self._otlp(obj["resourceLogs"], depth)

    def _gcp_text(self, obj: dict[str, Any], depth: int) -> list[str]:
        return self._text(obj["textPayload"], depth)

    def _gcp_json(self, obj: dict[str, Any], depth: int) -> list[str] | None:
        """A jsonPayload: a record of another kind inside, else its message field."""
        payload = obj["jsonPayload"]
        inner = self._lines(payload, depth + 1) if depth < MAX_DEPTH else None
        if inner is not None:
            return inner
        for key in ("message", "msg", "log", "textPayload"):
            if isinstance(payload.get(key), str):
                return self._text(payload[key], depth)
        return None

    def _loki(self, obj: dict[str, Any], depth: int) -> list[str]:
        return self._text(obj["line"], depth)

    def _json_formatter(self, obj: dict[str, Any], depth: int) -> list[str]:
        return self._formatted(obj, obj.get("message", obj.get("msg")))

    def _text(self, text: str, depth: int) -> list[str]:
        """A shipper's text field: vLLM's own lines (maybe a wrapper inside, maybe several lines)."""
        if text.endswith("\n"):
            text = text[:-1]
        stripped = text.lstrip()
        if depth < MAX_DEPTH and stripped.startswith('{"'):
            m = JSON_LINE.match(_encoded(stripped))
            if m is not None:
                try:
                    obj = json.loads(stripped)
                except ValueError:
                    obj = None
                if isinstance(obj, dict):
                    inner = self._lines(obj, depth + 1)
                    if inner is not None:
                        return inner
        return text.split("\n")

    def _formatted(self, obj: dict[str, Any], message: str) -> list[str]:
        """One record of vLLM's logger through a JSON formatter, back in vLLM's own layout.

        `(EngineCore_DP0 pid=12) ERROR 08-21 14:04:41 [core.py:700] message`: level, time and source as
        vLLM prints them; the process tag from vllm_process_name / processName with the pid; the traceback
        of exc_info / exc_text / stack_info after it, tagged with the process as vLLM's prefixes are.
        """
        level = _level(obj.get("levelname", obj.get("level", obj.get("severity"))))
        tag = ""
        name = obj.get("vllm_process_name") or obj.get("processName") or obj.get("process_name")
        pid = obj.get("process", obj.get("pid"))
        if isinstance(pid, int) or (isinstance(pid, str) and pid.isdigit()):
            tag = f"({name or 'MainProcess'} pid={pid}) "
        stamp = _stamp(obj.get("asctime", obj.get("timestamp", obj.get("time"))))
        source = ""
        filename, lineno = obj.get("filename"), obj.get("lineno")
        if filename and lineno is not None:
            source = f"[{filename}:{lineno}] "
        elif obj.get("pathname") and lineno is not None:
            source = f"[{str(obj['pathname']).rsplit('/', 1)[-1]}:{lineno}] "
        if level and stamp:
            header = f"{level} {stamp} {source}"
        elif level:
            header = f"{level}: "
        else:
            header = ""
        out = [f"{tag}{header}{part}" for part in message.split("\n")]
        for key in ("exc_info", "exc_text", "stack_info", "exception", "traceback"):
            extra = obj.get(key)
            if isinstance(extra, list):
                extra = "\n".join(str(x) for x in extra)
            if isinstance(extra, str) and extra.strip() and extra not in ("None", "NoneType: None"):
                out.extend(f"{tag}{part}" for part in extra.rstrip("\n").split("\n"))
                break
        return out

    def _otlp(self, resource_logs: list[Any], depth: int) -> list[str]:
        out: list[str] = []
        for rl in resource_logs:
            if not isinstance(rl, dict):
                continue
            for sl in rl.get("scopeLogs", rl.get("instrumentationLibraryLogs", [])) or []:
                if not isinstance(sl, dict):
                    continue
                for record in sl.get("logRecords", []) or []:
                    if isinstance(record, dict):
                        out.extend(self._otlp_record(record, depth) or [])
        return out

    def _otlp_record(self, record: dict[str, Any], depth: int) -> list[str] | None:
        body = _any_value(record.get("body"))
        if isinstance(body, dict):  # a structured body: a JSON formatter's record, or {"message": ...}
            inner = self._lines(body, depth + 1) if depth < MAX_DEPTH else None
            if inner is not None:
                return inner
            body = body.get("message", body.get("msg", body.get("log")))
        if not isinstance(body, str):
            return None
        return self._text(body, depth)


_JOURNAL_FIELDS = ("__REALTIME_TIMESTAMP", "_PID", "PRIORITY", "__CURSOR", "SYSLOG_IDENTIFIER")
_OTLP_FIELDS = ("severityText", "timeUnixNano", "severityNumber")
_FORMATTER_FIELDS = ("levelname", "level", "severity", "asctime")

#: The kinds of JSON record a shipper writes, each (is it this kind, its lines), tried in this order: the first
#: kind an object is decides (a Docker record with a MESSAGE field is a Docker record).
RECORD_KINDS: tuple[tuple[Callable[[dict[str, Any]], bool], Callable[..., list[str] | None]], ...] = (
    # Docker json-file driver (also fluentd/fluent-bit's docker parser): {"log", "stream", "time"}
    (lambda o: isinstance(o.get("log"), str) and ("stream" in o or "time" in o), Decoder._docker),
    # journald (`journalctl -o json` / `-o export` as JSON): MESSAGE, a string or an array of bytes
    (lambda o: "MESSAGE" in o and any(k in o for k in _JOURNAL_FIELDS), Decoder._journal),
    # OpenTelemetry collector file exporter: one line holds many records; or one record of it
    (lambda o: isinstance(o.get("resourceLogs"), list), Decoder._otlp_export),
    (lambda o: "body" in o and any(k in o for k in _OTLP_FIELDS), Decoder._otlp_record),
    # Google Cloud Logging / GKE: textPayload or jsonPayload
    (lambda o: isinstance(o.get("textPayload"), str), Decoder._gcp_text),
    (lambda o: isinstance(o.get("jsonPayload"), dict), Decoder._gcp_json),
    # Loki `logcli --output=jsonl`: {"labels": {...}, "line": "...", "timestamp": "..."}
    (lambda o: isinstance(o.get("line"), str) and ("labels" in o or "timestamp" in o), Decoder._loki),
    # vLLM's JSON formatter (python-json-logger and the like): message + levelname
    (lambda o: isinstance(o.get("message", o.get("msg")), str) and any(k in o for k in _FORMATTER_FIELDS),
     Decoder._json_formatter),
)

#: `gcloud logging read --format=json` (and the console's download): one pretty-printed JSON array, a field a line
PRETTY_MARKERS = (b'  "textPayload": "', b'  "jsonPayload": {')
#: Either marker, found in one pass (hyperscan's when installed: most blocks have neither).
PRETTY = BlockPattern(lazy(b"|".join(re.escape(m) for m in PRETTY_MARKERS)), 20)
PRETTY_TEXT = lazy(rb'^\s*"(?:textPayload|message)": ("(?:[^"\\]|\\.)*"),?\s*$')
PRETTY_SYNTAX = lazy(rb'^\s*(?:[\[\]{}],?|"[^"\n]*": .*)\s*$')


def _pretty(block: bytes) -> tuple[bytes, list[int]]:
    """A pretty-printed export: each text field's value is a log line; the rest of the JSON is dropped."""
    out: list[bytes] = []
    line_map: list[int] = []
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for index, raw in enumerate(lines):
        m = PRETTY_TEXT.match(raw)
        if m:
            try:
                text = json.loads(m.group(1))
            except ValueError:
                text = None
            if isinstance(text, str):
                for part in text.rstrip("\n").split("\n"):
                    out.append(_encoded(part))
                    line_map.append(index)
                continue
        if PRETTY_SYNTAX.match(raw):
            continue
        out.append(raw)
        line_map.append(index)
    return b"".join(part + b"\n" for part in out), line_map


def _has_record(block: bytes) -> bool:
    """Whether `{"` occurs in the block: memchr for each `{` (rare in a plain log) beats a two-byte search."""
    find = block.find
    i = find(b"{")
    while i != -1:
        if block[i + 1:i + 2] == b'"':
            return True
        i = find(b"{", i + 1)
    return False


def _any_value(value: Any) -> Any:
    """An OTLP AnyValue ({"stringValue": ...}, {"kvlistValue": {"values": [...]}}, ...) as plain Python."""
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "kvlistValue" in value:
        items = (value["kvlistValue"] or {}).get("values", []) or []
        return {kv.get("key"): _any_value(kv.get("value")) for kv in items if isinstance(kv, dict)}
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"] or {}).get("values", []) or []]
    for key in ("intValue", "doubleValue", "boolValue"):
        if key in value:
            return str(value[key])
    return value


def _journal_text(message: Any) -> str:
    """journald's MESSAGE: a string, or an array of byte values when it was not valid UTF-8."""
    if isinstance(message, str):
        return message
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message):
        return bytes(message).decode("utf-8", errors="replace")
    return "" if message is None else str(message)


def _level(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    name = value.upper()
    name = LEVEL_NAMES.get(name, name)
    return name if name in VLLM_LEVELS else None


def _stamp(value: Any) -> str | None:
    """A record's time as vLLM prints it (MM-DD HH:MM:SS), or None."""
    if not isinstance(value, str):
        return None
    m = _ASCTIME.search(value)
    return f"{m.group(1)}-{m.group(2)} {m.group(3)}" if m else None
