"""Output formats (github, sarif, markdown, jsonl): golden files, escaping, SARIF schema, exit codes.

Golden files live in tests/golden/<log>.<format>; volatile fields (the tool version, absolute paths) are
masked. Regenerate them after an intended change with:

    VLLM_DOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_formats.py
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from diagnoser import __version__
from diagnoser.analysis.pipeline import Report, diagnose
from diagnoser.cli import diagnose as cli_diagnose
from diagnoser.cli import files as cli_files
from diagnoser.cli import main as cli
from diagnoser.ingest.line import Line
from diagnoser.report import FORMATS, renderer
from diagnoser.report import github as gh
from diagnoser.report import markdown as md
from diagnoser.report.model import SCHEMA_VERSION, finding_dict, report_dict
from diagnoser.report.sarif import FINGERPRINT_KEY, sarif_log
from diagnoser.rules.loader import builtin_rules, load_rule_file, load_rules

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
LOGS = DATA / "logs"
GOLDEN = ROOT / "tests" / "golden"
SCHEMA = DATA / "sarif-schema-2.1.0.json"
ECHO_RULE = DATA / "rules" / "secret-echo.yaml"
GATE_RULES = DATA / "rules" / "gate"
INFO_RULE = GATE_RULES / "test-gate-info.yaml"
UPDATE = os.environ.get("VLLM_DOCTOR_UPDATE_GOLDEN") == "1"

MY_FORMATS = ("github", "sarif", "markdown", "jsonl")
#: Goldens with the shipped rules: regenerate them when a rule's advice changes (the message says how).
GOLDEN_LOGS = ("kv-cache-secrets", "namespace-secrets", "preemption", "tp-weights-oom")
#: Goldens with only the test gate rules: they move only when a format changes.
PINNED_LOGS = ("gate-clean", "gate-all")
FIXTURE_LOGS = ("example-kv-cache-too-small", "kv-cache-too-small-v0-tp2-0.5", "preemption-v1-0.12",
                "healthy-v1-0.10")  # from fixtures/, when present
EXT = {"github": "github.txt", "sarif": "sarif.json", "markdown": "md", "jsonl": "jsonl", "json": "json"}


def run_report(path: Path, label: str | None = None, rules=None) -> Report:
    with path.open("rb") as fh:
        return diagnose(fh, label or path.relative_to(ROOT).as_posix(), rules if rules is not None else builtin_rules())


def gate_rule_set() -> tuple:
    """One test rule per severity, nothing shipped."""
    return tuple(load_rule_file(p) for p in sorted(GATE_RULES.glob("*.yaml")))


def render(fmt: str, reports: list[Report], **opts) -> str:
    return renderer(fmt)(reports, {"step_summary": None, "color": False, **opts})


def mask(text: str) -> str:
    """Volatile fields: the tool version and absolute paths."""
    v = re.escape(__version__)
    text = re.sub(rf'("(?:version|semanticVersion)":\s*"){v}"', r'\1<VERSION>"', text)
    text = re.sub(rf"vllm-doctor {v}\b", "vllm-doctor <VERSION>", text)
    return text.replace(str(ROOT), "<ROOT>")


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    actual = mask(actual)
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"missing golden file {path.relative_to(ROOT)}; create it with "
                        "VLLM_DOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_formats.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, (f"{path.relative_to(ROOT)} differs; if the change is intended, regenerate with "
                                "VLLM_DOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_formats.py")


# -- registration -----------------------------------------------------------------------------------------

def test_formats_registered():
    for fmt in (*MY_FORMATS, "text", "json"):
        assert fmt in FORMATS
        assert callable(renderer(fmt))


def test_format_auto_picks_github_in_actions(monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert cli_diagnose.pick_format("auto") == "github"
    monkeypatch.setenv("GITHUB_ACTIONS", "false")
    assert cli_diagnose.pick_format("auto") == "text"
    assert cli_diagnose.pick_format("sarif") == "sarif"


# -- golden files -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", MY_FORMATS)
@pytest.mark.parametrize("log", GOLDEN_LOGS)
def test_golden(log, fmt):
    report = run_report(LOGS / f"{log}.log", f"logs/{log}.log")
    check_golden(f"{log}.{EXT[fmt]}", render(fmt, [report]))


@pytest.mark.parametrize("fmt", MY_FORMATS)
@pytest.mark.parametrize("log", PINNED_LOGS)
def test_golden_pinned_rules(log, fmt):
    report = run_report(LOGS / f"{log}.log", f"logs/{log}.log", rules=gate_rule_set())
    check_golden(f"{log}.{EXT[fmt]}", render(fmt, [report]))


@pytest.mark.parametrize("fmt", MY_FORMATS)
@pytest.mark.parametrize("log", FIXTURE_LOGS)
def test_golden_fixtures(log, fmt):
    path = ROOT / "fixtures" / f"{log}.log"
    if not path.exists():
        pytest.skip(f"fixtures/{log}.log not written yet")
    name = f"fixture-{log}.{EXT[fmt]}"
    if not (GOLDEN / name).exists() and not UPDATE:
        pytest.skip(f"no golden for fixtures/{log}.log yet: VLLM_DOCTOR_UPDATE_GOLDEN=1 python -m pytest "
                    "tests/test_formats.py")
    report = run_report(path, f"fixtures/{log}.log")
    check_golden(name, render(fmt, [report]))


@pytest.mark.parametrize("fmt", MY_FORMATS)
def test_golden_two_inputs(fmt):
    reports = [run_report(LOGS / "kv-cache-secrets.log", "logs/kv-cache-secrets.log"),
               run_report(LOGS / "preemption.log", "logs/preemption.log")]
    check_golden(f"two-inputs.{EXT[fmt]}", render(fmt, reports))


def test_every_golden_file_is_used():
    expected = {f"{log}.{EXT[fmt]}" for log in (*GOLDEN_LOGS, *PINNED_LOGS) for fmt in MY_FORMATS}
    expected |= {HTML_GOLDEN, COMPARE_GOLDEN, SCAN_GOLDEN}
    expected |= {f"two-inputs.{EXT[fmt]}" for fmt in MY_FORMATS}
    expected |= {f"fixture-{log}.{EXT[fmt]}" for log in FIXTURE_LOGS for fmt in MY_FORMATS}
    present = {p.name for p in GOLDEN.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert present <= expected, f"stale golden files: {sorted(present - expected)}"


# -- one source of truth: every machine format carries the JSON contract's finding ------------------------

def test_machine_formats_agree_with_the_json_contract():
    report = run_report(LOGS / "kv-cache-secrets.log")
    contract = json.loads(render("json", [report]))
    lines = [json.loads(line) for line in render("jsonl", [report]).splitlines()]
    sarif = json.loads(render("sarif", [report]))
    assert len(lines) == len(contract["findings"]) == len(sarif["runs"][0]["results"]) >= 1
    for obj, finding, result in zip(lines, contract["findings"], sarif["runs"][0]["results"], strict=True):
        assert obj["schema_version"] == SCHEMA_VERSION == contract["schema_version"]
        assert obj["input"] == contract["input"] and obj["tool"] == contract["tool"]
        assert {k: v for k, v in obj.items() if k not in ("schema_version", "tool", "input")} == finding
        assert result["properties"]["finding"] == finding
        assert result["properties"]["schema_version"] == SCHEMA_VERSION
    run_props = sarif["runs"][0]["properties"]
    assert run_props["schema_version"] == SCHEMA_VERSION
    assert run_props["inputs"][0]["context"] == contract["context"]
    assert run_props["inputs"][0]["redactions"] == contract["redactions"]


def test_jsonl_clean_log_writes_nothing_and_each_line_is_one_object():
    assert render("jsonl", [run_report(LOGS / "gate-clean.log", rules=gate_rule_set())]) == ""
    text = render("jsonl", [run_report(LOGS / "gate-all.log", rules=gate_rule_set())])
    assert text.endswith("\n") and len(text.splitlines()) == 3
    for line in text.splitlines():
        assert isinstance(json.loads(line), dict)


# -- SARIF ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sarif_validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _code_scanning_checks(doc: dict) -> None:
    """What GitHub code scanning needs beyond the schema."""
    assert doc["version"] == "2.1.0" and len(doc["runs"]) == 1
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "vllm-doctor" and driver["version"] and driver["informationUri"].startswith("https://")
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        for key in ("shortDescription", "fullDescription", "help"):
            assert rule[key]["text"].strip(), (rule["id"], key)
        assert rule["helpUri"].startswith("https://")
        assert len(rule["shortDescription"]["text"]) <= 1024
    fingerprints = []
    for res in run["results"]:
        assert res["ruleId"] in ids and ids[res["ruleIndex"]] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note")
        assert res["message"]["text"].strip()
        assert len(res["locations"]) == 1
        phys = res["locations"][0]["physicalLocation"]
        assert phys["artifactLocation"]["uri"] and phys["region"]["startLine"] >= 1
        assert phys["region"]["endLine"] >= phys["region"]["startLine"]
        fingerprints.append(res["partialFingerprints"][FINGERPRINT_KEY])
    assert len(fingerprints) == len(set(fingerprints))


@pytest.mark.parametrize("log", [*GOLDEN_LOGS, *PINNED_LOGS, "healthy", "hub-auth-secrets", "gate-info"])
def test_sarif_validates_against_the_schema(log, sarif_validator):
    rules = load_rules((ECHO_RULE, INFO_RULE))
    doc = json.loads(render("sarif", [run_report(LOGS / f"{log}.log", rules=rules)]))
    errors = sorted(sarif_validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    _code_scanning_checks(doc)


def test_sarif_several_inputs_stdin_and_config_validate(sarif_validator, tmp_path):
    conf = tmp_path / "serve.sh"
    conf.write_text("#!/bin/sh\nvllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --max-model-len 131072\n")
    reports = [run_report(LOGS / "kv-cache-secrets.log"), run_report(LOGS / "preemption.log", "-"),
               run_report(LOGS / "tp-weights-oom.log", str(LOGS / "tp-weights-oom.log"))]
    doc = sarif_log(reports, {"config_file": str(conf)})
    assert not list(sarif_validator.iter_errors(doc))
    _code_scanning_checks(doc)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]]
    assert "stdin" in uris


def test_sarif_levels_by_severity():
    rules = load_rules((INFO_RULE,))
    levels = {}
    for log in ("kv-cache-secrets", "preemption", "gate-info"):
        doc = sarif_log([run_report(LOGS / f"{log}.log", rules=rules)])
        levels[log] = doc["runs"][0]["results"][0]["level"]
    assert levels == {"kv-cache-secrets": "error", "preemption": "warning", "gate-info": "note"}


def _shifted(text: str) -> str:
    """The same failure in another run: other timestamps, pids, and two more lines before it."""
    text = re.sub(r"\d\d-\d\d \d\d:\d\d:\d\d", "09-30 17:45:01", text)
    text = re.sub(r"pid=\d+", "pid=99999", text)
    return "INFO 09-30 17:45:00 [x.py:1] warming up\nINFO 09-30 17:45:00 [x.py:2] still warming up\n" + text


@pytest.mark.parametrize("log", ["kv-cache-secrets", "preemption", "tp-weights-oom"])
def test_sarif_fingerprints_stable_across_runs(log):
    original = (LOGS / f"{log}.log").read_text()
    first = sarif_log([diagnose(io.BytesIO(original.encode()), f"logs/{log}.log")])
    again = sarif_log([diagnose(io.BytesIO(_shifted(original).encode()), f"logs/{log}.log")])
    fp1 = [r["partialFingerprints"] for r in first["runs"][0]["results"]]
    fp2 = [r["partialFingerprints"] for r in again["runs"][0]["results"]]
    lines1 = [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in first["runs"][0]["results"]]
    lines2 = [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in again["runs"][0]["results"]]
    assert fp1 == fp2 and fp1
    assert lines2 == [n + 2 for n in lines1]


def test_sarif_fingerprint_differs_by_rule_and_file():
    a = sarif_log([run_report(LOGS / "kv-cache-secrets.log", "a.log")])["runs"][0]["results"][0]
    b = sarif_log([run_report(LOGS / "kv-cache-secrets.log", "b.log")])["runs"][0]["results"][0]
    c = sarif_log([run_report(LOGS / "preemption.log", "a.log")])["runs"][0]["results"][0]
    fps = {x["partialFingerprints"][FINGERPRINT_KEY] for x in (a, b, c)}
    assert len(fps) == 3


@pytest.mark.parametrize("config, line", [
    ("#!/bin/sh\n# --max-model-len 4096 was too small\nvllm serve meta-llama/Llama-3.1-8B-Instruct \\\n"
     "  --gpu-memory-utilization 0.92 \\\n  --max-model-len 131072\n", 5),
    ("model: meta-llama/Llama-3.1-8B-Instruct\nmax-model-len: 131072\ngpu-memory-utilization: 0.92\n", 2),
    ("model: meta-llama/Llama-3.1-8B-Instruct\nmax_model_len: 131072\n", 2),
    ("args: [\"--max-model-len=131072\"]\n", 1),
])
def test_sarif_and_github_point_at_the_config_line(tmp_path, config, line):
    conf = tmp_path / "launch.conf"
    conf.write_text(config)
    report = run_report(LOGS / "kv-cache-secrets.log", "logs/kv.log")
    res = sarif_log([report], {"config_file": str(conf)})["runs"][0]["results"][0]
    phys = res["locations"][0]["physicalLocation"]
    assert phys["region"]["startLine"] == line
    assert phys["artifactLocation"]["uri"].endswith("launch.conf")
    related = res["relatedLocations"][0]["physicalLocation"]
    assert related["artifactLocation"]["uri"] == "logs/kv.log" and related["region"]["startLine"] == 20
    out = render("github", [report], config_file=str(conf))
    ann = [ln for ln in out.splitlines() if ln.startswith("::error ")][0]
    assert f"launch.conf,line={line}," in ann
    assert "(seen in logs/kv.log line 20)" in ann


def test_config_file_that_does_not_set_the_flag_falls_back_to_the_log(tmp_path):
    conf = tmp_path / "serve.sh"
    conf.write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct\n")
    report = run_report(LOGS / "kv-cache-secrets.log", "logs/kv.log")
    for cf in (str(conf), str(tmp_path / "missing.sh")):
        res = sarif_log([report], {"config_file": cf})["runs"][0]["results"][0]
        phys = res["locations"][0]["physicalLocation"]
        assert phys["artifactLocation"]["uri"] == "logs/kv.log" and phys["region"]["startLine"] == 20
        assert "relatedLocations" not in res


def test_sarif_uri_relative_to_workspace(monkeypatch, tmp_path):
    log = tmp_path / "ci" / "vllm server.log"
    log.parent.mkdir()
    log.write_bytes((LOGS / "kv-cache-secrets.log").read_bytes())
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    with log.open("rb") as fh:
        report = diagnose(fh, str(log))
    loc = sarif_log([report])["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc == {"uri": "ci/vllm%20server.log", "uriBaseId": "%SRCROOT%"}
    out = render("github", [report])
    assert "::error file=ci/vllm server.log,line=20," in out


# -- github: escaping and fencing -------------------------------------------------------------------------

def test_escape_data_and_properties():
    assert gh.escape_data("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext: a,b"
    assert gh.escape_property("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext%3A a%2Cb"
    assert gh.escape_data("%0A") == "%250A"  # an already-escaped looking text stays literal
    cmd = gh.workflow_command("warning", {"file": "a,b:c.log", "line": 3, "col": None}, "x\ny%")
    assert cmd == "::warning file=a%2Cb%3Ac.log,line=3::x%0Ay%25"
    assert gh.workflow_command("endgroup", None, "") == "::endgroup::"


def _unescape_data(s: str) -> str:
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def _unescape_property(s: str) -> str:
    return _unescape_data(s.replace("%3A", ":").replace("%2C", ","))


def runner_commands(output: str) -> list[tuple[str, dict[str, str], str]]:
    """What the Actions runner would execute: commands outside ::stop-commands:: fences, decoded."""
    commands, stop = [], None
    for line in output.split("\n"):
        if stop is not None:
            if line == f"::{stop}::":
                stop = None
            continue
        if line.startswith("##["):
            raise AssertionError(f"legacy command outside a fence: {line!r}")
        if not line.startswith("::"):
            assert line == "", f"raw text outside a fence: {line!r}"
            continue
        m = re.match(r"^::([\w-]+)(?: ([^:]*))?::(.*)$", line)
        assert m, f"malformed command: {line!r}"
        name, props_text, data = m.groups()
        props = {}
        for part in (props_text or "").split(","):
            if part:
                key, _, value = part.partition("=")
                props[key] = _unescape_property(value)
        if name == "stop-commands":
            stop = data
        commands.append((name, props, _unescape_data(data)))
    assert stop is None, "a stop-commands fence was never closed"
    return commands


def _hostile_report() -> Report:
    """A finding whose evidence and advice hold text that looks like workflow commands."""
    report = run_report(LOGS / "kv-cache-secrets.log", "logs/kv%cache,a:b.log")
    f = report.findings[0]
    evil = ["::error file=evil.py,line=1::INJECTED", "::add-mask::oops", "##[error]legacy INJECTED",
            "::set-output name=x::INJECTED", "::endgroup::", "::stop-commands::x", "::x::", "100% ``` `` ~~~"]
    for i, text in enumerate(evil):
        f.evidence.append(Line(number=100 + i, text=text, raw=text))
    f.advice += "\nsecond line: 50%, with ::error::INJECTED and\r\ncarriage returns"
    return report


def test_github_no_log_text_can_start_a_command():
    report = _hostile_report()
    out = render("github", [report])
    cmds = runner_commands(out)
    names = [c[0] for c in cmds]
    assert names == ["group", "stop-commands", "endgroup", "error"]
    assert not any("INJECTED" in c[2] and c[0] != "error" for c in cmds)
    _, props, message = cmds[-1]
    # decoding gives back exactly what we meant, newlines and percent signs included
    assert props["file"] == "logs/kv%cache,a:b.log" and props["line"] == "20"
    assert props["title"] == "vllm-doctor [kv-cache-too-small]: KV cache too small for one request of max_model_len"
    assert message.startswith(report.findings[0].advice.split("\n")[0])
    # (the CR is a control character: shown escaped, never sent raw)
    assert "second line: 50%, with ::error::INJECTED and\\u000d\ncarriage returns" in message
    assert "\nRun: vllm serve " in message
    # the hostile evidence is in the fenced body, verbatim
    assert "::error file=evil.py,line=1::INJECTED" in out


def test_github_stop_token_is_not_in_the_fenced_text():
    body = "::vllm-doctor-abc::\nline"
    lines = gh.fenced(body)
    token = lines[0].split("::stop-commands::", 1)[1]
    assert token not in body and lines[-1] == f"::{token}::"
    assert gh.stop_token(body) == gh.stop_token(body)  # deterministic


def test_github_severity_commands_and_stdin():
    rules = load_rules((INFO_RULE,))
    reports = [run_report(LOGS / f"{log}.log", rules=rules) for log in ("kv-cache-secrets", "preemption", "gate-info")]
    reports.append(run_report(LOGS / "preemption.log", "-"))
    cmds = runner_commands(render("github", reports))
    annotations = [(n, p) for n, p, _ in cmds if n in ("error", "warning", "notice")]
    assert [n for n, _ in annotations] == ["error", "warning", "notice", "warning"]
    assert "file" not in annotations[-1][1]  # stdin has no file


def test_github_job_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = run_report(LOGS / "kv-cache-secrets.log", "logs/kv.log")
    out = renderer("github")([report], {"color": False})
    text = summary.read_text()
    assert text.startswith("# earlier step\n")  # appended, never overwritten
    assert "## vllm-doctor: `logs/kv.log` — 1 error, 0 warnings, 0 info" in text
    assert "--max-model-len 36864" in text
    assert "\n::error file=logs/kv.log,line=20," in out
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    renderer("github")([report], {"color": False})
    assert summary.read_text() == text


def test_github_unwritable_summary_warns_and_goes_on(tmp_path, capsys):
    report = run_report(LOGS / "kv-cache-secrets.log")
    out = renderer("github")([report], {"step_summary": str(tmp_path / "no" / "such" / "dir" / "s.md")})
    assert "::error " in out
    assert "cannot append the job summary" in capsys.readouterr().err


# -- markdown ---------------------------------------------------------------------------------------------

def test_markdown_fences_survive_backticks():
    body = "a ``` b\n````` five"
    block = md.fence(body)
    assert block.startswith("``````text\n") and block.endswith("\n``````")
    assert md.code("x`y") == "``x`y``"
    assert md.code("`edge`") == "`` `edge` ``"


def test_markdown_caps_collapses_and_says_what_was_left_out():
    report = run_report(LOGS / "kv-cache-secrets.log", "logs/kv.log")
    f = report.findings[0]
    long = "ERROR x " + "y" * 2000
    for i in range(30):
        f.evidence.append(Line(number=200 + i, text=f"progress {i} of 30", raw=f"INFO progress {i} of 30"))
    for i in range(12):
        f.evidence.append(Line(number=300 + i, text=f"distinct {chr(97 + i)}", raw=f"distinct line {chr(97 + i)}"))
    f.evidence.append(Line(number=400, text=long, raw=long))
    f.evidence.append(Line(number=401, text="a ``` fence", raw="a ``` fence"))
    out = render("markdown", [report])
    assert "[+29 similar lines]" in out
    assert re.search(r"\d+ more lines left out", out)
    assert "y" * (md.MAX_LINE_CHARS + 10) not in out
    block = out.split("**Evidence:**", 1)[1]
    assert block.count("\n") < 40  # it fits


def test_markdown_caps_findings():
    report = run_report(LOGS / "kv-cache-secrets.log")
    report.findings = report.findings * (md.MAX_FINDINGS + 3)
    out = render("markdown", [report])
    assert "3 more findings left out" in out
    assert out.count("Error: KV cache too small") == md.MAX_FINDINGS


def test_markdown_environment_and_finding_content():
    out = render("markdown", [run_report(LOGS / "kv-cache-secrets.log", "logs/kv.log")])
    assert "vLLM `0.10.1`" in out and "model `meta-llama/Llama-3.1-8B-Instruct`" in out
    assert "max_model_len 131,072" in out and "utilization 0.92" in out
    assert "**Numbers:** max model len 131,072" in out and "required 16 GiB" in out
    assert "```sh\nvllm serve meta-llama/Llama-3.1-8B-Instruct" in out
    assert "10 secrets redacted" in out
    assert "No problems found." in render("markdown", [run_report(LOGS / "gate-clean.log", rules=gate_rule_set())])


# -- exit codes -------------------------------------------------------------------------------------------

def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the real entry point (cli.run) in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["vllm-doctor", *args])
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    with pytest.raises(SystemExit) as exc:
        cli.run()
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else (0 if code is None else 2)), out.out, out.err


@pytest.fixture
def gate_rules(monkeypatch):
    """Only the test gate rules (one per severity), so exit codes do not move when shipped rules change."""
    pinned = gate_rule_set()
    monkeypatch.setattr(cli_files, "builtin_rules", lambda: pinned)
    return pinned


SEVERITY_CASES = [
    # log, --fail-on, expected exit code
    ("gate-error", "error", 1), ("gate-error", "warning", 1), ("gate-error", "info", 1), ("gate-error", "never", 0),
    ("gate-warning", "error", 0), ("gate-warning", "warning", 1), ("gate-warning", "info", 1),
    ("gate-warning", "never", 0),
    ("gate-info", "error", 0), ("gate-info", "warning", 0), ("gate-info", "info", 1), ("gate-info", "never", 0),
    ("gate-clean", "error", 0), ("gate-clean", "warning", 0), ("gate-clean", "info", 0),
]


@pytest.mark.parametrize("log, fail_on, code", SEVERITY_CASES)
@pytest.mark.parametrize("command", ["check", "diagnose"])
def test_exit_code_per_severity_and_fail_on(monkeypatch, capsys, gate_rules, log, fail_on, code, command):
    args = [command, "--format", "jsonl", "--fail-on", fail_on, str(LOGS / f"{log}.log")]
    assert _cli(monkeypatch, capsys, *args)[0] == code
    assert _cli(monkeypatch, capsys, *args, "--exit-zero")[0] == 0


def test_exit_codes_with_the_shipped_rules(monkeypatch, capsys):
    kv, pre = str(LOGS / "kv-cache-secrets.log"), str(LOGS / "preemption.log")
    assert _cli(monkeypatch, capsys, "check", kv)[0] == 1
    assert _cli(monkeypatch, capsys, "check", "--fail-on", "never", kv)[0] == 0
    assert _cli(monkeypatch, capsys, "check", "--exit-zero", kv)[0] == 0
    assert _cli(monkeypatch, capsys, "check", pre)[0] == 0
    assert _cli(monkeypatch, capsys, "check", "--fail-on", "warning", pre)[0] == 1


@pytest.mark.parametrize("fmt", [*MY_FORMATS, "json", "text"])
def test_exit_code_is_the_same_in_every_format(monkeypatch, capsys, gate_rules, fmt):
    assert _cli(monkeypatch, capsys, "check", "-f", fmt, str(LOGS / "gate-error.log"))[0] == 1
    assert _cli(monkeypatch, capsys, "check", "-f", fmt, str(LOGS / "gate-warning.log"))[0] == 0
    assert _cli(monkeypatch, capsys, "check", "-f", fmt, str(LOGS / "gate-clean.log"))[0] == 0


def test_default_fail_on_is_error(monkeypatch, capsys, gate_rules):
    assert _cli(monkeypatch, capsys, str(LOGS / "gate-warning.log"))[0] == 0
    assert _cli(monkeypatch, capsys, str(LOGS / "gate-error.log"))[0] == 1


@pytest.mark.parametrize("where", ["diagnose", "render"])
@pytest.mark.parametrize("extra", [[], ["--exit-zero"], ["--fail-on", "never"]])
def test_a_crash_exits_2_never_0(monkeypatch, capsys, where, extra):
    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    if where == "diagnose":
        monkeypatch.setattr(cli_diagnose, "diagnose", boom)
    else:
        monkeypatch.setattr(cli_diagnose, "renderer", lambda name: boom)
    code, out, err = _cli(monkeypatch, capsys, "check", "-f", "sarif", *extra, str(LOGS / "healthy.log"))
    assert code == 2
    assert "internal error" in err and "simulated crash" in err


def test_usage_errors_exit_2(monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "check", str(LOGS / "no-such.log"))[0] == 2
    assert _cli(monkeypatch, capsys, "check", "--fail-on", "fatal", str(LOGS / "healthy.log"))[0] == 2
    assert _cli(monkeypatch, capsys, "check", "--format", "xml", str(LOGS / "healthy.log"))[0] == 2


def test_output_file_and_format_auto_in_actions(monkeypatch, capsys, tmp_path):
    target = tmp_path / "out.sarif"
    code, out, _ = _cli(monkeypatch, capsys, "check", "-f", "sarif", "-o", str(target), str(LOGS / "preemption.log"))
    assert code == 0 and out == "" and json.loads(target.read_text())["version"] == "2.1.0"
    monkeypatch.setattr(sys, "argv", ["vllm-doctor", "check", str(LOGS / "kv-cache-secrets.log")])
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    with pytest.raises(SystemExit) as exc:
        cli.run()
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert out.startswith("::group::") and "\n::error file=" in out
    assert "kv-cache-too-small" in summary.read_text()


def test_report_dict_is_the_contract_used():
    report = run_report(LOGS / "preemption.log")
    assert report_dict(report)["findings"][0] == finding_dict(report.findings[0])


HTML_GOLDEN = "fixture-serving-v1-dp2-0.10.html"


def test_golden_html():
    """--format html over a data-parallel serving log: one self-contained page (nothing fetched)."""
    report = run_report(ROOT / "fixtures" / "serving-v1-dp2-0.10.log", "fixtures/serving-v1-dp2-0.10.log")
    page = render("html", [report])
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', page)  # no fetched script, font or style
    assert "@import" not in page and page.count("<svg") >= 4
    check_golden(HTML_GOLDEN, page)


COMPARE_PAIR = ("upgrade-0.7.3-to-0.8.2-fails", "before-0.7.3.log", "after-0.8.2.log")
COMPARE_GOLDEN = "compare-upgrade-0.7.3-to-0.8.2.html"
SCAN_GOLDEN = "scan-fleet.html"


def compare_html() -> str:
    from diagnoser.compare.comparison import compare_reports
    from diagnoser.report.compare import renderer as compare_renderer

    folder = ROOT / "fixtures" / "compare" / COMPARE_PAIR[0]
    reports = [run_report(folder / name) for name in COMPARE_PAIR[1:]]
    return compare_renderer("html")(compare_reports(reports), {})


def test_golden_compare_html():
    """compare --format html: the serving report's page with both budgets as bars, the changes and the fix."""
    page = compare_html()
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', page) and "@import" not in page
    assert page.count('data-chart="budget-') == 2 and "--max-num-seqs 256" in page
    check_golden(COMPARE_GOLDEN, page)


def scan_html(docs: list[dict]) -> str:
    from diagnoser.report import scan_writer

    out = io.StringIO()
    scan_writer("html")(iter(docs), out, {"top": 5})
    return out.getvalue()


def fleet_docs() -> list[dict]:
    """A small fleet: failed, serving and clean fixtures, one twice, and a file that could not be read."""
    from diagnoser.fleet import ScanOptions, error_doc, scan

    names = ("kv-cache-too-small-v1-0.16.log", "kv-cache-too-small-v1-0.8.3.log", "preemption-v1-0.12.log",
             "healthy-v1-0.10.log", "weights-oom-v1-0.15.log", "kv-cache-too-small-v1-0.16.log")
    paths = [(ROOT / "fixtures" / n).relative_to(ROOT).as_posix() for n in names]
    cwd = os.getcwd()
    os.chdir(ROOT)  # relative paths in the page, whoever runs the suite from where
    try:
        docs = list(scan(paths, ScanOptions()))
    finally:
        os.chdir(cwd)
    return [*docs, error_doc("logs/cut.log.gz", "corrupt", "logs/cut.log.gz: cannot read (truncated: Compressed "
                                                            "file ended before the end-of-stream marker was reached)")]


def test_golden_scan_html():
    """scan --format html: the fleet summary as a page (outcomes bar, counts with shares, worst logs, bad files)."""
    page = scan_html(fleet_docs())
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', page) and "@import" not in page
    assert "logs/cut.log.gz" in page and "kv-cache-too-small" in page
    check_golden(SCAN_GOLDEN, page)


def test_html_pages_escape_what_the_logs_hold():
    """A path or message with markup or a terminal escape arrives as text, never as an element or an escape."""
    from diagnoser.fleet import error_doc

    evil = '<img src=x onerror=alert(1)>\x1b]0;pwned\x07'
    page = scan_html([error_doc(f"logs/{evil}.log", "corrupt", f"logs/{evil}.log: cannot read ({evil})")])
    assert "<img" not in page and "\x1b" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
