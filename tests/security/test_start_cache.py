"""Nothing on disk between runs decides what a run does (issue 29, item 3).

A cache restored by `actions/cache`, or the home folder of a shared self-hosted runner, is written by whoever
ran before. Whatever such a folder holds (a copy of a data file with other numbers, a serialized hyperscan
database, a file named like any entry the doctor ever kept), the report is the one a machine without it gives,
and the doctor writes nothing there. (Measured: parsing the bundled data and compiling the hyperscan databases
costs ~25-40 ms of a ~0.7 s start-up, and ~0.2 s of a large log's seconds: the cache was removed.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
PLAN = ("plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384")


def doctor(cache_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed command with this cache home (XDG_CACHE_HOME, and VLLM_DOCTOR_CACHE_DIR under it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_DOCTOR_CACHE_DIR", "VLLM_DOCTOR_NO_CACHE")}
    env["XDG_CACHE_HOME"] = str(cache_home)
    env["VLLM_DOCTOR_CACHE_DIR"] = str(cache_home / "vllm-doctor")
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def poison(folder: Path) -> None:
    """Every file in the cache folder rewritten by an attacker: JSON entries keep their key and change their value
    (L4's memory, the landmarks), binary entries become garbage; and planted entries under the names the doctor
    has used (data-*, hs-*, rules-*, templates-*)."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in list(folder.iterdir()):
        if path.suffix == ".json":
            doc = json.loads(path.read_text())
            text = json.dumps(doc).replace('"L4"', '"L4-X"').replace("22.5", "80").replace("24", "96")
            path.write_text(text)
        else:
            path.write_bytes(b"\x00" * 64)
    for name in ("data-gpus-0.json", "data-models-0.json", "hs-prefilter-0.bin", "rules-0.pickle", "templates-0.bin"):
        (folder / name).write_bytes(b"cos\nsystem\n(S'touch PWNED'\ntR.")


@pytest.mark.parametrize("args", [(str(EXAMPLE), "--format", "json"), PLAN])
def test_a_tampered_cache_changes_nothing(tmp_path, args):
    clean = doctor(tmp_path / "clean-home", *args)
    assert clean.returncode in (0, 1) and clean.stdout, clean.stderr
    home = tmp_path / "home"
    first = doctor(home, *args)  # whatever it keeps, it keeps here
    poison(home / "vllm-doctor")
    for path in (home / "vllm-doctor").iterdir():
        os.chmod(path, 0o600)  # owned by the user, writable by nobody else: what the old checks trusted
    os.chmod(home / "vllm-doctor", 0o700)
    after = doctor(home, *args)
    assert (after.returncode, after.stdout, after.stderr) == (clean.returncode, clean.stdout, clean.stderr)
    assert (first.returncode, first.stdout) == (clean.returncode, clean.stdout)
    assert not (tmp_path / "PWNED").exists()


def test_nothing_is_written_to_the_cache_folder(tmp_path):
    home = tmp_path / "home"
    for args in ((str(EXAMPLE),), PLAN, ("scan", "--no-progress", str(EXAMPLE))):
        res = doctor(home, *args)
        assert res.returncode in (0, 1), res.stderr
    written = [p for p in home.rglob("*")] if home.exists() else []
    assert written == [], written
