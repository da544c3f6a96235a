"""README.md and docs/*.md: short README, its test command is the one CI runs, links resolve, no project
history in user docs, the generated rules table is current."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_readme_is_at_most_250_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 250, n


def test_readme_starts_with_exactly_two_commands_install_run_and_test():
    blocks = _bash_blocks(README.read_text(encoding="utf-8"))
    assert blocks[:2] == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install . && "
        "vllm-doctor fixtures/example-kv-cache-too-small.log",
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test,ray]' && python -m pytest -q",
    ], blocks[:2]


def test_readme_second_command_is_what_ci_runs_verbatim():
    second = _bash_blocks(README.read_text(encoding="utf-8"))[1]
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    i = next(n for n, ln in enumerate(run) if "# --- the README's second command, verbatim ---" in ln)
    ci = run[i + 1].strip()
    # CI installs quietly (-q); otherwise the command is the README's, word for word
    assert ci.replace("pip install -q ", "pip install ") == second.split("&& ", 2)[2], (ci, second)


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_relative_links_resolve(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert broken == [], f"{page.name}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_carry_no_project_history(page: Path):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"\bissue \d+", text, flags=re.I), re.search(r".{40}\bissue \d+.{40}", text, re.I | re.S)
    assert not re.search(r"^#+ Measured\b", text, flags=re.M)
    assert "earlier versions did" not in text.lower()


def test_docs_rules_table_is_up_to_date():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-rules-table"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
