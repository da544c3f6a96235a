"""Decompression bombs are refused early (issue 29, item 7): a compressed log may expand to at most a cap of
bytes, and past the first RATIO_AFTER bytes to at most MAX_RATIO times what was read of it; either is a one-line
error naming the file and the flag that raises the cap, exit 2, while the other inputs are still reported.

Every codec (gzip, bzip2, xz, zstd when installed), single and multi-stream, from a file, from stdin and in
`scan`. The caps are made small through VLLM_DOCTOR_MAX_DECOMPRESSED (what `--max-decompressed` sets) so the
tests stay fast; the default-cap test uses a real bomb, bounded in time.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import time
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.ingest import sources

from .conftest import run_doctor

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
CODECS = {"gz": lambda b: gzip.compress(b, 9), "bz2": bz2.compress, "xz": lambda b: lzma.compress(b, preset=1)}
try:
    import zstandard

    CODECS["zst"] = lambda b: zstandard.ZstdCompressor(level=3).compress(b)
except ImportError:
    pass


def bomb(codec: str, streams: int = 8, each: int = 64 << 20) -> bytes:
    """`streams` concatenated streams of `each` zero bytes (every codec reads concatenated streams as one)."""
    one = CODECS[codec](b"\0" * each)
    return one * streams


def read_all(data: bytes, name: str = "x.log.gz") -> int:
    stream = sources.decompressed(io.BufferedReader(io.BytesIO(data)), name)  # type: ignore[arg-type]
    total = 0
    while chunk := stream.read(1 << 20):
        total += len(chunk)
    return total


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_ratio_cap_stops_a_bomb_early(codec, monkeypatch):
    monkeypatch.delenv("VLLM_DOCTOR_MAX_DECOMPRESSED", raising=False)
    data = bomb(codec, streams=4, each=sources.RATIO_AFTER)
    start = time.monotonic()
    with pytest.raises(InputError) as info:
        read_all(data, f"bomb.log.{codec}")
    message = str(info.value)
    assert f"bomb.log.{codec}" in message and "--max-decompressed" in message and "\n" not in message
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_byte_cap(codec, monkeypatch):
    """A log that compresses like a log (not a bomb) still stops at the byte cap."""
    monkeypatch.setenv("VLLM_DOCTOR_MAX_DECOMPRESSED", "256KiB")
    text = EXAMPLE.read_bytes() * 40  # ~1 MiB, ratio ~20-100
    with pytest.raises(InputError) as info:
        read_all(CODECS[codec](text), f"big.log.{codec}")
    assert "256 KiB" in str(info.value) or "262144" in str(info.value), str(info.value)
    monkeypatch.setenv("VLLM_DOCTOR_MAX_DECOMPRESSED", "64MiB")
    assert read_all(CODECS[codec](text)) == len(text)


def test_a_raised_cap_also_lifts_the_ratio_cap(monkeypatch):
    monkeypatch.setenv("VLLM_DOCTOR_MAX_DECOMPRESSED", "1GiB")
    data = bomb("gz", streams=1, each=sources.RATIO_AFTER * 2)
    assert read_all(data) == sources.RATIO_AFTER * 2


def test_plain_files_are_not_capped(monkeypatch):
    monkeypatch.setenv("VLLM_DOCTOR_MAX_DECOMPRESSED", "1KiB")
    stream = sources.decompressed(io.BufferedReader(io.BytesIO(EXAMPLE.read_bytes())), "x.log")
    assert stream.read() == EXAMPLE.read_bytes()


def test_cli_default_cap_refuses_a_real_bomb_quickly(tmp_path):
    """The issue's 785-byte .bz2 of 1 GB of zeros took 134 s: now a one-line error in seconds, exit 2, and the
    good log beside it is still reported."""
    path = tmp_path / "bomb.log.bz2"
    path.write_bytes(bomb("bz2", streams=16))  # 1 GiB of zeros in ~1.3 KB
    good = tmp_path / "good.log.gz"
    good.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    env = {k: v for k, v in os.environ.items() if k != "VLLM_DOCTOR_MAX_DECOMPRESSED"}
    start = time.monotonic()
    res = run_doctor(str(good), str(path), timeout=60, env=env, max_gib=2)
    assert time.monotonic() - start < 45
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if "bomb.log.bz2" in ln]
    assert len(errors) == 1 and "--max-decompressed" in errors[0], res.stderr
    assert "kv-cache-too-small" in res.stdout  # the other input's report


def test_stdin_and_scan_are_capped_too(tmp_path):
    data = bomb("gz", streams=1, each=4 << 20)
    env = {**os.environ, "VLLM_DOCTOR_MAX_DECOMPRESSED": "1MiB"}
    res = run_doctor(stdin=data, env=env)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--max-decompressed" in res.stderr, res.stderr
    (tmp_path / "b.log.gz").write_bytes(data)
    (tmp_path / "a.log").write_bytes(EXAMPLE.read_bytes())
    scan = run_doctor("scan", "--no-progress", "--format", "jsonl", str(tmp_path), env=env)
    assert scan.returncode in (1, 2), scan.stderr  # 1: the good log has an error finding
    docs = scan.stdout.splitlines()
    assert len(docs) == 2 and "--max-decompressed" in scan.stdout and "kv-cache-too-small" in scan.stdout


def test_the_flag_raises_the_cap(tmp_path):
    """`--max-decompressed SIZE` (phase 2: the CLI option) raises or lowers the cap."""
    path = tmp_path / "big.log.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes() * 40))
    low = run_doctor("--max-decompressed", "256KiB", str(path))
    assert low.returncode == 2 and "--max-decompressed" in low.stderr and low.stderr.count("\n") == 1, low.stderr
    high = run_doctor("--max-decompressed", "1GiB", str(path))
    assert high.returncode == 1 and "kv-cache-too-small" in high.stdout, high.stderr
