"""`--format github`: GitHub Actions workflow commands, and a job summary.

- One annotation per finding: `::error file=…,line=…,endLine=…,title=…::message` (`::warning`, `::notice`
  for info). It points at the log line, or with `--config-file` at the line of that file that sets the flag
  the fix changes, so a pull request that changed the flag shows the annotation on its own diff.
- The readable report goes in a collapsed group, fenced with `::stop-commands::TOKEN` … `::TOKEN::` so that
  no log text in it (a line starting `::error::` or `::add-mask::`, say) is ever run as a command. The token
  is a hash of the fenced text, so it cannot occur inside it, and the output is deterministic.
- Escaping as the runner decodes it: data `%` → `%25`, CR → `%0D`, LF → `%0A`; properties also `:` → `%3A`
  and `,` → `%2C`. So no text of ours or the log's can start a line or end a property.
- When `$GITHUB_STEP_SUMMARY` names a file, the Markdown report is appended to it (the job's summary page).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from diagnoser.analysis.contract import finding_dict
from diagnoser.analysis.pipeline import Report
from diagnoser.report import markdown, text
from diagnoser.report.sanitize import no_commands
from diagnoser.report.sarif import primary_location, relative_path

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(value: str) -> str:
    """The message part of a workflow command."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """A property value (file=, title=): data escaping plus `:` and `,`."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def workflow_command(name: str, properties: dict[str, Any] | None, message: str) -> str:
    """`::name key=value,key=value::message`, every part escaped; properties that are None are left out."""
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in (properties or {}).items() if v is not None)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def stop_token(body: str) -> str:
    """A token that does not occur in `body` (a hash of it; salted again in the impossible case it does)."""
    salt = 0
    while True:
        token = "vllm-doctor-" + hashlib.sha256(f"{salt}\0{body}".encode()).hexdigest()[:32]
        if token not in body:
            return token
        salt += 1


def fenced(body: str) -> list[str]:
    """Lines of `body` with workflow commands switched off around them."""
    token = stop_token(body)
    return [f"::stop-commands::{token}", *body.splitlines(), f"::{token}::"]


def annotation(report: Report, finding: Any, config_file: str | None) -> str:
    fd = finding_dict(finding)
    path, start, end, _ = primary_location(report.path, fd, config_file)
    props: dict[str, Any] = {}
    if path != "-":
        props["file"] = relative_path(path)
        props["line"] = start
        if end > start:
            props["endLine"] = end
    props["title"] = f"vllm-doctor [{fd['rule']}]: {fd['title']}"
    parts = [str(fd["advice"] or fd["title"])]
    if fd.get("command"):
        parts.append(f"Run: {fd['command']}")
    if path != report.path:
        parts.append(f"(seen in {relative_path(report.path)} line {fd['line']})")
    return workflow_command(COMMANDS.get(fd["severity"], "warning"), props, "\n\n".join(parts))


def write_step_summary(reports: list[Report], opts: dict[str, Any]) -> None:
    """Append the Markdown report to $GITHUB_STEP_SUMMARY (or opts['step_summary']) when one is named."""
    target = opts.get("step_summary", os.environ.get("GITHUB_STEP_SUMMARY"))
    if not target:
        return
    body = no_commands(markdown.render(reports, {**opts, "heading_level": 2}))
    try:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(body if body.endswith("\n") else body + "\n")
    except OSError as exc:
        print(f"vllm-doctor: warning: cannot append the job summary to {target}: {exc.strerror or exc}",
              file=sys.stderr)


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    opts = opts or {}
    config_file = opts.get("config_file")
    out: list[str] = []
    for r in reports:
        c = r.counts()
        head = (f"vllm-doctor: {relative_path(r.path)}: {c['error']} error(s), {c['warning']} warning(s), "
                f"{c['info']} info")
        out.append(workflow_command("group", None, head))
        out.extend(fenced(no_commands(text.render([r], {"color": False, "width": 0}).rstrip("\n"))))
        out.append("::endgroup::")
    for r in reports:
        for f in r.findings:
            out.append(annotation(r, f, config_file))
    write_step_summary(reports, opts)
    return "\n".join(out) + "\n"
