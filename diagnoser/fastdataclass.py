"""`dataclass` without compiling its methods on every start: the code it generates is kept across runs.

dataclasses writes each class's `__init__`, `__repr__`, `__eq__` (and more for frozen or ordered classes) as
Python source and exec()s it: about 90 functions on a diagnosis's imports, each parsed and compiled on every
start, a tenth of a short run's instructions. The code compiled is a function of that source text alone
(and of the Python version), so this `dataclass` is the standard decorator with its exec() answered from
templatecache's store of marshalled code objects: compiled the first time, loaded on every run after. The
class it returns is exactly what dataclasses builds (same methods, fields, `__dataclass_fields__`); the
functions are created, with their globals and closures, by running that code as dataclasses would.

The store holds code, so it is trusted as templatecache's is (datafiles' ownership checks, as Python trusts its
own `__pycache__`); without a cache (VLLM_DOCTOR_NO_CACHE=1, or one that cannot be read) every source is
compiled, as before.
"""

from __future__ import annotations

import builtins
import dataclasses
import sys
import threading
from typing import TYPE_CHECKING, Any

from . import datafiles, templatecache

_lock = threading.RLock()

if TYPE_CHECKING:  # type checkers see the standard decorator (the classes are exactly what it builds)
    from dataclasses import dataclass as dataclass
else:
    def dataclass(cls=None, /, **options):
        """`dataclasses.dataclass(cls, **options)`, its generated methods' code from the cache."""

        def wrap(klass):
            with _lock:  # dataclasses looks `exec` up in its module's globals first: ours while it builds
                dataclasses.exec = _exec
                try:
                    return dataclasses.dataclass(klass, **options)
                finally:
                    del dataclasses.exec

        return wrap if cls is None else wrap(cls)


def _exec(source: Any, globals_: dict[str, Any] | None = None, locals_: dict[str, Any] | None = None) -> None:
    """exec() of generated source, compiled once per source text (dataclasses' code has no future flags)."""
    if globals_ is None:  # the globals exec() would have used: those of its caller, dataclasses
        globals_ = vars(dataclasses)
    if not isinstance(source, str):
        builtins.exec(source, globals_, locals_)
        return
    store = templatecache.code_store(_key(), "dataclasses")
    code = store.get("d", source)
    if code is None:
        code = compile(source, "<string>", "exec", dont_inherit=True)
        store.put("d", source, [code])
    builtins.exec(code, globals_, locals_)


_KEY: list[str] = []


def _key() -> str:
    """The store's key: compiled code is only valid for this Python (bytecode and marshal format)."""
    if not _KEY:
        _KEY.append(datafiles.content_key([b"dataclass methods", sys.version.encode()]))
    return _KEY[0]
