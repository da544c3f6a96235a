"""`vllm-doctor compare`: each fixture pair's moved components, settings, fixes, command and exit code; the seed's
story end to end (the fixed flags make the planner predict a start); formats and errors."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from diagnoser.analysis.pipeline import diagnose
from diagnoser.compare import comparison as cmp
from diagnoser.compare.budget import plan_input
from diagnoser.plan import plan_config

from .conftest import FIXTURES
from .test_cli import doctor

GIB = 1 << 30

PAIRS = yaml.safe_load((FIXTURES / "compare" / "expected.yaml").read_text())


def _paths(case: dict) -> tuple[str, str]:
    d = FIXTURES / "compare" / case["dir"]
    return str(d / case["before"]), str(d / case["after"])


def _json(case: dict, *extra: str) -> tuple[dict, int]:
    before, after = _paths(case)
    run = doctor("compare", "--format", "json", *case.get("args", []), *extra, before, after)
    assert run.stderr == b"", run.stderr.decode()
    return json.loads(run.stdout), run.returncode


@pytest.mark.parametrize("case", PAIRS, ids=[c["dir"] for c in PAIRS])
def test_pair(case: dict) -> None:
    data, code = _json(case)
    assert code == case["exit"]
    assert data["schema_version"] == 1
    before, after = data["logs"]
    assert after["failed"] is case["after_failed"] and before["failed"] is False
    assert [before["budget"]["kv_cache_tokens"], after["budget"]["kv_cache_tokens"]] == case["kv_tokens"]
    for key in case.get("estimated", []):
        assert key in after["estimated"], key
    changes = {c["name"]: c for c in data["changes"]}
    for name, (was, now) in case["settings"].items():
        assert (changes[name]["before"], changes[name]["after"]) == (was, now), name
        assert changes[name]["why"]
    if not case["settings"]:
        assert not [c for c in data["changes"] if c.get("why") and c["name"] in ("engine", "cuda_graphs_in_budget")]
    fixes = {f["flag"]: f for f in data["fixes"]}
    assert set(fixes) == set(case["fixes"])
    for flag, (value, gib) in case["fixes"].items():
        assert fixes[flag]["value"] == value
        assert fixes[flag]["returns_gib"] == pytest.approx(gib, abs=0.05)
        assert fixes[flag]["reason"]
    if "command" in case:
        assert data["command"] == case["command"]
    if not case["fixes"]:
        assert data["command"] is None
    assert [a["flag"] for a in data["alternatives"]] == case.get("alternatives", data and [a["flag"] for a in
                                                                                          data["alternatives"]])
    summary = data["summary"]
    if case["moved"]:
        pos = [summary.index(m[0].upper() + m[1:] if i == 0 else m) for i, m in enumerate(case["moved"])]
        assert pos == sorted(pos)
        lost = before["budget"]["kv_cache_gib"] - after["budget"]["kv_cache_gib"]
        assert f"took {lost:.2f} GiB from the KV cache" in summary
        assert f"{case['kv_tokens'][0]:,} → {case['kv_tokens'][1]:,} tokens" in summary
    else:
        assert summary.startswith("Nothing worth reporting")
    assert data["gate"]["failed"] is (case["exit"] == 1)


def test_seed_story_planner_predicts_a_start_with_the_fix() -> None:
    """Same model, GPU and flags; the after start fails; the fix compare computes makes the planner agree it
    starts on the new release (and without it, agree it fails)."""
    case = next(c for c in PAIRS if "planner" in c)
    data, code = _json(case)
    assert code == 1 and data["logs"][1]["failure"] == "kv-cache-too-small"
    p = case["planner"]
    opts = {"model_ref": p["model"], "gpu_name": p["gpu"], "gpu_memory": None, "gpu_memory_utilization": None,
            "max_model_len": None, "kv_cache_dtype": None, "dtype": None, "quantization": None,
            "tensor_parallel_size": None, "pipeline_parallel_size": None, "max_num_seqs": None,
            "max_num_batched_tokens": None, "enforce_eager": None, "weights": None, "overhead": None,
            "vllm_version": p["vllm_version"], "log_path": None, "fmt": "json", "check": False,
            "min_concurrency": None, "from_file": False}
    fixed = shlex.split(data["command"])
    unfixed = [t for i, t in enumerate(fixed) if t != "--max-num-seqs" and (i == 0 or fixed[i - 1] != "--max-num-seqs")]
    assert plan_config(opts, unfixed).verdict.starts is False
    assert plan_config(opts, fixed).verdict.starts is True
    before_planned = plan_config({**opts, "vllm_version": "0.7.3"}, unfixed)
    assert before_planned.verdict.starts is True


def test_text_is_a_two_column_table_with_marks() -> None:
    case = PAIRS[0]
    before, after = _paths(case)
    run = doctor("compare", before, after)
    out = run.stdout.decode()
    assert run.returncode == 1
    header = next(line for line in out.splitlines() if line.startswith("Start-up budget"))
    assert "before-0.7.3.log (started)" in header and "after-0.8.2.log (failed)" in header and "delta" in header
    kv = next(line for line in out.splitlines() if line.strip().startswith("KV cache  "))
    assert "2.94 GiB" in kv and "0.04 GiB" in kv and "-2.90 GiB" in kv
    act = next(line for line in out.splitlines() if "activation peak" in line)
    assert "4.72 GiB~" in act        # not printed by the failed 0.8.2 start: estimated, marked
    assert "run: vllm serve meta-llama/Llama-3.1-8B-Instruct" in out and "--max-num-seqs 256" in out
    assert "Upgrade gate: FAIL" in out


def test_markdown_tables() -> None:
    before, after = _paths(PAIRS[1])
    out = doctor("compare", "--format", "markdown", before, after).stdout.decode()
    assert out.startswith("## vllm-doctor compare")
    assert "| KV cache | 4.91 GiB | 1.42 GiB~ | -3.49 GiB |" in out
    assert "```bash\nvllm serve meta-llama/Llama-3.1-8B-Instruct" in out


def _gpu_row(fmt: str, out: str) -> list[str]:
    """The GPU row's cells as each format prints them."""
    if fmt == "text":
        line = next(ln for ln in out.splitlines() if ln.startswith("  GPU  "))
        return [c.strip() for c in line.split("  ") if c.strip()][1:]
    if fmt == "markdown":
        return next(ln for ln in out.splitlines() if ln.startswith("| GPU |")).strip("|").split(" | ")[1:]
    row = re.search(r"<tr><th>GPU</th>(.*?)</tr>", out).group(1)
    return re.findall(r"<td>(.*?)</td>", row)


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_gpu_row_in_every_format(fmt: str) -> None:
    """Each start's GPU, its name and total: printed (not named by these logs), from --gpu, or told apart."""
    before, after = _paths(PAIRS[0])
    out = doctor("compare", "--format", fmt, before, after).stdout.decode()
    assert [c.strip() for c in _gpu_row(fmt, out)][:2] == [
        "22.05 GiB (name not in the log)", "22.05 GiB~ (name not in the log)"]   # the failed start's is the other's
    out = doctor("compare", "--format", fmt, "--gpu", "L4", before, after).stdout.decode()
    assert [c.strip() for c in _gpu_row(fmt, out)][:2] == ["L4 (--gpu), 22.05 GiB", "L4 (--gpu), 22.05 GiB~"]
    series = [*_paths(PAIRS[1]), _paths(next(c for c in PAIRS if c["dir"].startswith("healthy")))[1]]
    out = doctor("compare", "--format", fmt, *series).stdout.decode()
    cells = [c.strip() for c in _gpu_row(fmt, out)]
    assert cells == ["23.65 GiB (name not in the log)", "23.65 GiB~ (name not in the log)",
                     "79.19 GiB (name not in the log)", *([] if fmt == "text" else [""]), "changed"]


def test_gpu_row_names_the_gpu_the_log_printed() -> None:
    from diagnoser.report.compare.rows import settings_rows

    before, after = _paths(PAIRS[0])
    with open(before, "rb") as fb, open(after, "rb") as fa:
        reports = [diagnose(fb, "before.log"), diagnose(fa, "after.log")]
    reports[1].context.gpu_name = "NVIDIA L4"
    row = next(r for r in settings_rows(cmp.compare_reports(reports)) if r.label == "GPU")
    assert row.cells == ["22.05 GiB (name not in the log)", "NVIDIA L4, 22.05 GiB~"] and row.deltas == ["changed"]


def test_max_kv_loss_gate() -> None:
    case = next(c for c in PAIRS if c["dir"].startswith("cuda-graphs"))
    data, code = _json(case, "--max-kv-loss", "0.1")     # 19% lost: passes at 20%, fails at 10%
    assert code == 1 and "lost 19% of the KV tokens" in data["gate"]["reason"]
    assert _json(case)[1] == 0
    before, after = _paths(case)
    for fmt, verdict in (("text", "pass"), ("markdown", "**pass**"), ("html", "pass")):
        out = doctor("compare", "--format", fmt, before, after).stdout.decode()
        assert f"Upgrade gate: {verdict} (19% of the KV tokens lost, within --max-kv-loss 20%)." in out, fmt


def test_series_each_against_the_first() -> None:
    case = PAIRS[1]
    before, after = _paths(case)
    run = doctor("compare", "--format", "json", before, after, after)
    data = json.loads(run.stdout)
    assert len(data["logs"]) == 3 and len(data["series"]) == 2
    assert all(p["before"] == before for p in data["series"])


def test_stdin_as_one_log() -> None:
    before, after = _paths(PAIRS[1])
    with open(after, "rb") as fh:
        run = doctor("compare", "--format", "json", before, "-", stdin=fh.read())
    assert run.returncode == 1 and json.loads(run.stdout)["logs"][1]["input"] == "-"
    with open(after, "rb") as fh:
        out = doctor("compare", before, "-", stdin=fh.read()).stdout.decode()
    assert " stdin (started)" in out.splitlines()[2] and "Upgrade gate: FAIL: stdin lost 71%" in out


@pytest.mark.parametrize("args, message", [
    (["only-one.log"], "two logs or more"),
    (["missing-a.log", "missing-b.log"], "missing-a.log: cannot read"),
    (["-", "-"], "only one of the logs can be '-'"),
])
def test_usage_errors(args: list[str], message: str) -> None:
    run = doctor("compare", *args)
    assert run.returncode == 2 and message in run.stderr.decode() and len(run.stderr.splitlines()) == 1


def test_a_fragment_without_a_version_compares_only_its_budget(tmp_path) -> None:
    """A pasted fragment has no version banner: its printed figures still compare, release defaults do not."""
    before, after = _paths(PAIRS[1])
    lines = Path(after).read_text().splitlines()
    fragment = [ln for ln in lines if "version 0.8.4" not in ln and "Initializing a V1" not in ln]
    (tmp_path / "fragment.log").write_text("\n".join(fragment) + "\n")
    run = doctor("compare", "--format", "json", before, str(tmp_path / "fragment.log"))
    data = json.loads(run.stdout)
    assert run.returncode == 1                       # 71% of the KV tokens lost still fails the gate
    assert data["logs"][1]["vllm_version"] is None
    assert [c["name"] for c in data["changes"] if c.get("why")] == []
    assert "printed no vLLM version" in data["summary"]
    assert all(f["flag"] != "--max-num-seqs" for f in data["fixes"])    # no default is known to have moved
    assert data["logs"][1]["budget"]["kv_cache_tokens"] == 11664


def test_junk_is_no_crash(tmp_path) -> None:
    (tmp_path / "junk.log").write_bytes(bytes(range(256)) * 40)
    before, _ = _paths(PAIRS[0])
    run = doctor("compare", before, str(tmp_path / "junk.log"))
    assert run.returncode in (0, 1) and b"internal error" not in run.stderr
    run = doctor("compare", "--format", "html", str(tmp_path / "junk.log"), str(tmp_path / "junk.log"))
    page = run.stdout.decode()
    assert run.returncode == 0 and b"internal error" not in run.stderr and page.startswith("<!doctype html>")
    assert "<svg" not in page and "Start-up memory" not in page  # no figures: no empty bars


def test_fix_gives_max_model_len_when_the_new_release_needs_more() -> None:
    """A user who already set --max-num-seqs explicitly gets the length that fits now instead."""
    before, after = _paths(PAIRS[0])
    with open(before, "rb") as fb, open(after, "rb") as fa:
        reports = [diagnose(fb, "before.log"), diagnose(fa, "after.log")]
    reports[1].context.args["max_num_seqs"] = 1024    # as if the user had passed --max-num-seqs 1024
    reports[1].context.args_source = "non-default"
    comp = cmp.compare_reports(reports)
    fixes = {f.flag: f for f in comp.primary.fixes}
    assert "--max-num-seqs" not in fixes
    assert "--gpu-memory-utilization" not in fixes     # 2.3 GiB more would need a utilization above 1
    assert fixes["--max-model-len"].value == "327"     # 0.04 GiB holds 327 tokens (less than 1024: not rounded)
    assert "--max-model-len 327" in comp.primary.command


def test_plan_over_a_list_of_releases() -> None:
    run = doctor("plan", "--gpu", "L4", "--vllm-version", "0.7.3,0.8.2", "--format", "json", "--",
                 "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "16384")
    assert run.returncode == 0, run.stderr.decode()
    data = json.loads(run.stdout)
    assert [p["vllm_version"] for p in data["plans"]] == ["0.7.3", "0.8.2"]
    assert [p["engine"] for p in data["plans"]] == ["V0", "V1"]
    assert data["plans"][0]["starts"] is True and data["plans"][1]["starts"] is False
    assert [(f["flag"], f["value"]) for f in data["fixes"]] == [("--max-num-seqs", "256")]
    assert data["command"] == "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384 --max-num-seqs 256"
    assert data["checked"][0].startswith("Planned again with the fix: vLLM 0.8.2 starts")
    assert "Activations +3.08 GiB took 3.08 GiB from the KV cache" in data["summary"]  # planner physics (issue 15)


def test_plan_release_list_text_and_check() -> None:
    run = doctor("plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "16384", "--check",
                 "--vllm-version", "0.7.3,0.8.2")
    out = run.stdout.decode()
    assert run.returncode == 1          # --check: one release does not start
    assert "vLLM 0.7.3 (started)" in out and "vLLM 0.8.2 (failed)" in out
    assert "run: vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384 --max-num-seqs 256" in out


def test_plan_release_list_rejects_a_bad_release() -> None:
    run = doctor("plan", "--gpu", "L4", "--model", "llama-3.1-8b", "--vllm-version", "0.7.3,eight")
    assert run.returncode == 2 and "--vllm-version 'eight': not a vLLM release" in run.stderr.decode()


def test_graphs_fix_without_the_gpu_total_uses_vllms_own_figures() -> None:
    """V1 0.19/0.20 logs print no GPU total: the fix still follows the utilization vLLM said graphs are worth."""
    case = next(c for c in PAIRS if c["dir"].startswith("cuda-graphs"))
    before, after = _paths(case)
    data = json.loads(doctor("compare", "--format", "json", before, after).stdout)
    assert "gpu_total_gib" not in data["logs"][1]["budget"]
    fix = data["fixes"][0]
    assert (fix["flag"], fix["value"]) == ("--gpu-memory-utilization", "0.932")   # vLLM suggested 0.9313
    assert fix["returns_gib"] == pytest.approx(0.69, abs=0.01)


def test_output_file(tmp_path) -> None:
    before, after = _paths(PAIRS[3])
    out = tmp_path / "compare.md"
    run = doctor("compare", "--format", "markdown", "-o", str(out), before, after)
    assert run.returncode == 0 and run.stdout == b""
    assert "Nothing worth reporting" in out.read_text()


def test_graph_growth_outside_the_budget_is_named(tmp_path) -> None:
    """Before 0.20 graphs are captured outside the budget: more graph memory cannot shrink the KV cache, but it
    must be free, so the summary says so."""
    before, after = _paths(PAIRS[3])
    text = Path(after).read_text().replace("took 0.53 GiB", "took 1.41 GiB").replace(
        "0.53 GiB for CUDAGraph", "1.41 GiB for CUDAGraph")
    (tmp_path / "after.log").write_text(text)
    data = json.loads(doctor("compare", "--format", "json", before, str(tmp_path / "after.log")).stdout)
    assert "CUDA graphs took +0.89 GiB more at capture, outside the budget" in data["summary"]


def test_release_list_is_one_configuration_not_from_file(tmp_path) -> None:
    (tmp_path / "serve.sh").write_text("vllm serve meta-llama/Llama-3.1-8B-Instruct\n")
    run = doctor("plan", "--from-file", "--gpu", "L4", "--vllm-version", "0.7.3,0.8.2", str(tmp_path / "serve.sh"))
    assert run.returncode == 2 and "give one release with --from-file" in run.stderr.decode()


def test_unknown_gpu_is_a_usage_error() -> None:
    before, after = _paths(PAIRS[2])
    run = doctor("compare", "--gpu", "Voodoo5", before, after)
    assert run.returncode == 2 and "Voodoo5" in run.stderr.decode()


def test_explain_compare_is_the_commands_page() -> None:
    run = doctor("explain", "compare")
    out = run.stdout.decode()
    assert run.returncode == 0 and out.startswith("Usage: vllm-doctor compare [OPTIONS] LOGS...")
    assert "Exit 1 when the last log failed to start" in out and "--format [text|json|markdown|html]" in out


def test_kv_cache_memory_bytes_sizes_the_planned_start() -> None:
    """A start launched with --kv-cache-memory-bytes is planned with that KV size, not the utilization share."""
    before, after = _paths(PAIRS[0])
    with open(before, "rb") as fb, open(after, "rb") as fa:
        start = cmp.compare_reports([diagnose(fb, "before.log"), diagnose(fa, "after.log")]).starts[1]
    start.context.args["kv_cache_memory_bytes"] = 2 * GIB
    inp = plan_input(start)
    assert inp is not None and inp.kv_cache_fixed and inp.kv_cache_bytes == 2 * GIB
    start.context.args["kv_cache_memory_bytes"] = "lots"
    assert not plan_input(start).kv_cache_fixed
