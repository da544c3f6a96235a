"""Issue 16 item 2: a log cannot put code into the suggested `run:` and `python:` lines.

The command-execution cases run the suggested line in a real POSIX shell (with `vllm` a no-op function) and
evaluate the Python spelling, then assert that nothing was created.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnoser.analysis.pipeline import diagnose_text
from diagnoser.vllm import serve_args
from diagnoser.vllm.flags import load_flags

ARGS = "INFO 06-01 10:00:00 [utils.py:326] non-default args: {body}\n"
INIT = ("INFO 06-01 10:00:01 [core.py:69] Initializing a V1 LLM engine (v0.10.1) with config: "
        "model={model!r}, max_seq_len=131072, tensor_parallel_size=1\n")
KV_ERROR = ("ERROR 06-01 10:00:40 [core.py:700] ValueError: To serve at least one request with the models's max "
            "seq len (131072), (16.00 GiB KV cache is needed), which is larger than the available KV cache memory "
            "(4.62 GiB). Based on the available memory, the estimated maximum model length is 37840. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
#: A safe line is made of single-quoted text, the double-quoted single quote shlex.quote writes ("'"),
#: blanks between words, and the characters shlex.quote leaves bare: nothing a shell expands, splits or runs.
INERT = re.compile(r"""(?:'[^']*'|"'"|[\w@%+=:,./-]| )*""")


def commands_for(body: str, model: str = "org/model-8b"):
    report = diagnose_text(ARGS.format(body=body) + INIT.format(model=model) + KV_ERROR)
    f = report.findings[0]
    assert f.rule.id == "kv-cache-too-small"
    return f


def run_in_shell(line: str, cwd) -> list[str]:
    """The words a POSIX shell passes to `vllm` for `line` (vllm is a function that prints them)."""
    script = 'vllm() { for a in "$@"; do printf "%s\\0" "$a"; done; }\n' + line + "\n"
    out = subprocess.run(["sh", "-c", script], cwd=cwd, capture_output=True, timeout=10, check=False,
                         env={"PATH": "/usr/bin:/bin", "VLLM_API_KEY": "k"})
    return out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def assert_inert_shell(line: str) -> None:
    """Every word is bare-safe or single-quoted: nothing a shell would expand, split or run."""
    assert INERT.fullmatch(line.replace(serve_args.API_KEY_VALUE, "")), f"shell syntax in {line!r}"


def assert_literal_call(py: str) -> dict:
    """`LLM(model=..., k=literal, ...)`: one call of plain literals; returns the keywords."""
    tree = ast.parse(py, mode="eval")
    call = tree.body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "LLM", py
    assert call.args == []
    out = {}
    for kw in call.keywords:
        assert kw.arg is not None and kw.arg.isidentifier(), py
        out[kw.arg] = ast.literal_eval(kw.value)
    return out


def test_a_key_with_command_substitution_never_runs(tmp_path):
    f = commands_for("{'model': 'org/model-8b', 'x $(touch PWNED) #': 1, 'y`touch PWNED2`': 2}")
    assert "PWNED" not in (f.command or "")
    assert any("not a vLLM argument name" in n for n in f.command_notes)
    words = run_in_shell(f.command, tmp_path)
    assert words[:2] == ["serve", "org/model-8b"] and "--max-model-len" in words
    assert list(tmp_path.iterdir()) == []


def test_a_value_with_shell_syntax_is_quoted(tmp_path):
    f = commands_for("{'model': 'org/model-8b', 'served_model_name': ['a; touch PWNED'], "
                     "'tokenizer': '$(touch PWNED3)', 'chat_template': '`touch PWNED4` && x > y'}")
    assert_inert_shell(f.command)
    words = run_in_shell(f.command, tmp_path)
    assert words == shlex.split(f.command)[1:]
    assert "a; touch PWNED" in words and "$(touch PWNED3)" in words
    assert list(tmp_path.iterdir()) == []


def test_a_model_name_with_shell_syntax_is_quoted(tmp_path):
    f = commands_for("{'model': 'org/m; touch PWNED'}", model="org/m; touch PWNED")
    assert run_in_shell(f.command, tmp_path)[1] == "org/m; touch PWNED"
    assert list(tmp_path.iterdir()) == []


def test_a_key_with_python_code_never_reaches_the_call(tmp_path):
    marker = tmp_path / "PWNED"
    f = commands_for(f"{{'model': 'org/model-8b', \"seed=__import__('os').system('touch {marker}'),x\": 1, "
                     "'dtype': \"__import__('os')\"}")
    kws = assert_literal_call(f.python)
    assert set(kws) == {"model", "max_model_len"}
    # a value that reads like a call is an object's repr, not a value: left out, and said so
    assert any("dtype" in n for n in f.command_notes)
    eval(compile(f.python, "<run>", "eval"), {"LLM": lambda **kw: kw})  # noqa: S307 - the point of the test
    assert not marker.exists()


# -- properties: arbitrary argument dicts ------------------------------------------------------------------------

scalars = st.one_of(st.text(max_size=12), st.integers(), st.floats(), st.booleans(), st.none())
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=6), scalars, max_size=3))
known_keys = st.sampled_from(sorted(f.key for f in load_flags().values()))
keys = st.one_of(st.text(max_size=16), known_keys)
arg_dicts = st.dictionaries(keys, values, max_size=8)
versions = st.sampled_from([None, "0.5.3", "0.8.5", "0.10.1", "0.33.0"])


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.text(min_size=1, max_size=20), args=arg_dicts, version=versions)
def test_rendered_lines_never_expand_and_call_only_literals(model, args, version):
    cmd = serve_args.render_serve(model, args, version).text
    if not model.isprintable():
        assert cmd is None and serve_args.render_llm(model, args, version).text is None
        return
    assert cmd.isprintable()
    assert_inert_shell(cmd)
    words = shlex.split(cmd)
    # a name that starts with `-` is --model's value, never an option of its own (issue 29 item 16)
    assert words[:3] == ["vllm", "serve", f"--model={model}" if model.startswith("-") else model]
    for note in serve_args.render_serve(model, args, version).notes:
        assert "\x1b" not in note and "\n" not in note
    py = serve_args.render_llm(model, args, version).text
    kws = assert_literal_call(py)
    assert kws["model"] == model


@settings(max_examples=25, deadline=5000)
@given(args=arg_dicts)
def test_a_real_shell_sees_exactly_the_words_written(tmp_path_factory, args):
    cwd = tmp_path_factory.mktemp("sh")
    cmd = serve_args.render_serve("org/m", args, None).text
    words = shlex.split(cmd.replace(serve_args.API_KEY_VALUE, "k"))
    assert run_in_shell(cmd, cwd) == words[1:]
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("body", [
    "{'model': 'org/model-8b', 'x\\x1b]52;c;SGVsbG8=\\x07': 1}",
    "{'model': 'org/model-8b', 'a\\nb': 1, '--max-model-len 1 --x': 2}",
])
def test_keys_with_control_characters_are_dropped_and_shown_escaped(body):
    f = commands_for(body)
    assert "\x1b" not in f.command and "\n" not in f.command
    assert all("\x1b" not in n and "\n" not in n for n in f.command_notes)
