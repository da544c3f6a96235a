"""Where a failure happened, from its traceback: the component and the stage its frames name.

A message's words say what went wrong; the traceback's frames say where, and that is what decides the fix
when the same words come from several places ("CUDA out of memory" while loading the weights, capturing CUDA
graphs, sampling a batch). A frame names its file and function, and Python prints the source line under it:
`vllm/compilation/cuda_graph.py` with `with torch.cuda.graph(...)` is CUDA-graph capture, `vllm/v1/sample/`
is the sampler (its warm-up or serving: frames further out decide), `vllm/distributed/kv_transfer/` is the KV
connector. The tables are data (data/places.yaml); this module only reads them.

Pure: frames in, a Place out (no I/O beyond the bundled table, read once).

>>> place = locate([Frame('/x/site-packages/vllm/v1/worker/gpu_model_runner.py', 'capture_model', 3440),
...                 Frame('/x/site-packages/vllm/compilation/cuda_graph.py', '__call__', 162,
...                       'with torch.cuda.graph(cudagraph, pool=self.graph_pool):')])
>>> place.component, place.stage
('compile', 'cuda_graph_capture')
>>> locate([Frame('/usr/lib/python3/dist-packages/vllm/v1/sample/sampler.py', 'forward', 64)]).stages
('sampler_warmup', 'serving')
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from diagnoser import datafiles
from diagnoser.lazyre import lazy

#: `  File "/path/to/file.py", line 12, in func` (the indentation and the process prefix already stripped or not)
FRAME_LINE = lazy(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.\-]+)')
#: stages that only a running server is in: a start-up frame further out wins over them (V0's profile_run
#: calls execute_model; a LoRA load inside execute_model is still serving, the tracker keeps that)
SERVING = frozenset({"serving", "request_handling"})


@dataclass(frozen=True)
class Frame:
    """One traceback frame: the file, the function, the line number, and the source line printed under it."""

    path: str
    func: str
    line: int = 0
    code: str = ""

    @property
    def norm(self) -> str:
        """The path lower-cased with '/' separators (a Windows paste uses '\\')."""
        return self.path.replace("\\", "/").lower()

    @property
    def short(self) -> str:
        """The path from the package on (`vllm/v1/sample/sampler.py`), for a report."""
        norm = self.path.replace("\\", "/")
        for marker in ("site-packages/", "dist-packages/"):
            if marker in norm:
                return norm.rsplit(marker, 1)[1]
        m = re.search(r"(?:^|/)((?:vllm|vllm_\w+|torch|torch_\w+|transformers|triton|ray|xgrammar)/.*)$", norm)
        return m.group(1) if m else norm


@dataclass(frozen=True)
class Place:
    """Where a traceback says its exception was raised."""

    component: str | None = None      #: places.yaml component name (kv_transfer, compile, ...), None: none named
    title: str | None = None          #: the component in words
    platform: str | None = None       #: a platform plugin/runtime frame seen anywhere (vllm_ascend, torch_xla, ...)
    stages: tuple[str, ...] = ()      #: the fine stages it can be; one: known; several: unknown among them
    frame: Frame | None = None        #: the frame that named the component
    vllm_frame: Frame | None = None   #: the innermost frame in vLLM itself
    library_frame: Frame | None = None  #: the innermost frame outside vLLM (torch, transformers, a plugin)
    exception: str | None = None      #: the exception's class as printed (`torch.OutOfMemoryError`)

    @property
    def stage(self) -> str | None:
        """The fine stage when the frames decide it, else None ("stage unknown")."""
        return self.stages[0] if len(self.stages) == 1 else None


@dataclass(frozen=True)
class _Component:
    name: str
    title: str
    paths: tuple[str, ...]
    platform: bool
    funcs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _StageMark:
    paths: tuple[str, ...]
    funcs: frozenset[str]
    code: tuple[str, ...]
    stage: str | None
    maybe: tuple[str, ...]

    def names(self, frame: Frame, norm: str) -> bool:
        return (frame.func.rsplit(".", 1)[-1] in self.funcs or any(p in norm for p in self.paths)
                or any(c in frame.code for c in self.code))


@dataclass(frozen=True)
class _Table:
    transparent: tuple[str, ...]
    components: tuple[_Component, ...]
    stages: tuple[_StageMark, ...]


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v).lower() for v in (value or ()))


@lru_cache(maxsize=1)
def table() -> _Table:
    """The bundled places table (data/places.yaml), read once."""
    data = datafiles.load("places.yaml")
    components = tuple(
        _Component(name=c["name"], title=c.get("title") or c["name"], paths=_strings(c.get("paths")),
                   platform=bool(c.get("platform")), funcs=frozenset(str(f) for f in c.get("funcs") or ()))
        for c in data["components"])
    stages = tuple(
        _StageMark(paths=_strings(s.get("paths")), funcs=frozenset(str(f) for f in s.get("funcs") or ()),
                   code=tuple(str(c) for c in s.get("code") or ()), stage=s.get("stage"),
                   maybe=tuple(s.get("maybe") or ()))
        for s in data["stages"])
    return _Table(transparent=_strings(data.get("transparent")), components=components, stages=stages)


@lru_cache(maxsize=1)
def code_marks() -> tuple[str, ...]:
    """The source-line markers of the table: a tracker re-reads a place only when a source line holds one."""
    return tuple(c for mark in table().stages for c in mark.code)


def parse_frame(text: str) -> Frame | None:
    """A `File "...", line N, in func` line -> Frame (without its source line); None for any other line.

    >>> parse_frame('  File "/usr/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in run_engine_core')
    Frame(path='/usr/lib/python3.12/dist-packages/vllm/v1/engine/core.py', func='run_engine_core', line=699, code='')
    """
    m = FRAME_LINE.match(text)
    if m is None:
        return None
    return Frame(path=m.group("path"), func=m.group("func"), line=int(m.group("line")))


def frames_of(lines: Iterable[str]) -> list[Frame]:
    """The frames of a traceback's lines, each with the source line printed under it (carets skipped)."""
    out: list[Frame] = []
    expect_code = False
    for text in lines:
        frame = parse_frame(text)
        if frame is not None:
            out.append(frame)
            expect_code = True
            continue
        stripped = text.strip()
        if expect_code and stripped and not set(stripped) <= set("^~ "):
            last = out[-1]
            out[-1] = Frame(last.path, last.func, last.line, stripped)
        expect_code = False
    return out


def component_of_source(source: str) -> str | None:
    """The component a logger's `[file:line]` names (`nixl_connector.py:651` -> kv_transfer), None if none.

    >>> component_of_source('nixl_connector.py:651'), component_of_source('core.py:700')
    ('kv_transfer', None)
    """
    name = "/" + source.rsplit(":", 1)[0].replace("\\", "/").lower().lstrip("./")
    if _is_transparent(name):
        return None
    comp = component_of_path(name)
    return comp.name if comp is not None else None


def _is_transparent(norm: str) -> bool:
    return any(t in norm for t in table().transparent)


def component_of_path(norm: str) -> _Component | None:
    """The component a (normalised) path belongs to; None when the table names none."""
    for comp in table().components:
        if any(p in norm for p in comp.paths):
            return comp
    return None


def _component_of_func(func: str) -> _Component | None:
    name = func.rsplit(".", 1)[-1]
    for comp in table().components:
        if name in comp.funcs:
            return comp
    return None


def component_of_exception(name: str | None) -> str | None:
    """The component an exception's module names (`nixl._bindings.nixlBackendError` -> kv_transfer,
    `torch._inductor.exc.InductorError` -> compile); None for a builtin or an unqualified name.

    >>> component_of_exception('zmq.error.ZMQError'), component_of_exception('ValueError')
    ('ipc', None)
    """
    if not name or "." not in name:
        return None
    module = "/" + name.rsplit(".", 1)[0].replace(".", "/").lower() + "/"
    comp = component_of_path(module)
    return comp.name if comp is not None else None


@dataclass(frozen=True)
class _FrameFacts:
    """What the tables say of one frame (worked out once per frame: a traceback is re-placed at each frame)."""

    is_vllm: bool
    transparent: bool
    component: _Component | None
    platform: str | None
    marks: tuple[_StageMark, ...]  #: the stage marks that name it, in the table's order


@lru_cache(maxsize=4096)
def _facts(frame: Frame) -> _FrameFacts:
    norm = frame.norm
    comp = component_of_path(norm) or _component_of_func(frame.func)
    return _FrameFacts(
        is_vllm=frame.short.lower().startswith("vllm/") and "torch_compile_cache" not in norm,
        transparent=_is_transparent(norm), component=comp,
        platform=_platform_name(norm) if comp is not None and comp.platform else None,
        marks=tuple(mark for mark in table().stages if mark.names(frame, norm)))


def _stages(frames: Sequence[Frame]) -> tuple[str, ...]:
    """The fine stages the frames allow, innermost frame first (see module doc and places.yaml)."""
    maybe: tuple[str, ...] = ()
    serving: str | None = None
    for frame in reversed(frames):
        for mark in _facts(frame).marks:
            if mark.stage is None:
                maybe = maybe or mark.maybe
            elif mark.stage in SERVING:
                serving = serving or mark.stage
            else:
                return (mark.stage,)
    if serving is not None:
        return (serving,)
    return maybe


def locate(frames: Sequence[Frame], exception: str | None = None) -> Place:
    """The Place of a traceback: frames outermost first (as Python prints them), and its exception's class."""
    component: _Component | None = None
    named_by: Frame | None = None
    platform: str | None = None
    vllm_frame = library_frame = None
    for frame in reversed(frames):
        facts = _facts(frame)
        if vllm_frame is None and facts.is_vllm:
            vllm_frame = frame
        if library_frame is None and not facts.is_vllm and not facts.transparent:
            library_frame = frame
        if platform is None and facts.platform is not None:
            platform = facts.platform
        if component is None and facts.component is not None and not facts.transparent:
            component, named_by = facts.component, frame
    name = component.name if component is not None else component_of_exception(exception)
    title = component.title if component is not None else _title(name)
    return Place(component=name, title=title, platform=platform, stages=_stages(frames), frame=named_by,
                 vllm_frame=vllm_frame, library_frame=library_frame, exception=exception)


def component_names() -> tuple[str, ...]:
    """Every component the table names (what a rule's `components:` may list)."""
    return tuple(c.name for c in table().components)


def _title(name: str | None) -> str | None:
    for comp in table().components:
        if comp.name == name:
            return comp.title
    return None


_PLATFORMS = (("vllm_ascend", "ascend"), ("torch_npu", "ascend"), ("torch_xla", "tpu"), ("tpu_inference", "tpu"),
              ("tpu_commons", "tpu"), ("/jax", "tpu"), ("intel_extension_for_pytorch", "xpu"), ("torch/xpu", "xpu"),
              ("vllm_gaudi", "hpu"), ("habana_frameworks", "hpu"), ("neuron", "neuron"), ("/aiter/", "rocm"))


def _platform_name(norm: str) -> str | None:
    """The accelerator a platform frame belongs to (None: vllm/platforms/, which serves all)."""
    for marker, name in _PLATFORMS:
        if marker in norm:
            return name
    return None


def describe(place: Place) -> str:
    """One line for a report: 'in the sampler (vllm/v1/sample/sampler.py, forward)'.

    >>> describe(locate([Frame('/a/vllm/v1/sample/sampler.py', 'forward', 64)]))
    'in the sampler (vllm/v1/sample/sampler.py, forward)'
    """
    if place.component is None:
        return ""
    where = place.frame or place.library_frame or place.vllm_frame
    return f"in {place.title}" + (f" ({where.short}, {where.func})" if where is not None else "")
