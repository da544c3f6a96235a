"""Score the doctor on a labelled corpus folder (fixtures/corpus/dev, or a held-out one).

    python3 bench/corpus_score.py [LABELS.yaml] [--verbose] [--json]

LABELS defaults to fixtures/corpus/dev/labels.yaml; each entry's `file` is relative to the labels file. The
schema is the real-logs one: file, class, stage, root_cause, facts, source/provenance, vllm_version, notes.

A class is `healthy`, a rule id, or `other:<kind>` (a failure of a kind no rule is meant for; when <kind> is a
rule id the doctor has, it is scored as that rule). Reported, as the real-logs tool does, plus the stage:
  top1        failures whose rule exists: the first finding is that rule
  stage       of those, the first finding's stage equals the label's (labels with a stage only)
  root-cause  the label's root_cause text is in the first finding's evidence (case-insensitive)
  unflagged   a failed server (not healthy, not a warning-only class) given no error finding
  healthy-false-alarms   a healthy log given any error or warning finding
  named       an `other:<kind>` failure whose first finding is a specific rule (not the fallback, nothing)
  facts       each number in `facts` found under its name (or an alias) in the JSON report, within 1%
The last line is one summary; --json prints the same figures as one JSON object instead.
Exit status 0 always unless the labels file is unreadable (2): a score is a measurement, not a gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from diagnoser.analysis.pipeline import diagnose  # noqa: E402
from diagnoser.rules.loader import builtin_rules  # noqa: E402

DEFAULT = ROOT / "fixtures" / "corpus" / "dev" / "labels.yaml"
#: first findings that name nothing (the fallback, context, one failed request)
GENERIC = {None, "unrecognized-failure", "startup-summary", "request-failed"}
ALIASES = {
    "kv_cache_gib": ["available_gib", "kv_cache_gib", "available_kv_cache_gib"],
    "available_kv_cache_gib": ["available_gib", "kv_cache_gib", "available_kv_cache_gib"],
    "available_gib": ["available_gib", "kv_cache_gib", "available_kv_cache_gib"],
    "gpu_blocks": ["num_gpu_blocks", "gpu_blocks"],
    "max_seq_len": ["max_model_len", "max_seq_len"],
    "free_gib": ["gpu_free_gib", "free_gib"],
    "limit_tokens": ["max_model_len", "limit_tokens"],
}


def numbers(obj: Any, key: str = "") -> Any:
    """Every (name, number) pair of a JSON report, the name being the nearest key."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from numbers(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from numbers(v, key)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield key, float(obj)


def report_of(path: Path) -> dict[str, Any]:
    """The `--format json` report of one log, in this process."""
    with path.open("rb") as fh:
        return diagnose(fh, str(path)).to_dict()


def score(labels_path: Path, verbose: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The figures and the lines describing each miss."""
    labels = yaml.safe_load(labels_path.read_text(encoding="utf-8")) or []
    rules = {r.id: r for r in builtin_rules()}
    warning_only = {rid for rid, r in rules.items() if r.severity != "error"}
    root = labels_path.parent
    s = dict(cases=0, top1=0, top1_of=0, stage=0, stage_of=0, rc=0, rc_of=0, unflagged=0, failures=0,
             healthy=0, false_alarms=0, named=0, others=0, facts=0, facts_of=0, crashes=0)
    lines: list[str] = []
    for case in labels:
        s["cases"] += 1
        cls = str(case["class"])
        kind = cls.split(":", 1)[1] if cls.startswith("other:") else None
        want = kind if kind in rules else (cls if cls in rules else None)
        try:
            report = report_of(root / case["file"])
        except Exception as exc:  # noqa: BLE001 - a crash is counted and shown, the scoring goes on
            s["crashes"] += 1
            lines.append(f"CRASH {case['file']}: {type(exc).__name__}: {exc}"[:200])
            continue
        findings = report.get("findings") or []
        first = findings[0] if findings else {}
        got = first.get("rule")
        serious = [f for f in findings if f.get("severity") in ("error", "warning")]
        misses: list[str] = []
        if cls == "healthy":
            s["healthy"] += 1
            if serious:
                s["false_alarms"] += 1
                misses.append("false-alarm")
        else:
            s["failures"] += 1
            if want is not None:
                s["top1_of"] += 1
                if got == want:
                    s["top1"] += 1
                    if case.get("stage"):
                        s["stage_of"] += 1
                        if first.get("stage") == case["stage"]:
                            s["stage"] += 1
                        else:
                            misses.append(f"stage={first.get('stage')}!={case['stage']}")
                else:
                    misses.append("top1")
            else:
                s["others"] += 1
                if got not in GENERIC:
                    s["named"] += 1
                else:
                    misses.append("unnamed")
            if not any(f.get("severity") == "error" for f in findings) and want not in warning_only:
                s["unflagged"] += 1
                misses.append("unflagged")
            if case.get("root_cause"):
                s["rc_of"] += 1
                evidence = " ".join(e.get("text", "") for e in first.get("evidence") or [])
                if str(case["root_cause"]).lower() in evidence.lower():
                    s["rc"] += 1
                else:
                    misses.append("root-cause")
        have = list(numbers(report))
        missing = []
        for name, value in (case.get("facts") or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            s["facts_of"] += 1
            names = ALIASES.get(name, [name])
            if any(k in names and abs(v - value) <= max(0.011 * abs(value), 0.011) for k, v in have):
                s["facts"] += 1
            else:
                missing.append(f"{name}={value}")
        if misses or (verbose and missing):
            shown = [f"{f.get('rule')}/{f.get('severity')}/{f.get('stage')}" for f in findings][:4]
            lines.append(f"{'MISS' if misses else 'ok  '} {case['file']} want={cls} got={shown} "
                         f"{' '.join(misses)}" + (f" missing-facts={missing}" if missing else ""))
    return s, lines


def summary(s: dict[str, Any]) -> str:
    def pct(a: int, b: int) -> str:
        return f"{a}/{b} ({100.0 * a / b:.0f}%)" if b else f"{a}/0"

    return (f"cases {s['cases']} top1 {pct(s['top1'], s['top1_of'])} stage {pct(s['stage'], s['stage_of'])} "
            f"root-cause {pct(s['rc'], s['rc_of'])} unflagged {s['unflagged']}/{s['failures']} "
            f"healthy-false-alarms {s['false_alarms']}/{s['healthy']} named {pct(s['named'], s['others'])} "
            f"facts {pct(s['facts'], s['facts_of'])} crashes {s['crashes']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("labels", nargs="?", default=str(DEFAULT))
    parser.add_argument("--verbose", action="store_true", help="also list cases with missing facts")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    path = Path(args.labels)
    try:
        figures, lines = score(path, args.verbose)
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        print(f"{path}: cannot read the labels: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        for line in lines:
            print(line)
        print(summary(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
