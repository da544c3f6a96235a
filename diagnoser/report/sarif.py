"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning (and any SARIF viewer).

One run for all inputs (code scanning rejects several runs of one tool in one category). `tool.driver.rules`
holds the rules that fired, with their explanation as help; each result points at the log line that shows
the problem, or, with `--config-file`, at the line of that file that sets the flag the fix changes (the log
line is then a related location). `partialFingerprints` are computed from the rule, the file and the
message with its numbers masked, so a rerun that fails the same way (other timestamps, slightly other
figures) updates the same alert instead of opening a new one.

Every result carries the finding exactly as the JSON contract names it in `properties`, and the run carries
`schema_version` and each input's context, so no field exists only in SARIF.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import textwrap
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from diagnoser.analysis.advise import Finding
from diagnoser.analysis.contract import SCHEMA_VERSION, TOOL, finding_dict, report_dict
from diagnoser.analysis.pipeline import Report
from diagnoser.lazyre import lazy
from diagnoser.rules.model import Rule

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/vllm-doctor/vllm-doctor"
RULE_DOC_URI = INFORMATION_URI + "/blob/main/rules/{id}.yaml"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
FINGERPRINT_KEY = "vllmDoctorFinding/v1"
STDIN_URI = "stdin"


# -- locations (shared with the github format) ------------------------------------------------------------

def base_dir() -> Path:
    """Paths are reported relative to the checkout: $GITHUB_WORKSPACE in Actions, else the current folder."""
    return Path(os.environ.get("GITHUB_WORKSPACE") or os.getcwd())


def relative_path(path: str) -> str:
    """A path as a repository-relative POSIX path when it lies under the base folder, else as given."""
    if path in ("-", ""):
        return STDIN_URI
    p = Path(path)
    if p.is_absolute():
        try:
            return p.resolve().relative_to(base_dir().resolve()).as_posix()
        except (ValueError, OSError):
            return p.as_posix()
    return PurePosixPath(*p.parts).as_posix() if p.parts else path


def artifact_location(path: str) -> dict[str, Any]:
    """SARIF artifactLocation: relative URIs against %SRCROOT%, anything else as a file: URI."""
    rel = relative_path(path)
    if Path(rel).is_absolute():
        return {"uri": Path(rel).as_uri()}
    return {"uri": quote(rel, safe="/-._~"), "uriBaseId": "%SRCROOT%"}


def fix_keys(finding: dict[str, Any]) -> list[str]:
    """The flags and env vars a finding's fixes change, in order (`--max-model-len`, `VLLM_X`)."""
    keys: list[str] = []
    for fx in finding.get("fixes") or []:
        for key in (fx.get("env"), fx.get("flag")):
            if key and key not in keys:
                keys.append(str(key))
    return keys


@lru_cache(maxsize=8)
def _config_lines(path: str) -> tuple[str, ...]:
    try:
        return tuple(Path(path).read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return ()


def _setting_pattern(key: str) -> re.Pattern[str]:
    """`--max-model-len` matches `--max-model-len 8192`, `max_model_len: 8192`, `max-model-len=8192`."""
    if not key.startswith("-") and key.isupper():  # an env var: `VLLM_X=1`, `VLLM_X: 1`, `- name: VLLM_X`
        return re.compile(rf"(?<![\w-]){re.escape(key)}\b")
    words = [re.escape(w) for w in re.split(r"[-_]+", key.lstrip("-")) if w]
    name = "[-_]".join(words)
    return re.compile(rf"(?<![\w-])(?:--)?{name}(?![\w-])\s*(?:[=:\s]|$)", re.IGNORECASE)


def config_line(config_file: str | None, keys: list[str]) -> int | None:
    """The 1-based line of the config file that sets the first of these flags, if it sets any."""
    if not config_file or not keys:
        return None
    lines = _config_lines(config_file)
    for key in keys:
        pattern = _setting_pattern(key)
        for i, line in enumerate(lines, 1):
            if line.lstrip().startswith("#"):
                continue
            if pattern.search(line):
                return i
    return None


def primary_location(report_path: str, finding: dict[str, Any], config_file: str | None
                     ) -> tuple[str, int, int, bool]:
    """(path, start line, end line, is the config file) where a finding is best shown."""
    line = config_line(config_file, fix_keys(finding))
    if line is not None and config_file:
        return config_file, line, line, True
    start = max(1, int(finding.get("line") or 1))
    end = max(start, int(finding.get("end_line") or start))
    return report_path, start, end, False


# -- messages and fingerprints ----------------------------------------------------------------------------

def message_text(finding: dict[str, Any]) -> str:
    """Title, advice and the corrected command: plain text, as code scanning shows it."""
    parts = [f"{finding['title']}."]
    if finding.get("advice"):
        parts.append(str(finding["advice"]))
    if finding.get("command"):
        parts.append(f"Run: {finding['command']}")
    return "\n\n".join(parts)


_VOLATILE = lazy(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b|\d+(?:[.,]\d+)*")


def fingerprint(rule_id: str, uri: str, finding: dict[str, Any]) -> str:
    """Stable across runs: rule, file, and the anchor evidence with numbers and ids masked."""
    from diagnoser.ingest.line import parse_line

    evidence = finding.get("evidence") or []
    anchor = next((e for e in evidence if e.get("line") == finding.get("line")), evidence[0] if evidence else None)
    text = parse_line(0, anchor["text"]).text if anchor else finding.get("title", "")
    text = " ".join(_VOLATILE.sub("#", text).split())
    return hashlib.sha256(f"{rule_id}\0{uri}\0{text}".encode()).hexdigest()[:32]


# -- rules ------------------------------------------------------------------------------------------------

def _pascal(rule_id: str) -> str:
    return "".join(w.capitalize() for w in re.split(r"[^A-Za-z0-9]+", rule_id) if w)


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    explanation = textwrap.dedent(rule.explanation or "").strip() or rule.title
    first_paragraph = explanation.split("\n\n", 1)[0].replace("\n", " ").strip()
    refs = list(rule.references or [])
    help_text = explanation + ("\n\nReferences:\n" + "\n".join(f"- {r}" for r in refs) if refs else "")
    help_md = explanation + ("\n\n**References**\n\n" + "\n".join(f"- <{r}>" for r in refs) if refs else "")
    tags = ["vllm", "reliability"]
    if rule.stage:
        tags.append(f"stage:{rule.stage}")
    return {
        "id": rule.id,
        "name": _pascal(rule.id),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": first_paragraph},
        "help": {"text": help_text, "markdown": help_md},
        "helpUri": refs[0] if refs else RULE_DOC_URI.format(id=rule.id),
        "defaultConfiguration": {"level": LEVELS.get(rule.severity, "warning")},
        "properties": {"tags": tags, "precision": "high", "problem.severity": rule.severity},
    }


# -- the log ----------------------------------------------------------------------------------------------

def _result(report: Report, f: Finding, rule_index: int, config_file: str | None,
            seen: dict[str, int]) -> dict[str, Any]:
    fd = finding_dict(f)
    path, start, end, in_config = primary_location(report.path, fd, config_file)
    loc = artifact_location(path)
    region: dict[str, Any] = {"startLine": start, "endLine": end}
    anchor = next((e for e in fd["evidence"] if e["line"] == fd["line"]), None)
    if anchor and not in_config:
        region["snippet"] = {"text": anchor["text"]}
    result: dict[str, Any] = {
        "ruleId": f.rule.id,
        "ruleIndex": rule_index,
        "level": LEVELS.get(f.severity, "warning"),
        "message": {"text": message_text(fd)},
        "locations": [{"physicalLocation": {"artifactLocation": loc, "region": region}}],
    }
    if in_config:
        log_start = max(1, int(fd["line"] or 1))
        result["relatedLocations"] = [{
            "id": 1,
            "physicalLocation": {"artifactLocation": artifact_location(report.path),
                                 "region": {"startLine": log_start,
                                            "endLine": max(log_start, int(fd["end_line"] or log_start))}},
            "message": {"text": "where the log shows it"},
        }]
    fp = fingerprint(f.rule.id, loc["uri"], fd)
    seen[fp] = seen.get(fp, 0) + 1
    if seen[fp] > 1:
        fp = f"{fp}:{seen[fp]}"
    result["partialFingerprints"] = {FINGERPRINT_KEY: fp}
    result["properties"] = {"schema_version": SCHEMA_VERSION, "input": report.path, "finding": fd}
    return result


def sarif_log(reports: list[Report], opts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The SARIF document as a dict."""
    opts = opts or {}
    config_file = opts.get("config_file")
    rules: dict[str, Rule] = {}
    for r in reports:
        for f in r.findings:
            rules.setdefault(f.rule.id, f.rule)
    order = sorted(rules)
    index = {rid: i for i, rid in enumerate(order)}
    seen: dict[str, int] = {}
    results = [_result(r, f, index[f.rule.id], config_file, seen) for r in reports for f in r.findings]
    inputs = []
    for r in reports:
        doc = report_dict(r)
        doc.pop("findings")
        inputs.append(doc)
    artifacts = []
    for path in dict.fromkeys([*(r.path for r in reports), *([config_file] if config_file else [])]):
        artifacts.append({"location": artifact_location(path), "roles": ["analysisTarget"]})
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": TOOL["name"],
                "version": TOOL["version"],
                "semanticVersion": TOOL["version"],
                "informationUri": INFORMATION_URI,
                "rules": [rule_descriptor(rules[rid]) for rid in order],
            }},
            "invocations": [{"executionSuccessful": True}],
            "artifacts": artifacts,
            "results": results,
            "columnKind": "unicodeCodePoints",
            "properties": {"schema_version": SCHEMA_VERSION, "inputs": inputs},
        }],
    }


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    return json.dumps(sarif_log(reports, opts), indent=2, ensure_ascii=False, default=str) + "\n"
