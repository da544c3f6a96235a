"""`scan --engine ray` and diagnoser.fleet.ray.diagnose_dataset on a local Ray (2 CPUs): every row equals the
single-process scan's, nothing lost, nothing duplicated. Needs the `ray` extra (CI installs it)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from diagnoser.fleet import scan  # noqa: E402
from diagnoser.fleet.discover import iter_paths  # noqa: E402
from diagnoser.fleet.ray import diagnose_dataset, read_logs, scan_paths  # noqa: E402
from diagnoser.report.rows import rows  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

N_LOGS = 240


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few hundred logs made from the fixtures: plain, gzip, multi-pod kubectl files, a corrupt one."""
    root = tmp_path_factory.mktemp("fleet")
    sources = sorted(FIXTURES.glob("*.log"))
    for i in range(N_LOGS):
        src = sources[i % len(sources)]
        folder = root / f"node-{i % 7}"
        folder.mkdir(exist_ok=True)
        data = src.read_bytes()
        if i % 5 == 1:
            (folder / f"replica-{i}.log.gz").write_bytes(gzip.compress(data))
        elif i % 11 == 3:
            other = sources[(i + 1) % len(sources)].read_text(errors="replace").splitlines()
            mine = data.decode(errors="replace").splitlines()
            text = "".join(f"[pod/vllm-{i}-0/vllm] {ln}\n" for ln in mine)
            text += "".join(f"[pod/vllm-{i}-1/vllm] {ln}\n" for ln in other)
            (folder / f"pods-{i}.log").write_text(text)
        else:
            (folder / f"replica-{i}.log").write_bytes(data)
    (root / "node-0" / "broken.log.gz").write_bytes(gzip.compress(bytes(range(256)) * 40)[:300])
    return root


@pytest.fixture(scope="module")
def single(fleet: Path) -> list[dict]:
    """The single-process scan of the fleet: the reference every Ray row is compared with."""
    return list(scan(iter_paths([str(fleet)])))


def test_scan_engine_ray_equals_the_single_process_scan(fleet: Path, single: list[dict], local_ray: None) -> None:
    distributed = list(scan_paths([str(fleet)]))
    assert len(single) > N_LOGS  # the multi-pod files count twice
    assert [d["input"]["path"] for d in distributed] == [d["input"]["path"] for d in single]
    assert distributed == single
    assert sum("error" in d for d in distributed) == 1
    assert ray.is_initialized()  # a Ray the caller started is left running


def test_diagnose_dataset_rows_equal_the_scan_rows(fleet: Path, single: list[dict], local_ray: None) -> None:
    got = diagnose_dataset(read_logs(str(fleet))).take_all()
    # a user's own read_binary_files rows (bytes + path) work too
    plain = ray.data.read_binary_files(str(fleet / "node-2"), include_paths=True)
    assert {r["source"] for r in diagnose_dataset(plain).take_all()} >= {str(p) for p in (fleet / "node-2").glob("*.log")}
    expected = [r for d in single for r in rows(d)]

    def key(row: dict) -> str:
        return json.dumps({k: row.get(k) for k in expected[0]}, sort_keys=True, default=str)

    # read_binary_files names files by absolute path without a scheme, as the single scan does here
    assert Counter(map(key, got)) == Counter(map(key, expected))
    assert len(got) == len(expected)
    assert {r["status"] for r in got} == {"finding", "error"} | ({"ok"} & {r["status"] for r in expected})


def test_uris_are_listed_and_read_by_pyarrow_filesystems(fleet: Path, local_ray: None) -> None:
    folder = fleet / "node-0"
    distributed = list(scan_paths([f"file://{folder}"]))
    single = list(scan(iter_paths([str(folder)])))
    assert [d["input"]["path"] for d in distributed] == [f"file://{d['input']['path']}" for d in single]
    for got, expected in zip(distributed, single, strict=True):
        if "error" in expected:  # the truncated archive: reported, not fatal to the job
            assert got["error"]["type"] == expected["error"]["type"] == "corrupt"
            continue
        assert got["findings"] == expected["findings"] and got["context"] == expected["context"]


def test_the_cli_runs_on_ray(fleet: Path, local_ray: None) -> None:
    from click.testing import CliRunner

    from diagnoser.cli.main import main

    result = CliRunner().invoke(main, ["scan", "--engine", "ray", "--format", "jsonl", str(fleet / "node-1")],
                                catch_exceptions=False)
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert docs == list(scan(iter_paths([str(fleet / "node-1")])))
    assert result.exit_code == 1


def test_ray_address_reaches_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """--ray-address, else $RAY_ADDRESS, joins that cluster; neither starts a local Ray with this machine's CPUs."""
    import diagnoser.fleet.ray as dray

    calls: list[dict] = []

    class FakeRay:
        @staticmethod
        def is_initialized() -> bool:
            return False

        @staticmethod
        def init(**kwargs) -> None:
            calls.append(kwargs)

    monkeypatch.setattr(dray, "_ray", lambda: FakeRay)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert dray.init(num_cpus=3) and calls[-1]["address"] is None and calls[-1]["num_cpus"] == 3
    assert dray.init("ray://head:10001") and calls[-1]["address"] == "ray://head:10001"
    assert "num_cpus" not in calls[-1]  # a cluster's CPUs are the cluster's
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert dray.init() and calls[-1]["address"] == "auto"
    assert dray.init("ray://other:10001") and calls[-1]["address"] == "ray://other:10001"  # the option wins
