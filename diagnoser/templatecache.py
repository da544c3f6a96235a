"""Compiled jinja2 templates across runs: the Python source jinja2 generates, kept in the user's cache.

(Its CodeStore also keeps the methods @dataclass generates: fastdataclass.py.)

Generating it (parse, then code generation) is most of what rendering costs a short run: ~3 ms for a rule's
template or expression, ~100 ms for `plan`'s report. The generated source is a function of the template's
text, the environment (its class, syntax options, filters and tests, intercepted operators), the module
that configures it (`salt`: constant folding may call its filters at compile time) and the jinja2 and
Python versions, so its compiled form (a code object, marshalled) is stored in datafiles' cache under a
key made of all but the text, by text, and loaded on later runs. For the rule sandbox nothing changes at run time: the
generated code calls the same sandboxed environment for every attribute, call and operator; the load-time
checks (sandbox.check_template) ran when the rule was validated.

The cache holds code, so it is read only under datafiles' trust checks (owned by the user, writable by
nobody else), as Python trusts its own __pycache__. What a run compiled is written once, at exit, merged
with what another run stored meanwhile; any problem (unreadable, corrupt, an entry that does not compile)
falls back to jinja2's compiler (marshal data is checked to be a code object).
"""

from __future__ import annotations

import contextlib
import marshal
import sys
import threading
import types
from pathlib import Path
from typing import Any

NAME = "templates"


def from_string(env: Any, source: str, salt: tuple[str, ...] = ()) -> Any:
    """`env.from_string(source)`, from the cache when this environment compiled this text before."""
    store = _store(env, salt)
    code = store.get("t", source)
    if code is None:
        with _Capture(env) as generated:
            compiled = env.from_string(source)
        store.put("t", source, generated)
        return compiled
    return env.template_class.from_code(env, code, env.make_globals(None), None)


def compile_expression(env: Any, source: str, salt: tuple[str, ...] = ()) -> Any:
    """`env.compile_expression(source, undefined_to_none=False)`, from the cache likewise."""
    from jinja2.environment import TemplateExpression

    store = _store(env, salt)
    code = store.get("e", source)
    if code is None:
        with _Capture(env) as generated:
            compiled = env.compile_expression(source, undefined_to_none=False)
        store.put("e", source, generated)
        return compiled
    return TemplateExpression(env.template_class.from_code(env, code, env.make_globals(None), None), False)


class _Capture:
    """Records the code objects jinja2 compiles inside the block (its Environment._compile).

    One capture at a time (a lock): the hook sits on the environment object while its block runs."""

    _lock = threading.Lock()

    def __init__(self, env: Any) -> None:
        self.env = env
        self.code: list[Any] = []

    def __enter__(self) -> list[Any]:
        self._lock.acquire()
        original = self.env._compile

        def compile_(*args: Any, **kwargs: Any) -> Any:
            code = original(*args, **kwargs)
            self.code.append(code)
            return code

        self.env._compile = compile_
        return self.code

    def __exit__(self, *exc: object) -> None:
        try:
            del self.env._compile  # the class's method again
        finally:
            self._lock.release()


class CodeStore:
    """Cached code objects under one key (an environment configuration, a Python version), by (kind, source).

    Kept as one marshalled dict of marshalled code objects (a blob): loading it costs well under a millisecond,
    where the JSON of base64 texts it replaces cost ~8 ms a run (1.6 MB parsed for the few entries a run uses)."""

    def __init__(self, key: str, name: str = NAME) -> None:
        self.key, self.name = key, name
        self.stored: dict[str, bytes] = _read_store(name, key)
        self.new: dict[str, bytes] = {}

    def get(self, kind: str, source: str) -> Any:
        """The code object for (kind, source), or None (not stored, or what is stored is not one)."""
        data = self.stored.get(f"{kind}:{source}")
        if not isinstance(data, bytes):
            return None
        try:
            code = marshal.loads(data)
        except (ValueError, EOFError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def put(self, kind: str, source: str, compiled: list[Any]) -> None:
        if len(compiled) == 1 and isinstance(compiled[0], types.CodeType):  # the template's own code, only
            self.new[f"{kind}:{source}"] = marshal.dumps(compiled[0])

    def flush(self) -> None:
        if not self.new:
            return
        from . import datafiles

        merged = {**_read_store(self.name, self.key), **self.new}  # with what another run stored meanwhile
        with contextlib.suppress(ValueError):  # (marshal refuses nothing of str and bytes: a guard all the same)
            datafiles.write_blob(self.name, self.key, marshal.dumps(merged))
        self.stored, self.new = merged, {}


def _read_store(name: str, key: str) -> dict[str, bytes]:
    """The stored {entry: marshalled code}, or {} (none, unreadable, corrupt, or not of that form)."""
    from . import datafiles

    raw = datafiles.read_blob(name, key)
    if raw is None:
        return {}
    try:
        stored = marshal.loads(raw)
    except Exception:  # noqa: BLE001 - corrupt or truncated (marshal raises several kinds): compiled afresh
        return {}
    if not isinstance(stored, dict):
        return {}
    return {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, bytes)}


_STORES: dict[str, CodeStore] = {}


_KEYS: dict[tuple[int, tuple[str, ...]], tuple[Any, str]] = {}


def _store(env: Any, salt: tuple[str, ...]) -> CodeStore:
    known = _KEYS.get((id(env), salt))
    if known is None or known[0] is not env:
        known = _KEYS[(id(env), salt)] = (env, _key(env, salt))  # the reference keeps the id from being reused
    return code_store(known[1])


def code_store(key: str, name: str = NAME) -> CodeStore:
    """The one store of (`name`, `key`) in this process, read on first use; what it gains is written at exit."""
    store = _STORES.get(f"{name}-{key}")
    if store is None:
        if not _STORES:
            import atexit

            atexit.register(flush)
        store = _STORES[f"{name}-{key}"] = CodeStore(key, name)
    return store


def flush() -> None:
    """Write what this process compiled (also run at exit)."""
    for store in _STORES.values():
        store.flush()


def _key(env: Any, salt: tuple[str, ...]) -> str:
    import jinja2

    from . import datafiles

    cls = type(env)
    options = [getattr(env, name, None) for name in (
        "block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
        "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
        "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized", "is_async",
        "sandboxed")]
    ops = [sorted(getattr(env, "intercepted_binops", ())), sorted(getattr(env, "intercepted_unops", ()))]
    described = repr([f"{cls.__module__}.{cls.__qualname__}", options, ops, bool(env.finalize),
                      bool(env.autoescape), sorted(env.extensions), _functions(env.filters), _functions(env.tests)])
    parts = [jinja2.__version__.encode(), sys.version.encode(), described.encode()]
    parts.extend(Path(p).read_bytes() for p in salt)
    return datafiles.content_key(parts)


def _functions(table: dict[str, Any]) -> list[Any]:
    """Each filter or test by name, with what the compiler reads from it (pass_arg) and its code (jinja2's own
    are named by the version)."""
    out = []
    for name in sorted(table):
        fn = table[name]
        if (getattr(fn, "__module__", None) or "").startswith("jinja2."):
            out.append((name, fn.__module__, getattr(fn, "__qualname__", "")))
            continue
        code = getattr(fn, "__code__", None)
        out.append((name, str(getattr(fn, "jinja_pass_arg", None)),
                    _code(code) if code is not None else getattr(fn, "__qualname__", type(fn).__name__)))
    return out


def _code(code: Any) -> Any:
    """A code object's bytecode, constants and names, nested code included (no addresses: stable across runs)."""
    consts = [_code(c) if hasattr(c, "co_code") else sorted(map(repr, c)) if isinstance(c, frozenset) else repr(c)
              for c in code.co_consts]
    return [code.co_code.hex(), consts, list(code.co_names)]
