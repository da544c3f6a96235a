"""Shared test helpers: fixture paths and a way to diagnose text like a user would."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# the suite's own cache of parsed rules and data (datafiles.py), never the user's; also for CLI subprocesses
os.environ["VLLM_DOCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="vllm-doctor-test-cache-")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
