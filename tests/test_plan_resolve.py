"""The planner's resolve table (option > command > log > default, with sources), vLLM's argparse verdict on a
command line (serve_args.check, which replaced plan.parse_serve), and the plan package's boundaries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from diagnoser.analysis.tracker import Context
from diagnoser.cli.plan import plan_command
from diagnoser.errors import UsageError
from diagnoser.plan import VllmRejects, plan_config
from diagnoser.plan.resolve import COMMAND, DEFAULT, LOG, OPTION, TABLE, resolve
from diagnoser.vllm import serve_args
from diagnoser.vllm.releases import parse_version

V = parse_version("0.10.1")
OPTS = {"model_ref": None, "gpu_name": "L4", "gpu_memory": None, "gpu_memory_utilization": None,
        "max_model_len": None, "kv_cache_dtype": None, "dtype": None, "quantization": None,
        "tensor_parallel_size": None, "pipeline_parallel_size": None, "max_num_seqs": None,
        "max_num_batched_tokens": None, "enforce_eager": None, "weights": None, "overhead": None,
        "vllm_version": "latest", "log_path": None, "fmt": "json", "check": False, "min_concurrency": None,
        "from_file": False, "command": ()}


def _cmd(text: str) -> serve_args.ServeArgs:
    return serve_args.parse_text(text)


def _log(**values: object) -> Context:
    ctx = Context()
    for key, value in values.items():
        setattr(ctx, key, value)
    return ctx


def run_json(args: list[str]) -> dict:
    result = CliRunner().invoke(plan_command(), ["--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# --- the table -------------------------------------------------------------------------------------------------

def test_option_beats_command_beats_log_beats_default():
    cmd = _cmd("vllm serve org/m --max-model-len 8192 -tp 2 --kv-cache-dtype fp8")
    ctx = _log(model="org/log-model", max_model_len=4096, tensor_parallel_size=4, pipeline_parallel_size=2,
               dtype="half")
    got = resolve({**OPTS, "tensor_parallel_size": 8}, cmd, ctx, V)
    assert (got["tensor_parallel_size"], got.came_from("tensor_parallel_size")) == (8, OPTION)
    assert (got["max_model_len"], got.came_from("max_model_len")) == (8192, COMMAND)
    assert (got["model"], got.came_from("model")) == ("org/m", COMMAND)
    assert (got["pipeline_parallel_size"], got.came_from("pipeline_parallel_size")) == (2, LOG)
    assert (got["dtype"], got.came_from("dtype")) == ("float16", LOG)    # vLLM's alias, whatever the source
    assert (got["kv_cache_dtype"], got.came_from("kv_cache_dtype")) == ("fp8", COMMAND)
    assert (got["enforce_eager"], got.came_from("enforce_eager")) == (False, DEFAULT)
    assert (got["cpu_offload"], got.came_from("cpu_offload")) == (0.0, DEFAULT)
    assert set(got.values) == {row.name for row in TABLE}                  # every row resolved, with a source


def test_the_log_engine_beats_the_environment_variable():
    cmd = _cmd("VLLM_USE_V1=0 vllm serve org/m")
    assert resolve(OPTS, cmd, None, V).came_from("engine") == COMMAND
    assert resolve(OPTS, cmd, None, V)["engine"] == "V0"
    got = resolve(OPTS, cmd, _log(engine="V1"), V)
    assert (got["engine"], got.came_from("engine")) == ("V1", LOG)


def test_measured_kv_memory_counts_only_at_the_logs_utilization():
    ctx = _log(available_kv_cache_gib=4.0, gpu_memory_utilization=0.9)
    assert resolve(OPTS, _cmd("vllm serve m"), ctx, V)["kv_cache"] == 4.0 * (1 << 30)
    other = resolve({**OPTS, "gpu_memory_utilization": 0.8}, _cmd("vllm serve m"), ctx, V)
    assert other["kv_cache"] is None and other.came_from("kv_cache") == DEFAULT
    fixed = resolve(OPTS, _cmd("vllm serve m --kv-cache-memory-bytes 4000000000"), ctx, V)
    assert (fixed["kv_cache"], fixed.came_from("kv_cache")) == (4e9, COMMAND)


def test_an_invalid_command_value_is_vllms_error_an_invalid_option_is_ours():
    with pytest.raises(VllmRejects, match=r"^vllm serve: error: argument --tensor-parallel-size: invalid value: "
                                          r"'two'$"):
        resolve(OPTS, _cmd("vllm serve m -tp two"), None, V)
    with pytest.raises(VllmRejects, match=r"'4x' is not a size"):
        resolve(OPTS, _cmd("vllm serve m --cpu-offload-gb 4x"), None, V)
    with pytest.raises(UsageError, match=r"--max-model-len: 'lots' is not a length") as err:
        resolve({**OPTS, "max_model_len": "lots"}, _cmd("vllm serve m"), None, V)
    assert not isinstance(err.value, VllmRejects)


def test_a_given_size_is_given_in_the_sources_and_the_assumptions():
    data = run_json(["--model", "llama-3.1-8b", "--gpu", "L4", "--weights", "15GiB"])
    assert data["sources"]["weights"] == "given" and data["sources"]["overhead"] == "estimated"
    assert "weights: given with --weights" in data["assumptions"]


# --- vLLM's argparse verdict (serve_args.check) -----------------------------------------------------------------

def test_a_switch_before_a_short_flag_keeps_tp_in_the_plan_and_its_command():
    data = run_json(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--enforce-eager", "-tp", "2",
                     "--max-model-len", "200000"])
    assert data["tensor_parallel_size"] == 2 and data["enforce_eager"] is True
    assert data["command"] == ("vllm serve llama-3.1-8b --enforce-eager --tensor-parallel-size 2 "
                               "--max-model-len 131072")


def test_a_list_flag_takes_every_value_and_a_negative_switch_stays_negative():
    data = run_json(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--served-model-name", "a", "b",
                     "--no-enable-prefix-caching", "--max-model-len", "200000"])
    assert data["command"] == ("vllm serve llama-3.1-8b --served-model-name a b --no-enable-prefix-caching "
                               "--max-model-len 131072")


def test_the_api_key_never_reaches_the_suggested_command():
    data = run_json(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--api-key", "sk-abcdef0123456789",
                     "--max-model-len", "200000"])
    assert "sk-abcdef" not in json.dumps(data) and '--api-key "$VLLM_API_KEY"' in data["command"]
    assert any("VLLM_API_KEY" in note for note in data["notes"])


@pytest.mark.parametrize(("line", "version", "error"), [
    ("vllm serve m extra --foo=1 --max-model-len 4096 more", "0.10.1",
     "vllm serve: error: unrecognized arguments: extra --foo=1 more"),
    ("vllm serve m --max-model-length 4096", "0.10.1",
     "vllm serve: error: unrecognized arguments: --max-model-length 4096 (did you mean --max-model-len?)"),
    ("vllm serve m --max-model-len", "0.10.1", "vllm serve: error: argument --max-model-len: expected one argument"),
    ("vllm serve m --max_model_len=4096", "0.4.3", "vllm serve: error: unrecognized arguments: --max_model_len=4096"
     " (did you mean --max-model-len?)"),
    ("python -m vllm.entrypoints.openai.api_server --model m --bogus", "0.6.0",
     "api_server.py: error: unrecognized arguments: --bogus"),
])
def test_argparse_errors_in_the_order_written(line, version, error):
    assert serve_args.check(_cmd(line), parse_version(version)).error == error


def test_a_removed_flag_is_refused_at_once_with_its_replacement():
    got = serve_args.check(_cmd("vllm serve m --swap-space 4 --unknown-one"), parse_version("0.33"))
    assert got.error is not None and got.error.startswith("vllm serve: error: unrecognized arguments: --swap-space "
                                                          "(--swap-space was removed in vLLM 0.18.0")
    assert serve_args.check(_cmd("vllm serve m --swap-space 4"), parse_version("0.17.1")).error is None


def test_notes_for_what_vllm_accepts():
    got = serve_args.check(_cmd("vllm serve m --max_model_len 4096 --max-model 4096"), parse_version("0.10.1"))
    assert got.error is None
    assert any(n.startswith("--max_model_len: vLLM 0.1-0.5.0 would fail") for n in got.notes)
    assert "--max-model is an abbreviation argparse accepts for --max-model-len" in got.notes
    old = serve_args.check(_cmd("vllm serve m --enable-prefix-caching"), parse_version("0.3.0"))
    assert old.notes == ["--enable-prefix-caching only exists from vLLM 0.3.3"]


def test_a_launch_file_refusal_is_will_not_start_and_the_command_line_one_exit_2(tmp_path):
    opts = {**OPTS, "fmt": "text"}
    with pytest.raises(VllmRejects):
        plan_config(opts, ["vllm", "serve", "llama-3.1-8b", "--max-model-length", "4096"])
    script = tmp_path / "serve-vllm.sh"
    script.write_text("vllm serve llama-3.1-8b --max-model-length 4096\n", encoding="utf-8")
    result = CliRunner().invoke(plan_command(), ["--gpu", "L4", "--check", "--from-file", str(script)])
    assert result.exit_code == 1, result.output
    assert f"{script}: will not start: vllm serve: error: unrecognized arguments: --max-model-length" in result.output


# --- boundaries -------------------------------------------------------------------------------------------------

def test_the_planner_library_does_not_import_click():
    code = ("import sys, diagnoser.plan, diagnoser.plan.files, diagnoser.plan.explain; "
            "sys.exit('click' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0



@pytest.mark.parametrize(("version", "present", "absent"), [
    ("0.8.2", ["models's", " GB KV cache"], ["GiB", "estimated maximum", "conserving_memory"]),
    ("0.8.3", ["models's", " GiB KV cache"], ["estimated maximum", "conserving_memory"]),
    ("0.9.1", ["estimated maximum model length is"], ["conserving_memory"]),
    ("0.13.0", ["conserving_memory"], ["CPU backend"]),
    ("0.22.0", ["model's max seq len", "CPU memory on the CPU backend", "conserving_memory"], ["models's"]),
])
def test_the_kv_message_has_each_releases_wording(version, present, absent):
    # the release each wording changed in is data (releases.yaml), the planner prints it as that release would
    from diagnoser.plan.verdict import kv_message
    from diagnoser.vllm import sizing
    from diagnoser.vllm.modelspec import load_model
    from diagnoser.vllm.releases import parse_version

    spec = load_model("llama-3.1-8b")
    v = parse_version(version)
    inp = sizing.PlanInput(arch=spec.arch, gpu_bytes=24 * 2**30, max_model_len=131072, version=v, engine="V1")
    text = kv_message(sizing.plan_memory(inp), v)
    for want in present:
        assert want in text, (version, want, text)
    for unwanted in absent:
        assert unwanted not in text, (version, unwanted, text)
