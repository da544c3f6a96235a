"""Track: where the start-up is (stage) and what the log has said about itself (context).

The stage comes from landmark lines (catalog section B) and, for the exception that ends a traceback, from
the innermost frame whose function names a stage: a bare "CUDA out of memory" raised under load_weights is
a loading failure, the same words under capture_model a warmup failure. Tracebacks are followed per
process, because V1 workers and the EngineCore interleave their output.

The context is one object filled from the `non-default args` dict, the older `Namespace(...)` dump, the
engine `with config:` line and the memory lines; rules read it for advice and the report prints it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property, lru_cache
from typing import Any

from diagnoser import datafiles
from diagnoser.analysis import frames as places
from diagnoser.ingest.dense import ShapeCache, ShapePlans
from diagnoser.ingest.keywords import KeywordIndex
from diagnoser.ingest.line import Line
from diagnoser.lazyre import lazy
from diagnoser.vllm import serve_args
from diagnoser.vllm.releases import default, engine_choice, parse_version
from diagnoser.vllm.stages import coarse, order


def _compute_capability(gpu_name: str | None) -> float | None:
    """The logged GPU's compute capability (what decides V1's fallback to V0 in 0.8-0.10.1); the presets are read
    only when a log names a GPU."""
    if not gpu_name:
        return None
    from diagnoser.vllm.modelspec import compute_capability_of

    return compute_capability_of(gpu_name)

#: Frames that only say "inside the engine's start-up" (data/landmarks.yaml frames.engine_init)
WEAK_FRAME_STAGE = "engine_init"


@dataclass
class Context:
    """Everything the log says about the deployment. None means the log did not say."""

    version: str | None = None
    engine: str | None = None
    platform: str | None = None
    model: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    gpu_name: str | None = None
    gpu_total_gib: float | None = None
    gpu_free_gib: float | None = None
    requested_gib: float | None = None
    weights_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None
    #: 0.18.0+: the utilization the budget equals once the CUDA-graph estimate is subtracted (graphs in budget)
    utilization_without_graphs: float | None = None
    available_kv_cache_gib: float | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    engine_ready: bool = False
    server_started: bool = False
    stats_lines: int = 0
    last_stats_line: int | None = None  #: a stats line after an error means the server kept serving
    progress_line: int | None = None  #: the latest stats line of an engine moving (a hang's stats show none)
    peak_kv_usage_pct: float | None = None
    max_running_reqs: int | None = None
    max_waiting_reqs: int | None = None
    #: where the last start-up became ready (the API server started, or the engine finished its init)
    ready_line: int | None = None
    ready_time: str | None = None
    last_stats_text: str | None = None  #: the latest stats line (what the server was doing before a crash)
    #: the operator stopped the process (Ctrl-C, SIGTERM) here: exceptions after it are the stop's echo
    interrupted_line: int | None = None
    interrupted_stage: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    #: where `args` came from: "non-default" (V1 'non-default args') or "namespace" (a full argparse dump)
    args_source: str | None = None
    #: settings the log did not print but that are known from the release's defaults
    defaults: list[str] = field(default_factory=list)

    def as_dict(self, internal: bool = False) -> dict[str, Any]:
        """The fields that the log set (for JSON; `internal`: also the bookkeeping templates read)."""
        out: dict[str, Any] = {}
        names = _context_fields()
        for name, value in self.__dict__.items():  # field order (set so by __init__); fields() is slow per line
            if name not in names or (name in INTERNAL and not internal) or value is None or value == {}:
                continue
            if not value and name in ("engine_ready", "server_started", "stats_lines", "defaults"):
                continue
            out[name] = value
        return out


@lru_cache(maxsize=1)
def _context_fields() -> frozenset[str]:
    return frozenset(f.name for f in fields(Context))

#: Context fields for the rules' own reasoning (recovered errors, time since ready), not for the report.
INTERNAL = {"ready_line", "ready_time", "last_stats_text", "interrupted_line", "interrupted_stage", "progress_line"}

#: Settings keys (non-default args, Namespace, engine config) -> Context fields.
SETTING_ALIASES = {
    "model": "model",
    "model_tag": "model",
    "max_model_len": "max_model_len",
    "max_seq_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "block_size": "block_size",
}
#: Keys from the engine config line: its values are resolved defaults, not the user's choice.
ENGINE_ONLY = {"max_seq_len"}

EXCEPTION = lazy(
    r"^(?:[\w.]+\.)?(?P<exc>[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?:: (?P<msg>.*))?$"
    r"|^\s*Value error, (?P<pyd>.*)$"
)
FRAME = lazy(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<func>[\w<>.]+)')
TRACEBACK_START = "Traceback (most recent call last)"
STATS = {
    "running": lazy(r"Running: (\d+) reqs"),
    "waiting": lazy(r"(?:Waiting|Pending): (\d+) reqs"),
    "kv_pct": lazy(r"KV cache usage: ([\d.]+)%"),
    "gen": lazy(r"generation throughput: ([\d.]+) tokens/s"),
}


def to_number(text: str) -> int | float | None:
    """'1,587,648' -> 1587648; '0.92' -> 0.92; anything else -> None."""
    text = text.strip().replace(",", "").replace(" ", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _coerce(value: Any) -> Any:
    if isinstance(value, str):
        v = value.strip().strip("'\"")
        if v in ("True", "true"):
            return True
        if v in ("False", "false"):
            return False
        if v in ("None", "none", ""):
            return None
        if v.startswith("torch."):
            v = v[len("torch."):]
        n = to_number(v) if re.fullmatch(r"-?[\d,.]+", v) else None
        return n if n is not None else v
    return value


SETTING_PAIR = lazy(r"(?:^|[\s,{(])'?(?P<key>[a-z_][\w]*)'?\s*[=:]\s*(?P<value>'[^']*'|\"[^\"]*\"|[^,(){}\[\]]+)")


def _dict_with_objects(text: str) -> dict[str, Any] | None:
    """A dict repr whose values include objects (`[LoRAModulePath(name='sql', path='/p')]`): literals stay
    values, each object stays its repr text (serve_args reads the fields it needs). None if not a dict."""
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Dict):
        return None

    def value(v: ast.expr) -> Any:
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if isinstance(v, (ast.List, ast.Tuple)):
                return [value(e) for e in v.elts]
            return ast.get_source_segment(text, v)

    out: dict[str, Any] = {}
    for k, v in zip(node.keys, node.values, strict=False):
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            out[k.value] = value(v)
    return out


def parse_settings(text: str) -> dict[str, Any]:
    """A dict repr, a Namespace(...) body or a `k=v, k=v` config string -> dict (best effort, never raises)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            value = ast.literal_eval(text)
            if isinstance(value, dict):
                return {str(k): v for k, v in value.items()}
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
        with_objects = _dict_with_objects(text)
        if with_objects is not None:
            return with_objects
    out: dict[str, Any] = {}
    for m in SETTING_PAIR.finditer(text):
        key = m.group("key")
        if key not in out:
            out[key] = _coerce(m.group("value"))
    return out


def parse_command(text: str) -> dict[str, Any]:
    """`vllm serve MODEL --max-model-len 2048 --enforce-eager -tp 2` -> {'model': ..., 'max_model_len': 2048,
    'enforce_eager': True, 'tensor_parallel_size': 2} (arity and short forms from the flag list)."""
    parsed = serve_args.parse_text(text)
    out: dict[str, Any] = {"model": parsed.model} if parsed.model else {}
    for key, value in parsed.settings().items():
        out[key] = [_coerce(v) for v in value] if isinstance(value, list) else _coerce(value)
    return out


@dataclass
class Landmark:
    """One landmark line kind, from data/landmarks.yaml."""

    keywords: list[str]
    pattern: str | None
    stage: str | None
    engine: str | None
    sets: dict[str, Any]
    stats: bool
    interrupt: bool = False  #: the operator stopped the process (a signal, Ctrl-C)

    @cached_property
    def regex(self) -> re.Pattern[str] | None:
        """Compiled on first use: most landmarks never see their keyword in a short log."""
        return re.compile(self.pattern) if self.pattern else None


@lru_cache(maxsize=1)
def load_landmarks() -> tuple[list[Landmark], dict[str, str]]:
    """Landmarks and the frame -> fine stage table (package data, read once)."""
    data = datafiles.load("landmarks.yaml")
    marks = [
        Landmark(
            keywords=list(item["keywords"]),
            pattern=item.get("regex") or None,
            stage=item.get("stage"),
            engine=item.get("engine"),
            sets=dict(item.get("set") or {}),
            stats=bool(item.get("stats")),
            interrupt=bool(item.get("interrupt")),
        )
        for item in data["landmarks"]
    ]
    frames = {func: stage for stage, funcs in data["frames"].items() for func in funcs}
    return marks, frames


def landmark_keywords() -> list[str]:
    """Keywords the reader's prefilter must keep for the tracker."""
    marks, _ = load_landmarks()
    words = [k for m in marks for k in m.keywords]
    return [*words, TRACEBACK_START, 'File "', "Error", "Exception", "Value error,"]


#: a worker's tensor-parallel rank in its process tag: `VllmWorker TP1`, `Worker_TP1`, `Worker_DP0_TP1`
TP_TAG = lazy(r"(?:\b|_)TP(\d+)\b")


@dataclass
class _Proc:
    in_traceback: bool = False
    frame_stage: str | None = None
    #: the traceback's frames so far (analysis/frames.py reads their paths, functions and source lines)
    frames: list[places.Frame] = field(default_factory=list)
    expect_code: bool = False
    place: places.Place | None = None

    def restart(self) -> None:
        self.in_traceback, self.frame_stage, self.frames, self.expect_code, self.place = True, None, [], False, None

    def add_frame(self, frame: places.Frame) -> None:
        self.frames.append(frame)
        self.expect_code = True
        self.place = places.locate(self.frames)

    def add_code(self, code: str) -> None:
        """The source line Python prints under a frame: re-read the place when it names a stage."""
        last = self.frames[-1]
        self.frames[-1] = places.Frame(last.path, last.func, last.line, code)
        self.expect_code = False
        if any(mark in code for mark in places.code_marks()):
            self.place = places.locate(self.frames)

    def component(self, exception: str) -> str | None:
        """The component the traceback ending in `exception` (its class, as printed) points at."""
        if self.place is not None and self.place.component is not None:
            return self.place.component
        return places.component_of_exception(exception)


class Tracker:
    """Feeds on lines in order; answers "which stage is this line in" and holds the Context."""

    def __init__(self) -> None:
        self.context = Context()
        self.stage: str | None = None  # fine stage from landmarks
        self._procs: dict[str, _Proc] = {}
        self._marks, self._frames = load_landmarks()
        self._index = KeywordIndex([k.lower() for k in m.keywords] for m in self._marks)
        self._shapes = ShapeCache(self._index)
        self._nondefault_seen = False
        self._worker_pids: set[int | None] = set()  # V0's (VllmWorkerProcess pid=N): one per extra rank
        self._tp_from_tags = False

    def observe(self, line: Line) -> str | None:
        """Update stage and context from one line; return the fine stage that applies to it."""
        text = line.text
        key = line.proc_key
        proc = self._procs.get(key)
        if proc is None:
            proc = self._procs[key] = _Proc()
            if line.process:
                self._worker_tag(line.process, line.pid)
        stripped = text.lstrip()
        if stripped.startswith(TRACEBACK_START):
            proc.restart()
            return self.stage
        if not proc.in_traceback and FRAME.match(text):
            # a fragment pasted from the middle of a traceback: its frames still say where it failed
            proc.restart()
        if proc.in_traceback:
            return self._traceback_line(proc, line, stripped)
        if line.user_content:
            return self.stage
        if line.source and line.level in ("ERROR", "CRITICAL", "WARNING"):
            # a component's own logger (`[nixl_connector.py:651]`) names it
            line.component = places.component_of_source(line.source)
        marks = self._marks
        for i in self._shapes.matches(text):
            mark = marks[i]
            self._apply(mark, text, line.number, line.timestamp)
            if mark.stage:
                proc.frame_stage = None
        return self._here(proc)

    def _traceback_line(self, proc: _Proc, line: Line, stripped: str) -> str | None:
        """A line inside a process's traceback: a frame, the source line under it, or the exception ending it."""
        m = FRAME.match(line.text)
        if m:
            func = m.group("func").rsplit(".", 1)[-1]
            stage = self._frames.get(func)
            if stage:
                proc.frame_stage = stage
            proc.add_frame(places.Frame(m.group("file"), m.group("func")))
            line.component = proc.place.component if proc.place is not None else None
            return self._here(proc)
        if EXCEPTION.match(stripped):
            proc.in_traceback = False
            line.component = proc.component(stripped.split(":", 1)[0])
            for i in self._index.matches(stripped.lower()):  # "KeyboardInterrupt" ends a Ctrl-C's traceback
                if self._marks[i].interrupt:
                    self._apply(self._marks[i], line.text, line.number, line.timestamp)
            return self._here(proc)
        if proc.expect_code and stripped and proc.frames:
            proc.add_code(stripped)
        return self._here(proc)

    def _worker_tag(self, process: str, pid: int | None) -> None:
        """A worker's process tag shows tensor parallelism when no args line said it: `VllmWorker TP1`,
        `Worker_TP3` (V1) -> at least rank + 1; each V0 `VllmWorkerProcess` pid is one rank beside the driver."""
        m = TP_TAG.search(process)
        if m:
            size = int(m.group(1)) + 1
        elif process.startswith("VllmWorkerProcess"):
            self._worker_pids.add(pid)
            size = len(self._worker_pids) + 1
        else:
            return
        ctx = self.context
        if (ctx.pipeline_parallel_size or 1) > 1:
            return  # V0's worker processes are TP x PP ranks: the split is not known
        if ctx.tensor_parallel_size is None or (self._tp_from_tags and size > ctx.tensor_parallel_size):
            ctx.tensor_parallel_size = size
            self._tp_from_tags = True

    def _here(self, proc: _Proc) -> str | None:
        """The stage of a process's current line: its traceback's frames, else the last landmark.

        Once the server is serving, a frame that names a start-up step (a LoRA load, a re-run warmup) does
        not move a failure back to start-up: anything after ready happens while serving.
        """
        placed = self._placed(proc.place, proc.frame_stage)
        if placed is not False:
            return placed
        if proc.frame_stage is None:
            return self.stage
        if proc.frame_stage == WEAK_FRAME_STAGE:
            # "somewhere in the engine's start-up": only better than no landmark, or one before start-up
            return proc.frame_stage if coarse(self.stage) in (None, "cli", "config") else self.stage
        if coarse(self.stage) == "serving" and coarse(proc.frame_stage) != "serving":
            return self.stage
        return proc.frame_stage

    def _placed(self, place: places.Place | None, frame_stage: str | None) -> str | None | bool:
        """The stage the frames' places decide (False: they do not, the function table and landmarks do).

        A decisive place (graph capture by its source line, the profiling run, loading) wins, except that a
        serving frame is weak against a start-up landmark and a start-up frame against a serving landmark. Frames
        that allow several stages (the sampler: its warm-up or serving) defer to the landmark when it is one of
        them; a paste without a landmark stays unknown (None), never a guessed stage.
        """
        if place is None or not place.stages:
            return False
        landmark = coarse(self.stage)
        if place.stage is not None:
            decided = coarse(place.stage)
            if (landmark == "serving" and decided != "serving") or (
                    decided == "serving" and landmark not in (None, "cli", "config", "serving")):
                return self.stage
            return place.stage
        if frame_stage is not None:
            return False
        if landmark in {coarse(s) for s in place.stages}:
            return self.stage
        return self.stage if landmark not in (None, "cli", "config") else None

    def _apply(self, mark: Landmark, text: str, number: int = 0, timestamp: str | None = None) -> None:
        """A landmark on a line: what its regex's groups say (each group by its reader: _GROUP_READERS), then
        what the landmark itself marks (a stop, a stage, the engine, context flags, a stats line)."""
        if mark.regex is not None:
            m = mark.regex.search(text)
            if not m:
                return
            for name, raw in m.groupdict().items():
                if raw is not None:
                    _GROUP_READERS.get(name, Tracker._read_number)(self, mark, name, raw, text)
        ctx = self.context
        if mark.interrupt:
            ctx.interrupted_line, ctx.interrupted_stage = number, coarse(self.stage)
        self._move_stage(mark)
        if mark.engine:
            ctx.engine = mark.engine
        self._set_flags(mark, number, timestamp)
        if mark.stats:
            self._stats(text, number)
        if ctx.engine is None and ctx.version:
            self._engine_from_version()

    def _read_command(self, mark: Landmark, name: str, raw: str, text: str) -> None:
        """The command line the server was started with: its settings are the user's."""
        self._settings(parse_command(raw), engine_line=False)
        self.context.args_source = self.context.args_source or "command"

    def _read_settings(self, mark: Landmark, name: str, raw: str, text: str) -> None:
        """`non-default args: {...}`, `args: Namespace(...)` or the engine's config line."""
        ctx = self.context
        self._settings(parse_settings(raw), engine_line=mark.stage == "config")
        if text.lstrip().startswith("non-default args"):
            self._nondefault_seen = True
            ctx.args_source = "non-default"
        elif text.lstrip().startswith("args: Namespace"):
            ctx.args_source = "namespace"

    def _read_text(self, mark: Landmark, name: str, raw: str, text: str) -> None:
        """A context field that is text (the release, the model, the GPU, the platform)."""
        setattr(self.context, name, raw.strip())

    def _read_number(self, mark: Landmark, name: str, raw: str, text: str) -> None:
        """Any other group: a number for the context field of its name, when there is one."""
        value = to_number(raw)
        if value is not None and hasattr(self.context, name):
            setattr(self.context, name, value)

    def _move_stage(self, mark: Landmark) -> None:
        """A landmark's stage becomes the current one when stages may move there."""
        ctx = self.context
        ready = ctx.server_started or ctx.engine_ready
        # a stop before the server was ready leaves the stage where the start-up was
        # (a landmark of the stage it is in, a stats line while serving, leaves it there: no order to look up)
        if mark.stage and mark.stage != self.stage and self._advances(mark.stage) and (
                mark.stage != "shutdown" or ready):
            self.stage = mark.stage

    def _set_flags(self, mark: Landmark, number: int, timestamp: str | None) -> None:
        """The context fields the landmark sets; the server's ready line and time."""
        ctx = self.context
        for key, value in mark.sets.items():
            setattr(ctx, key, value)
        if mark.sets.get("server_started") or (mark.sets.get("engine_ready") and not ctx.server_started):
            # uvicorn's own lines carry no timestamp: keep the one vLLM's "Starting ... server" line had
            ctx.ready_line, ctx.ready_time = number, timestamp or ctx.ready_time

    def _engine_from_version(self) -> None:
        """V1 is the only engine once VLLM_USE_V1 is gone (0.11) and was opt-in before 0.8; between, the init
        line tells."""
        ctx = self.context
        v = parse_version(ctx.version)
        if default("v1_only", v):
            ctx.engine = "V1"
        elif engine_choice(v, compute_capability=_compute_capability(ctx.gpu_name)).engine == "V0":
            ctx.engine = "V0"

    def finish(self) -> Context:
        """Fill what the release's defaults say when the log listed only non-default args."""
        ctx = self.context
        if self._nondefault_seen and ctx.version and ctx.gpu_memory_utilization is None:
            ctx.gpu_memory_utilization = float(default("gpu_memory_utilization", parse_version(ctx.version)))
            ctx.defaults.append(f"gpu_memory_utilization={ctx.gpu_memory_utilization} "
                                f"(not in non-default args: vLLM {ctx.version}'s default)")
        return ctx

    def _advances(self, stage: str) -> bool:
        """Stages only move forward, except a new start-up (args or engine init) which restarts them."""
        if coarse(stage) in ("cli", "config"):
            return True
        return order(stage) >= order(self.stage) or self.stage is None

    def _settings(self, settings: dict[str, Any], engine_line: bool) -> None:
        ctx = self.context
        if not engine_line:
            ctx.args.update({k: v for k, v in settings.items() if k != "model_tag"})
        for key, value in settings.items():
            target = SETTING_ALIASES.get(key)
            if target is None:
                continue
            value = _coerce(value) if isinstance(value, str) else value
            if value is None:
                continue
            if engine_line and key in ENGINE_ONLY and getattr(ctx, target) is not None:
                continue
            setattr(ctx, target, value)

    def _stats(self, text: str, number: int) -> None:
        ctx = self.context
        ctx.stats_lines += 1
        ctx.last_stats_line = number
        ctx.last_stats_text = text[:300]
        got = _STATS_PLANS(text)
        if got["kv_pct"]:
            try:  # (a try costs nothing when nothing is raised; a `with suppress` an object a stats line)
                pct = float(text[slice(*got["kv_pct"])])
            except ValueError:  # '1.2.3' fits [\d.]+ and is no number
                pass
            else:
                ctx.peak_kv_usage_pct = max(pct, ctx.peak_kv_usage_pct or 0.0)
        if got["running"]:
            ctx.max_running_reqs = max(int(text[slice(*got["running"])]), ctx.max_running_reqs or 0)
        if got["gen"] and ("Running: 0 reqs" in text or (to_number(text[slice(*got["gen"])]) or 0) > 0):
            ctx.progress_line = number  # tokens generated, or nothing left to run: not hung
        if got["waiting"]:
            ctx.max_waiting_reqs = max(int(text[slice(*got["waiting"])]), ctx.max_waiting_reqs or 0)


#: How the tracker reads a landmark regex's named group, by the group's name (any other: _read_number).
_GROUP_READERS: dict[str, Callable[[Tracker, Landmark, str, str, str], None]] = {
    "command": Tracker._read_command,
    "settings": Tracker._read_settings,
    "version": Tracker._read_text,
    "model": Tracker._read_text,
    "gpu_name": Tracker._read_text,
    "platform": Tracker._read_text,
}


def _stats_plan(text: str) -> dict[str, tuple[int, int] | None]:
    """Where the tracker's stats figures are in a line (positions: one plan serves a shape, see ingest/dense.py)."""
    found = {k: r.search(text) for k, r in STATS.items()}
    return {k: (m.start(1), m.end(1)) if m else None for k, m in found.items()}


_STATS_PLANS = ShapePlans(_stats_plan)


def is_exception_line(text: str) -> re.Match[str] | None:
    """`ValueError: ...`, `torch.OutOfMemoryError: ...`, pydantic's `Value error, ...`."""
    return EXCEPTION.match(text.strip())
