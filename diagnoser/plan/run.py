"""`vllm-doctor plan`'s body: plan one configuration, or one per release (`--vllm-version A,B`).

The click command is in cli.py; this module gets its options as a dict and an `echo` function to print
with, raises only the project's own errors (errors.py), and returns the exit code.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from diagnoser.errors import UsageError
from diagnoser.plan.explain import assumptions_for, render_text
from diagnoser.plan.resolve import (
    COMMAND,
    LOG,
    NO_MODEL,
    OPTION,
    MissingInput,
    Resolved,
    VllmRejects,
    check_arch,
    check_max_len,
    check_utilization,
    log_context,
    resolve,
    resolve_gpu,
)
from diagnoser.plan.span import release_span
from diagnoser.plan.verdict import Verdict, suggest_changes, verdict_for
from diagnoser.vllm import memory as mem
from diagnoser.vllm import releases, serve_args, sizing
from diagnoser.vllm.modelspec import GpuSpec, ModelSpec, load_model
from diagnoser.vllm.releases import Version, version_str
from diagnoser.vllm.what_if import length_table, what_if


class Echo(Protocol):
    """How the command prints (click.echo from the CLI): stdout, or stderr with err=True."""

    def __call__(self, message: str, *, nl: bool = True, err: bool = False) -> Any: ...


@dataclass
class Planned:
    """One planned configuration: the JSON data, the text report, and whether --check passes."""

    data: dict[str, Any]
    text: str
    ok: bool
    verdict: Verdict
    res: sizing.PlanResult


def read_command(tokens: Sequence[str], version: Version) -> tuple[serve_args.ServeArgs, list[str]]:
    """A `vllm serve ...` command line, parsed; what vLLM `version` says about it (VllmRejects on an error)."""
    cmd = serve_args.parse(list(tokens))
    checked = serve_args.check(cmd, version)
    if checked.error:
        raise VllmRejects(checked.error)
    return cmd, checked.notes


def fixed_command(model: str, settings: dict[str, Any], changes: dict[str, str | None],
                  version: Version) -> serve_args.Rendered:
    """`vllm serve MODEL ...` with the flag changes applied in place (new flags last; '' removes a flag, None
    is a switch)."""
    out = dict(settings)
    for flag, value in changes.items():
        key = serve_args.key_of(flag)
        if value == "":
            out.pop(key, None)
        else:
            out[key] = True if value is None else value
    return serve_args.render_serve(model, out, version_str(version))


def _settings_from(inp: sizing.PlanInput, opts: dict[str, Any]) -> dict[str, Any]:
    """The settings of a command built from the planner's own options (no `vllm serve` command given)."""
    out: dict[str, Any] = {}
    if inp.tensor_parallel_size > 1:
        out["tensor_parallel_size"] = str(inp.tensor_parallel_size)
    if inp.pipeline_parallel_size > 1:
        out["pipeline_parallel_size"] = str(inp.pipeline_parallel_size)
    if inp.gpu_memory_utilization is not None:
        out["gpu_memory_utilization"] = f"{inp.gpu_memory_utilization:g}"
    if inp.max_model_len is not None:
        out["max_model_len"] = str(inp.max_model_len)
    if inp.kv_cache_dtype != "auto":
        out["kv_cache_dtype"] = inp.kv_cache_dtype
    if inp.dtype != "auto":
        out["dtype"] = inp.dtype
    if inp.quantization:
        out["quantization"] = inp.quantization
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if opts.get(key):
            out[key] = str(opts[key])
    if inp.enforce_eager:
        out["enforce_eager"] = True
    if inp.kv_cache_fixed and inp.kv_cache_bytes is not None:
        out["kv_cache_memory_bytes"] = str(int(inp.kv_cache_bytes))
    return out


def _plan_input(spec: ModelSpec, gpu: GpuSpec, got: Resolved, cmd: serve_args.ServeArgs,
                version: Version, entry: str = "serve") -> sizing.PlanInput:
    """The memory model's input from the resolved settings (vLLM's 'auto' length: None + max_model_len_auto)."""
    max_len = check_max_len(got["max_model_len"])
    auto_len = max_len == -1 and got.came_from("max_model_len") != LOG
    if got.came_from("max_model_len") == COMMAND:
        check_length_spelling(str(cmd.values().get("--max-model-len", "")), version)
    if max_len is not None and max_len <= 0:
        max_len = None
    util = got["gpu_memory_utilization"]
    check_utilization(util, VllmRejects)
    quant = got["quantization"]
    if quant and spec.arch.quantization and quant != spec.arch.quantization:
        spec.notes.append(f"--quantization {quant} replaces the checkpoint's {spec.arch.quantization}")
    kv_fixed = got.came_from("kv_cache") in (COMMAND, OPTION)
    cc = gpu.compute_capability
    return sizing.PlanInput(
        arch=spec.arch, gpu_bytes=gpu.memory_bytes, gpu_name=gpu.name, gpu_memory_utilization=util,
        max_model_len=max_len, kv_cache_dtype=got["kv_cache_dtype"], dtype=got["dtype"], quantization=quant,
        quant_bits=spec.arch.quant_bits if quant and quant == spec.arch.quantization else None,
        tensor_parallel_size=got["tensor_parallel_size"], pipeline_parallel_size=got["pipeline_parallel_size"],
        max_num_seqs=got["max_num_seqs"], max_num_batched_tokens=got["max_num_batched_tokens"],
        enforce_eager=got["enforce_eager"], weights=got["weights"], overhead=got["overhead"],
        kv_cache_bytes=got["kv_cache"], kv_cache_fixed=kv_fixed, cpu_offload_bytes=got["cpu_offload"] or 0.0,
        version=version, engine=got["engine"], entry=entry,
        compute_capability=float(cc) if cc and gpu.platform == "cuda" else None, use_v1=cmd.env.get("VLLM_USE_V1"),
        **sizing.serve_extras(cmd.values(), cmd.env, auto_len),
    )


def check_length_spelling(text: str, version: Version) -> None:
    """Raise VllmRejects for a --max-model-len spelling release `version` does not parse: a suffix ('16k') before
    0.8.4, 'auto' / -1 before 0.14.0 (settings max_model_len_suffixes, max_model_len_auto)."""
    text = text.strip()
    auto = text.lower() in ("auto", "-1")
    if auto and not releases.default("max_model_len_auto", version):
        if text == "-1":
            raise VllmRejects(f"--max-model-len -1: vLLM {version_str(version)} has no auto-fit length (added in "
                              "0.14.0); give a length such as 16384")
        kind = "human_readable_int" if releases.default("max_model_len_suffixes", version) else "int"
        raise VllmRejects(f"vllm serve: error: argument --max-model-len: invalid {kind} value: {text!r}")
    if re.fullmatch(r"\d+(?:\.\d+)?[kKmMgG]", text) and not releases.default("max_model_len_suffixes", version):
        raise VllmRejects(f"vllm serve: error: argument --max-model-len: invalid int value: {text!r} "
                          "(k/K suffixes are read from vLLM 0.8.4)")


def _measured(ctx: Any) -> dict[str, Any] | None:
    """The log's own KV figures, shown beside the plan's."""
    if ctx is None:
        return None
    tokens = ctx.kv_cache_tokens or (ctx.num_gpu_blocks or 0) * (ctx.block_size or 16) or None
    return {"kv_cache_tokens": tokens, "max_concurrency": ctx.max_concurrency,
            "available_kv_cache_gib": ctx.available_kv_cache_gib, "weights_gib": ctx.weights_gib}


def _data(spec: ModelSpec, gpu: GpuSpec, res: sizing.PlanResult, verdict: Verdict, min_conc: float | None,
          ok: bool) -> dict[str, Any]:
    """The JSON contract of one plan (what-if, lengths, command and notes are added by the caller)."""
    inp = res.inp
    return {
        "model": spec.arch.name, "model_source": spec.source, "gpu": gpu.name,
        "gpu_memory_bytes": int(gpu.memory_bytes), "vllm_version": version_str(inp.version),
        "engine": res.engine,
        "gpu_memory_utilization": res.gpu_memory_utilization, "max_model_len": res.max_model_len,
        "tensor_parallel_size": inp.tensor_parallel_size, "pipeline_parallel_size": inp.pipeline_parallel_size,
        "kv_cache_dtype": inp.kv_cache_dtype, "dtype": inp.dtype,
        "quantization": inp.quantization or spec.arch.quantization, "max_num_seqs": res.max_num_seqs,
        "max_num_batched_tokens": res.max_num_batched_tokens, "enforce_eager": inp.enforce_eager,
        "kv_bytes_per_token": res.kv_bytes_per_token, "budget_bytes": int(res.budget_bytes),
        # what vLLM's own figures leave between the share and weights + overhead + KV: the table adds up
        "other_bytes": int(res.budget_bytes - res.weights_bytes - res.overhead_bytes - res.kv_cache_bytes),
        "weights_bytes": int(res.weights_bytes), "overhead_bytes": int(res.overhead_bytes),
        "overhead_parts": {"activations": int(res.activation_bytes), "non_torch": int(res.non_torch_bytes),
                           "cuda_graphs": int(res.cuda_graph_bytes),
                           "cuda_graphs_in_budget": res.graphs_in_budget},
        "kv_cache_bytes": int(res.kv_cache_bytes), "kv_cache_tokens": res.kv_cache_tokens,
        "request_kv_bytes": res.request_kv_bytes, "fits": res.fits and verdict.starts,
        "starts": verdict.starts, "stage": verdict.stage, "vllm_message": verdict.message, "why": verdict.why,
        "max_model_len_that_fits": res.max_model_len_that_fits,
        "max_concurrency": round(res.max_concurrency, 4), "min_concurrency": min_conc,
        "check_passed": ok, "sources": res.sources,
    }


def plan_config(opts: dict[str, Any], tokens: Sequence[str], extra_notes: Sequence[str] = ()) -> Planned:
    """Plan one configuration: the planner's options, and a `vllm serve ...` command line (may be empty)."""
    asked = str(opts["vllm_version"] or "latest")
    version, version_notes = releases.parse_release(asked), _release_notes(asked)
    cmd, cmd_notes = read_command(tokens, version) if tokens else (serve_args.ServeArgs(), [])
    ctx = log_context(opts["log_path"]) if opts["log_path"] else None
    if ctx is not None and asked == "latest" and ctx.version:
        version, version_notes = releases.parse_version(ctx.version), _release_notes(ctx.version)
    unknown = opts.get("vllm_version") is None and not (ctx is not None and ctx.version)
    got = resolve(opts, cmd, ctx, version)
    if not got["model"]:
        raise MissingInput(NO_MODEL)
    spec = load_model(str(got["model"]))
    check_arch(spec, str(got["model"]))
    gpu, got.sources["gpu"] = resolve_gpu(opts, ctx)
    inp = _plan_input(spec, gpu, got, cmd, version, opts.get("entry") or "serve")
    res = sizing.plan_memory(inp)
    span = release_span(inp) if unknown else None
    if span is not None:
        version_notes.append(span.sentence())
    _sources_from_log(res, got)
    verdict = verdict_for(res, gpu, version, inp.dtype, inp.max_model_len is not None)
    min_conc = opts["min_concurrency"]
    ok = verdict.starts and (min_conc is None or res.max_concurrency >= min_conc)
    rows = what_if(inp, res)
    changes, fix_note = suggest_changes(res, verdict, rows, min_conc)
    rendered = _suggested_command(opts, cmd, got, spec, inp, changes, fix_note)
    data = {**_data(spec, gpu, res, verdict, min_conc, ok), "measured": _measured(ctx),
            "assumptions": assumptions_for(spec, gpu, res, got), "what_if": rows,
            "lengths": length_table(inp, res), "command": rendered.text, "command_note": fix_note,
            "notes": [*extra_notes, *version_notes, *cmd_notes, *spec.notes, *rendered.notes],
            **({"release_range": span.as_json()} if span is not None else {})}
    text = render_text(data, res, spec, gpu, verdict) if opts["fmt"] != "json" else ""
    return Planned(data, text, ok, verdict, res)


def _release_notes(name: str) -> list[str]:
    """What the planner notes about the release `name` (asked for, or the one a log names): its note, if any."""
    return [n for n in [releases.release_note(name)] if n]


def _sources_from_log(res: sizing.PlanResult, got: Resolved) -> None:
    """Mark the figures memory.py was given that came from the log as measured there."""
    for key in ("weights", "overhead", "kv_cache"):
        if got.came_from(key) == LOG:
            res.sources[key] = "measured (log)"


def _suggested_command(opts: dict[str, Any], cmd: serve_args.ServeArgs, got: Resolved, spec: ModelSpec,
                       inp: sizing.PlanInput, changes: dict[str, str | None], fix_note: str) -> serve_args.Rendered:
    """The command with the suggested changes applied (the given command, else one built from the options); none
    when the suggestion changes nothing, which would repeat the failing command (the note says what to do)."""
    if not (changes or fix_note == "no change needed"):
        return serve_args.Rendered(None)
    model = cmd.model or (str(got["model"]) if spec.source.startswith("config.json") else spec.arch.name)
    settings = cmd.settings() if cmd.items else _settings_from(inp, opts)
    return fixed_command(model, settings, changes, inp.version)


def run_plan(opts: dict[str, Any], echo: Echo) -> int:
    """The plan command: one configuration, one per release, or launch config files; returns the exit code."""
    if opts.get("from_file"):
        if "," in str(opts["vllm_version"]):
            raise UsageError("--vllm-version with a list of releases plans one configuration; "
                             "give one release with --from-file")
        from diagnoser.plan.files import run_from_files

        return run_from_files(opts, echo)
    tokens = list(opts["command"] or ())
    if tokens and tokens[0] == "--":
        tokens = tokens[1:]
    first = next((t for t in tokens if not re.fullmatch(r"[A-Za-z_]\w*=.*|env", t)), "")
    if tokens and not (first in ("vllm", "python", "python3") or first.endswith("/vllm")):
        raise UsageError(f"unexpected argument {first!r}; put a vLLM command after '--' "
                         "(vllm-doctor plan --gpu L4 -- vllm serve MODEL ...), or plan launch config "
                         "files with --from-file")
    if "," in str(opts["vllm_version"]):
        return run_release_plans(opts, tokens, echo)
    planned = plan_config(opts, tokens)
    if opts["fmt"] == "json":
        echo(json.dumps(planned.data, indent=2))
    else:
        echo(planned.text, nl=False)
    return 0 if planned.ok or not opts["check"] else 1


def _checked_fix(opts: dict[str, Any], last: Planned, fixes: list[Any], command: str) -> str:
    """The fix checked by the planner itself: the same release planned again with the fixed flags."""
    cleared = {**opts, "vllm_version": last.data["vllm_version"],
               **{serve_args.key_of(f.flag): None for f in fixes}}
    again = plan_config(cleared, shlex.split(command))
    return (f"Planned again with the fix: vLLM {last.data['vllm_version']} "
            + (f"starts, {again.res.kv_cache_bytes / mem.GIB:.2f} GiB of KV cache "
               f"({again.res.kv_cache_tokens:,} tokens)." if again.verdict.starts
               else f"still does not start ({again.verdict.why})."))


def run_release_plans(opts: dict[str, Any], tokens: list[str], echo: Echo) -> int:
    """`--vllm-version 0.7.3,0.8.2`: one plan per release, side by side, with what moved and the fix."""
    from diagnoser.compare.comparison import compare_plans
    from diagnoser.report.compare import renderer as compare_renderer

    versions = [v.strip() for v in str(opts["vllm_version"]).split(",") if v.strip()]
    for v in versions:
        releases.parse_release(v)
    planned = [plan_config({**opts, "vllm_version": v}, tokens) for v in versions]
    comparison = compare_plans(planned)
    notes = []
    for one, last in zip(comparison.pairs, planned[1:], strict=True):
        if not one.fixes:
            continue
        changes = {f.flag: f.value for f in one.fixes}
        cmd = serve_args.parse(tokens)
        settings = cmd.settings() if tokens else _settings_from(last.res.inp, opts)
        one.command = fixed_command(cmd.model or last.data["model"], settings, changes, last.res.inp.version).text
        if one.command:
            notes.append(_checked_fix(opts, last, one.fixes, one.command))
    if opts["fmt"] == "json":
        doc = comparison.as_json()
        echo(json.dumps({"schema_version": 1, "plans": [p.data for p in planned],
                         **{k: doc[k] for k in ("changes", "summary", "fixes", "command", "alternatives")},
                         "checked": notes}, indent=2))
    else:
        echo(compare_renderer("text")(comparison, {}), nl=False)
        for note in notes:
            echo(note)
    return 0 if all(p.ok for p in planned) or not opts["check"] else 1
