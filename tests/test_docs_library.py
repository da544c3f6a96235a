"""docs/library.md: every ```python block runs, in order, from the repository root (its asserts are the test)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

DOC = ROOT / "docs" / "library.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    exec(compile(BLOCKS[index], f"{DOC}:block{index + 1}", "exec"), {"__name__": "docs_example"})  # noqa: S102
