"""The start-up caches (datafiles' JSON and blobs, hyperscan databases, compiled templates) change nothing a
user sees: a warm run says what a cold one does; a changed input is never answered from an old entry; a
corrupt, foreign or stale entry, or a cache directory that cannot be written, falls back to building afresh.
"""

from __future__ import annotations

import marshal
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from jinja2.exceptions import SecurityError, UndefinedError

from diagnoser import datafiles, keywords, sandbox, templatecache
from diagnoser.tracker import load_landmarks

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "example-kv-cache-too-small.log"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(folder))
    monkeypatch.delenv("VLLM_DOCTOR_NO_CACHE", raising=False)
    return folder


@pytest.fixture
def fresh_templates(monkeypatch):
    """A process that has compiled nothing yet (what a new run starts with)."""
    monkeypatch.setattr(templatecache, "_STORES", {})
    monkeypatch.setattr(templatecache, "_KEYS", {})


def _new_run(monkeypatch):
    templatecache.flush()
    monkeypatch.setattr(templatecache, "_STORES", {})
    monkeypatch.setattr(templatecache, "_KEYS", {})


# --- datafiles ------------------------------------------------------------------------------------------------

def test_json_and_blob_entries_come_back_only_under_their_key(cache):
    datafiles.write_cache("demo", "k1", {"a": [1, 2]})
    datafiles.write_blob("bin", "k1", b"\x00payload")
    assert datafiles.read_cache("demo", "k1") == {"a": [1, 2]}
    assert datafiles.read_blob("bin", "k1") == b"\x00payload"
    assert datafiles.read_cache("demo", "k2") is None and datafiles.read_blob("bin", "k2") is None
    # a file renamed to another key does not answer for it: the key is inside
    (cache / "bin-k1.bin").rename(cache / "bin-k3.bin")
    (cache / "demo-k1.json").rename(cache / "demo-k3.json")
    assert datafiles.read_blob("bin", "k3") is None and datafiles.read_cache("demo", "k3") is None


def test_corrupt_entries_read_as_missing(cache):
    datafiles.write_cache("demo", "k1", [1])
    (cache / "demo-k1.json").write_text('{"format": 1, "key": "k1", "value": [1', encoding="utf-8")
    assert datafiles.read_cache("demo", "k1") is None
    (cache / "bin-k1.bin").write_bytes(b"garbage")
    os.chmod(cache / "bin-k1.bin", 0o600)
    assert datafiles.read_blob("bin", "k1") is None


def test_entries_others_can_write_are_not_trusted(cache):
    datafiles.write_blob("bin", "k1", b"x")
    os.chmod(cache / "bin-k1.bin", 0o666)
    assert datafiles.read_blob("bin", "k1") is None


def test_a_few_copies_per_name_are_kept_the_oldest_go(cache):
    for i in range(datafiles.KEEP + 2):
        datafiles.write_cache("demo", f"k{i}", i)
        os.utime(cache / f"demo-k{i}.json", (1000 + i, 1000 + i))
    kept = sorted(p.name for p in cache.glob("demo-*.json"))
    assert len(kept) == datafiles.KEEP and "demo-k0.json" not in kept and f"demo-k{datafiles.KEEP + 1}.json" in kept


def test_a_cache_directory_that_cannot_be_created_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(blocker / "cache"))
    datafiles.write_cache("demo", "k1", 1)
    datafiles.write_blob("bin", "k1", b"x")
    assert datafiles.read_cache("demo", "k1") is None and datafiles.read_blob("bin", "k1") is None


# --- hyperscan databases ----------------------------------------------------------------------------------------

def _ids(db, text: bytes) -> set[int]:
    found: set[int] = set()
    db.scan(text, match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
    return found


def test_a_cached_hyperscan_database_is_loaded_not_compiled(cache, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    words = [b"out of memory", b"nccl error", b"traceback"]
    first = keywords.literal_database("hs-test", words, caseless=True)
    assert len(list(cache.glob("hs-test-*.bin"))) == 1

    def refuse(*_a, **_k):
        raise AssertionError("compiled although a cached copy exists")

    monkeypatch.setattr(hyperscan, "Database", refuse)
    second = keywords.literal_database("hs-test", words, caseless=True)
    text = b"x NCCL ERROR y\nCUDA Out Of Memory\n"
    assert _ids(second, text) == _ids(first, text) == {0, 1}


def test_other_words_or_flags_never_get_an_old_database(cache):
    pytest.importorskip("hyperscan")
    keywords.literal_database("hs-test", [b"alpha", b"beta"], caseless=True)
    db = keywords.literal_database("hs-test", [b"gamma", b"delta"], caseless=True)
    assert _ids(db, b"alpha beta") == set() and _ids(db, b"GAMMA") == {0}
    exact = keywords.literal_database("hs-test", [b"gamma", b"delta"])
    assert _ids(exact, b"GAMMA") == set() and _ids(exact, b"gamma") == {0}


def test_a_corrupt_or_foreign_database_file_is_compiled_again(cache):
    hyperscan = pytest.importorskip("hyperscan")
    words = [b"alpha", b"beta"]
    keywords.literal_database("hs-test", words)
    (path,) = cache.glob("hs-test-*.bin")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert _ids(keywords.literal_database("hs-test", words), b"beta alpha") == {0, 1}
    # a valid database of other words stored under this key: the probe scan catches it
    other = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    other.compile(expressions=[b"zzz"], ids=[0], elements=1, flags=[0])
    key = path.name[len("hs-test-"):-len(".bin")]
    datafiles.write_blob("hs-test", key, hyperscan.dumpb(other))
    assert _ids(keywords.literal_database("hs-test", words), b"beta alpha") == {0, 1}


def test_a_block_patterns_database_is_loaded_on_the_next_run_and_compiled_again_when_corrupt(cache, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    pattern = re.compile(rb' HTTP/[12](?:\.[01])?" (5\d\d|429)\b')
    text = b'x "GET / HTTP/1.1" 200 OK\n' * 5000 + b'y "POST /v1 HTTP/1.1" 503 Service Unavailable\n' * 3
    want = [m.span() for m in pattern.finditer(text)]
    assert [m.span() for m in keywords.BlockPattern(pattern, 20).finditer(text)] == want and len(want) == 3
    (path,) = cache.glob("hs-pattern-*.bin")

    def refuse(*_a, **_k):
        raise AssertionError("compiled although a cached copy exists")

    with monkeypatch.context() as m:
        m.setattr(hyperscan, "Database", refuse)
        again = keywords.BlockPattern(pattern, 20)  # a new run's
        assert again.accelerated and [x.span() for x in again.finditer(text)] == want
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert [x.span() for x in keywords.BlockPattern(pattern, 20).finditer(text)] == want


def test_hyperscan_works_with_a_cache_that_cannot_be_written(tmp_path, monkeypatch):
    pytest.importorskip("hyperscan")
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(blocker / "cache"))
    assert _ids(keywords.literal_database("hs-test", [b"alpha"]), b"ALPHA alpha") == {0}


# --- compiled templates ------------------------------------------------------------------------------------------

ADVICE = "Set {{ flag }} to {{ value | tokens }}{% if note %} ({{ note }}){% endif %}."


def test_a_cached_template_renders_what_jinja2_compiles(cache, fresh_templates, monkeypatch):
    env = sandbox.template_env()
    cold = sandbox.render(sandbox.template(env, ADVICE), {"flag": "--max-model-len", "value": 36864, "note": "x"})
    assert cold == "Set --max-model-len to 36,864 (x)."
    _new_run(monkeypatch)
    assert list(cache.glob("templates-*.bin"))
    env = sandbox.template_env()
    monkeypatch.setattr(env, "from_string", lambda *_a, **_k: pytest.fail("compiled although cached"))
    monkeypatch.setattr(env, "compile_expression", lambda *_a, **_k: pytest.fail("compiled although cached"))
    warm = sandbox.render(sandbox.template(env, ADVICE), {"flag": "--max-model-len", "value": 36864, "note": "x"})
    assert warm == cold


def test_a_cached_expression_evaluates_what_jinja2_compiles(cache, fresh_templates, monkeypatch):
    source = "(need_gib / have_gib * 100) | round(1) if have_gib else none"
    assert sandbox.expression(sandbox.template_env(), source)(need_gib=3, have_gib=4) == 75.0
    _new_run(monkeypatch)
    env = sandbox.template_env()
    monkeypatch.setattr(env, "compile_expression", lambda *_a, **_k: pytest.fail("compiled although cached"))
    expr = sandbox.expression(env, source)
    assert expr(need_gib=3, have_gib=4) == 75.0 and expr(need_gib=3, have_gib=0) is None


def test_cached_templates_stay_sandboxed(cache, fresh_templates, monkeypatch):
    env = sandbox.template_env()
    for _ in range(2):  # compiled, then from the cache
        with pytest.raises((SecurityError, UndefinedError)):
            sandbox.render(sandbox.template(env, "{{ items.__class__.__mro__ }}"), {"items": []})
        with pytest.raises(SecurityError):
            sandbox.render(sandbox.template(env, "{{ items.append(1) }}"), {"items": []})
        with pytest.raises(SecurityError):
            sandbox.render(sandbox.template(env, "{{ 'x' * n }}"), {"n": 10**9})
        _new_run(monkeypatch)
        env = sandbox.template_env()


def test_a_change_to_what_shapes_the_code_is_a_miss(cache, fresh_templates, monkeypatch, tmp_path):
    salt = tmp_path / "config.py"
    salt.write_text("A = 1\n", encoding="utf-8")
    calls = []

    def compiled(env):
        original = env.from_string
        monkeypatch.setattr(env, "from_string", lambda s: calls.append(s) or original(s))
        return templatecache.from_string(env, "{{ a }}\n{% if b %}b{% endif %}", (str(salt),))

    def env(**options):
        from jinja2 import Environment
        return Environment(**options)

    compiled(env())
    _new_run(monkeypatch)
    compiled(env())
    assert len(calls) == 1  # the second run read it back
    salt.write_text("A = 2\n", encoding="utf-8")  # the module configuring the environment changed
    _new_run(monkeypatch)
    compiled(env())
    assert len(calls) == 2
    _new_run(monkeypatch)
    tpl = compiled(env(trim_blocks=True))  # another option: other code (the newline after a block goes)
    assert len(calls) == 3 and tpl.render(a=1, b=True) == "1\nb"
    other = env()
    other.filters["shout"] = lambda s: s.upper()
    _new_run(monkeypatch)
    compiled(other)
    assert len(calls) == 4


def test_corrupt_or_tampered_template_entries_fall_back_to_jinja2(cache, fresh_templates, monkeypatch):
    env = sandbox.template_env()
    sandbox.template(env, ADVICE)
    _new_run(monkeypatch)
    (path,) = cache.glob("templates-*.bin")
    key = path.name[len("templates-"):-len(".bin")]
    entries = marshal.loads(datafiles.read_blob("templates", key))
    datafiles.write_blob("templates", key, marshal.dumps({k: b"not marshal data" for k in entries}))
    names = {"flag": "--x", "value": 5, "note": None}
    assert sandbox.render(sandbox.template(sandbox.template_env(), ADVICE), names) == "Set --x to 5."
    _new_run(monkeypatch)
    datafiles.write_blob("templates", key, marshal.dumps({k: marshal.dumps(("not", "code")) for k in entries}))
    names = {"flag": "--x", "value": 5, "note": None}
    assert sandbox.render(sandbox.template(sandbox.template_env(), ADVICE), names) == "Set --x to 5."
    _new_run(monkeypatch)
    for p in cache.glob("templates-*.bin"):
        p.write_bytes(p.read_bytes()[:40] + b"\xff\x00 truncated")
    assert sandbox.render(sandbox.template(sandbox.template_env(), ADVICE), names) == "Set --x to 5."


def test_templates_render_with_a_cache_that_cannot_be_written(tmp_path, fresh_templates, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CACHE_DIR", str(blocker / "cache"))
    env = sandbox.template_env()
    assert sandbox.render(sandbox.template(env, ADVICE), {"flag": "--x", "value": 5, "note": None}) == "Set --x to 5."
    _new_run(monkeypatch)


def test_every_landmark_pattern_compiles():
    marks, _ = load_landmarks()
    patterns = [m for m in marks if m.pattern]
    assert patterns and all(m.regex.pattern == m.pattern for m in patterns)


# --- end to end -------------------------------------------------------------------------------------------------

def _doctor(env_cache: str | None, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_DOCTOR_CACHE_DIR", "VLLM_DOCTOR_NO_CACHE")}
    if env_cache is None:
        env["VLLM_DOCTOR_NO_CACHE"] = "1"
    else:
        env["VLLM_DOCTOR_CACHE_DIR"] = env_cache
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


@pytest.mark.parametrize("args", [(str(FIXTURE), "--format", "json"),
                                  ("plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384")])
def test_cold_warm_and_uncached_runs_say_the_same(tmp_path, args):
    folder = str(tmp_path / "cache")
    cold, warm, uncached = _doctor(folder, *args), _doctor(folder, *args), _doctor(None, *args)
    assert list((tmp_path / "cache").glob("templates-*.bin"))
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    unwritable = _doctor(str(blocker / "cache"), *args)
    assert cold.stdout and cold.returncode in (0, 1)
    for other in (warm, uncached, unwritable):
        assert (other.returncode, other.stdout, other.stderr) == (cold.returncode, cold.stdout, cold.stderr)


# --- lazily compiled regexes -----------------------------------------------------------------------------------

def test_a_lazy_regex_compiles_on_first_use_and_behaves_as_the_compiled_one():
    import copy
    import pickle
    import re

    from diagnoser import redact
    from diagnoser.lazyregex import lazy

    pat = lazy(r"(?P<n>\d+) reqs", re.IGNORECASE)
    assert pat._compiled is None  # nothing compiled at import or construction
    copied = copy.deepcopy(pat)
    assert pat._compiled is None and isinstance(copied, type(pat)) and copied == pat
    text = "Running: 12 REQS, Waiting: 3 reqs"
    plain = re.compile(r"(?P<n>\d+) reqs", re.IGNORECASE)
    assert [m.group("n") for m in pat.finditer(text)] == [m.group("n") for m in plain.finditer(text)] == ["12", "3"]
    assert pat._compiled is not None and pat.sub("x", text) == plain.sub("x", text)
    assert pat.pattern == plain.pattern and pat.groupindex == plain.groupindex
    again = pickle.loads(pickle.dumps(pat))
    assert again == pat and again.search(text).group("n") == "12"
    # a module's lazy pattern still redacts what it did
    assert "hunter2secret" not in redact.Redactor()("curl -H 'Authorization: Bearer hunter2secret9' x")


# --- dataclass methods (fastdataclass) ---------------------------------------------------------------------------

def _build_classes():
    """The same classes built by the standard decorator and by fastdataclass: every kind of generated method."""
    import dataclasses

    from diagnoser.fastdataclass import dataclass as cached

    built = []
    for deco in (dataclasses.dataclass, cached):
        @deco(frozen=True, order=True)
        class Version:
            major: int
            minor: int = 0

        @deco(slots=True)
        class Line:
            number: int
            text: str
            tags: list[str] = dataclasses.field(default_factory=list)

        @deco
        class Plain:
            name: str
            version: Version | None = None
        built.append((Version, Line, Plain))
    return built


def _behaviour(classes):
    Version, Line, Plain = classes
    v = Version(1, 2)
    line = Line(3, "x")
    line.tags.append("t")
    out = [repr(v), v == Version(1, 2), v < Version(2), hash(v) == hash(Version(1, 2)), repr(line),
           line == Line(3, "x", ["t"]), Line(1, "a").tags is not Line(1, "a").tags, repr(Plain("p", v)),
           [f.name for f in __import__("dataclasses").fields(Plain)], hasattr(line, "__dict__")]
    try:
        v.major = 5
    except Exception as exc:  # noqa: BLE001 - which exception a frozen class raises is part of its behaviour
        out.append(type(exc).__name__)
    try:
        Line(1)
    except TypeError as exc:
        out.append(str(exc))
    return out


def test_cached_dataclasses_behave_as_the_standard_ones_cold_and_warm(cache, fresh_templates, monkeypatch):
    import dataclasses

    from diagnoser import fastdataclass

    standard, cold = _build_classes()
    assert _behaviour(cold) == _behaviour(standard)
    assert not hasattr(dataclasses, "exec")  # dataclasses is left as it was found
    _new_run(monkeypatch)
    assert list(cache.glob("dataclasses-*.bin"))
    monkeypatch.setattr(fastdataclass, "compile", lambda *_a, **_k: pytest.fail("compiled although cached"),
                        raising=False)
    _, warm = _build_classes()
    assert _behaviour(warm) == _behaviour(standard)
    assert warm[0].__init__.__annotations__ == standard[0].__init__.__annotations__  # not stringified


def test_a_bad_dataclass_fails_as_the_standard_one_and_leaves_dataclasses_alone(cache, fresh_templates):
    import dataclasses

    from diagnoser.fastdataclass import dataclass as cached

    messages = []
    for deco in (dataclasses.dataclass, cached):
        with pytest.raises(TypeError) as info:
            @deco
            class Bad:
                a: int = 0
                b: str
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "non-default argument 'b' follows default argument" in messages[0]
    assert not hasattr(dataclasses, "exec")


def test_corrupt_dataclass_entries_are_compiled_again(cache, fresh_templates, monkeypatch):
    standard, _ = _build_classes()
    _new_run(monkeypatch)
    (path,) = cache.glob("dataclasses-*.bin")
    key = path.name[len("dataclasses-"):-len(".bin")]
    entries = marshal.loads(datafiles.read_blob("dataclasses", key))
    datafiles.write_blob("dataclasses", key, marshal.dumps({k: marshal.dumps(("not", "code")) for k in entries}))
    _, again = _build_classes()
    assert _behaviour(again) == _behaviour(standard)
    _new_run(monkeypatch)
    path.write_bytes(b"not a blob at all")
    monkeypatch.setenv("VLLM_DOCTOR_NO_CACHE", "1")
    _, uncached = _build_classes()
    assert _behaviour(uncached) == _behaviour(standard)


# --- the shipped rules, validated once -------------------------------------------------------------------------

def _shipped_rules():
    from diagnoser import rules

    rules.builtin_rules.cache_clear()
    try:
        return rules.builtin_rules()
    finally:
        rules.builtin_rules.cache_clear()


def test_cached_rules_are_the_validated_ones_and_a_tampered_copy_runs_nothing(cache, monkeypatch, tmp_path):
    import pickle

    from diagnoser import rules

    validations = []
    add = rules._add_rules
    monkeypatch.setattr(rules, "_add_rules", lambda *a, **k: validations.append(1) or add(*a, **k))
    validated = _shipped_rules()
    (path,) = cache.glob("rules-*.bin")
    warm = _shipped_rules()
    assert len(validations) == 1  # the second load validated nothing
    assert warm == validated and [r.path for r in warm] == [r.path for r in validated]
    assert {type(p.regex).__name__ for r in warm for p in r.patterns if p.regex is not None} == {"LazyRegex"}

    class Exploit:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    header = path.read_bytes().split(b"\n", 1)[0] + b"\n"
    for payload in (pickle.dumps(Exploit()), pickle.dumps(("not", "rules")), b"\x80\x05garbage"):
        path.write_bytes(header + payload)
        assert _shipped_rules() == validated
        assert not (tmp_path / "pwned").exists()
    assert len(validations) == 4  # each bad copy was a miss: validated again
