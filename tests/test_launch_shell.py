"""The shell lexer (diagnoser/launch/shell.py): sh's word splitting, linear, bounded (issue 16 item 9)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from diagnoser.launch.shell import MAX_WORDS, LaunchFileError, ShellLexer, shell_words


def texts(line: str) -> list[str]:
    return [w.text for w in shell_words(line) if not w.op]


@pytest.mark.parametrize("line, words", [
    ("vllm serve 'm o' \"a $X b\" c\\ d e#f # gone", ["vllm", "serve", "m o", "a $X b", "c d", "e#f"]),
    ("vllm serve m --a=1 2>&1 >log | tee x", ["vllm", "serve", "m", "--a=1", "tee", "x"]),
    ("X=$'a\\tb' vllm serve ${M:-x} $(echo y) `z`", ["X=a\tb", "vllm", "serve", "${M:-x}", "$(echo y)", "`z`"]),
])
def test_words_as_sh_splits_them(line, words):
    assert texts(line) == words


def test_dynamic_words_are_marked():
    got = {w.text: w.dynamic for w in shell_words('vllm serve "$MODEL" plain `cmd`') if not w.op}
    assert got == {"vllm": False, "serve": False, "$MODEL": True, "plain": False, "`cmd`": True}


def test_a_lexer_is_a_one_shot_object_with_line_numbers():
    words = ShellLexer("a \\\n b\nc", first_line=10).words()
    assert [(w.text, w.line) for w in words] == [("a", 10), ("b", 11), ("\n", 11), ("c", 12)]


def test_many_redirections_on_one_line_are_read_in_one_pass():
    # each `2>&1` used to slice the rest of the text: quadratic on a long line
    line = "vllm serve m " + " ".join(f"--a{i} {i} 2>&1" for i in range(20_000))
    words = texts(line)
    assert len(words) == 3 + 40_000 and words[-1] == "19999"


def test_more_words_than_any_launch_script_are_refused():
    with pytest.raises(LaunchFileError, match=f"more than {MAX_WORDS:,} shell words"):
        shell_words("vllm serve m " + "--x 1 " * MAX_WORDS)


def test_a_12_mb_one_line_script_is_refused_not_planned_for_minutes(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\nvllm serve org/m " + " ".join(f"--x{i} {i}" for i in range(800_000)) + "\n")
    assert script.stat().st_size > 12_000_000
    out = subprocess.run([sys.executable, "-m", "diagnoser", "plan", "--from-file", str(script), "--gpu", "L4"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert f"{script}: line 2: more than {MAX_WORDS:,} shell words" in out.stderr
    assert len(out.stderr) < 400
