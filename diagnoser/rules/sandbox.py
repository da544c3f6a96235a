"""The sandbox for rule templates and expressions: a rule pack is data, so it must never run code.

Rule packs come from teammates and the internet. Their jinja2 templates (`advice`, `fixes`) and expressions
(`derive`, `when`) see only:

- the rule's facts, `ctx` (plain dicts, lists, numbers, strings), and a few plain values;
- `fn.NAME` / `mem.NAME`: the functions and constants named in FN_API and MEM_API, as a namespace object
  that holds nothing else (no module, no object whose attributes lead back to one).

Two layers enforce it. At load time, `check_template` rejects (RuleError "path: key: what to change") a
template that names an `fn.`/`mem.` member outside the lists, reads a private (`_x`) attribute, calls a
method or filter not on the safe lists, imports, includes, defines macros or nests loops. At run time
the environment is jinja2's ImmutableSandboxedEnvironment (no mutation of facts or ctx, no `__class__`
walks), refuses any attribute that is a module or belongs to a function, and bounds sizes: string and list
repeats, powers, `%` widths, `range()`, and each render's output length and time. An over-size result raises
SecurityError: the advice says it could not be computed, and the tool goes on.
"""

from __future__ import annotations

import functools
import operator
import threading
import time
import types
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from jinja2 import StrictUndefined, Undefined, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from diagnoser.lazyre import lazy
from diagnoser.rules import functions as advice_functions
from diagnoser.vllm import memory

#: What `fn.` offers templates (diagnoser/rules/functions.py): plain functions over plain values.
FN_API = (
    "hyphen", "underscore", "divisors", "divisors_near", "closest_flag", "renamed_flag", "tp_to_fit",
    "bad_arguments", "flag_fix", "corrected_args", "process_memory", "others_gib", "capability",
    "capability_int", "quant_methods_for", "closest_choice", "model_weights_gib", "closest_model", "tp_sizes",
    "size_for_peak",
    # the long-tail rules
    "seconds_between", "duration", "cuda_of_driver", "driver_for_cuda", "pip_package", "lora_rank_for",
    "version_at_least", "first_known",
)
#: What `mem.` offers templates (diagnoser/vllm/memory.py): arithmetic over numbers, and its constants.
MEM_API = (
    "GIB", "MIB", "GB", "LEN_STEP", "BLOCK_SIZE", "SAMPLER_BYTES_PER_LOGIT",
    "round_down", "kv_bytes_per_token", "tokens_in", "concurrency", "bytes_per_token_from_need",
    "max_len_that_fits", "utilization_for", "utilization_within_free", "budget_gib", "human_tokens",
    "dtype_bytes", "kv_value_bytes", "kv_heads_per_rank", "layers_per_stage", "blocks_for", "format_gib",
    "lower_utilization",
)
#: Filters a template may use (jinja2's `attr`, `format` with `*` widths, `center`, `indent`, `wordwrap`,
#: `replace`... are not here: they reach attributes or build unbounded strings).
FILTERS = {
    "tokens", "gib", "default", "d", "format", "int", "float", "round", "abs", "join", "first", "last", "length",
    "count", "list", "lower", "upper", "title", "capitalize", "trim", "max", "min", "sum", "sort", "unique",
    "select", "reject", "selectattr", "rejectattr", "map", "string", "e", "escape", "batch", "slice", "dictsort",
    "items", "tojson", "truncate",
}
#: Methods of plain values (str, dict, list) a template may call.
METHODS = {
    "get", "keys", "values", "items", "startswith", "endswith", "count", "index", "find", "rfind", "lower", "upper",
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "partition", "rpartition", "isdigit",
    "isalpha", "isalnum", "isupper", "islower", "title", "capitalize", "removeprefix", "removesuffix",
}
#: Template tags that could import, include, recurse or loop without a bound.
FORBIDDEN_NODES = (nodes.Macro, nodes.CallBlock, nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends,
                   nodes.Block)

#: Size bounds of one evaluation.
MAX_STR = 100_000  #: characters of one string or items of one list built by `*` or `%`
MAX_POW_BITS = 100_000  #: bits of an integer built by `**`
MAX_RANGE = 10_000  #: items of one range()
MAX_OUTPUT = 100_000  #: characters of one rendered template
MAX_VALUE = 10 * MAX_STR  #: printed size (about: characters of its repr) of any value an operation builds
MAX_FACT = 10_000  #: printed size of an expression's value (a derived fact)
MAX_SECONDS = 2.0  #: wall time of one rendered template or evaluated expression
#: characters that the operations of one render or evaluation may build in all (each value is bounded by
#: MAX_VALUE; 7,000 reassignments of a 1 MB namespace attribute are bounded here, not by the deadline)
MAX_BUILT = 10 * MAX_VALUE


def _namespace(module: types.ModuleType, names: tuple[str, ...]) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{n: getattr(module, n) for n in names if hasattr(module, n)})


#: The objects templates see as `fn` and `mem`.
FN = _namespace(advice_functions, FN_API)
MEM = _namespace(memory, MEM_API)
NAMESPACES = {"fn": (FN, set(FN_API)), "mem": (MEM, set(MEM_API))}
#: the functions of FN and MEM, by id (the only other things templates may call)
_API_IDS = frozenset(id(v) for ns in (FN, MEM) for v in vars(ns).values() if callable(v))


_CLOCK = threading.local()  #: the deadline of the render or evaluation running on this thread


def _tick() -> None:
    """Stop the template or expression running on this thread once it is past MAX_SECONDS.

    Called by every sandbox hook (attribute, item, call, filter, operator) and by `weight`, so a loop that
    emits nothing, or one slow filter, is bounded too, not only the gaps between output chunks."""
    deadline = getattr(_CLOCK, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise SecurityError(f"the template took longer than {MAX_SECONDS:g} s")


def _built(size: int) -> None:
    """Count `size` characters built by an operation against the running render's MAX_BUILT."""
    total = getattr(_CLOCK, "built", 0) + size
    _CLOCK.built = total
    if total > MAX_BUILT:
        raise SecurityError(f"the template built more than {MAX_BUILT:,} characters in all")


def _timed(call: Callable[[], Any], seconds: float = MAX_SECONDS) -> Any:
    """call() under a fresh deadline of `seconds` (at most MAX_SECONDS; nested calls keep the outer one)."""
    if getattr(_CLOCK, "deadline", None) is not None:
        return call()
    if seconds <= 0:
        raise SecurityError("the rule's time budget for this log is spent")
    _CLOCK.deadline = time.monotonic() + min(seconds, MAX_SECONDS)
    _CLOCK.built = 0
    try:
        return call()
    finally:
        _CLOCK.deadline = None


def weight(value: Any, limit: int = MAX_VALUE) -> int:
    """About how many characters `value` prints as, counting every reference to a shared item again (as
    str() does); SecurityError once it passes `limit`. Walks at most about `limit` items.

    >>> weight("abc"), weight([1, "ab"]), weight({"k": [None]})
    (5, 11, 18)
    """
    total, stack, steps = 0, [value], 0
    while stack:
        v = stack.pop()
        steps += 1
        if steps % 4096 == 0:
            _tick()
        if isinstance(v, str | bytes):
            total += len(v) + 2
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 1
        elif isinstance(v, float):
            total += 24
        elif isinstance(v, Namespace):
            stack.append(object.__getattribute__(v, "_Namespace__attrs"))
            total += 12
        elif isinstance(v, Mapping):
            total += 2 + 4 * len(v)
            if total <= limit:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, list | tuple | set | frozenset | KeysView | ValuesView | ItemsView | range):
            total += 2 + 2 * len(v)
            if total <= limit and not isinstance(v, range):
                stack.extend(v)
        else:
            total += 40  # an object's repr: `<function divisors at 0x...>`
        if total > limit:
            raise SecurityError(f"a value of more than {limit:,} characters; the limit is {limit:,}")
    return total


def _bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise SecurityError(f"range() of {len(r):,} items; the limit is {MAX_RANGE:,}")
    return r


_PERCENT_SPEC = lazy(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_percent(fmt: str) -> None:
    total = 0
    for m in _PERCENT_SPEC.finditer(fmt):
        for part in m.groups():
            if part == "*" or (part and int(part) > 1000):
                raise SecurityError("a %-format width or precision over 1000")
            total += int(part or 0)
    if total > MAX_STR:
        raise SecurityError(f"%-format widths adding up to {total:,}; the limit is {MAX_STR:,}")


def _bounded_format(value: Any, *args: Any, **kwargs: Any) -> str:
    """jinja2's `format` filter (`'%.1f'|format(x)`) with widths and precisions bounded."""
    text = str(value)
    _check_percent(text)
    if args and kwargs:
        raise SecurityError("format takes positional or keyword arguments, not both")
    return text % (kwargs or args)


def _size(value: Any) -> int | None:
    """A sequence's size for a repeat: a string's length, a list's items or, when more, its items' printed
    size (`[big_string] * n` repeats references that print in full); None for anything else."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list | tuple):
        return max(len(value), weight(value) - 2 - 2 * len(value))
    return None


def _bounded_mul(left: Any, right: Any) -> Any:
    for seq, n in ((left, right), (right, left)):
        size = _size(seq)
        if size is not None and isinstance(n, int):
            if size * max(n, 0) > MAX_STR:
                raise SecurityError(f"a repeat building {size * n:,} items; the limit is {MAX_STR:,}")
            _built(size * max(n, 0))
    return operator.mul(left, right)


def _bounded_pow(left: Any, right: Any) -> Any:
    if (isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
            and left.bit_length() * right > MAX_POW_BITS):
        raise SecurityError(f"a power of about {left.bit_length() * right:,} bits; the limit is {MAX_POW_BITS:,}")
    return operator.pow(left, right)


def _bounded_mod(left: Any, right: Any) -> Any:
    if isinstance(left, str):
        _check_percent(left)
    return operator.mod(left, right)


def _bounded_add(left: Any, right: Any) -> Any:
    a, b = _size(left), _size(right)
    if a is not None and b is not None:
        if a + b > MAX_VALUE:
            raise SecurityError("a concatenation over the size limit")
        _built(a + b)
    return operator.add(left, right)


def _bounded_concat(values: tuple[Any, ...]) -> str:
    """`a ~ b ~ c`: jinja2's str_join, refused past MAX_VALUE (`{% set a = a ~ a %}` doubles a string)."""
    values = tuple(values)
    size = sum(weight(v) for v in values)
    if size > MAX_VALUE:
        raise SecurityError("a concatenation over the size limit")
    _built(size)
    return "".join(str(v) for v in values)


def _bounded_output(value: Any) -> Any:
    """`{{ value }}`: a value whose printed form passes MAX_VALUE is refused before str() builds it."""
    if not isinstance(value, str):
        if callable(value) and not isinstance(value, Undefined):
            raise SecurityError("a function is not a value to print")
        weight(value)
    return value


class _BoundedCode(CodeGenerator):
    """jinja2's code generator, with `~` (Concat) routed through _bounded_concat like the other operators."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _filter_args(func: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A filter's arguments after the context, eval context or environment jinja2 passes first."""
    return args[1:] if getattr(func, "jinja_pass_arg", None) is not None else args


def _check_join(value: Any, sep: Any = "", *_: Any) -> None:
    n = len(value) if isinstance(value, list | tuple | str | range) else 0
    if weight(value) + n * len(str(sep)) > MAX_VALUE:
        raise SecurityError("a join over the size limit")


def _check_count(value: Any, count: Any = 1, *_: Any) -> None:
    if not isinstance(count, int) or count > MAX_RANGE:
        raise SecurityError(f"batch/slice into {count} parts; the limit is {MAX_RANGE:,}")


def _check_indent(value: Any, indent: Any = None, *_: Any) -> None:
    if indent is not None and (not isinstance(indent, int) or not 0 <= indent <= 8):
        raise SecurityError("tojson indent must be a number from 0 to 8")


def _check_sum(value: Any, attribute: Any = None, start: Any = 0, *_: Any) -> None:
    if not isinstance(start, int | float):
        raise SecurityError("sum adds numbers only")


#: Filters whose arguments can make a small value huge (or slow), and what is checked before they run.
_PRECHECKS: dict[str, tuple[Callable[..., None], tuple[str, ...]]] = {
    "join": (_check_join, ("d",)), "batch": (_check_count, ("linecount",)), "slice": (_check_count, ("slices",)),
    "tojson": (_check_indent, ("indent",)), "sum": (_check_sum, ("attribute", "start")),
}


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that runs under the deadline, with its arguments checked and its result's size bounded;
    a lazy result (map, select, batch, slice) is bounded item by item."""
    check, keywords = _PRECHECKS.get(name, (None, ()))

    @functools.wraps(func)  # keeps jinja_pass_arg: jinja2 still passes the context the filter asks for
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        if check is not None:
            own = _filter_args(func, args)
            if own and isinstance(own[0], Iterator):  # a generator is read once: materialise it for both
                args = (*args[: len(args) - len(own)], list(own[0]), *own[1:])
                own = _filter_args(func, args)
            check(*own, *(kwargs[k] for k in keywords if k in kwargs))
        result = func(*args, **kwargs)
        if isinstance(result, Iterator):
            return _bounded_items(result)
        weight(result)
        return result

    return guarded


def _bounded_items(items: Iterator[Any]) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i >= MAX_STR:
            raise SecurityError(f"a sequence of more than {MAX_STR:,} items")
        _tick()
        yield item


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {"*": _bounded_mul, "**": _bounded_pow, "%": _bounded_mod,
                                                  "+": _bounded_add}


#: What templates may call besides fn./mem. members and the allowed methods: the globals they are given.
_GLOBAL_CALLS = frozenset({_bounded_range, dict, Namespace})


def _callable_allowed(obj: Any) -> bool:
    """fn./mem. members, range/dict/namespace, `loop.cycle`/`loop.changed`, and METHODS of str, dict, list."""
    if isinstance(obj, Undefined) or any(obj is g for g in _GLOBAL_CALLS) or id(obj) in _API_IDS:
        return True
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", None)
    if isinstance(obj, types.MethodType) and isinstance(owner, LoopContext):
        return name in ("cycle", "changed")
    return (isinstance(obj, types.BuiltinMethodType) and type(owner) in (str, dict, list, tuple)
            and name in METHODS)


class RuleSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment that also refuses modules, function attributes and over-size values,
    calls only what rules are offered (whatever route reached it: `x.m()`, `x['m']()`), and runs every
    hook under the render's deadline."""

    intercepted_binops = frozenset(_BINOPS)
    code_generator_class = _BoundedCode
    bounded_concat = staticmethod(_bounded_concat)  # not `concat`: jinja2 joins output chunks with that

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(value, types.ModuleType | type):
            return False
        if isinstance(obj, types.FunctionType | types.BuiltinFunctionType | types.MethodType | type):
            return False
        return super().is_safe_attribute(obj, attr, value)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja2's
        _tick()
        if not _callable_allowed(__obj):
            name = getattr(__obj, "__name__", type(__obj).__name__)
            raise SecurityError(f"{name}() is not something rules may call")
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        _tick()
        op = _BINOPS.get(operator_)
        if op is None:
            return super().call_binop(context, operator_, left, right)
        return op(left, right)


def template_env() -> RuleSandbox:
    """The one environment for rule templates and expressions: sandboxed, bounded, strict about names."""
    # optimized=False: jinja2's constant folding (a fifth of a compile) only folds literals, which rules rarely
    # hold; the code renders the same without it
    env = RuleSandbox(undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
                      finalize=_bounded_output, optimized=False)
    for name in ("lipsum", "cycler", "joiner"):
        env.globals.pop(name, None)
    env.globals["range"] = _bounded_range
    env.filters["tokens"] = _tokens
    env.filters["gib"] = _gib
    env.filters["format"] = _bounded_format
    # only the allowed filters exist (`map('center', ...)` names one by a string the load check cannot see)
    env.filters = {name: _guard_filter(name, f) for name, f in env.filters.items() if name in FILTERS}
    env.tests["known"] = lambda v: not isinstance(v, Undefined) and v is not None
    return env


def template(env: RuleSandbox, source: str) -> Any:
    """`env.from_string(source)`: a rule's advice template, compiled in the sandbox."""
    return env.from_string(source)


def expression(env: RuleSandbox, source: str) -> Any:
    """`env.compile_expression(source, undefined_to_none=False)`: called as `bounded(names, seconds)`, each
    evaluation runs under `seconds` (at most MAX_SECONDS; what is left of its rule's budget)."""
    compiled = env.compile_expression(source, undefined_to_none=False)

    def bounded(names: dict[str, Any], seconds: float = MAX_SECONDS) -> Any:
        def evaluate() -> Any:
            result = compiled(**names)
            weight(result, MAX_FACT)  # a fact is a number or a short text, and it is kept with every hit
            return result

        return _timed(evaluate, seconds)

    return bounded


#: What else decides the code jinja2 generates here: this module (options, intercepted operators, filters).


def render(template: Any, names: dict[str, Any]) -> str:
    """A template's text, refused (SecurityError) past MAX_OUTPUT characters or MAX_SECONDS."""
    def run() -> str:
        out: list[str] = []
        size = 0
        for chunk in template.generate(**names):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise SecurityError(f"the template's output exceeds {MAX_OUTPUT:,} characters")
            _tick()
            out.append(chunk)
        return "".join(out)

    return _timed(run)


def _tokens(n: Any) -> str:
    """35000 -> '35,000'; an unknown value prints as '?' rather than failing the advice."""
    try:
        return f"{int(n):,}"
    except (TypeError, ValueError, OverflowError):
        return "?"


def _gib(x: Any) -> str:
    """4.6213 -> '4.62'."""
    try:
        return f"{float(x):.2f}"
    except (TypeError, ValueError, OverflowError):
        return "?"


def check_template(ast: nodes.Template) -> str | None:
    """What a parsed template or expression does that rules may not (None when it is fine): the first problem
    that the checks below find, in their order."""
    members = list(ast.find_all((nodes.Getattr, nodes.Getitem)))
    for check in _TEMPLATE_CHECKS:
        problem = check(ast, members)
        if problem:
            return problem
    return None


def _statement_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """A statement rules may not use ({% macro %}, {% include %}, ...)."""
    for node in ast.find_all(FORBIDDEN_NODES):
        return f"{{% {type(node).__name__.lower()} %}} is not allowed in rule templates"
    return None


def _loop_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """A recursive or a nested loop."""
    for loop in ast.find_all(nodes.For):
        if loop.recursive:
            return "recursive loops are not allowed in rule templates"
        if any(True for _ in loop.find_all(nodes.For)):
            return "nested loops are not allowed in rule templates"
    return None


def _member_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """A private attribute, or a member that its namespace (fn., mem.) does not offer."""
    for node in members:
        attr = node.attr if isinstance(node, nodes.Getattr) else _const_key(node.arg)
        if isinstance(attr, str) and attr.startswith("_"):
            return f"{attr!r}: private attributes are not allowed"
        target = node.node
        if isinstance(target, nodes.Name) and target.name in NAMESPACES:
            allowed = NAMESPACES[target.name][1]
            if attr not in allowed:
                import difflib  # a rule author's mistake: not on a diagnosis's way

                close = difflib.get_close_matches(attr, allowed, n=3) if isinstance(attr, str) else []
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                return (f"{target.name}.{attr if isinstance(attr, str) else '[...]'} is not available to rules"
                        f"{hint}; {target.name}. offers: {', '.join(sorted(allowed))}")
    return None


def _member_of_member_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """An attribute read on a namespace's member (`fn.x.y`)."""
    for node in members:
        if _names_namespace(node.node):
            return f"{_dotted(node)}: fn. and mem. members have no attributes to read"
    return None


def _call_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """A method call that is not one of METHODS (namespace functions are checked as members)."""
    for call in ast.find_all(nodes.Call):
        fn = call.node
        member = isinstance(fn, nodes.Getattr) and isinstance(fn.node, nodes.Name) and fn.node.name in NAMESPACES
        if isinstance(fn, nodes.Getattr) and not member and fn.attr not in METHODS:
            return f".{fn.attr}(): not a method rules may call; allowed: {', '.join(sorted(METHODS))}"
    return None


def _filter_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """A filter that is not one of FILTERS."""
    for flt in ast.find_all(nodes.Filter):
        if flt.name not in FILTERS:
            return f"unknown filter |{flt.name}: not a filter rules may use; allowed: {', '.join(sorted(FILTERS))}"
    return None


def _bare_namespace_problem(ast: nodes.Template, members: list[nodes.Node]) -> str | None:
    """A namespace used as a value itself (`fn`, not `fn.NAME(...)`)."""
    accessed = {id(node.node) for node in members}
    for name in ast.find_all(nodes.Name):
        if name.name in NAMESPACES and id(name) not in accessed:
            return f"{name.name} is a namespace: use {name.name}.NAME(...), not {name.name} itself"
    return None


#: check_template's checks, in the order their problems are reported.
_TEMPLATE_CHECKS: tuple[Callable[[nodes.Template, list[nodes.Node]], str | None], ...] = (
    _statement_problem, _loop_problem, _member_problem, _member_of_member_problem, _call_problem, _filter_problem,
    _bare_namespace_problem,
)


def _const_key(arg: nodes.Node) -> Any:
    return arg.value if isinstance(arg, nodes.Const) else object()


def _names_namespace(node: nodes.Node) -> bool:
    """`fn.x` or `fn['x']` (so `fn.x.y` can be refused)."""
    return (isinstance(node, nodes.Getattr | nodes.Getitem) and isinstance(node.node, nodes.Name)
            and node.node.name in NAMESPACES)


def _dotted(node: nodes.Node) -> str:
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        return f"{_dotted(node.node)}.{node.attr}"
    if isinstance(node, nodes.Getitem):
        return f"{_dotted(node.node)}[...]"
    return "..."


def parse_checked(env: RuleSandbox, source: str, expression: bool) -> nodes.Template:
    """Parse a template (or an expression) and apply check_template; errors are ValueError with the reason."""
    try:
        ast = env.parse("{{ (" + source + ") }}" if expression else source)
    except TemplateSyntaxError as exc:
        if expression:
            raise ValueError(f"not a valid expression: {exc.message}") from None
        raise ValueError(f"template does not parse (line {exc.lineno}): {exc.message}") from None
    problem = check_template(ast)
    if problem:
        raise ValueError(problem)
    return ast
