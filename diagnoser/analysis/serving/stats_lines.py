"""vLLM's stats lines and uvicorn's access lines, read: where the figures are, and the access lines per interval.

A stats line (V0's "Avg prompt throughput ... Pending: N reqs, GPU KV cache usage: X%", V1's "Engine 000: ...
Waiting: N reqs, GPU KV cache usage: X%, Prefix cache hit rate: Y%") closes one interval of one engine. Where its
values sit depends only on its shape (digit classes), so a plan is made once per line shape (dense.ShapePlans)
and each line is sliced. Access lines are counted in raw blocks, not decoded (`access_counts`); only a few failing
ones per interval are kept raw (Series.access_block) and decoded when a window shows them as evidence.
"""

from __future__ import annotations

from diagnoser.ingest.dense import ShapePlans
from diagnoser.ingest.keywords import BlockPattern
from diagnoser.lazyre import lazy

ENGINE = lazy(r"\bEngine (\d+): |\b(\d+) Engines Aggregated: ")
STAT_FIELDS = {
    "prompt_tps": lazy(r"Avg prompt throughput: ([\d.]+) tokens/s"),
    "gen_tps": lazy(r"(?:Avg generation throughput|^Throughput): ([\d.]+) tokens/s"),
    "running": lazy(r"(?:Running: |RUNNING: )(\d+)"),
    "waiting": lazy(r"(?:Waiting: |Pending: |WAITING: )(\d+)"),
    "swapped": lazy(r"Swapped: (\d+) reqs"),
    "preemptions": lazy(r"Preemptions: (\d+)"),
    "prefix_hit_pct": lazy(r"Prefix cache hit rate: (?:GPU: )?([\d.]+)%"),
}
KV_USAGE = lazy(r"\b([A-Z]+) KV cache usage: ([\d.]+)%")
V0_PREEMPTED = lazy(r"is preempted by PreemptionMode\.\w+.*?(?:total_num_cumulative_preemption=(\d+))?$")
#: raw-block markers: where a stats line starts a new interval; an access line's status code
STATS_MARK = b"Avg prompt throughput"
BLOCK_ERROR = BlockPattern(lazy(rb' HTTP/[12](?:\.[01])?" (5\d\d|429)\b'), 20)


def stat_plan(text: str) -> tuple[tuple[str, ...], tuple[slice, ...], str | tuple[int, int]]:
    """Where a stats line's values are: the fields in the order they are read, their slices, and the engine
    ("0", "all", or where its number is). Positions only (digit classes), so one plan serves a shape."""
    fields = []
    for name, rx in STAT_FIELDS.items():
        m = rx.search(text)
        if m:
            fields.append((name, m.start(1), m.end(1)))
    kv = list(KV_USAGE.finditer(text))
    if kv:
        fields.append(("kv_pct", kv[0].start(2), kv[0].end(2)))
        if len(kv) > 1 and kv[1].group(1) == "CPU":
            fields.append(("cpu_kv_pct", kv[1].start(2), kv[1].end(2)))
    m = ENGINE.search(text)
    engine: str | tuple[int, int] = (m.start(1), m.end(1)) if m and m.group(1) else ("all" if m else "0")
    return tuple(f[0] for f in fields), tuple(slice(a, b) for _, a, b in fields), engine

STAT_PLANS = ShapePlans(stat_plan)
#: where a V0 preemption warning's cumulative count is: None (no warning), (-1, -1) (no count), or its span
V0_PLANS = ShapePlans(lambda text: (m.span(1) if (m := V0_PREEMPTED.search(text)) else None))


def stat_values(text: str) -> tuple[dict[str, float], str]:
    """A stats line's values by field, and its engine ("0", "all", or its number without leading zeros)."""
    names, spans, engine_span = STAT_PLANS(text)
    try:  # one C-level pass: slices, floats, the dict
        values = dict(zip(names, map(float, map(text.__getitem__, spans)), strict=True))
    except ValueError:  # a malformed number ('1.2.3' fits [\d.]+): that field only is not read
        values = {name: v for name, span in zip(names, spans, strict=True)
                  if (v := _number(text[span])) is not None}
    engine = engine_span if isinstance(engine_span, str) else (text[slice(*engine_span)].lstrip("0") or "0")
    return values, engine


def _number(text: str) -> float | None:
    """float(text), None when it is no number."""
    try:
        return float(text)
    except ValueError:
        return None


def access_counts(block: bytes, gaps: list[tuple[int, int]] | None = None, starts: list[int] | None = None
                  ) -> tuple[list[int], list[int]] | None:
    """(where the block's stats lines start, the access lines (` HTTP/`) before each and after the last), within
    `gaps` (None: the whole block); None when the block holds no access line. The passes over the whole block
    that Series.access_block needs, as a function of the block alone.
    `starts`: the block's keyword lines (the reader's hits; a stats line is one), else the block is searched.

    >>> block = b'GET / HTTP/1.1" 200\\nINFO Avg prompt throughput: 1\\nGET / HTTP/1.1" 200\\n'
    >>> access_counts(block)
    ([20], [1, 1])
    """
    ranges = [(0, len(block))] if gaps is None else gaps
    if all(block.find(b" HTTP/", a, b) == -1 for a, b in ranges):
        return None
    find = block.find
    if starts is not None:  # a stats line holds a keyword: among the hits, without a pass over the block
        cuts = [s for s in starts if find(STATS_MARK, s, find(b"\n", s)) != -1]
    else:  # where each stats line starts: literal finds (a regex with a leading [^\n]* is quadratic)
        cuts = []
        i = find(STATS_MARK)
        while i != -1:
            cuts.append(block.rfind(b"\n", 0, i) + 1)
            nl = find(b"\n", i)
            i = find(STATS_MARK, nl) if nl != -1 else -1
    counts: list[int] = []
    pos, r = 0, 0
    for start in [*cuts, len(block)]:
        n = 0
        while r < len(ranges):
            a, b = ranges[r]
            lo, hi = max(a, pos), min(b, start)
            if lo < hi:
                n += block.count(b" HTTP/", lo, hi)
            if b > start:
                break
            r += 1
        counts.append(n)
        pos = start
    return cuts, counts

