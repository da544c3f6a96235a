"""Live: diagnose a log while it is being written (`--tee`, `--follow`, `--until`, `vllm-doctor run`).

One loop, no threads: a `Feed` is the stream the reader pulls from. It waits for input with select() in
short polls, passes every byte it reads to stdout unchanged the moment it has it (`--tee`), and between
polls lets the `Watch` act on time: release the lines the matcher holds for their window once the input is
idle, decide that a failure is certain, give up at `--timeout`, print running counts. The reader, tracker,
matcher and advisor are the ones a file goes through, so a live verdict is the file's verdict.

Exit codes: 0 ready (or, for `--until exit`/`failure`, no failure), 1 a failure (printed), 3 timeout.

Here: the `Watch` and `run_live`; the sources and the `Feed` are in sources.py, `run`'s command in command.py.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from diagnoser.analysis.advise import Advisor, Finding
from diagnoser.analysis.contract import finding_dict
from diagnoser.analysis.hits import Hit
from diagnoser.analysis.matcher import Matcher
from diagnoser.analysis.pipeline import Report, prefilter_for
from diagnoser.analysis.tracker import Tracker
from diagnoser.errors import InputError
from diagnoser.ingest.line import Line
from diagnoser.ingest.reader import ReadStats, read_lines
from diagnoser.ingest.redact import Redactor
from diagnoser.live.command import Child, after_command, drain_in_background
from diagnoser.live.sources import POLL, Feed, FollowSource, PipeSource
from diagnoser.live.tee import FileTee, Tee, tee_source
from diagnoser.rules.model import Rule
from diagnoser.vllm.stages import coarse

POLL_BUSY = 0.01     #: seconds between looks while the matcher holds lines (else sources.POLL): idle this
                     #: long, they are matched (no more window coming)
SETTLE = 1.0         #: a failure is certain once the input has been idle this long after it ...
SETTLE_MAX = 5.0     #: ... or this long after it at the latest (the rest of a traceback, other ranks)
EXIT_TIMEOUT = 3

#: A traceback's frame at the module level: the exception was not caught, the interpreter exits with it.
TOPLEVEL_FRAME = re.compile(r'^\s*File "[^"]+", line \d+, in <module>\s*$|^\s*File "<frozen runpy>"')
#: What a vLLM process prints as it goes down after an error: its wrappers' exceptions, a monitor's word
#: that a process died, a fatal signal (all on lines the reader passes on: they carry rule keywords).
GOING_DOWN = re.compile(
    r"initialization failed|failed to start|See root cause above|died unexpectedly|died, exit code|"
    r"Fatal Python error|EngineCore encountered|Engine loop has died|Background loop has errored|"
    r"WorkerProc hit an exception|Worker failed with error")


class Stop(Exception):  # noqa: N818 - control flow, not an error
    """Ends the live loop early with a verdict."""

    def __init__(self, verdict: str) -> None:
        super().__init__(verdict)
        self.verdict = verdict


@dataclass
class LiveOptions:
    until: str | None = None        #: ready | failure | exit | None (watch until the input ends)
    timeout: float | None = None    #: seconds, for --until
    tee: bool = False
    fmt: str = "text"               #: text: one stderr line per finding; jsonl: events
    update_every: float = 10.0      #: a repeated finding's running count is printed at most this often
    fail_on: str = "error"


# -- the watch: what is known so far, and when to say it ---------------------------------------------------


@dataclass
class _Told:
    rule: str
    severity: str
    count: int = 1
    said_count: int = 1
    said_at: float = 0.0


@dataclass
class Watch:
    """Consumes lines; announces findings, stage changes and readiness; decides the verdict."""

    rules: list[Rule] | tuple[Rule, ...]
    opts: LiveOptions
    path: str = "-"
    redact: bool = True
    emit: Callable[[str], None] = field(default=lambda s: print(s, file=sys.stderr, flush=True))
    tee_fd: int | None = None       #: where --tee copies the input (stdout's descriptor)
    clock: Callable[[], float] = time.monotonic
    close_tee: bool = False         #: --tee: close the copy (stdout) once the input has been copied to its end
    exited: Callable[[], bool] = field(default=lambda: False)  #: `run`: whether the command has exited

    def __post_init__(self) -> None:
        self.redactor = Redactor() if self.redact else None
        self.stats = ReadStats()
        self.tracker = Tracker()
        self.matcher = Matcher(self.rules, self.tracker.context)
        self.advisor = Advisor()
        self.start = self.clock()
        self.stage: str | None = None
        self.stage_since = self.start
        self.seen = 0
        self.told: dict[str, _Told] = {}
        self.failure_at: float | None = None
        self.last_line_at = self.start
        self.ready_line: int | None = None
        self.feed: Feed | None = None
        self.tee: Tee | None = None
        # an unrecognized failure (no rule but the fallback's): certain once the process is seen going down
        self.unrecognized: int | None = None    #: line of the first exception only the fallback rule matched
        self.toplevel = False                   #: the current traceback reaches the module level (uncaught)
        self.suspect_at: float | None = None    #: when the going-down evidence came
        self.findings: list[Finding] = []
        self.last_number = 0
        # expressions compiled while the input is idle, one rule a tick, so the first hit of a rule does not
        # pay for jinja2's compiler on the way to stderr
        self._cold = [[*r.derive.values(), *(p.when for p in r.patterns if p.when), *([r.when] if r.when else [])]
                      for r in self.rules]

    # the loop -----------------------------------------------------------------------------------------

    def run(self, source: Any) -> tuple[str, int]:
        """Read `source` to its end or to a verdict: returns (verdict, exit code)."""
        tee_fd = self.tee_fd
        if isinstance(source, Tee):
            self.tee, tee_fd = source, None  # started by the caller
        elif tee_fd is not None and isinstance(source, PipeSource):
            self.tee = source = tee_source(source.fd, tee_fd, self.close_tee)  # the copy runs ahead
            tee_fd = None
        self.feed = Feed(source, self._tick, tee_fd,
                         lambda: POLL_BUSY if self.matcher.held or self._cold or self.failure_at is not None
                         or self.suspect_at is not None else POLL)
        verdict = "exit"
        try:
            for line in read_lines(self.feed, prefilter_for(self.rules), self.redactor, self.stats):
                self.last_line_at = self.clock()
                self.matcher.feed(line, self.tracker.observe(line))
                self._after_line(line)
        except Stop as stop:
            verdict = stop.verdict
        self.stats.lines = self.stats.lines or self.feed.newlines + self.feed.partial  # a reader stopped early
        if self.tee is not None and self.feed.eof:
            self.tee.finish()
        return self._verdict(verdict)

    @property
    def eof(self) -> bool:
        """Whether the input was read to its end."""
        return self.feed is not None and self.feed.eof

    def release_tee(self) -> bool:
        """After an early verdict: True when the input has more to come (for a drainer to copy)."""
        if self.tee is None:
            return not self.eof
        if isinstance(self.tee, FileTee):
            self.tee.finish()  # a file: the copy ends by itself, in a moment
            return False
        self.tee.stop()
        return not self.tee.done

    def report(self) -> Report:
        """The report of what was read so far (for the formats' renderers)."""
        self.tracker.finish()
        return Report(path=self.path, lines=self.stats.lines, bytes=self.stats.bytes, context=self.tracker.context,
                      findings=self.findings, redactions=dict(self.redactor.counts) if self.redactor else {})

    def _after_line(self, line: Line) -> None:
        number = line.number
        if len(self.matcher.hits) > self.seen:
            self._new_hits()
        self._going_down(line.text)
        stage = self.tracker.stage
        if stage != self.stage:
            self.stage, self.stage_since = stage, self.clock()
            self._event({"event": "stage", "stage": coarse(stage) if stage else None, "fine_stage": stage,
                         "line": number})
        self.last_number = number
        ctx = self.tracker.context
        # ready: the API server is up (its start line, uvicorn's), or a log joined mid-serving shows stats
        if self.ready_line is None and (ctx.server_started or ctx.stats_lines):
            self.ready_line = number
            self.matcher.finish()
            self._new_hits()
            self._event({"event": "ready", "line": self.ready_line, "after_s": round(self.clock() - self.start, 3)})
            if self.opts.until == "ready":
                raise Stop("ready")
        self._check()

    def _tick(self, idle: bool) -> None:
        now = self.clock()
        if idle and self.matcher.held:
            self.matcher.finish()  # nothing more is coming for now: match the held lines
            self._new_hits()
        elif idle and self._cold:
            for source in self._cold.pop():
                self.matcher.ev.value(source, {})
        self._check()
        self._counts(now)

    def _check(self) -> None:
        now = self.clock()
        if self.opts.timeout is not None and now - self.start >= self.opts.timeout:
            raise Stop("timeout")
        if self.failure_at is not None and self.opts.until in ("failure", "ready"):
            idle = now - max(self.last_line_at, self.failure_at)
            if idle >= SETTLE or now - self.failure_at >= SETTLE_MAX:
                raise Stop("failure")
        if self.suspect_at is not None and self.opts.until in ("failure", "ready"):
            idle = now - max(self.last_line_at, self.suspect_at)
            if idle >= SETTLE or now - self.suspect_at >= SETTLE_MAX:
                self.suspect_at = None
                if self._unrecognized_error():
                    raise Stop("failure")
        if self.feed is not None and now - self.feed.last_data >= SETTLE and self.exited():
            raise Stop("exit")  # the command is gone and its output has stopped (a worker may hold the pipe)

    def _going_down(self, text: str) -> None:
        """Watch for the process going down after an exception only the fallback rule explains."""
        if text.startswith("Traceback (most recent call last)"):
            self.toplevel = False
        elif TOPLEVEL_FRAME.match(text):
            self.toplevel = True
            self._suspect()
        elif GOING_DOWN.search(text):
            self._suspect()

    def _suspect(self) -> None:
        if self.unrecognized is not None and self.failure_at is None and self.suspect_at is None:
            self.suspect_at = self.clock()

    def _unrecognized_error(self) -> bool:
        """Whether the report, as of now, has an error (the fallback's conditions are evaluated as for a file)."""
        self.matcher.finish()
        self._new_hits()
        return any(f.severity == "error" for f in self.advisor.findings(list(self.matcher.hits), self.tracker.context))

    def _new_hits(self, final: bool = False) -> None:
        """Announce each rule the first time it hits, straight from the hit (no advice rendering on the way:
        the first rendering compiles templates, too slow for a live line); count its repeats."""
        hits = self.matcher.hits
        fresh = hits[self.seen:]
        self.seen = len(hits)
        replaced = {(h.line.number, rid) for h in fresh for rid in h.rule.overrides}
        for h in fresh:
            rule = h.rule
            if rule.id in self.told:
                self.told[rule.id].count += 1
                continue
            if rule.fallback and rule.severity == "error" and self.unrecognized is None:
                self.unrecognized = h.line.number
                if self.toplevel:  # the exception ends a traceback from the module level: uncaught
                    self._suspect()
            if rule.severity == "info" or rule.keep_when or rule.fallback or (h.line.number, rule.id) in replaced:
                continue  # these need the whole picture: reported with the findings at the end
            stage = rule.stage_of(h.stage, h.pattern.generic)
            self.told[rule.id] = _Told(rule.id, rule.severity, count=1, said_count=1, said_at=self.clock())
            self._announce(h, stage)
            if rule.severity == "error" and self.failure_at is None:
                self.failure_at = self.clock()
        if final:
            self.findings = self.advisor.findings(list(hits), self.tracker.context)

    def _announce(self, hit: Hit, stage: str | None) -> None:
        rule = hit.rule
        if self.opts.fmt == "jsonl":
            self._event({"event": "finding", "rule": rule.id, "title": rule.title, "severity": rule.severity,
                         "stage": stage, "fine_stage": rule.fine_stage or hit.fine_stage, "line": hit.line.number,
                         "text": hit.line.text, "facts": hit.facts})
        else:
            self.emit(f"vllm-doctor: line {hit.line.number}: {rule.severity} [{rule.id}] {rule.title} "
                      f"(stage: {stage or 'unknown'})")

    def _counts(self, now: float) -> None:
        for rid, told in self.told.items():
            if told.count > told.said_count and now - told.said_at >= self.opts.update_every:
                told.said_count, told.said_at = told.count, now
                if self.opts.fmt == "jsonl":
                    self._event({"event": "count", "rule": rid, "occurrences": told.count})
                elif told.severity != "info":
                    self.emit(f"vllm-doctor: [{rid}] seen {told.count} times so far")

    def _event(self, doc: dict[str, Any]) -> None:
        if self.opts.fmt == "jsonl":
            self.emit(json.dumps({"schema_version": 1, **doc}, ensure_ascii=False, default=str,
                                 separators=(",", ":")))

    def _verdict(self, verdict: str) -> tuple[str, int]:
        """The exit code for how the loop ended, and the closing events."""
        self.matcher.finish()
        self._new_hits(final=True)
        errors = [f for f in self.findings if f.severity == "error"]
        elapsed = self.clock() - self.start
        if verdict == "ready":
            code = 0
        elif verdict == "timeout":
            code = EXIT_TIMEOUT
            stage = self.stage or "unknown"
            message = (f"vllm-doctor: timeout after {elapsed:.0f} s: "
                       f"{'not ready yet' if self.opts.until == 'ready' else 'still running'}; stage "
                       f"{coarse(self.stage) if self.stage else 'unknown'} ({stage}) for "
                       f"{self.clock() - self.stage_since:.0f} s, line {self.last_number}")
            if self.opts.fmt == "jsonl":
                self._event({"event": "timeout", "stage": coarse(self.stage) if self.stage else None,
                             "fine_stage": self.stage, "stage_for_s": round(self.clock() - self.stage_since, 3),
                             "after_s": round(elapsed, 3)})
            else:
                self.emit(message)
        elif verdict == "failure" or errors:
            verdict, code = "failure", 1
        elif self.opts.until == "ready":
            verdict, code = "ended", 1  # the log ended (the server exited) before it was ready
            if self.opts.fmt != "jsonl":
                self.emit(f"vllm-doctor: the log ended before the server was ready (stage: "
                          f"{coarse(self.stage) if self.stage else 'unknown'})")
        else:
            code = 0
        self._event({"event": "summary", "verdict": verdict, "exit_code": code, "after_s": round(elapsed, 3),
                     "lines": self.stats.lines or self.last_number, "ready_line": self.ready_line,
                     "counts": {s: sum(1 for f in self.findings if f.severity == s)
                                for s in ("error", "warning", "info")},
                     "findings": [finding_dict(f) for f in self.findings]})
        return verdict, code


# -- the whole live run, for the CLI -----------------------------------------------------------------------


def run_live(opts: LiveOptions, rules: list[Rule] | tuple[Rule, ...], render: Callable[[Report], str],
             path: str = "-", *, follow: str | None = None, command: list[str] | None = None, redact: bool = True,
             output: str | None = None, kill_on_failure: bool = False,
             exit_code: Callable[[Report], int] = lambda r: 0, tee: Tee | None = None) -> int:
    """Read stdin, a file, a followed file or a command's output live; print as it goes; return the exit code.

    With --tee stdout carries the input, so everything the doctor says goes to stderr; without it the closing
    report (or, with --format jsonl, the events) goes to stdout. `tee`: the copy of stdin or `path`, started
    by the caller (tee.start) before the rules were loaded.
    """
    events_to = sys.stderr if opts.tee or opts.fmt != "jsonl" else sys.stdout
    watch = Watch(rules, opts, path=follow or (" ".join(command) if command else path), redact=redact,
                  emit=lambda s: print(s, file=events_to, flush=True),
                  tee_fd=sys.stdout.fileno() if opts.tee else None, close_tee=opts.tee)
    source, child, fh = _live_source(watch, path, follow, command, tee)
    try:
        verdict, code = watch.run(source)
    except KeyboardInterrupt:
        verdict, code = watch._verdict("exit")
    report = watch.report()
    if verdict == "exit":
        code = exit_code(report)
    more = watch.release_tee() if verdict != "exit" or not watch.eof else False  # the copy stops or ends here
    if child is not None:
        code = after_command(child, verdict, code, more, opts.tee, kill_on_failure)
    elif verdict in ("ready", "failure", "timeout") and not follow and fh is None and path == "-" and more:
        drain_in_background(sys.stdin.fileno(), opts.tee)  # the producer keeps its pipe
    if fh is not None:
        fh.close()
    if watch.tee is not None:
        watch.tee.close()
    _closing_output(watch, verdict, report, render, output)
    return code


def _live_source(watch: Watch, path: str, follow: str | None, command: list[str] | None,
                 tee: Tee | None) -> tuple[Any, Child | None, BinaryIO | None]:
    """What the watch reads: a followed file, a started command, the caller's copy, a file or stdin; with the
    command (its exit ends the watch) and the file opened here (closed by the caller)."""
    if follow:
        return FollowSource(follow), None, None
    if command:
        child = Child(command)
        watch.exited = child.exited
        return child.source, child, None
    if tee is not None:
        return tee, None, None
    if path != "-":
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed by run_live
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror or exc}); check the path") from None
        return PipeSource(fh.fileno()), None, fh
    return PipeSource(sys.stdin.fileno()), None, None


def _closing_output(watch: Watch, verdict: str, report: Report, render: Callable[[Report], str],
                    output: str | None) -> None:
    """The last word: the ready line, or the closing report (to -o, or stdout; stderr with --tee). With
    --format jsonl the summary event already said it."""
    opts = watch.opts
    if verdict == "ready" and opts.fmt != "jsonl":
        print(f"vllm-doctor: ready at line {watch.ready_line} after {watch.clock() - watch.start:.1f} s",
              file=sys.stderr, flush=True)
    elif opts.fmt != "jsonl" and (verdict != "ready"):
        text = render(report)
        if output:
            with open(output, "w", encoding="utf-8") as out:
                out.write(text)
        else:
            stream = sys.stderr if opts.tee else sys.stdout
            stream.write(text)
            stream.flush()
