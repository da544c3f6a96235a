"""The release-defaults data file and its lookups: each default with the release it changed in."""

from __future__ import annotations

import doctest

import pytest

from diagnoser.errors import UsageError
from diagnoser.vllm import releases as rel


def test_doctests() -> None:
    assert doctest.testmod(rel).failed == 0


@pytest.mark.parametrize("text, expected", [
    ("0.7.3", (0, 7, 3)), ("0.8.5.post1", (0, 8, 5)), ("v0.10", (0, 10, 0)), ("0.10.1.1", (0, 10, 1)),
    ("0.6.4.post1", (0, 6, 4)), ("0.9.2rc1", (0, 9, 2)),
])
def test_parse_release(text: str, expected: tuple[int, int, int]) -> None:
    assert rel.parse_release(text) == expected
    assert rel.parse_version(text) == expected


@pytest.mark.parametrize("bad", ["eight", "0.8.x", "", "0.8;rm"])
def test_parse_release_rejects_with_hint(bad: str) -> None:
    with pytest.raises(UsageError, match="write 0.8.5"):
        rel.parse_release(bad)


def test_latest_is_the_data_files() -> None:
    assert rel.parse_version("latest") == rel.latest() == (0, 33, 0)


@pytest.mark.parametrize("version, engine", [("0.7.3", "V0"), ("0.8.0", "V1"), ("0.6.4", "V0"), ("0.33.0", "V1")])
def test_default_engine(version: str, engine: str) -> None:
    assert rel.engine_for(rel.parse_version(version)) == engine


@pytest.mark.parametrize("version, gib, name, seqs", [
    ("0.7.3", 22.0, "L4", 256),            # V0
    ("0.8.2", 22.0, "L4", 1024),           # V1 before 0.8.5: 1024 everywhere (the upgrade that surprised people)
    ("0.8.5", 22.0, "L4", 256),            # small GPUs back to 256
    ("0.8.5", 79.2, "A100-80GB", 1024),    # >= 70 GiB
    ("0.9.0", 79.2, "NVIDIA A100-SXM4-80GB", 256),  # A100 excluded from 0.9.0
    ("0.9.0", 79.2, "H100-80GB", 1024),
])
def test_max_num_seqs_by_release_and_gpu(version: str, gib: float, name: str, seqs: int) -> None:
    assert rel.default("max_num_seqs", rel.parse_version(version), gpu_gib=gib, gpu_name=name) == seqs


@pytest.mark.parametrize("version, gib, name, max_len, tokens", [
    ("0.7.3", 22.0, "L4", 8192, 8192),       # V0: max(max_model_len, 2048)
    ("0.7.3", 22.0, "L4", 1024, 2048),
    ("0.6.6", 22.0, "L4", 65536, 512),       # V0 chunked prefill above 32K
    ("0.7.3", 22.0, "L4", 65536, 2048),
    ("0.8.2", 79.2, "NVIDIA H100 80GB HBM3", 8192, 8192),  # V1 large tier by name
    ("0.8.2", 79.2, "A100-80GB", 8192, 2048),
    ("0.31.0", 178.4, "B200", 8192, 16384),
])
def test_max_num_batched_tokens(version: str, gib: float, name: str, max_len: int, tokens: int) -> None:
    v = rel.parse_version(version)
    assert rel.default("max_num_batched_tokens", v, gpu_gib=gib, gpu_name=name, max_model_len=max_len) == tokens


def test_engine_choice_by_release() -> None:
    assert rel.default("engine_env", (0, 6, 4)) and rel.default("engine_env", (0, 10, 2))
    assert not rel.default("engine_env", (0, 6, 3)) and not rel.default("engine_env", (0, 11, 0))
    assert rel.default("v1_only", (0, 11, 0)) and not rel.default("v1_only", (0, 10, 2))


def test_each_default_knows_the_release_it_changed_in() -> None:
    d = rel.default_entry("gpu_memory_utilization", (0, 21, 0))
    assert (d.value, d.since) == (0.92, (0, 20, 0))
    d = rel.default_entry("cuda_graphs_in_budget", (0, 19, 1))
    assert d.value is False and d.since == (0, 18, 0)
    assert rel.default("cuda_graphs_in_budget", (0, 20, 0)) is True
    assert rel.default_entry("engine", (0, 8, 2)).since == (0, 8, 0)


def test_capture_sizes_per_release() -> None:
    v0 = rel.default("cudagraph_capture_sizes", (0, 7, 3), max_model_len=8192)
    assert v0[-1] == 256 and len(v0) == 35           # cut at max_num_seqs 256
    v1 = rel.default("cudagraph_capture_sizes", (0, 8, 2), gpu_gib=22.0, gpu_name="L4")
    assert len(v1) == 67 and v1[-1] == 512           # 1024 seqs, but 512 is the largest size; 2048 tokens allow it
    new = rel.default("cudagraph_capture_sizes", (0, 12, 0), gpu_gib=22.0, gpu_name="L4")
    assert new[-1] == 512 and len(new) == 51         # 8-steps to 248, then 16-steps to 512
    small = rel.default("cudagraph_capture_sizes", (0, 12, 0), max_num_seqs=64)
    assert small[-1] == 128                          # min(2 x max_num_seqs, 512)
    assert rel.default("cudagraph_capture_sizes", (0, 9, 2), max_num_seqs=64)[-1] == 512    # before #20628
    ten = rel.default("cudagraph_capture_sizes", (0, 10, 1), max_num_seqs=64)
    assert ten[-1] == 128 and all(b - a <= 8 for a, b in zip(ten, ten[1:], strict=False))  # 8-steps only until 0.11.1


def test_effective_settings_marks_explicit_and_defaults() -> None:
    s = rel.effective_settings((0, 8, 2), gpu_gib=22.0, gpu_name="L4", max_model_len=8192,
                               explicit={"max_num_seqs": None, "gpu_memory_utilization": 0.9})
    assert s["gpu_memory_utilization"] == {"value": 0.9, "source": "explicit"}
    assert s["max_num_seqs"]["value"] == 1024 and s["max_num_seqs"]["since"] == "0.6.5"
    assert s["engine"]["value"] == "V1" and s["enable_prefix_caching"]["value"] is True
    assert list(s) == list(rel.load().shown)
    assert s["kv_cache_memory_bytes"]["value"] is None
    assert rel.default("kv_cache_memory_bytes_flag", (0, 10, 2)) and not rel.default("kv_cache_memory_bytes_flag",
                                                                                     (0, 10, 1))


def test_every_setting_resolves_for_every_engine_and_tier() -> None:
    for name in rel.load().settings:
        for version in ((0, 2, 6), (0, 7, 3), (0, 8, 2), (0, 11, 1), (0, 20, 0), (0, 33, 0)):
            for gib, gpu in ((22.0, "L4"), (79.2, "H100"), (178.0, "B200")):
                for engine in ("V0", "V1"):
                    rel.default_entry(name, version, engine=engine, gpu_gib=gib, gpu_name=gpu, max_model_len=4096)


def test_sources_cited_where_a_default_changed() -> None:
    """Every entry after the first of its setting says where it came from."""
    for name, entries in rel.load().settings.items():
        for entry in entries[1:]:
            if entry.value != entries[0].value:
                assert entry.source, f"releases.yaml: settings.{name}: since {entry.since}: add a source"
