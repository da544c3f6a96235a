"""Start-up without a cache: the hyperscan databases are compiled in the process and find what the regexes find,
each bundled data file is parsed once per process, the shipped YAML parsed ahead (data/parsed_yaml.json) says what
YAML says and is never used for a text it was not made from, and two runs say the same (nothing is kept between them:
tests/security/test_start_cache.py shows a planted cache changes nothing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser import datafiles
from diagnoser.analysis.tracker import load_landmarks
from diagnoser.ingest import keywords

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "example-kv-cache-too-small.log"


def _ids(db, text: bytes) -> set[int]:
    found: set[int] = set()
    db.scan(text, match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
    return found


def test_literal_databases_follow_their_words_and_flags():
    pytest.importorskip("hyperscan")
    db = keywords.literal_database("hs-test", [b"gamma", b"delta"], caseless=True)
    assert _ids(db, b"alpha beta") == set() and _ids(db, b"GAMMA") == {0} and _ids(db, b"x delta") == {1}
    exact = keywords.literal_database("hs-test", [b"gamma", b"delta"])
    assert _ids(exact, b"GAMMA") == set() and _ids(exact, b"gamma") == {0}


def test_a_block_pattern_finds_what_the_regex_finds():
    pytest.importorskip("hyperscan")
    pattern = re.compile(rb' HTTP/[12](?:\.[01])?" (5\d\d|429)\b')
    text = b'x "GET / HTTP/1.1" 200 OK\n' * 5000 + b'y "POST /v1 HTTP/1.1" 503 Service Unavailable\n' * 3
    want = [m.span() for m in pattern.finditer(text)]
    found = keywords.BlockPattern(pattern, 20)
    assert found.accelerated and [m.span() for m in found.finditer(text)] == want and len(want) == 3


def test_data_files_are_parsed_once_per_process():
    assert datafiles.load("gpus.yaml") is datafiles.load("gpus.yaml")
    assert {"gpus"} <= set(datafiles.load("gpus.yaml"))


def _gen_parsed_yaml():
    import runpy

    return runpy.run_path(str(ROOT / "scripts" / "gen-parsed-yaml"), run_name="gen_parsed_yaml")


def test_the_parsed_yaml_file_is_up_to_date():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-parsed-yaml"), "--check"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr


def test_every_shipped_yaml_text_is_answered_from_the_parsed_file_with_what_yaml_says():
    texts = _gen_parsed_yaml()["texts"]()
    index = datafiles._parsed()
    assert len(texts) > 100 and all(datafiles.text_key(t) in index for t in texts)
    for text in texts:
        assert datafiles.yaml_load(text) == datafiles.parse_yaml(text)


def test_an_edited_text_is_parsed_and_a_missing_parsed_file_changes_nothing(monkeypatch):
    from diagnoser.rules.loader import builtin_rules_dir, shipped_rule

    path = builtin_rules_dir() / "kv-cache-too-small.yaml"
    text = path.read_text(encoding="utf-8")
    edited = text.replace("title: ", "title: EDITED ", 1)
    assert datafiles.text_key(edited) not in datafiles._parsed()
    assert datafiles.yaml_load(edited.split("\nmatch:")[0])["title"].startswith("EDITED ")
    answered = shipped_rule(path)
    monkeypatch.setattr(datafiles, "_parsed", lambda: {})
    parsed = shipped_rule(path)
    assert parsed.title == answered.title and parsed.patterns == answered.patterns
    assert parsed.advice == answered.advice and parsed.fixes == answered.fixes and parsed.derive == answered.derive


def test_a_value_json_would_change_is_left_to_yaml():
    import json

    left = ["when: 2024-01-02\n", "1: one\n", "x: .nan\n"]
    assert json.loads(datafiles.parsed_index(left)) == {}
    kept = json.loads(datafiles.parsed_index([*left, "a: [1, 2.0, true]\n"]))
    assert list(kept.values()) == ['{"a":[1,2.0,true]}']


def test_every_landmark_pattern_compiles():
    marks, _ = load_landmarks()
    patterns = [m for m in marks if m.pattern]
    assert patterns and all(m.regex.pattern == m.pattern for m in patterns)


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120, check=False)


@pytest.mark.parametrize("args", [(str(FIXTURE), "--format", "json"),
                                  ("plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384")])
def test_two_runs_say_the_same(args):
    first, second = _doctor(*args), _doctor(*args)
    assert first.stdout and first.returncode in (0, 1)
    assert (second.returncode, second.stdout, second.stderr) == (first.returncode, first.stdout, first.stderr)
