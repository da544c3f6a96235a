"""The line record: one cleaned line of the log, and the prefixes stripped from it.

A `Line` is what every later layer sees: its number in the input, the message (`text`) and the raw text it
came from (evidence), with what the prefixes said recorded beside it (process, pid, rank, level, time, the
source file). `parse_line` strips those prefixes (docker, Kubernetes, CI, journald, chat quoting, vLLM's logger
and its process tags; `PREFIXES`, repeatedly, in any order) and marks a line that echoes user content (a
prompt, a request), which must never be taken for vLLM's own message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diagnoser.ingest.keywords import KeywordIndex, lowered_part
from diagnoser.lazyre import lazy

LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
PROC = r"\((?P<proc>[A-Za-z_][\w]*(?:[ _][\w=]+)*?)\s+pid=(?P<pid>\d+)(?:,\s*ip=[^)\s]*)?\)"

#: Prefixes stripped from the start of a line, repeatedly, in any order.
PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("quote", re.compile(r"^(?:>[ \t]?)+")),
    # shippers' text shapes (JSON records are decoded before, in wrappers.py): `kubectl logs --prefix`,
    # `journalctl -o short-iso` (time, host, identifier[pid]), RFC 5424 syslog
    ("kubectl", re.compile(r"^\[(?:pod/)?[\w.-]+/[\w.-]+\] ")),
    ("journal", re.compile(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) [\w.-]+ [\w.@/-]+\[\d+\]: ")),
    ("rfc5424", re.compile(r"^<\d{1,3}>1 \S+ \S+ \S+ \S+ \S+ (?:-|(?:\[[^\]]*\])+) ?")),
    ("iso", re.compile(
        r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*(?:\|\s*)?")),
    ("syslog", re.compile(
        r"^(?:<\d{1,3}>)?[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? [\w.-]+ [\w.@/-]+(?:\[\d+\])?: ")),
    ("cri", re.compile(r"^(?:stdout|stderr) [FP] ")),
    ("compose", re.compile(r"^[a-z0-9][\w.-]*-\d+\s+\| ")),
    ("pipe", re.compile(rf"^(?:(?:{LEVELS})\s*\|\s*)?(?:stdout|stderr)\s*\|\s*")),
    ("proc", re.compile("^" + PROC + r"\s?")),
    # Ray's own daemons, relayed to the driver's output without a pid: "(raylet) ...", "(raylet, ip=10.0.0.5) ..."
    ("raytag", re.compile(r"^\((?:raylet|gcs_server|autoscaler|monitor|log_monitor|dashboard_agent)"
                          r"(?:,\s*ip=[^)\s]*)?\)\s?")),
    ("rank", re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")),
    ("vllm", re.compile(
        rf"^(?P<level>{LEVELS}) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? "
        r"(?:\[(?P<src>[^\]\s]+:\d+)\]|(?P<src_old>[\w./-]+:\d+)\])?[ \t]?")),
    ("uvicorn", re.compile(rf"^(?P<level>{LEVELS}):\s+")),
)


def _any_prefix(prefixes: tuple[tuple[str, re.Pattern[str]], ...]) -> re.Pattern[str]:
    """PREFIXES as one alternation, each in a group named after it (its own groups renamed `NAME__GROUP`):
    one C-level match per prefix stripped instead of a Python call per table row. Alternatives are tried in
    the table's order, so the first row that matches wins, as in the loop."""
    def own(name: str, body: str) -> str:
        return re.sub(r"\(\?P<(\w+)>", lambda m: f"(?P<{name}__{m.group(1)}>", body)
    return re.compile("|".join(f"(?P<{name}>{own(name, p.pattern)})" for name, p in prefixes))


_PREFIX = _any_prefix(PREFIXES)
_PREFIX_GROUPS = {name: [(f"{name}__{g}", g) for g in p.groupindex] for name, p in PREFIXES}
RANK_IN_PROC = lazy(r"(?:rank=|TP|rank)(\d+)")

#: Lines that echo user content (prompts) must never be taken for vLLM's own messages.
USER_CONTENT = lazy(
    r"^(?:Received request|Added request|Finished request|Aborted request|Request \S+ (?:details|params))"
    r"|\bprompt: '|\bprompt_token_ids: \[|\"(?:GET|POST|PUT|DELETE) /"
)
#: What USER_CONTENT needs: one of its line starts, or one of these literals.
_USER_CONTENT_STARTS = ("Received request", "Added request", "Finished request", "Aborted request", "Request ")
_USER_CONTENT_WORDS = ("prompt: '", "prompt_token_ids: [", '"GET /', '"POST /', '"PUT /', '"DELETE /')
_USER_CONTENT_ANY = KeywordIndex([w] for w in _USER_CONTENT_WORDS)


@dataclass(slots=True)
class Line:
    """One cleaned line. `text` is the message; `raw` keeps the prefixes for evidence."""

    number: int
    text: str
    raw: str
    process: str | None = None
    pid: int | None = None
    rank: int | None = None
    level: str | None = None
    timestamp: str | None = None
    source: str | None = None
    user_content: bool = False
    follow: bool = False  #: kept only because it follows a keyword line
    #: the component (analysis/frames.py) its traceback's frames or its logger's file name; set by the tracker
    component: str | None = None

    @property
    def proc_key(self) -> str:
        """Identifies the process that wrote the line (tracebacks are tracked per process)."""
        if self.pid is not None:
            return f"{self.process}:{self.pid}"
        return self.process or ""



def parse_line(number: int, text: str, follow: bool = False) -> Line:
    """Strip and record the prefixes of one clean line."""
    line = Line(number=number, text=text, raw=text, follow=follow)
    rest = text
    guard = 0
    while rest and guard < 8:
        guard += 1
        found = _next_prefix(rest)
        if found is None:
            break
        name, m, groups = found
        if name == "proc":
            if line.process is None:
                line.process = groups["proc"]
                line.pid = int(groups["pid"])
                r = RANK_IN_PROC.search(groups["proc"])
                if r and line.rank is None:
                    line.rank = int(r.group(1))
        elif name == "rank":
            line.rank = int(groups["rank"])
        elif name in ("vllm", "uvicorn"):
            line.level = groups["level"]
            line.timestamp = groups.get("ts")
            line.source = groups.get("src") or groups.get("src_old")
        rest = rest[m.end():]
    line.text = rest.rstrip()
    lowered_part(text, line.text, len(text) - len(rest))  # a long piece's lower-cased copy, not made again
    line.user_content = _user_content(line.text)
    return line


def _next_prefix(rest: str) -> tuple[str, re.Match[str], dict[str, str | None]] | None:
    """The first PREFIXES row that matches a non-empty start of `rest`: (name, match, its groups)."""
    m = _PREFIX.match(rest)
    if m is None:
        return None  # no row matches (the common last round: one C-level try)
    if m.end() > 0:
        name = m.lastgroup or ""
        return name, m, {group: m.group(full) for full, group in _PREFIX_GROUPS[name]}
    for name, pattern in PREFIXES:  # a row matched empty: the table's loop skips such a match
        m = pattern.match(rest)
        if m and m.end() > 0:
            return name, m, m.groupdict()
    return None


def _user_content(text: str) -> bool:
    """USER_CONTENT.search(text), with the regex run only when one of its literals is there (an alternation with
    word boundaries scans a 1 MB piece of an enormous line at about 6 MB/s, and costs a stats line 5 us)."""
    if not text.startswith(_USER_CONTENT_STARTS) and not _USER_CONTENT_ANY.any_in(text):
        return False
    return USER_CONTENT.search(text) is not None

