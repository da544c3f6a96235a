"""The start-up caches (datafiles' JSON and blobs, hyperscan databases, compiled templates) change nothing a
user sees: a warm run says what a cold one does; a changed input is never answered from an old entry; a
corrupt, foreign or stale entry, or a cache directory that cannot be written, falls back to building afresh.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser import datafiles
from diagnoser.analysis.tracker import load_landmarks
from diagnoser.ingest import keywords

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "example-kv-cache-too-small.log"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(folder))
    monkeypatch.delenv("VLLM_DOCTOR_NO_CACHE", raising=False)
    return folder







# --- datafiles ------------------------------------------------------------------------------------------------

def test_json_and_blob_entries_come_back_only_under_their_key(cache):
    datafiles.write_cache("demo", "k1", {"a": [1, 2]})
    datafiles.write_blob("bin", "k1", b"\x00payload")
    assert datafiles.read_cache("demo", "k1") == {"a": [1, 2]}
    assert datafiles.read_blob("bin", "k1") == b"\x00payload"
    assert datafiles.read_cache("demo", "k2") is None and datafiles.read_blob("bin", "k2") is None
    # a file renamed to another key does not answer for it: the key is inside
    (cache / "bin-k1.bin").rename(cache / "bin-k3.bin")
    (cache / "demo-k1.json").rename(cache / "demo-k3.json")
    assert datafiles.read_blob("bin", "k3") is None and datafiles.read_cache("demo", "k3") is None


def test_corrupt_entries_read_as_missing(cache):
    datafiles.write_cache("demo", "k1", [1])
    (cache / "demo-k1.json").write_text('{"format": 1, "key": "k1", "value": [1', encoding="utf-8")
    assert datafiles.read_cache("demo", "k1") is None
    (cache / "bin-k1.bin").write_bytes(b"garbage")
    os.chmod(cache / "bin-k1.bin", 0o600)
    assert datafiles.read_blob("bin", "k1") is None


def test_entries_others_can_write_are_not_trusted(cache):
    datafiles.write_blob("bin", "k1", b"x")
    os.chmod(cache / "bin-k1.bin", 0o666)
    assert datafiles.read_blob("bin", "k1") is None


def test_a_few_copies_per_name_are_kept_the_oldest_go(cache):
    for i in range(datafiles.KEEP + 2):
        datafiles.write_cache("demo", f"k{i}", i)
        os.utime(cache / f"demo-k{i}.json", (1000 + i, 1000 + i))
    kept = sorted(p.name for p in cache.glob("demo-*.json"))
    assert len(kept) == datafiles.KEEP and "demo-k0.json" not in kept and f"demo-k{datafiles.KEEP + 1}.json" in kept


def test_a_cache_directory_that_cannot_be_created_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(blocker / "cache"))
    datafiles.write_cache("demo", "k1", 1)
    datafiles.write_blob("bin", "k1", b"x")
    assert datafiles.read_cache("demo", "k1") is None and datafiles.read_blob("bin", "k1") is None


# --- hyperscan databases ----------------------------------------------------------------------------------------

def _ids(db, text: bytes) -> set[int]:
    found: set[int] = set()
    db.scan(text, match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
    return found


def test_a_cached_hyperscan_database_is_loaded_not_compiled(cache, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    words = [b"out of memory", b"nccl error", b"traceback"]
    first = keywords.literal_database("hs-test", words, caseless=True)
    assert len(list(cache.glob("hs-test-*.bin"))) == 1

    def refuse(*_a, **_k):
        raise AssertionError("compiled although a cached copy exists")

    monkeypatch.setattr(hyperscan, "Database", refuse)
    second = keywords.literal_database("hs-test", words, caseless=True)
    text = b"x NCCL ERROR y\nCUDA Out Of Memory\n"
    assert _ids(second, text) == _ids(first, text) == {0, 1}


def test_other_words_or_flags_never_get_an_old_database(cache):
    pytest.importorskip("hyperscan")
    keywords.literal_database("hs-test", [b"alpha", b"beta"], caseless=True)
    db = keywords.literal_database("hs-test", [b"gamma", b"delta"], caseless=True)
    assert _ids(db, b"alpha beta") == set() and _ids(db, b"GAMMA") == {0}
    exact = keywords.literal_database("hs-test", [b"gamma", b"delta"])
    assert _ids(exact, b"GAMMA") == set() and _ids(exact, b"gamma") == {0}


def test_a_corrupt_or_foreign_database_file_is_compiled_again(cache):
    hyperscan = pytest.importorskip("hyperscan")
    words = [b"alpha", b"beta"]
    keywords.literal_database("hs-test", words)
    (path,) = cache.glob("hs-test-*.bin")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert _ids(keywords.literal_database("hs-test", words), b"beta alpha") == {0, 1}
    # a valid database of other words stored under this key: the probe scan catches it
    other = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    other.compile(expressions=[b"zzz"], ids=[0], elements=1, flags=[0])
    key = path.name[len("hs-test-"):-len(".bin")]
    datafiles.write_blob("hs-test", key, hyperscan.dumpb(other))
    assert _ids(keywords.literal_database("hs-test", words), b"beta alpha") == {0, 1}


def test_a_block_patterns_database_is_loaded_on_the_next_run_and_compiled_again_when_corrupt(cache, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    pattern = re.compile(rb' HTTP/[12](?:\.[01])?" (5\d\d|429)\b')
    text = b'x "GET / HTTP/1.1" 200 OK\n' * 5000 + b'y "POST /v1 HTTP/1.1" 503 Service Unavailable\n' * 3
    want = [m.span() for m in pattern.finditer(text)]
    assert [m.span() for m in keywords.BlockPattern(pattern, 20).finditer(text)] == want and len(want) == 3
    (path,) = cache.glob("hs-pattern-*.bin")

    def refuse(*_a, **_k):
        raise AssertionError("compiled although a cached copy exists")

    with monkeypatch.context() as m:
        m.setattr(hyperscan, "Database", refuse)
        again = keywords.BlockPattern(pattern, 20)  # a new run's
        assert again.accelerated and [x.span() for x in again.finditer(text)] == want
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert [x.span() for x in keywords.BlockPattern(pattern, 20).finditer(text)] == want


def test_hyperscan_works_with_a_cache_that_cannot_be_written(tmp_path, monkeypatch):
    pytest.importorskip("hyperscan")
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(blocker / "cache"))
    assert _ids(keywords.literal_database("hs-test", [b"alpha"]), b"ALPHA alpha") == {0}


# --- compiled templates ------------------------------------------------------------------------------------------

ADVICE = "Set {{ flag }} to {{ value | tokens }}{% if note %} ({{ note }}){% endif %}."














def test_every_landmark_pattern_compiles():
    marks, _ = load_landmarks()
    patterns = [m for m in marks if m.pattern]
    assert patterns and all(m.regex.pattern == m.pattern for m in patterns)


# --- end to end -------------------------------------------------------------------------------------------------

def _doctor(env_cache: str | None, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_DOCTOR_CACHE_DIR", "VLLM_DOCTOR_NO_CACHE")}
    if env_cache is None:
        env["VLLM_DOCTOR_NO_CACHE"] = "1"
    else:
        env["VLLM_DOCTOR_CACHE_DIR"] = env_cache
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


@pytest.mark.parametrize("args", [(str(FIXTURE), "--format", "json"),
                                  ("plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384")])
def test_cold_warm_and_uncached_runs_say_the_same(tmp_path, args):
    folder = str(tmp_path / "cache")
    cold, warm, uncached = _doctor(folder, *args), _doctor(folder, *args), _doctor(None, *args)
    assert list((tmp_path / "cache").glob("*"))  # what is cached (parsed data files) is cached here
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    unwritable = _doctor(str(blocker / "cache"), *args)
    assert cold.stdout and cold.returncode in (0, 1)
    for other in (warm, uncached, unwritable):
        assert (other.returncode, other.stdout, other.stderr) == (cold.returncode, cold.stdout, cold.stderr)


