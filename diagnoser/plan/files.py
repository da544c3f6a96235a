"""`plan --from-file FILE...`: plan every vLLM launch in launch config files (what the pre-commit hook runs).

Each file's `# vllm-doctor:` pins win over the command line; a launch vLLM would refuse is "will not start"
(exit 1 with --check), a file the doctor cannot plan is an error (exit 2). Exit 2 > 1 > 0 over all files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from diagnoser.errors import DoctorError, UsageError
from diagnoser.plan.resolve import MissingInput, VllmRejects, check_utilization, parse_len, parse_size
from diagnoser.plan.run import Echo, plan_config
from diagnoser.vllm.modelspec import load_gpu

NO_GPU_HINT = ("give --gpu NAME or --gpu-memory SIZE on the command line (in the pre-commit hook: "
               "args: [--gpu, L4]), or pin it in the file with a comment '# vllm-doctor: gpu=L4'")
NO_MODEL_HINT = ("no model to plan: the launch names none, or only a variable; pin it with a comment "
                 "'# vllm-doctor: model=NAME' (a preset, repo id or config.json path) or give --model")


def check_options(opts: dict[str, Any]) -> list[str]:
    """The files to plan; the command line's own values checked once, not once per file."""
    paths = [p for p in (opts["command"] or ()) if p != "--"]
    if not paths:
        raise UsageError("--from-file: give one or more launch config files (a `vllm serve` script, "
                         "a vLLM YAML config, ...)")
    if opts["gpu_name"] and opts["gpu_memory"]:
        raise UsageError("give --gpu or --gpu-memory, not both")
    if opts["gpu_name"]:
        load_gpu(opts["gpu_name"])
    if opts["gpu_memory"]:
        parse_size(opts["gpu_memory"])
    check_utilization(opts["gpu_memory_utilization"])
    if opts["max_model_len"] is not None:
        parse_len(opts["max_model_len"])
    return paths


def file_opts(opts: dict[str, Any], pins: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The planner's options for one file: its `# vllm-doctor:` pins win over the command line."""
    out = dict(opts)
    source = "command line"
    if "gpu" in pins or "gpu-memory" in pins:
        if "gpu" in pins and "gpu-memory" in pins:
            raise UsageError("the vllm-doctor comment pins both gpu= and gpu-memory=; keep one")
        out["gpu_name"], out["gpu_memory"] = pins.get("gpu"), pins.get("gpu-memory")
        source = "pinned in the file"
        if out["gpu_name"]:
            load_gpu(out["gpu_name"])
        else:
            parse_size(out["gpu_memory"])
    if "model" in pins:
        out["model_ref"] = pins["model"]
    if "vllm-version" in pins:
        if not re.fullmatch(r"\d+(\.\d+){0,2}|latest", pins["vllm-version"]):
            raise UsageError(f"vllm-version={pins['vllm-version']} in the vllm-doctor comment is not a "
                             "release number (write vllm-version=0.8.5)")
        out["vllm_version"] = pins["vllm-version"]
    return out, source


def summary_line(label: str, entry: dict[str, Any]) -> str:
    """`path: starts, 1.87 requests of 16,384 at once (L4)` / `path: will not start: why (L4)`."""
    gpu = f" ({entry['gpu']})" if entry.get("gpu") else ""
    if not entry["starts"]:
        return f"{label}: will not start: {entry['why']}{gpu}"
    conc, length = entry["max_concurrency"], entry["max_model_len"]
    if not entry["check_passed"]:
        return (f"{label}: starts, but only {conc:.2f} requests of {length:,} at once, below --min-concurrency "
                f"{entry['min_concurrency']:g}{gpu}")
    return f"{label}: starts, {conc:.2f} requests of {length:,} at once{gpu}"


@dataclass
class FileRun:
    """One `--from-file` run: the JSON entries, the text reports and summaries, and the exit code so far."""

    opts: dict[str, Any]
    echo: Echo
    entries: list[dict[str, Any]] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    errors: bool = False
    failed: bool = False

    @property
    def check(self) -> bool:
        return bool(self.opts["check"])

    def error(self, label: str, message: str) -> None:
        """A file or launch the doctor cannot plan: one line on stderr now, an entry in the JSON."""
        self.errors = True
        self.echo(f"vllm-doctor: error: {label}: {message}", err=True)
        self.entries.append({"file": label, "error": message})

    def plan_file(self, path: str) -> None:
        """Every launch in one file, with the file's pins."""
        from diagnoser.launch import LaunchFileError, read_launch_file

        try:
            lf = read_launch_file(path)
        except LaunchFileError as exc:
            self.error(path, str(exc))
            return
        if lf.skip_reason:
            self.echo(f"vllm-doctor: {path}: skipped: {lf.skip_reason}", err=True)
            self.entries.append({"file": path, "skipped": lf.skip_reason})
            return
        try:
            fopts, gpu_source = file_opts(self.opts, lf.pins)
        except DoctorError as exc:
            self.error(path, str(exc))
            return
        if not (fopts["gpu_name"] or fopts["gpu_memory"] or fopts["log_path"]):
            self.error(path, f"no GPU to plan for: {NO_GPU_HINT}")
            return
        for launch in lf.launches:
            label = path if len(lf.launches) == 1 else f"{path}:{launch.line}"
            where = {"file": path, "line": launch.line, "kind": launch.kind, "gpu_source": gpu_source}
            self.plan_launch(label, where, fopts, launch)

    def plan_launch(self, label: str, where: dict[str, Any], fopts: dict[str, Any], launch: Any) -> None:
        """One launch: planned (the image's release when none is asked for), refused by vLLM, or an error."""
        notes = list(launch.notes)
        if launch.image_version and fopts["vllm_version"] in (None, "latest"):
            fopts = {**fopts, "vllm_version": launch.image_version}
            notes.append(f"planned for vLLM {launch.image_version}, the release of the image {launch.image}")
        try:
            planned = plan_config(fopts, launch.tokens, notes)
        except VllmRejects as exc:
            self.refused(label, where, fopts, notes, str(exc))
            return
        except MissingInput as exc:
            self.error(label, NO_MODEL_HINT if str(exc).startswith("no model") else str(exc))
            return
        except DoctorError as exc:
            msg = str(exc)
            if msg.startswith("unknown model"):
                msg += " Or pin the architecture with a comment '# vllm-doctor: model=NAME'."
            self.error(label, msg)
            return
        entry = {**where, **planned.data}
        self.entries.append(entry)
        self.failed = self.failed or not planned.ok
        if self.opts["fmt"] == "json":
            return
        line = summary_line(label, entry)
        self.summaries.append(line)
        if not self.check:
            self.reports.append(f"== {line}\n\n{planned.text.rstrip()}\n")
            return
        extra = []
        if not planned.ok and planned.data["command_note"] != "no change needed":
            extra.append(f"  fix ({planned.data['command_note']})" +
                         (f": {planned.data['command']}" if planned.data["command"] else ""))
        extra += [f"  note: {n}" for n in notes]
        self.reports.append("\n".join([line, *extra]))

    def refused(self, label: str, where: dict[str, Any], fopts: dict[str, Any], notes: list[str],
                message: str) -> None:
        """A launch vLLM itself would refuse at its command line: it will not start."""
        entry = {**where, "starts": False, "fits": False, "stage": "cli", "check_passed": False,
                 "vllm_message": message, "why": message, "notes": notes,
                 "gpu": fopts["gpu_name"] or fopts["gpu_memory"]}
        self.failed = True
        self.entries.append(entry)
        self.summaries.append(summary_line(label, entry))
        self.reports.append("\n".join([self.summaries[-1], *(f"  note: {n}" for n in notes)]) +
                            ("" if self.check else "\n"))

    def finish(self) -> int:
        """Print the reports (or the JSON list) and return the exit code: 2 on an error, 1 on a failed --check."""
        if self.opts["fmt"] == "json":
            self.echo(json.dumps(self.entries, indent=2))
        elif self.reports:
            self.echo("\n".join(self.reports))
            if not self.check and len(self.summaries) > 1:
                self.echo("Summary:\n" + "\n".join(f"  {line}" for line in self.summaries))
        if self.errors:
            return 2
        return 1 if self.check and self.failed else 0


def run_from_files(opts: dict[str, Any], echo: Echo) -> int:
    """`plan --from-file FILE...`: plan every vLLM launch in the files; exit 2 > 1 > 0 over all of them."""
    run = FileRun(opts, echo)
    for path in check_options(opts):
        run.plan_file(path)
    return run.finish()
