"""`vllm-doctor FILE.gz` (and .bz2, .xz, .zst), `check`, `compare` and stdin read compressed logs transparently,
through the one opener `scan` and the library use (sources.open_log); live modes refuse them in one line."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli.main import main
from tests.conftest import FIXTURES

LOG = FIXTURES / "kv-cache-too-small-v1-0.16.log"
COMPARE = FIXTURES / "compare" / "upgrade-0.7.3-to-0.8.2-fails"


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def doctor(*args: str, prelude: str = "pass") -> tuple[int, str, str]:
    """The command as a user runs it (the entry point's one-line error contract), in a subprocess."""
    code = f"import sys; {prelude}; from diagnoser.cli.main import run; sys.argv = ['vllm-doctor', *sys.argv[1:]]; run()"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def as_json(*args: str, stdin: bytes | None = None) -> dict:
    code, out, err = run("--format", "json", *args, stdin=stdin)
    assert code == 1, err
    return json.loads(out)


def same(doc: dict, plain: dict) -> None:
    assert doc["findings"] == plain["findings"] and doc["findings"][0]["rule"] == "kv-cache-too-small"
    assert doc["context"] == plain["context"]
    assert doc["input"]["lines"] == plain["input"]["lines"] > 0


def zstd(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("suffix,pack", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress),
                                         (".zst", zstd), (".1", gzip.compress)])
def test_diagnose_reads_a_compressed_file_like_the_plain_one(tmp_path: Path, suffix, pack) -> None:
    path = tmp_path / f"server.log{suffix}"  # `.1`: a rotated gzip file, known by its magic bytes
    path.write_bytes(pack(LOG.read_bytes()))
    doc = as_json(str(path))
    same(doc, as_json(str(LOG)))
    assert doc["input"]["path"] == str(path)


def test_check_and_stdin_read_compressed_logs(tmp_path: Path) -> None:
    path = tmp_path / "server.log.gz"
    path.write_bytes(gzip.compress(LOG.read_bytes()))
    code, out, err = run("check", str(path))
    assert code == 1 and "kv-cache-too-small" in out and "no vLLM log" not in err
    plain = as_json(str(LOG))
    for args, data in (((), path.read_bytes()), (("-",), bz2.compress(LOG.read_bytes()))):
        done = subprocess.run([sys.executable, "-m", "diagnoser", "--format", "json", *args], input=data,
                              capture_output=True, timeout=120)
        assert done.returncode == 1, done.stderr
        same(json.loads(done.stdout), plain)


def test_compare_reads_compressed_logs(tmp_path: Path) -> None:
    before, after = tmp_path / "before.log.gz", tmp_path / "after.log.bz2"
    before.write_bytes(gzip.compress((COMPARE / "before-0.7.3.log").read_bytes()))
    after.write_bytes(bz2.compress((COMPARE / "after-0.8.2.log").read_bytes()))
    code, out, _ = run("compare", "--format", "json", str(before), str(after))
    plain_code, plain, _ = run("compare", "--format", "json", str(COMPARE / "before-0.7.3.log"), str(COMPARE / "after-0.8.2.log"))
    got, want = json.loads(out), json.loads(plain)
    assert code == plain_code == 1
    assert got["changes"] == want["changes"] and got["fixes"]
    assert [(f["flag"], f["value"], f["returns_gib"]) for f in got["fixes"]] == \
        [(f["flag"], f["value"], f["returns_gib"]) for f in want["fixes"]]
    assert [log["budget"] for log in got["logs"]] == [log["budget"] for log in want["logs"]]


def test_truncated_and_corrupt_archives_are_one_line_errors(tmp_path: Path) -> None:
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(LOG.read_bytes())[:300])
    code, _, err = doctor(str(cut))
    assert code == 2
    assert err.strip().splitlines() == [f"vllm-doctor: error: {cut}: cannot read (truncated: Compressed file ended "
                                        "before the end-of-stream marker was reached); check the file"]
    bad = tmp_path / "bad.log.bz2"
    bad.write_bytes(b"BZh9" + bytes(range(64)))
    code, _, err = doctor(str(bad), str(LOG))  # the good input is still reported
    assert code == 2 and f"{bad}: cannot read (Invalid data stream)" in err
    code, _, err = doctor("compare", str(LOG), str(cut))
    assert code == 2 and err.count("\n") == 1 and f"{cut}: cannot read (truncated" in err


def test_zstd_without_the_extra_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "server.log.zst"
    path.write_bytes(zstd(LOG.read_bytes()))
    code, out, err = doctor(str(path), prelude="sys.modules['zstandard'] = None")  # as if the extra were missing
    assert code == 2 and out == ""
    assert err.strip() == (f"vllm-doctor: error: {path}: is zstandard-compressed; install the optional extra to "
                           "read it: pip install 'vllm-log-doctor[zstd]' (or decompress it with `zstd -d`)")


def test_live_modes_refuse_compressed_files(tmp_path: Path) -> None:
    path = tmp_path / "server.log.gz"
    path.write_bytes(gzip.compress(LOG.read_bytes()))
    code, _, err = doctor("--follow", str(path))
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: is gzip-compressed, which --follow cannot read as it grows" in err
    code, _, err = doctor("--follow", str(tmp_path / "not-yet.log.zst"))  # not written yet: known by its name
    assert code == 2 and "is zstd-compressed" in err
    code, _, err = doctor("--until", "ready", str(path))
    assert code == 2 and "is gzip-compressed, which --tee/--until/--timeout cannot read" in err
