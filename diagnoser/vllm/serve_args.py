"""One way to read and write a `vllm serve` command line and its Python `LLM(...)` spelling.

Every fact about a flag (takes a value or not, how many, short forms, JSON or structured values, the negative
`--no-X` form, server-only or engine argument, the releases it exists in) comes from data/vllm_flags.yaml
through flags.py; nothing here knows a flag by name except `--model` and the secret `--api-key`.

Rendering is where log text becomes something a user pastes into a shell or a Python prompt, so it is
strict: only a name that the flag list knows, or that matches the flag grammar exactly, is written; every
shell word is `shlex.quote`d; the Python call carries only `repr`s of plain literals. Whatever cannot be
written safely is left out, and a note says so.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from diagnoser.lazyre import lazy
from diagnoser.vllm import releases
from diagnoser.vllm.flags import Flag, by_prefix, closest_flag, lookup, normalize

#: `--max-model-len`: the spelling vLLM's argparse generates (lower case words joined by hyphens).
FLAG_GRAMMAR = lazy(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*\Z")
#: `max_model_len`: the same name as a Python keyword argument.
KEY_GRAMMAR = lazy(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*\Z")
#: The value written for --api-key: the variable, never the secret.
API_KEY_VALUE = '"$VLLM_API_KEY"'
API_KEY_NOTE = ("the API key (--api-key) comes from \"$VLLM_API_KEY\": export VLLM_API_KEY with your key first "
                "(the log's value is never repeated)")
NO_MODEL_NOTE = "no command is suggested: the model could not be read from the log"
_NEGATIVE_NUMBER = lazy(r"-\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\Z|-\.\d+\Z")
_OBJECT_REPR = lazy(r"(?P<cls>[A-Za-z_]\w*)\((?P<body>.*)\)\Z", re.S)
_PROGRAM_WORDS = ("vllm", "vllm.exe", "serve", "python", "python3", "-m")
MAX_NOTE_NAME = 40


def key_of(flag: str) -> str:
    """'--max-model-len' -> 'max_model_len'."""
    return flag.lstrip("-").replace("-", "_")


def flag_of(key: str) -> str:
    """'max_model_len' -> '--max-model-len'."""
    return "--" + key.replace("_", "-")


def _version(text: str | None) -> tuple[int, ...] | None:
    """A release from the log or the flag list (releases.parse_version); None when there is none."""
    if not text or not re.search(r"\d", str(text)):
        return None
    return releases.parse_version(str(text))


def in_release(flag: Flag, version: str | None) -> bool:
    """Whether the release has the flag (True when the release or the flag's range is unknown)."""
    v = _version(version)
    if v is None:
        return True
    since, until = _version(flag.since), _version(flag.until)
    return not (since and v < since) and not (until and v >= until)


def negative_form(flag: Flag, version: str | None) -> str | None:
    """'--no-enable-prefix-caching' where the release accepts it, else None."""
    if not flag.negatable:
        return None
    v, since = _version(version), _version(flag.negatable_since)
    if v is not None and since is not None and v < since:
        return None
    return "--no-" + flag.name[2:]


# --- reading ---------------------------------------------------------------------------------------------------

def tokenize(text: str) -> list[str]:
    """Shell words of one command line; a fragment with an unterminated quote falls back to blanks."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


@dataclass
class Item:
    """One option as written: the spelling, the flag it names (None: unknown) and its raw value words."""

    spelled: str
    flag: Flag | None
    words: list[str] | None   #: None for a switch; [] when a value was expected but missing
    negated: bool = False
    abbreviated: bool = False
    joined: bool = False      #: written `--flag=value` (one word)
    at: int = field(default=-1, compare=False)   #: the option's word index, for messages in the order written

    @property
    def name(self) -> str:
        return self.flag.name if self.flag else self.spelled

    @property
    def value(self) -> Any:
        """A switch -> True/False; one word -> the word; nargs '+' -> the list."""
        if self.words is None:
            return not self.negated
        if self.flag is not None and self.flag.nargs == "+":
            return list(self.words)
        return self.words[0] if self.words else None


@dataclass
class ServeArgs:
    """A parsed `vllm serve` command line."""

    model: str | None = None
    items: list[Item] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)   #: positionals after the model (argparse rejects)
    env: dict[str, str] = field(default_factory=dict)      #: VAR=value words before the program
    prog: str = "vllm serve"
    model_flag: bool = False                                #: the model was given as `--model NAME`
    positional_at: list[int] = field(default_factory=list, compare=False, repr=False)  #: their word indexes

    def values(self) -> dict[str, Any]:
        """Long names of the known flags -> values ('--max-model-len' -> '2048'); the last one given wins."""
        return {it.flag.name: it.value for it in self.items if it.flag is not None}

    def settings(self) -> dict[str, Any]:
        """Python names -> values ('max_model_len' -> '2048'); values stay the words as written."""
        return {key_of(it.name): it.value for it in self.items if it.flag is not None or FLAG_GRAMMAR.match(
            it.name.split("=", 1)[0])}

    def given(self) -> set[str]:
        """The long names of the known flags given."""
        return {it.flag.name for it in self.items if it.flag is not None}


def parse(tokens: list[str]) -> ServeArgs:
    """`[VAR=v ...] vllm serve MODEL --flag v --flag=v -tp 2 --switch ...` -> ServeArgs (never raises).

    Arity comes from the flag list: a switch never swallows the next word (`--enforce-eager -tp 2`), a
    flag with nargs '+' takes every word up to the next option, an unknown flag takes one word if one
    follows. A value word that looks like an option is not taken (argparse does the same), except a
    negative number.
    """
    out = ServeArgs()
    toks = list(tokens)
    i = 0
    while i < len(toks) and (toks[i] == "env" or re.fullmatch(r"[A-Za-z_]\w*=.*", toks[i], re.S)):
        if toks[i] != "env":
            k, _, v = toks[i].partition("=")
            out.env[k] = v
        i += 1
    if i + 2 < len(toks) and toks[i].startswith("python") and toks[i + 1] == "-m":
        out.prog = "api_server.py"
        i += 3
    while i < len(toks) and (toks[i] in _PROGRAM_WORDS or toks[i].endswith(("/vllm", "api_server"))):
        i += 1
        if toks[i - 1] == "serve":  # the program ends at `serve`: a model called `python` or `vllm` is the model
            break
    return _parse_arguments(toks, i, out)


def parse_arguments(tokens: list[str]) -> ServeArgs:
    """The arguments after the program (`MODEL --flag v ...`), read as parse() reads them; no env or program words."""
    return _parse_arguments(list(tokens), 0, ServeArgs())


def resolve(name: str) -> tuple[Flag | None, bool]:
    """The flag an option's name spells, and whether it is an abbreviation argparse accepts (`--max-model`)."""
    flag = lookup(name)
    if flag is not None:
        return flag, False
    flag = by_prefix(name)
    return flag, flag is not None


def takes_value(flag: Flag | None, toks: list[str], i: int) -> bool:
    """Whether the option before toks[i] (no `=value`) takes a value: the flag list says; an unknown flag
    takes the next word unless it looks like an option."""
    return flag.value if flag is not None else (i < len(toks) and not _is_option(toks[i]))


def value_count(flag: Flag | None, toks: list[str], i: int) -> int:
    """How many of toks[i:] the option takes as its value: one, or every word up to the next option for
    nargs '+'; none when the next word looks like an option (argparse does the same), except a negative number."""
    if not takes_value(flag, toks, i):
        return 0
    many = flag is not None and flag.nargs == "+"
    n = 0
    while i + n < len(toks) and not _is_option(toks[i + n]) and (many or n == 0):
        n += 1
    return n


def _parse_arguments(toks: list[str], i: int, out: ServeArgs) -> ServeArgs:
    """parse()'s reading of the arguments from toks[i] on (the arity rules are its docstring's), into out."""
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not _is_option(tok):
            if out.model is None:
                out.model = tok
            else:
                out.positionals.append(tok)
                out.positional_at.append(i - 1)
            continue
        name, eq, raw = tok.partition("=")
        flag, abbreviated = resolve(name)
        item = Item(spelled=name, flag=flag, words=None, abbreviated=abbreviated,
                    negated=name.startswith("--no-") and flag is not None and flag.negatable, at=i - 1)
        if eq:
            item.words = [raw]
            item.joined = True
        elif takes_value(flag, toks, i):
            n = value_count(flag, toks, i)
            item.words = toks[i:i + n]
            i += n
        if flag is not None and flag.name == "--model" and item.words:
            out.model = item.words[0]
            out.model_flag = True
            continue
        out.items.append(item)
    return out


def parse_text(text: str) -> ServeArgs:
    """parse(tokenize(text))."""
    return parse(tokenize(text))


# --- writing ---------------------------------------------------------------------------------------------------

@dataclass
class Rendered:
    """A rendered command (None: nothing safe or useful to suggest) and what was left out of it."""

    text: str | None
    notes: list[str] = field(default_factory=list)


def _plain(value: Any, depth: int = 0) -> bool:
    """A literal that `repr` writes and `ast.literal_eval` reads back: no objects, no NaN, bounded depth."""
    if depth > 8:
        return False
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def printable(text: str) -> bool:
    """No control, format (bidi) or line-separator characters: text a terminal shows as it is."""
    return text.isprintable()


def _word(value: Any) -> str:
    """One value as the command line writes it: 0.92, 36864, text."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e-4 or value == 0 else repr(value)
    return str(value)


def _shown(name: str) -> str:
    """A name from the log, safe to print in a note."""
    text = ascii(name)[1:-1]
    return text if len(text) <= MAX_NOTE_NAME else text[:MAX_NOTE_NAME] + "..."


def _fields(element: Any) -> dict[str, Any] | None:
    """A structured list element (a dict, or the repr `LoRAModulePath(name='a', path='/p')`) -> its fields."""
    if isinstance(element, dict):
        return element
    m = _OBJECT_REPR.match(element.strip()) if isinstance(element, str) else None
    if not m:
        return None
    try:
        call = ast.parse(f"f({m.group('body')})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (SyntaxError, ValueError, AssertionError, TypeError, MemoryError, RecursionError):
        return None


def _structured(flag: Flag, value: Any) -> list[str] | None:
    """Elements of a structured list written as the flag's `item` form says ('sql=/loras/sql')."""
    values = value if isinstance(value, (list, tuple)) else [value]
    words = []
    for element in values:
        got = _fields(element)
        if got is None:
            if isinstance(element, str) and not _OBJECT_REPR.match(element.strip()):
                words.append(element)   # already in the command-line form
                continue
            return None
        try:
            words.append(flag.item.format(**got))  # type: ignore[union-attr]
        except (KeyError, IndexError, ValueError):
            return None
    return words


def _json_value(value: Any) -> Any:
    """A JSON flag's value as a plain object: a dict/list, or the JSON string the log printed."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            try:
                return ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
    return value


def _cli_words(flag: Flag | None, name: str, value: Any, version: str | None) -> list[str] | None:
    """The shell words for one setting, or None when it cannot be written (caller notes it)."""
    if value is True or value is False:
        return _switch_words(flag, name, value, version)
    if flag is not None and not flag.value:
        return None     # a switch with a value that is not a boolean
    if flag is not None and flag.item:
        words = _structured(flag, value)
        return None if words is None else [name, *words]
    if flag is not None and flag.json:
        return _json_words(name, value)
    if isinstance(value, (list, tuple)):
        return _list_words(flag, name, value)
    return _scalar_words(name, value)


def _switch_words(flag: Flag | None, name: str, on: bool, version: str | None) -> list[str] | None:
    """A boolean setting: the flag itself when on; when off, the release's negative form (nothing when the
    flag has none: off is its default), None for an unknown flag."""
    if on:
        return [name]
    if flag is None:
        return None
    negative = negative_form(flag, version)
    return [negative] if negative else []


def _json_words(name: str, value: Any) -> list[str] | None:
    """A JSON flag and its value as one compact JSON word, when the value is a plain dict or list."""
    obj = _json_value(value)
    if not isinstance(obj, (dict, list)) or not _plain(obj):
        return None
    return [name, json.dumps(obj, separators=(", ", ": "))]


def _list_words(flag: Flag | None, name: str, value: list[Any] | tuple[Any, ...]) -> list[str] | None:
    """A list setting: the flag then one word per item, for a flag taking several values (nargs '+')."""
    if flag is None or flag.nargs != "+" or not value or not all(
            _plain(v) and not isinstance(v, (list, dict, tuple)) for v in value):
        return None
    return [name, *(_word(v) for v in value)]


def _scalar_words(name: str, value: Any) -> list[str] | None:
    """A single plain value: the flag and its word (None for a dict, a non-plain value or an object's repr)."""
    if isinstance(value, dict) or not _plain(value):
        return None
    if isinstance(value, str) and _OBJECT_REPR.match(value.strip()):
        return None     # an object's repr (CompilationConfig(...)) is no value vLLM parses
    return [name, _word(value)]


def _resolve(key: Any) -> tuple[Flag | None, str | None]:
    """The flag a settings key names, and its long spelling; (None, None) for a name that may not be written."""
    if not isinstance(key, str) or not KEY_GRAMMAR.match(key):
        return None, None
    name = flag_of(key)
    return lookup(name), name if FLAG_GRAMMAR.match(name) else None


#: how a release without `vllm serve` (before 0.5.2) starts the OpenAI-compatible server
API_SERVER_MODULE = ("python", "-m", "vllm.entrypoints.openai.api_server", "--model")


def render_serve(model: str | None, settings: dict[str, Any], version: str | None = None,
                 env: dict[str, str] | None = None, module: bool = False) -> Rendered:
    """`[VAR=v] vllm serve MODEL --flag v ...`, every word quoted; unwritable settings left out with a note.

    A release before `vllm serve` (or `module`: the log's server was launched that way) gets
    `python -m vllm.entrypoints.openai.api_server --model MODEL ...`."""
    if not model or not isinstance(model, str):
        return Rendered(None, [NO_MODEL_NOTE])
    notes: list[str] = []
    words = [f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items() if re.fullmatch(r"[A-Z_][A-Z0-9_]*", k)]
    if not printable(model):
        return Rendered(None, ["no command is suggested: the model name from the log holds control characters"])
    module = module or not releases.has_vllm_serve(version)
    # a name that starts with `-` (from someone else's log) would be read as an option: `--model=NAME` is a value
    launch = API_SERVER_MODULE if module else ("vllm", "serve")
    if model.startswith("-"):  # `--model=NAME`: one word, a value whatever it starts with
        words += [*launch[:3], shlex.quote(f"--model={model}")]
    else:
        words += [*launch, shlex.quote(model)]
    for key, value in settings.items():
        if value is None or key == "model":
            continue
        flag, name = _resolve(key)
        if name is None:
            notes.append(f"left out '{_shown(str(key))}': not a vLLM argument name")
            continue
        if flag is not None and flag.name == "--api-key":
            words += [flag.name, API_KEY_VALUE]
            notes.append(API_KEY_NOTE)
            continue
        if flag is not None and not in_release(flag, version):
            notes.append(f"left out {flag.name}: vLLM {version} does not have it")
            continue
        cli = _cli_words(flag, name, value, version)
        if cli is not None and not all(printable(w) for w in cli):
            cli = None
        if cli is None:
            notes.append(f"left out {name}: its value from the log cannot be written as a command-line value")
            continue
        words += [cli[0], *(shlex.quote(w) for w in cli[1:])] if cli else []
    return Rendered(" ".join(words), notes)


def render_llm(model: str | None, settings: dict[str, Any], version: str | None = None) -> Rendered:
    """`LLM(model='...', key=literal, ...)`: engine arguments only (server options are not LLM's)."""
    if not model or not isinstance(model, str) or not printable(model):
        return Rendered(None, [])
    notes: list[str] = []
    args = [f"model={model!r}"]
    for key, value in settings.items():
        if value is None or key == "model":
            continue
        flag, name = _resolve(key)
        if name is None or keyword.iskeyword(key) or (flag is not None and flag.server_only):
            continue
        if flag is not None and not in_release(flag, version):
            continue
        py = _py_value(flag, value)
        if py is None:
            notes.append(f"left out {key} from LLM(...): its value from the log is not a plain literal")
            continue
        args.append(f"{key}={py!r}")
    return Rendered(f"LLM({', '.join(args)})", notes)


def _py_value(flag: Flag | None, value: Any) -> Any:
    if flag is not None and flag.json:
        value = _json_value(value)
        if not isinstance(value, (dict, list)):
            return None
    if flag is not None and flag.item:
        return None     # structured objects (LoRAModulePath) are not literals
    if isinstance(value, str) and _OBJECT_REPR.match(value.strip()):
        return None
    return value if _plain(value) and value is not None else None


def number_or_text(value: Any) -> Any:
    """A fix's rendered text '36864' reads as the number 36864 (so LLM(...) gets an int)."""
    if isinstance(value, str):
        for conv in (int, float):
            try:
                out = conv(value)
            except ValueError:
                continue
            return out if not isinstance(out, float) or math.isfinite(out) else value
    return value


# --- what vLLM's argparse says about a command line -----------------------------------------------------------

#: Unrecognized arguments named in the error (each looked up for a "did you mean"); the rest are counted.
MAX_UNKNOWN_SHOWN = 20
#: The first release whose argparse reads `--max_model_len` as `--max-model-len` (earlier ones reject it).
UNDERSCORE_SINCE = (0, 5, 1)


@dataclass
class Checked:
    """vLLM's verdict on a command line for one release: notes on what it accepts, and the error it exits with."""

    notes: list[str] = field(default_factory=list)
    error: str | None = None    #: `vllm serve: error: ...` as argparse prints it; None when it parses


def _as_written(item: Item) -> list[str]:
    """The item's words as the command line had them ('--flag=v' stays one word)."""
    if item.joined and item.words:
        return [f"{item.spelled}={item.words[0]}"]
    return [item.spelled, *(item.words or [])]


def check(args: ServeArgs, version: releases.Version) -> Checked:
    """What vLLM `version`'s argparse does with `args`: unknown flags and extra positionals (with a "did you
    mean"), a value missing, a flag removed in that release, `--snake_case` before 0.5.1; notes for
    abbreviations, underscore spellings and flags newer than the release. The first fatal problem wins, as in
    argparse; unknown words are reported together at the end, in the order written."""
    out = Checked()
    prog, shown_version = args.prog, releases.version_str(version)
    unknown = list(zip(args.positional_at, ([w] for w in args.positionals), strict=True))
    for item in args.items:
        flag, name = item.flag, item.spelled
        if flag is None:
            unknown.append((item.at, _as_written(item)))
            continue
        if item.abbreviated:
            out.notes.append(f"{name} is an abbreviation argparse accepts for {flag.name}")
        if name.startswith("--") and "_" in name.split(".", 1)[0]:
            hyphen = normalize(name)
            if version < UNDERSCORE_SINCE:
                out.notes.append(f"vLLM {shown_version} rejects {name}: "
                                 f"'{prog}: error: unrecognized arguments: {name}'; write {hyphen}")
                unknown.append((item.at, _as_written(item)))
                continue
            out.notes.append(f"{name}: vLLM 0.1-0.5.0 would fail with '{prog}: error: unrecognized "
                             f"arguments: {name}'; from 0.5.1 vLLM accepts it as {hyphen}. Write {hyphen}.")
        if flag.until and version >= releases.parse_version(flag.until):
            became = f"; use {flag.renamed_to}" if flag.renamed_to else ""
            out.error = (f"{prog}: error: unrecognized arguments: {name} ({flag.name} was removed in vLLM "
                         f"{flag.until}{became}; planning for vLLM {shown_version}, see --vllm-version)")
            return out
        if flag.since and version < releases.parse_version(flag.since):
            out.notes.append(f"{flag.name} only exists from vLLM {flag.since}")
        if flag.value and item.words == []:
            out.error = f"{prog}: error: argument {name}: expected one argument"
            return out
    if unknown:
        out.error = _unrecognized(prog, [w for _, words in sorted(unknown, key=lambda u: u[0]) for w in words])
    return out


def _unrecognized(prog: str, words: list[str]) -> str:
    """argparse's `unrecognized arguments` error, with a did-you-mean for misspelled flags."""
    shown = words[:MAX_UNKNOWN_SHOWN]
    more = f" ... and {len(words) - len(shown)} more" if len(words) > len(shown) else ""
    hints = []
    for word in shown:
        if word.startswith("--"):
            guess, score = closest_flag(word.split("=", 1)[0])
            if guess and score >= 70:
                hints.append(f"did you mean {guess}?")
    return (f"{prog}: error: unrecognized arguments: {' '.join(shown)}{more}" +
            (" (" + "; ".join(hints) + ")" if hints else ""))
