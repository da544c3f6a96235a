"""`vllm-doctor scan`: many logs, one report each, equal to diagnosing each alone; bad files counted, never fatal."""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli.main import main
from diagnoser.fleet import ScanOptions, scan
from diagnoser.fleet.discover import iter_paths
from diagnoser.fleet.split import detect
from diagnoser.report.rows import COLUMNS
from tests.conftest import FIXTURES

A = FIXTURES / "kv-cache-too-small-v1-0.16.log"
B = FIXTURES / "weights-oom-v1-0.15.log"
HEALTHY = FIXTURES / "healthy-v1-0.10.log"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def diagnose_json(path: Path) -> dict:
    code, out, _ = run("--format", "json", str(path))
    assert code in (0, 1)
    return json.loads(out)


def same_diagnosis(doc: dict, expected: dict) -> None:
    assert doc["findings"] == expected["findings"]
    assert doc["context"] == expected["context"]
    assert doc["summary"] == expected["summary"]
    assert doc["input"]["lines"] == expected["input"]["lines"]


# -- acceptance: scan over the fixtures equals diagnose on each file ------------------------------------------

def test_scan_jsonl_rows_equal_diagnose_json_on_each_fixture() -> None:
    code, out, err = run("scan", "--format", "jsonl", str(FIXTURES))
    docs = [d for d in jsonl(out) if "/shapes/" not in d["input"]["path"]]
    # fixtures/shapes/ holds shipper exports (Loki, OTLP) that scan splits into one report per stream
    files = sorted(p for p in FIXTURES.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(FIXTURES).parts)
                   and p.parent.name != "shapes")
    assert [d["input"]["path"] for d in docs] == [str(p) for p in files]
    for doc, path in zip(docs, files, strict=True):
        assert doc == diagnose_json(path), path.name
    assert code == 1 and err == ""


def test_jobs_2_gives_the_same_documents_in_the_same_order(tmp_path: Path) -> None:
    paths = [str(p) for p in sorted(FIXTURES.glob("*-0.1*.log"))][:12]
    assert len(paths) == 12
    taken: list[str] = []

    def listing():  # records how far the scan has read the listing when each result comes out
        for p in paths:
            taken.append(p)
            yield p

    seen_when = []
    docs = []
    for doc in scan(listing(), jobs=2):
        seen_when.append(len(taken))
        docs.append(doc)
    assert docs == list(scan(paths, jobs=1))
    # constant memory: at most 4 files per worker in flight, however long the listing
    assert seen_when[0] <= 8 + 1
    assert all(n - i <= 9 for i, n in enumerate(seen_when))


def test_doctests_of_the_scan_modules() -> None:
    import doctest

    from diagnoser.fleet import ray as ray_engine
    from diagnoser.fleet import split
    from diagnoser.ingest import sources
    from diagnoser.report import otel

    for module in (sources, split, otel, ray_engine):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


# -- inputs: folders, globs, compression --------------------------------------------------------------------

def test_folders_recursive_globs_and_hidden_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "a" / "one.log").write_bytes(A.read_bytes())
    (tmp_path / "a" / "b" / "two.log").write_bytes(B.read_bytes())
    (tmp_path / "a" / ".swap.log").write_bytes(B.read_bytes())
    (tmp_path / ".hidden" / "three.log").write_bytes(B.read_bytes())
    assert [Path(p).name for p in iter_paths([str(tmp_path)])] == ["two.log", "one.log"]  # a/b/ < a/one.log
    assert [Path(p).name for p in iter_paths([str(tmp_path / "**" / "*.log")])] == ["two.log", "one.log"]
    # the same file named twice is scanned once
    assert len(list(iter_paths([str(tmp_path), str(tmp_path / "a" / "one.log")]))) == 2


def test_a_target_that_names_nothing_is_a_usage_error(tmp_path: Path) -> None:
    code, out, err = run("scan", str(tmp_path / "missing"))
    assert code == 2 and "missing: no such file or folder" in err and out == ""
    code, _, err = run("scan", str(tmp_path / "*.log"))
    assert code == 2 and "matches no file" in err
    code, _, err = run("scan", str(tmp_path))
    assert code == 2 and "no log files found" in err


def test_compressed_logs_are_read_transparently(tmp_path: Path) -> None:
    data = A.read_bytes()
    (tmp_path / "a.log.gz").write_bytes(gzip.compress(data))
    (tmp_path / "b.log.bz2").write_bytes(bz2.compress(data))
    (tmp_path / "rotated.1").write_bytes(gzip.compress(data))  # by magic bytes, not the name
    docs = list(scan(iter_paths([str(tmp_path)])))
    assert len(docs) == 3
    for doc in docs:
        same_diagnosis(doc, diagnose_json(A))


def test_zstd_logs_need_the_extra_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "a.log.zst").write_bytes(zstandard.ZstdCompressor().compress(A.read_bytes()))
    same_diagnosis(list(scan([str(tmp_path / "a.log.zst")]))[0], diagnose_json(A))
    two_frames = zstandard.ZstdCompressor().compress(A.read_bytes()[:5000])
    two_frames += zstandard.ZstdCompressor().compress(A.read_bytes()[5000:])  # `zstd` appends frames like this
    (tmp_path / "b.log.zst").write_bytes(two_frames)
    same_diagnosis(list(scan([str(tmp_path / "b.log.zst")]))[0], diagnose_json(A))
    (tmp_path / "cut.log.zst").write_bytes(two_frames[: len(two_frames) - 100])
    assert list(scan([str(tmp_path / "cut.log.zst")]))[0]["error"]["type"] == "corrupt"
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if the extra were not installed
    doc = list(scan([str(tmp_path / "a.log.zst")]))[0]
    assert doc["error"]["type"] == "invalid"
    assert "pip install 'vllm-log-doctor[zstd]'" in doc["error"]["message"]


# -- bad files ----------------------------------------------------------------------------------------------

def bad_folder(tmp_path: Path) -> Path:
    (tmp_path / "01-good.log").write_bytes(A.read_bytes())
    (tmp_path / "02-cut.log.gz").write_bytes(gzip.compress(B.read_bytes())[:200])
    (tmp_path / "03-dangling.log").symlink_to(tmp_path / "gone.log")
    (tmp_path / "04-bad.log.bz2").write_bytes(b"BZh9" + os.urandom(64))
    (tmp_path / "05-healthy.log").write_bytes(HEALTHY.read_bytes())
    (tmp_path / "06-quiet.log").write_text("INFO 05-01 10:00:00 [api_server.py:1] hello\n")
    return tmp_path


def test_bad_files_are_reported_counted_and_never_stop_the_scan(tmp_path: Path) -> None:
    folder = bad_folder(tmp_path)
    code, out, _ = run("scan", "--format", "jsonl", str(folder))
    docs = jsonl(out)
    assert [Path(d["input"]["path"]).name for d in docs] == [
        "01-good.log", "02-cut.log.gz", "03-dangling.log", "04-bad.log.bz2", "05-healthy.log", "06-quiet.log"]
    errors = {Path(d["input"]["path"]).name: d["error"] for d in docs if "error" in d}
    assert errors["02-cut.log.gz"]["type"] == "corrupt"
    assert errors["03-dangling.log"]["type"] == "unreadable"
    assert "No such file" in errors["03-dangling.log"]["message"]
    assert errors["04-bad.log.bz2"]["type"] == "corrupt"
    assert docs[0]["findings"][0]["rule"] == "kv-cache-too-small"
    assert docs[4]["summary"]["error"] == 0
    assert code == 1  # an error finding wins over unreadable files
    code, out, _ = run("scan", str(folder))
    assert "6 log(s): 1 with errors, 0 with warnings (no error), 2 clean, 3 unreadable" in out
    assert "Unreadable (3)" in out and "03-dangling.log: cannot read" in out


def test_exit_codes(tmp_path: Path) -> None:
    folder = bad_folder(tmp_path)
    assert run("scan", str(HEALTHY))[0] == 0
    assert run("scan", str(A))[0] == 1
    assert run("scan", "--exit-zero", str(A))[0] == 0
    assert run("scan", "--fail-on", "never", str(A), str(HEALTHY))[0] == 0
    assert run("scan", str(HEALTHY), str(folder / "02-cut.log.gz"))[0] == 2
    assert run("scan", "--fail-on", "never", str(folder))[0] == 2
    assert run("scan", "--fail-on", "warning", str(FIXTURES / "preemption-v1-0.12.log"))[0] == 1
    assert run("scan", str(FIXTURES / "preemption-v1-0.12.log"))[0] == 0


# -- one log per pod/container ------------------------------------------------------------------------------

def interleave(a: list[str], b: list[str]) -> list[tuple[int, str]]:
    out = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            out.append((0, a[i]))
        if i < len(b):
            out.append((1, b[i]))
    return out


PODS = [{"namespace": "ml", "pod": "vllm-a-0", "container": "vllm"},
        {"namespace": "ml", "pod": "vllm-b-0", "container": "vllm"}]


def multiplexed(shape: str) -> bytes:
    a, b = A.read_text().splitlines(), B.read_text().splitlines()
    merged = interleave(a, b)
    stamps = [f"2026-05-11T22:{i // 60 % 60:02d}:{i % 60:02d}.{i:09d}Z" for i in range(len(merged))]
    if shape == "kubectl":
        return "".join(f"[pod/{PODS[s]['pod']}/{PODS[s]['container']}] {ln}\n" for s, ln in merged).encode()
    if shape == "logcli":  # logcli's default direction: newest first
        lines = [f"{stamps[i]} {{container=\"vllm\", namespace=\"ml\", pod=\"{PODS[s]['pod']}\"}} {ln}"
                 for i, (s, ln) in enumerate(merged)]
        return ("\n".join(reversed(lines)) + "\n").encode()
    if shape == "logcli-jsonl":
        return "".join(json.dumps({"labels": PODS[s], "line": ln, "timestamp": stamps[i]}) + "\n"
                       for i, (s, ln) in enumerate(merged)).encode()
    assert shape == "loki-api"  # query_range, direction backward
    result = []
    for s in (0, 1):
        values = [[str(1778539000000000000 + i), ln] for i, (t, ln) in enumerate(merged) if t == s]
        result.append({"stream": PODS[s], "values": list(reversed(values))})
    return json.dumps({"status": "success", "data": {"resultType": "streams", "result": result}}).encode()


@pytest.mark.parametrize("shape", ["kubectl", "logcli", "logcli-jsonl", "loki-api"])
def test_a_file_of_several_pods_is_one_log_per_pod(shape: str, tmp_path: Path) -> None:
    data = multiplexed(shape)
    assert detect(data[:65536]) == shape
    path = tmp_path / "pods.log.gz"
    path.write_bytes(gzip.compress(data))
    docs = list(scan([str(path)]))
    assert [d["input"]["stream"] for d in docs] == ["pod/vllm-a-0/vllm", "pod/vllm-b-0/vllm"]
    assert docs[0]["input"]["path"] == f"{path}#pod/vllm-a-0/vllm"
    assert docs[0]["input"]["labels"]["pod"] == "vllm-a-0"
    same_diagnosis(docs[0], diagnose_json(A))  # stages in order: the backward exports were turned around
    same_diagnosis(docs[1], diagnose_json(B))


def test_a_plain_log_is_never_split() -> None:
    for path in FIXTURES.glob("*.log"):
        assert detect(path.read_bytes()[:65536]) is None, path.name


# -- formats ------------------------------------------------------------------------------------------------

def test_text_summary_counts(tmp_path: Path) -> None:
    (tmp_path / "pods.log").write_bytes(multiplexed("kubectl"))
    code, out, _ = run("scan", str(tmp_path), str(A), str(HEALTHY))
    assert out.startswith("vllm-doctor scan: 4 log(s): 3 with errors, 0 with warnings (no error), 1 clean, 0 unreadable")
    rules = out.split("Findings by rule (logs it fired in)\n")[1].split("\n\n")[0].splitlines()
    table = {ln.split()[0]: (ln.split()[1], int(ln.split()[2])) for ln in rules}
    assert table["kv-cache-too-small"] == ("error", 2)
    assert table["weights-oom"] == ("error", 1)
    assert "By model" in out and "By GPU" in out and "By vLLM release" in out
    worst = out.split("Worst logs (first finding; 3 shown)\n")[1].splitlines()
    assert any("#pod/vllm-b-0/vllm:" in ln and "[weights-oom]" in ln for ln in worst)


def test_worst_logs_are_bounded_by_top() -> None:
    code, out, _ = run("scan", "--top", "3", str(FIXTURES / "[kpw]*.log"))
    worst = out.split("Worst logs (first finding; 3 shown)\n")[1].split("\n\n")[0].splitlines()
    assert len(worst) == 3 and all(" ERROR [" in ln for ln in worst)


def test_markdown_summary(tmp_path: Path) -> None:
    _, out, _ = run("scan", "--format", "markdown", str(A), str(B), str(HEALTHY))
    assert out.startswith("## vllm-doctor scan\n")
    assert "**3** log(s): **2** with errors" in out
    assert "| `kv-cache-too-small` | error | 1 |" in out
    assert "### Worst logs" in out and "### By vLLM release" in out


def test_csv_has_one_row_per_finding_and_per_clean_or_bad_log(tmp_path: Path) -> None:
    folder = bad_folder(tmp_path)
    _, out, _ = run("scan", "--format", "csv", str(folder))
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == list(COLUMNS)
    docs = list(scan(iter_paths([str(folder)])))
    assert len(rows) == sum(max(1, len(d.get("findings", []))) for d in docs)
    by_status = {r["status"] for r in rows}
    assert by_status == {"finding", "ok", "error"}
    kv = next(r for r in rows if r["rule"] == "kv-cache-too-small")
    assert float(kv["max_model_len"]) == docs[0]["findings"][0]["facts"]["max_model_len"]
    assert kv["release"] == docs[0]["context"]["version"] and kv["stage"] == "startup"
    assert json.loads(kv["facts"]) == docs[0]["findings"][0]["facts"]


def test_progress_only_when_asked_or_on_a_terminal(tmp_path: Path) -> None:
    _, _, err = run("scan", "--progress", str(A), str(HEALTHY))
    assert "\rscan: [" in err and "2/2 files" in err and err.endswith("\n")
    assert run("scan", str(A), str(HEALTHY))[2] == ""


def test_output_file(tmp_path: Path) -> None:
    code, out, _ = run("scan", "--format", "jsonl", "-o", str(tmp_path / "out.jsonl"), str(A))
    assert code == 1 and out == ""
    assert jsonl((tmp_path / "out.jsonl").read_text())[0]["findings"][0]["rule"] == "kv-cache-too-small"


def test_options_reach_the_workers(tmp_path: Path) -> None:
    log = ("INFO 05-01 10:00:00 [api_server.py:1] non-default args: {'model': 'm', "
           "'hf_token': 'hf_abcdefghijklmnopqrstuvwxyz0123'}\n")
    (tmp_path / "secret.log").write_text(log)
    for jobs in (1, 2):
        kept = list(scan([str(tmp_path / "secret.log")], ScanOptions(redact=False), jobs=jobs))
        assert kept[0]["redactions"]["total"] == 0
        redacted = list(scan([str(tmp_path / "secret.log")], ScanOptions(), jobs=jobs))
        assert redacted[0]["redactions"]["total"] == 1
