"""One file, one or several logs: files that interleave pods and containers are cut into one log each.

Recognised from the file's first 64 KiB, whatever its name:
- `kubectl logs --prefix` (`[pod/NAME/CONTAINER] line`, also with `--all-containers` or a label selector);
- Loki exports: `logcli query --output=jsonl` (`{"labels": {...}, "line": "...", "timestamp": ...}`),
  `logcli`'s default output (`TIMESTAMP {labels} line`), and the HTTP API's `query_range` JSON
  (`{"data": {"result": [{"stream": {...}, "values": [[ns, line], ...]}]}}`).
Each stream is spooled to its own temporary file (memory stays flat whatever the size), and a stream Loki
returned newest-first (logcli's default direction) is read back oldest-first, so stages follow in order.
A file in none of these shapes is one log, read byte for byte as `vllm-doctor FILE` reads it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

from diagnoser.errors import InputError, LimitError
from diagnoser.ingest.sources import sniff
from diagnoser.lazyre import lazy

HEAD = 1 << 16
MAX_STREAMS = 1000                 #: more pods/containers than this in one file is refused, not guessed at
MAX_API_JSON = 256 << 20           #: a Loki API response is one JSON document: parsed whole, so bounded
KUBECTL = lazy(rb"^\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\] ?")
LOGCLI = lazy(rb"^(?P<ts>\d{4}-\d\d-\d\dT\S+)\s+\{(?P<labels>[^{}\n]*)\}\s(?P<line>.*)$")
LABEL = lazy(r'([A-Za-z_][\w.]*)="((?:[^"\\]|\\.)*)"')
POD_KEYS = ("pod", "pod_name", "k8s_pod_name", "kubernetes_pod_name")
CONTAINER_KEYS = ("container", "container_name", "k8s_container_name", "kubernetes_container_name")
NAMESPACE_KEYS = ("namespace", "k8s_namespace_name", "kubernetes_namespace_name")


@dataclass
class Log:
    """One log cut from a file: its report name, its labels (resource attributes), and its bytes."""

    name: str
    stream: BinaryIO
    labels: dict[str, str] = field(default_factory=dict)
    key: str | None = None  #: "pod/NAME/CONTAINER" for a cut log, None for a whole file


def stream_key(labels: dict[str, str]) -> str:
    """A stream's name: `pod/NAME/CONTAINER` as kubectl prints it when the labels say so, else its labels.

    >>> stream_key({"pod": "vllm-0", "container": "vllm", "namespace": "ml"})
    'pod/vllm-0/vllm'
    >>> stream_key({"app": "vllm", "host": "gpu-3"})
    'app=vllm,host=gpu-3'
    """
    pod = next((labels[k] for k in POD_KEYS if labels.get(k)), None)
    if pod:
        container = next((labels[k] for k in CONTAINER_KEYS if labels.get(k)), None)
        return f"pod/{pod}/{container}" if container else f"pod/{pod}"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "stream"


def detect(head: bytes) -> str | None:
    """'kubectl', 'logcli-jsonl', 'logcli', 'loki-api' or None (a plain log) from a file's first bytes."""
    text = head.lstrip()
    if text.startswith(b"{") and b'"result"' in text[:HEAD] and (b'"data"' in text[:200] or b'"status"' in text[:200]):
        return "loki-api"
    lines = [ln for ln in head.split(b"\n")[:-1][:64] if ln.strip()] or [ln for ln in head.split(b"\n") if ln.strip()]
    if not lines:
        return None
    first = lines[0].strip()
    if first.startswith(b"{"):
        try:
            obj = json.loads(first)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("line"), str) and isinstance(obj.get("labels"), dict):
            return "logcli-jsonl"
    for name, pattern in (("kubectl", KUBECTL), ("logcli", LOGCLI)):
        if sum(1 for ln in lines if pattern.match(ln)) >= max(1, 0.8 * len(lines)):
            return name
    return None


def _order_key(ts: Any) -> tuple[int, Any]:
    text = str(ts)
    return (0, int(text)) if text.isdigit() else (1, text)


class _Spool:
    """Per stream, a temporary file of its lines; remembers the first and last timestamp seen."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.files: dict[str, IO[bytes]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.first: dict[str, Any] = {}
        self.last: dict[str, Any] = {}

    def add(self, labels: dict[str, str], line: bytes, ts: Any = None) -> None:
        key = stream_key(labels)
        fh = self.files.get(key)
        if fh is None:
            if len(self.files) >= MAX_STREAMS:
                raise LimitError(f"{self.path}: holds more than {MAX_STREAMS} pod/container streams; "
                                 "split it by pod first (one file per pod)")
            fh = self.files[key] = tempfile.TemporaryFile(prefix="vllm-doctor-")  # noqa: SIM115 - closed in logs()
            self.labels[key] = labels
        fh.write(line.rstrip(b"\r\n") + b"\n")
        if ts is not None:
            self.first.setdefault(key, ts)
            self.last[key] = ts

    def logs(self) -> Iterator[Log]:
        try:
            for key, fh in sorted(self.files.items()):
                newest_first = key in self.first and _order_key(self.last[key]) < _order_key(self.first[key])
                fh.flush()
                fh.seek(0)
                stream: BinaryIO = _reversed_copy(fh) if newest_first else fh  # type: ignore[assignment]
                if stream is not fh:
                    fh.close()
                yield Log(f"{self.path}#{key}", stream, dict(self.labels[key]), key)
        finally:
            for fh in self.files.values():
                fh.close()


def _reversed_copy(fh: IO[bytes]) -> IO[bytes]:
    """A new temporary file with fh's lines in reverse order, read backwards in blocks (constant memory)."""
    out = tempfile.TemporaryFile(prefix="vllm-doctor-")  # noqa: SIM115 - the caller closes it
    fh.seek(0, os.SEEK_END)
    pos = fh.tell()
    tail = b""
    while pos > 0:
        step = min(1 << 20, pos)
        pos -= step
        fh.seek(pos)
        block = fh.read(step) + tail
        parts = block.split(b"\n")
        tail = parts[0]
        for part in reversed(parts[1:]):
            if part:
                out.write(part + b"\n")
    if tail:
        out.write(tail + b"\n")
    out.seek(0)
    return out


def _labels_text(text: str) -> dict[str, str]:
    return {k: v.encode().decode("unicode_escape") if "\\" in v else v for k, v in LABEL.findall(text)}


def _str_labels(obj: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in obj.items()} if isinstance(obj, dict) else {}


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    """Lines of at most 1 MiB (a longer one comes in pieces, which continue the stream they belong to)."""
    return iter(lambda: stream.readline(1 << 20), b"")


def _cut_kubectl(stream: BinaryIO, path: str, spool: _Spool) -> None:
    labels: dict[str, str] = {}
    for line in _lines(stream):
        m = KUBECTL.match(line)
        if m:
            labels = {"pod": m["pod"].decode(errors="replace"),
                      "container": m["container"].decode(errors="replace")}
            line = line[m.end():]
        spool.add(labels, line)  # an unprefixed line continues the stream before it


def _cut_logcli(stream: BinaryIO, path: str, spool: _Spool) -> None:
    labels: dict[str, str] = {}
    for line in _lines(stream):
        m = LOGCLI.match(line.rstrip(b"\r\n"))
        if m:
            labels = _labels_text(m["labels"].decode(errors="replace"))
            spool.add(labels, m["line"], m["ts"].decode())
        else:
            spool.add(labels, line)


def _cut_logcli_jsonl(stream: BinaryIO, path: str, spool: _Spool) -> None:
    for number, line in enumerate(_lines(stream), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise InputError(f"{path}: line {number}: not a JSON object, but the file began as "
                             "`logcli --output=jsonl`; export it again") from None
        text = obj.get("line") if isinstance(obj, dict) else None
        if not isinstance(text, str):
            continue
        spool.add(_str_labels(obj.get("labels")), text.encode("utf-8", "surrogateescape"), obj.get("timestamp"))


def _cut_loki_api(stream: BinaryIO, path: str, spool: _Spool) -> None:
    data = stream.read(MAX_API_JSON + 1)
    if len(data) > MAX_API_JSON:
        raise LimitError(f"{path}: a Loki API response over {MAX_API_JSON >> 20} MiB; export it with "
                         "`logcli query --output=jsonl` instead (read line by line)")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}), but it began as a Loki API response") from None
    del data
    result = ((doc.get("data") or {}).get("result") if isinstance(doc, dict) else None) or []
    for entry in result if isinstance(result, list) else []:
        if not isinstance(entry, dict):
            continue
        labels = _str_labels(entry.get("stream"))
        for value in entry.get("values") or []:
            if isinstance(value, list) and len(value) >= 2 and isinstance(value[1], str):
                spool.add(labels, value[1].encode("utf-8", "surrogateescape"), value[0])


#: How each shape detect() names is cut into streams (written to the spool).
CUTTERS = {"kubectl": _cut_kubectl, "logcli": _cut_logcli, "logcli-jsonl": _cut_logcli_jsonl,
           "loki-api": _cut_loki_api}


def _cut(shape: str, stream: BinaryIO, path: str) -> Iterator[Log]:
    spool = _Spool(path)
    CUTTERS[shape](stream, path, spool)
    yield from spool.logs()


def logs_in(raw: BinaryIO, path: str) -> Iterator[Log]:
    """The logs a (decompressed) file holds: several when it interleaves pods, else the whole file as one."""
    head, stream = sniff(raw, HEAD)
    shape = detect(head)
    if shape is None:
        yield Log(path, stream)
        return
    try:
        yield from _cut(shape, stream, path)
    finally:
        stream.close()
