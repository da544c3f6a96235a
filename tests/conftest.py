"""Shared test helpers: fixture paths and a way to diagnose text like a user would."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# the suite's own cache of parsed rules and data (datafiles.py), never the user's; also for CLI subprocesses
# (removed when the session ends, so runs do not pile up directories in the temp folder)
_CACHE = tempfile.mkdtemp(prefix="vllm-doctor-test-cache-")
os.environ["VLLM_DOCTOR_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
