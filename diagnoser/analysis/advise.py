"""Advise: hits -> findings, ranked, with advice and fixes computed from the numbers.

Hits of one rule that agree on their facts are one finding (the same error printed by each tensor-parallel
rank lists the ranks); aggregate rules (preemption) fold every hit into one summary. A generic phrase
never outranks a specific message, and a fallback rule (unrecognized-failure) only speaks when no other
error does. The primary finding is the earliest specific error: the root cause, not the wrapper that
reported it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnoser.analysis.expressions import Evaluator, derive_facts, template_names
from diagnoser.analysis.fold import Fold
from diagnoser.analysis.hits import MAX_EVIDENCE, Hit, drop_shadowed
from diagnoser.analysis.tracker import Context
from diagnoser.ingest.reader import Line
from diagnoser.lazyre import lazy
from diagnoser.rules.model import SEVERITY_RANK, Fix, Rule
from diagnoser.vllm import serve_args
from diagnoser.vllm.flags import lookup as lookup_flag

BLANK_RUN = lazy(r"\n[ \t]*\n(?:[ \t]*\n)+")  #: template branches leave runs of blank lines
#: Settings never carried into a suggested command (secrets, and values that only restate the model; --api-key
#: is written as "$VLLM_API_KEY" by serve_args).
COMMAND_SKIP = {"model", "model_tag", "hf_token", "token", "served_model_name_internal"}
#: From a full Namespace(...) dump (old releases), the settings worth repeating in a suggested command.
NAMESPACE_KEEP = {
    "max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size", "dtype",
    "kv_cache_dtype", "quantization", "max_num_seqs", "max_num_batched_tokens", "enforce_eager",
    "trust_remote_code", "enable_chunked_prefill", "cpu_offload_gb", "swap_space", "block_size",
    "served_model_name", "port", "enable_prefix_caching",
}


@dataclass
class Finding:
    """One diagnosis: what, where, the numbers, and what to do."""

    rule: Rule
    severity: str
    stage: str | None
    fine_stage: str | None
    line: int
    end_line: int
    evidence: list[Line]
    facts: dict[str, Any]
    advice: str = ""
    fixes: list[dict[str, Any]] = field(default_factory=list)
    command: str | None = None
    python: str | None = None
    command_notes: list[str] = field(default_factory=list)  #: what the command leaves out, and why
    ranks: list[int] = field(default_factory=list)
    occurrences: int = 1
    generic: bool = False

    @property
    def title(self) -> str:
        return self.rule.title


def _compatible(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _group(hits: list[Hit]) -> list[list[Hit]]:
    """Hits of one rule with agreeing facts form one group; aggregate rules form one group each.

    A hit joins the first group (in order of creation) of its rule whose merged facts agree with it on every
    key both have, or that holds only other tensor-parallel ranks. Indexed, so that twenty thousand distinct
    exceptions take linear time, not the quadratic scan over every earlier group.
    """
    groups: list[list[Hit]] = []
    by_rule: dict[str, _RuleGroups] = {}
    for hit in hits:
        rg = by_rule.get(hit.rule.id)
        if rg is None:
            rg = by_rule[hit.rule.id] = _RuleGroups()
        gid = (0 if rg.groups else None) if hit.rule.aggregate else rg.find(hit)
        if gid is None:
            groups.append(rg.new(hit))
        else:
            rg.add(gid, hit)
    return groups


def _freeze(value: Any) -> Any:
    """A hashable stand-in that is equal exactly when the values are (lists and dicts as tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return ("__dict__", tuple(sorted(((str(k), _freeze(v)) for k, v in value.items()))))
    try:
        hash(value)
    except TypeError:
        return ("__repr__", repr(value))
    return value


class _RuleGroups:
    """One rule's groups, their merged facts, and the indexes that find a hit's group without a scan."""

    def __init__(self) -> None:
        self.groups: list[list[Hit]] = []
        self.merged: list[dict[str, Any]] = []
        self._order: list[dict[str, tuple[tuple[int, int], Any]]] = []  #: per key: (rank, line) of its value
        self.keyset: list[frozenset[str]] = []
        self.ranks: list[set[int | None]] = []
        self.buckets: dict[frozenset[str], set[int]] = {}
        #: (group keyset, keys shared with a hit) -> projection of the merged facts on those keys -> groups
        self.indexes: dict[tuple[frozenset[str], frozenset[str]], dict[tuple[Any, ...], set[int]]] = {}
        self.cursor: dict[int, int] = {}  #: per rank: no group before this one can take that rank

    def find(self, hit: Hit) -> int | None:
        facts = hit.facts
        keys = frozenset(facts)
        best: int | None = None
        for keyset, members in self.buckets.items():
            if not members:
                continue
            shared = keyset & keys
            if not shared:
                found = min(members)
            else:
                names = tuple(sorted(shared))
                index = self._index(keyset, shared, names)
                hit_ids = index.get(tuple(_freeze(facts[k]) for k in names))
                found = min(hit_ids) if hit_ids else None
            if found is not None and (best is None or found < best):
                best = found
        rank = hit.line.rank
        if rank is not None:
            c = self.cursor.get(rank, 0)
            while c < len(self.groups) and (None in self.ranks[c] or rank in self.ranks[c]):
                c += 1  # a group that holds this rank (or a rankless hit) never takes it: skip it for good
            self.cursor[rank] = c
            if c < len(self.groups) and (best is None or c < best):
                best = c
        return best

    def _index(self, keyset: frozenset[str], shared: frozenset[str], names: tuple[str, ...]
               ) -> dict[tuple[Any, ...], set[int]]:
        index = self.indexes.get((keyset, shared))
        if index is None:
            index = self.indexes[(keyset, shared)] = {}
            for gid in self.buckets.get(keyset, ()):
                index.setdefault(self._project(gid, names), set()).add(gid)
        return index

    def _project(self, gid: int, names: tuple[str, ...]) -> tuple[Any, ...]:
        merged = self.merged[gid]
        return tuple(_freeze(merged[k]) for k in names)

    def new(self, hit: Hit) -> list[Hit]:
        gid = len(self.groups)
        group = [hit]
        self.groups.append(group)
        self.merged.append({})
        self._order.append({})
        self.keyset.append(frozenset())
        self.ranks.append(set())
        self._register(gid)
        self.add(gid, hit, first=True)
        return group

    def add(self, gid: int, hit: Hit, first: bool = False) -> None:
        if not first:
            self.groups[gid].append(hit)
        self.ranks[gid].add(hit.line.rank)
        key = (hit.line.rank if hit.line.rank is not None else -1, hit.line.number)
        order, merged = self._order[gid], self.merged[gid]
        changes = {k: v for k, v in hit.facts.items() if k not in order or key < order[k][0]}
        if not changes:
            return
        self._unregister(gid)
        for k, v in changes.items():
            order[k] = (key, v)
            merged[k] = v
        self.keyset[gid] = frozenset(merged)
        self._register(gid)

    def _register(self, gid: int) -> None:
        keyset = self.keyset[gid]
        self.buckets.setdefault(keyset, set()).add(gid)
        for (ks, shared), index in self.indexes.items():
            if ks == keyset:
                index.setdefault(self._project(gid, tuple(sorted(shared))), set()).add(gid)

    def _unregister(self, gid: int) -> None:
        keyset = self.keyset[gid]
        self.buckets.get(keyset, set()).discard(gid)
        for (ks, shared), index in self.indexes.items():
            if ks == keyset:
                members = index.get(self._project(gid, tuple(sorted(shared))))
                if members is not None:
                    members.discard(gid)


def _other_rank(group: list[Hit], hit: Hit) -> bool:
    """The same failure on another tensor-parallel rank (its own numbers) is the same finding."""
    ranks = {h.line.rank for h in group}
    return hit.line.rank is not None and None not in ranks and hit.line.rank not in ranks


def _merged_facts(group: list[Hit]) -> dict[str, Any]:
    """Facts of a group; where ranks disagree, the lowest rank's numbers win (rank 0 is the reference)."""
    facts: dict[str, Any] = {}
    for h in sorted(group, key=lambda h: (h.line.rank if h.line.rank is not None else -1, h.line.number)):
        for k, v in h.facts.items():
            facts.setdefault(k, v)
    return facts


def _aggregate(rule: Rule, group: list[Hit]) -> dict[str, Any]:
    facts = _merged_facts(group)
    for name, how in rule.aggregate.items():
        values = [h.facts[name] for h in group if name in h.facts]
        if how == "count":
            facts[name] = len(values)
            continue
        if not values:
            facts.pop(name, None)
            continue
        if how == "max":
            facts[name] = max(values)
        elif how == "min":
            facts[name] = min(values)
        elif how == "sum":
            facts[name] = sum(values)
        elif how == "first":
            facts[name] = values[0]
        elif how == "last":
            facts[name] = values[-1]
        elif how == "list":
            facts[name] = [v for v in values if v is not None]
        elif how == "distinct":
            facts[name] = sorted({str(v) for v in values})
    stamped = [h.line.timestamp for h in group if h.line.timestamp]
    facts["hits"] = len(group)
    facts["first_line"], facts["last_line"] = group[0].line.number, group[-1].line.number
    if stamped:
        facts["first_time"], facts["last_time"] = stamped[0], stamped[-1]
    return facts


def command_settings(ctx: Context) -> dict[str, Any]:
    """The log's own settings worth repeating in a suggested command (Python names -> values)."""
    settings: dict[str, Any] = {}
    full_dump = ctx.args_source == "namespace"
    for key, value in ctx.args.items():
        if key in COMMAND_SKIP or value is None:
            continue
        # a Namespace(...) dump lists every default too: keep only what shapes memory and the model
        if full_dump and (key not in NAMESPACE_KEEP or value in ("None", "", [], {}) or value is False):
            continue
        flag = lookup_flag("--" + str(key).replace("_", "-"))
        if flag is not None and flag.default is not None and value == flag.default:
            continue
        settings[key] = value
    if not ctx.args:
        # no args line in the log: repeat what the engine config line says the user chose
        settings.update(_chosen_in_engine_config(ctx))
    return settings


#: why a finding shows no command: its fix is not a flag (a token, a driver, a file) ...
NOT_A_FLAG_FIX = "no command is suggested: the fix is not a change to the command line"
#: ... or its flag's value needs a number the log does not print
NO_VALUE = "no command is suggested: the log does not print the numbers that size the flag's value (see above)"
#: advice that spells a whole command itself (`vllm serve ...`, `python -m vllm...`): no note is needed
COMMAND_IN_ADVICE = lazy(r"`(?:vllm serve|python -m vllm)\b")


def build_command(ctx: Context, fixes: list[dict[str, Any]]) -> tuple[str | None, str | None, list[str]]:
    """The corrected `vllm serve` command, its Python LLM(...) spelling, and notes on what was left out.

    No command is shown when the model is unknown, or when the fixes change nothing on the command line
    (repeating the failing command would suggest it works).
    """
    settings = command_settings(ctx)
    before = dict(settings)
    env: dict[str, str] = {}
    for fix in fixes:
        if fix.get("env"):
            env[str(fix["env"])] = str(fix["value"])
            continue
        key = serve_args.key_of(fix["flag"])
        value = fix.get("value")
        if value in (None, "", True, "true", "True"):
            settings[key] = True
        elif value in ("false", "False", "remove"):
            settings.pop(key, None)
        else:
            settings[key] = serve_args.number_or_text(value)
    if ctx.model and settings == before and not env:
        return None, None, [NOT_A_FLAG_FIX]
    cmd = serve_args.render_serve(ctx.model, settings, ctx.version, env)
    py = serve_args.render_llm(ctx.model, settings, ctx.version)
    return cmd.text, py.text, cmd.notes + py.notes


def _chosen_in_engine_config(ctx: Context) -> dict[str, Any]:
    """Settings the engine's `with config:` line shows that differ from what vLLM would pick by itself."""
    out: dict[str, Any] = {}
    if ctx.tensor_parallel_size and ctx.tensor_parallel_size > 1:
        out["tensor_parallel_size"] = ctx.tensor_parallel_size
    if ctx.pipeline_parallel_size and ctx.pipeline_parallel_size > 1:
        out["pipeline_parallel_size"] = ctx.pipeline_parallel_size
    if ctx.quantization and str(ctx.quantization) != "None":
        out["quantization"] = ctx.quantization
    if ctx.kv_cache_dtype and ctx.kv_cache_dtype != "auto":
        out["kv_cache_dtype"] = ctx.kv_cache_dtype
    if ctx.enforce_eager:
        out["enforce_eager"] = True
    return out


#: compiled advice templates by source, shared by every Advisor: a scan of many logs compiles each once
_TEMPLATES: dict[str, Any] = {}


class Advisor:
    """Turns hits into ranked findings for one log."""

    def __init__(self) -> None:
        self.env: Any = None   # the sandbox (and jinja2) load with the first finding to render
        self.ev = Evaluator()
        self._templates = _TEMPLATES

    def findings(self, hits: list[Hit], ctx: Context, folds: dict[str, Fold] | None = None) -> list[Finding]:
        """`folds`: aggregate rules with more hits than were kept whole (Matcher.folds)."""
        ctx_dict = ctx.as_dict(internal=True)
        found: list[Finding] = []
        for group in _group(drop_shadowed(hits)):
            rule = group[0].rule
            finding = self._finding(group, folds.get(rule.id) if folds and rule.aggregate else None, ctx_dict)
            if "cause" in rule.facts and "cause" not in finding.facts:
                _take_cause(finding, hits, ctx, group)
            if not self._kept(finding, ctx_dict):
                continue
            if finding.severity == "error" and _recovered(finding, ctx):
                finding.severity = "info"
                finding.facts["recovered_at"] = ctx.ready_line
            found.append(finding)
        kept = _ranked(_one_cause(found, ctx))
        for finding in kept:  # only what is reported: a log of distinct fallback groups renders one advice
            self._render(finding, ctx, ctx_dict)
        return kept

    def _finding(self, group: list[Hit], fold: Fold | None, ctx_dict: dict[str, Any]) -> Finding:
        """One group's finding: its facts (derived ones too), stage, first line, evidence and ranks."""
        rule = group[0].rule
        specific = [h for h in group if not h.pattern.generic]
        anchor = specific[0] if specific else group[0]
        staged = _staged_hit(group, specific, anchor)
        stage = rule.stage_of(staged.stage, staged.pattern.generic)
        facts = derive_facts(rule, _group_facts(rule, group, fold), ctx_dict, self.ev, stage)
        ranks = sorted(fold.ranks if fold is not None else {h.line.rank for h in group if h.line.rank is not None})
        return Finding(
            rule=rule, severity=rule.severity, stage=stage,
            fine_stage=rule.fine_stage or staged.fine_stage, line=anchor.line.number,
            end_line=max(anchor.end_line, anchor.line.number), evidence=_evidence(group), facts=facts,
            ranks=ranks, occurrences=fold.count if fold is not None else len(group), generic=not specific,
        )

    def _kept(self, finding: Finding, ctx_dict: dict[str, Any]) -> bool:
        """The rule's `keep_when` on the finished finding (true when the rule has none)."""
        rule = finding.rule
        return not rule.keep_when or self.ev.truth(
            rule.keep_when, {**template_names(finding.facts, ctx_dict), "line": finding.line, "stage": finding.stage,
                             "fine_stage": finding.fine_stage})

    def _render(self, finding: Finding, ctx: Context, ctx_dict: dict[str, Any]) -> None:
        rule = finding.rule
        names = template_names(finding.facts, ctx_dict)
        names.update({"severity": finding.severity, "rule_id": rule.id, "ranks": finding.ranks,
                      "stage": finding.stage})
        fixes = [f for f in (self._fix(fx, names) for fx in rule.fixes) if f]
        finding.fixes = fixes
        if finding.severity == "error" or (fixes and ctx.args):
            finding.command, finding.python, finding.command_notes = build_command(ctx, fixes)
        names["command"] = finding.command or ""
        finding.advice = self._text(rule.advice, names, rule)
        if NOT_A_FLAG_FIX in finding.command_notes:
            notes = [n for n in finding.command_notes if n != NOT_A_FLAG_FIX]
            if not COMMAND_IN_ADVICE.search(finding.advice):
                notes.insert(0, NO_VALUE if any(fx.flag for fx in rule.fixes) else NOT_A_FLAG_FIX)
            finding.command_notes = notes
        if finding.facts.get("recovered_at"):
            finding.advice = (f"Not a failure: the start-up completed after this (ready at line "
                              f"{finding.facts['recovered_at']}), so vLLM recovered from it (a retry or a "
                              f"fallback). Reported for information only.\n{finding.advice}")

    def _fix(self, fix: Fix, names: dict[str, Any]) -> dict[str, Any] | None:
        if fix.when and not self.ev.truth(fix.when, names):
            return None
        value = self._text(fix.value, names, None).strip()
        if fix.value and not value:
            return None
        flag = self._text(fix.flag, names, None).strip() if fix.flag and "{" in fix.flag else fix.flag
        if fix.flag and not flag:
            return None
        out: dict[str, Any] = {"flag": flag, "value": value, "reason": self._text(fix.reason, names, None)}
        if fix.env:
            out["env"] = fix.env
        if fix.diagnostic:
            out["diagnostic"] = True
        return out

    def _text(self, source: str, names: dict[str, Any], rule: Rule | None) -> str:
        from diagnoser.rules.sandbox import render, template, template_env

        tpl = self._templates.get(source)
        if tpl is None:
            self.env = self.env or template_env()
            tpl = self._templates[source] = template(self.env, source)
        try:
            return BLANK_RUN.sub("\n\n", render(tpl, names)).strip()
        except Exception as exc:  # noqa: BLE001 - a template over unusual facts must not kill the report
            if rule is None:
                return ""
            return f"{rule.title}. (Advice could not be computed from these numbers: {exc}.)"


def _group_facts(rule: Rule, group: list[Hit], fold: Fold | None) -> dict[str, Any]:
    """A group's facts: an aggregate rule's from its fold (or its hits), another rule's merged across ranks."""
    if fold is not None:
        return fold.facts(rule)
    return _aggregate(rule, group) if rule.aggregate else _merged_facts(group)


def _staged_hit(group: list[Hit], specific: list[Hit], anchor: Hit) -> Hit:
    """The hit whose stage is the finding's: the anchor, else the first (specific) hit with a stage. The same
    error printed again with frames or after a landmark (a C++ watchdog line first, the Python traceback
    later) says where it happened, when its first printing does not."""
    if anchor.stage is not None:
        return anchor
    return next((h for h in (specific or group) if h.stage is not None), anchor)


def _one_cause(found: list[Finding], ctx: Context) -> list[Finding]:
    """One failure, one error: within one start-up, a rule's later errors (the same segment again, a second
    library with the same bad build) and the errors of rules its rule `explains` (NCCL's "unhandled system
    error" after a failed /dev/shm segment) become evidence of the first error, not errors of their own."""
    out: list[Finding] = []
    folded: set[int] = set()
    ordered = sorted(found, key=lambda f: f.line)
    for i, f in enumerate(ordered):
        root = None if f.severity != "error" else next(
            (r for j, r in enumerate(ordered) if j != i and id(r) not in folded and r.severity == "error"
             and _same_start(r, f, ctx) and (f.rule.id in r.rule.explains or (r.rule.id == f.rule.id and j < i))),
            None)
        if root is None:
            out.append(f)
            continue
        folded.add(id(f))
        _fold_into(root, f)
    return [f for f in out if id(f) not in folded]


def _same_start(a: Finding, b: Finding, ctx: Context) -> bool:
    """Whether two findings are of one start-up: none became ready between them."""
    ready = ctx.ready_line
    return ready is None or (a.line < ready) == (b.line < ready)


def _fold_into(root: Finding, other: Finding) -> None:
    """`other` as evidence of `root`: its first line, its count, and (another rule's) a sentence naming it."""
    lines = [ln for ln in other.evidence[:1] if all(ln.number != e.number for e in root.evidence)]
    root.evidence = sorted([*root.evidence[:MAX_EVIDENCE - len(lines)], *lines], key=lambda line: line.number)
    root.end_line = max(root.end_line, other.line)
    root.occurrences += other.occurrences
    if other.rule.id != root.rule.id:
        root.facts.setdefault("also_reported_as", []).append(other.rule.id)
        root.advice += (f"\nThe {other.rule.id} error at line {other.line} is this failure reported again: it "
                        "goes away with it.")


def _ranked(found: list[Finding]) -> list[Finding]:
    """A fallback finding speaks only when no other finding is an error (and then only the first one); ranked by
    severity, fallback last, a wrapper after what it wraps, specific before generic, then the earliest line."""
    errors = [f for f in found if f.severity == "error" and not f.rule.fallback]
    if errors:
        found = [f for f in found if not f.rule.fallback]
    else:
        fallbacks = [f for f in found if f.rule.fallback]
        found = [f for f in found if not f.rule.fallback] + fallbacks[:1]
    found.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.rule.fallback, f.rule.wrapper, f.generic, f.line))
    return found


#: The rule whose hits are original exceptions (it skips the wrappers): candidates for the cause a death
#: message points at.
CAUSE_RULES = ("unrecognized-failure",)
#: Lines after a death banner in which the same process's traceback ends in its cause.
CAUSE_AFTER_SPAN = 80


def _take_cause(finding: Finding, hits: list[Hit], ctx: Context, group: list[Hit]) -> None:
    """A message that only says the engine died ("EngineDeadError", "Worker proc ... died") reports a cause
    printed before it: the latest exception before it (after the server became ready, for a death while
    serving), at its first occurrence, becomes the finding's `cause` and its first evidence line. `group`: the
    finding's hits; a death reported several times ("EngineCore encountered a fatal error", its traceback,
    then the API server's EngineDeadError) takes the exception printed before its last report."""
    floor = ctx.ready_line if (finding.stage == "serving" and ctx.ready_line) else 0
    # hits are in log order; a shipper's record (a JSON formatter's exc_info) holds several lines under one
    # number, so "before" is the hits that came ahead of the finding's own, not a smaller line number
    mine = {id(h) for h in group}
    own = max(i for i, h in enumerate(hits) if id(h) in mine)  # its last report (group is a subset of hits)
    before = [h for h in hits[:own] if h.rule.id in CAUSE_RULES and floor < h.line.number and _is_cause(h)]
    if not before:
        # a banner that prints its cause after it ("EngineCore encountered a fatal error." then the traceback):
        # the first exception the same process prints within the traceback's span
        last_own = hits[own].line
        before = [h for h in hits[own + 1:] if h.rule.id in CAUSE_RULES and _is_cause(h) and (
                  _same_record(h.line, last_own) or (last_own.pid is not None and h.line.pid == last_own.pid
                                                     and 0 < h.line.number - last_own.number <= CAUSE_AFTER_SPAN))][:1]
    if not before:
        return
    last = before[-1]
    key = (last.facts.get("exception"), last.facts.get("message"))
    first = next(h for h in before if (h.facts.get("exception"), h.facts.get("message")) == key)
    finding.facts["cause"] = (f"{key[0]}: {key[1]}" if key[1] else str(key[0])) if key[0] else str(key[1])
    finding.facts["cause_line"] = first.line.number
    finding.evidence = sorted([first.line, *[e for e in finding.evidence if e is not first.line]][:MAX_EVIDENCE],
                              key=lambda line: line.number)


def _same_record(a: Line, b: Line) -> bool:
    """Two lines of one log record: vLLM's formatter prints an exception's traceback under its message's own
    header (process, level, time and file:line), however long the traceback, tagged or not."""
    return (a.timestamp is not None and a.source is not None
            and (a.proc_key, a.level, a.timestamp, a.source) == (b.proc_key, b.level, b.timestamp, b.source))


def _is_cause(hit: Hit) -> bool:
    """An exception with a message, or a bare exception class ending a traceback (an `assert` without a
    message); not a signal's name (faulthandler's "Fatal Python error: Aborted" is the death itself)."""
    return bool(hit.facts.get("message")) or str(hit.facts.get("exception") or "").endswith(("Error", "Exception"))


def _recovered(finding: Finding, ctx: Context) -> bool:
    """An error printed during a start-up that then completed (the server became ready after it, and went on
    to serve or stayed up) is one vLLM recovered from: a retried lookup, a fallback logged at ERROR."""
    if finding.stage == "serving" or ctx.ready_line is None or finding.line >= ctx.ready_line:
        return False
    return ctx.server_started or ctx.engine_ready


def _evidence(group: list[Hit]) -> list[Line]:
    """A few distinct lines (the first occurrence's window, then other ranks' first lines), in log order."""
    return sorted(_first_lines(group), key=lambda line: line.number)


def _first_lines(group: list[Hit]) -> list[Line]:
    """The evidence lines in the order they are chosen."""
    seen: set[str] = set()
    out: list[Line] = []
    for h in group:
        for line in h.evidence:
            key = line.text.strip()
            if key in seen:
                continue
            seen.add(key)
            out.append(line)
            if len(out) >= MAX_EVIDENCE:
                return out
    return out
