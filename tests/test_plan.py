"""`vllm-doctor plan`: CLI, command-line parsing, JSON contract, --check, --log, accuracy against real start-ups."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli.main import main
from diagnoser.cli.plan import plan_command
from diagnoser.errors import UsageError
from diagnoser.plan import parse_size
from diagnoser.vllm import sizing
from diagnoser.vllm.flags import closest_flag, load_flags, lookup, renamed
from diagnoser.vllm.modelspec import load_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
WORKED = ["--model", "llama-3.1-8b", "--gpu-memory", "24GB", "--gpu-memory-utilization", "0.92",
          "--weights", "16GB", "--overhead", "1.5GB"]
JSON_KEYS = {"kv_bytes_per_token", "budget_bytes", "weights_bytes", "overhead_bytes", "kv_cache_bytes",
             "kv_cache_tokens", "request_kv_bytes", "fits", "max_model_len_that_fits", "max_concurrency",
             "assumptions", "what_if"}


def run(args: list[str]):
    return CliRunner().invoke(plan_command(), args)


def run_json(args: list[str]) -> dict:
    result = run(["--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# --- the worked example ------------------------------------------------------------------------------------------

def test_worked_example_text():
    result = run(WORKED)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "22.08" in out                      # share, GB
    assert "4.58" in out                       # left for the KV cache, GB
    assert "131,072 B (128 KiB)" in out
    assert "34,928" in out                     # tokens
    assert "16.00" in out                      # per-request KV at 131,072 tokens, GiB
    assert "vLLM refuses to start" in out
    assert "To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache" in out
    assert "Largest --max-model-len that fits (multiple of 1024): 34,816" in out
    line = next(row for row in out.splitlines() if row.strip().startswith("16,384"))
    assert "2.00 GiB" in line and "2.13x" in line      # 16,384 tokens need 2 GiB: two at once
    for what in ("fp8 KV cache", "4-bit weights", "TP=2", "TP=4", "--gpu-memory-utilization 0.95"):
        assert what in out
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.92 --max-model-len 34816" in out


def test_worked_example_json():
    data = run_json(WORKED)
    assert set(data) >= JSON_KEYS
    assert data["budget_bytes"] == int(22.08e9)
    assert data["weights_bytes"] == int(16e9) and data["overhead_bytes"] == int(1.5e9)
    assert data["kv_cache_bytes"] == pytest.approx(4.58e9, abs=1)
    assert data["kv_bytes_per_token"] == 131072
    assert data["request_kv_bytes"] == 16 * GIB
    assert data["fits"] is False
    assert data["max_model_len_that_fits"] == 34816
    assert isinstance(data["assumptions"], list) and all(isinstance(a, str) for a in data["assumptions"])
    assert {"label", "kv_cache_tokens", "max_concurrency", "fits"} <= set(data["what_if"][1])
    short = run_json([*WORKED, "--max-model-len", "16384"])
    assert short["fits"] is True and short["request_kv_bytes"] == 2 * GIB
    assert 2 <= short["max_concurrency"] < 3


# --- --check -----------------------------------------------------------------------------------------------------------

def test_check_exit_codes():
    assert run([*WORKED, "--check"]).exit_code == 1                                   # will not start
    assert run([*WORKED, "--max-model-len", "16384", "--check"]).exit_code == 0
    assert run([*WORKED, "--max-model-len", "16384", "--check", "--min-concurrency", "2"]).exit_code == 0
    assert run([*WORKED, "--max-model-len", "16384", "--check", "--min-concurrency", "3"]).exit_code == 1
    assert run([*WORKED]).exit_code == 0                                                # no --check: report only


def test_min_concurrency_picks_the_length():
    data = run_json([*WORKED, "--min-concurrency", "4"])
    assert "--max-model-len 8192" in data["command"]  # 8,192 tokens need 1 GiB: 4.27 of them fit


def test_bad_model_or_gpu_is_exit_2_with_names():
    result = run(["--model", "llama-3.1-8bx", "--gpu", "L4", "--check"])
    assert result.exit_code == 2
    assert "llama-3.1-8b" in result.output and "Known models" in result.output
    result = run(["--model", "llama-3.1-8b", "--gpu", "H1000", "--check"])
    assert result.exit_code == 2
    assert "H100-80GB" in result.output and "Known GPUs" in result.output
    assert run(["--model", "llama-3.1-8b"]).exit_code == 2          # no GPU at all
    assert run(["--model", "llama-3.1-8b", "--gpu", "L4", "--gpu-memory", "24x"]).exit_code == 2


def test_through_the_main_group():
    result = CliRunner().invoke(main, ["plan", *WORKED, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kv_bytes_per_token"] == 131072


@pytest.mark.skipif(shutil.which("vllm-doctor") is None, reason="vllm-doctor is not on PATH")
def test_installed_command():
    proc = subprocess.run(["vllm-doctor", "plan", "--gpu", "L4", "--check", "--format", "json", "--",
                           "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "16384"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["fits"] is True and data["gpu"] == "L4"
    bad = subprocess.run(["vllm-doctor", "plan", "--gpu", "L5", "--model", "llama-3.1-8b", "--check"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "L4" in bad.stderr


# --- a whole vllm serve command line --------------------------------------------------------------------------------

def test_command_line_both_spellings():
    data = run_json(["--gpu", "L4", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                     "--max-model-len", "16384", "--gpu-memory-utilization=0.92", "--port", "8000",
                     "--enable-prefix-caching", "-tp", "1"])
    assert data["max_model_len"] == 16384 and data["gpu_memory_utilization"] == 0.92
    assert data["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert data["command"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384")


def test_underscore_spelling_is_reported_both_ways():
    data = run_json(["--gpu", "L4", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                     "--max_model_len", "16384"])
    note = " ".join(data["notes"])
    assert "unrecognized arguments: --max_model_len" in note and "0.5.1" in note and "--max-model-len" in note
    assert data["max_model_len"] == 16384
    assert "--max-model-len 16384" in data["command"] and "--max_model_len" not in data["command"]
    old = run(["--gpu", "L4", "--vllm-version", "0.4.3", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
               "--max_model_len", "16384"])
    assert old.exit_code == 2 and "unrecognized arguments: --max_model_len" in old.output


def test_unknown_and_removed_flags():
    result = run(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-length", "4096"])
    assert result.exit_code == 2
    assert "unrecognized arguments: --max-model-length" in result.output and "--max-model-len" in result.output
    result = run(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--swap-space", "4"])
    assert result.exit_code == 2 and "removed in vLLM 0.18.0" in result.output
    ok = run(["--gpu", "L4", "--vllm-version", "0.17.1", "--", "vllm", "serve", "llama-3.1-8b", "--swap-space", "4",
              "--max-model-len", "8192"])
    assert ok.exit_code == 0, ok.output


def test_api_server_form_env_and_planner_overrides():
    data = run_json(["--gpu", "A100-80GB", "--max-model-len", "4096", "--", "VLLM_USE_V1=1", "python", "-m",
                     "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen2.5-7B-Instruct",
                     "--max-model-len", "32768", "--kv-cache-dtype", "fp8"])
    assert data["max_model_len"] == 4096          # the planner's own option wins
    assert data["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 1
    assert data["model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_kv_cache_memory_bytes_fixes_the_pool():
    data = run_json(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192",
                     "--kv-cache-memory-bytes", "4GiB"])
    assert data["kv_cache_bytes"] == 4 * GIB
    assert data["kv_cache_tokens"] == 4 * GIB // 131072


def test_sizes():
    assert parse_size("24GB") == 24e9
    assert parse_size("24GiB") == 24 * GIB
    assert parse_size("24G") == 24 * GIB
    assert parse_size("22528MiB") == 22528 * (1 << 20)
    with pytest.raises(UsageError):
        parse_size("lots")


# --- verdicts other than the KV cache ---------------------------------------------------------------------------------

def test_tp_must_divide_heads_and_bf16_needs_ampere():
    data = run_json(["--model", "llama-3.1-8b", "--gpu", "H100", "-tp", "3", "--max-model-len", "4096"])
    assert data["fits"] is False and "must be divisible by tensor parallel size (3)" in data["vllm_message"]
    data = run_json(["--model", "qwen2.5-1.5b", "--gpu", "T4", "--dtype", "bfloat16", "--max-model-len", "4096"])
    assert data["stage"] == "worker_init" and "--dtype=half" in data["vllm_message"]
    assert "--dtype half" in data["command"]


def test_weights_larger_than_gpu_and_quantized_names():
    data = run_json(["--model", "llama-3.1-70b", "--gpu", "L4", "--max-model-len", "4096"])
    assert data["stage"] == "weight_loading"
    awq = run_json(["--model", "Qwen/Qwen2.5-14B-Instruct-AWQ", "--gpu", "L4", "--max-model-len", "8192"])
    assert awq["quantization"] == "awq"
    assert awq["weights_bytes"] < 0.4 * run_json(["--model", "qwen2.5-14b", "--gpu", "H100",
                                                  "--max-model-len", "8192"])["weights_bytes"]


def test_model_from_config_json(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
              "max_position_embeddings": 2048, "torch_dtype": "float16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    data = run_json(["--model", str(tmp_path), "--gpu", "T4"])
    assert data["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2
    assert data["max_model_len"] == 2048
    data = run_json(["--model", str(tmp_path / "config.json"), "--gpu", "T4"])
    assert data["fits"] is True


def test_from_a_startup_log(tmp_path):
    log = tmp_path / "startup.log"
    log.write_text(
        "INFO 01-02 03:04:05 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.3) with config: "
        "model='Qwen/Qwen2.5-14B-Instruct', tokenizer='Qwen/Qwen2.5-14B-Instruct', dtype=torch.bfloat16, "
        "max_seq_len=4096, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, "
        "enforce_eager=False, kv_cache_dtype=auto, seed=0\n"
        "INFO 01-02 03:04:20 worker.py:267] the current vLLM instance can use total_gpu_memory (40.00GiB) x "
        "gpu_memory_utilization (0.85) = 34.00GiB\n"
        "INFO 01-02 03:04:20 worker.py:267] model weights take 27.50GiB; non_torch_memory takes 0.50GiB; PyTorch "
        "activation peak memory takes 1.00GiB; the rest of the memory reserved for KV Cache is 5.00GiB.\n",
        encoding="utf-8")
    data = run_json(["--log", str(log)])
    assert data["model"] == "Qwen/Qwen2.5-14B-Instruct" and data["vllm_version"] == "0.7.3"
    assert data["weights_bytes"] == int(27.5 * GIB)
    assert data["overhead_bytes"] == int(1.5 * GIB)
    assert data["kv_cache_bytes"] == 5 * GIB
    assert data["sources"] == {"weights": "measured (log)", "overhead": "measured (log)", "kv_cache": "measured (log)"}
    assert data["max_model_len"] == 4096 and data["gpu_memory_utilization"] == 0.85
    assert data["kv_cache_tokens"] == 5 * GIB // (48 * 2 * 8 * 128 * 2) // 16 * 16


# --- flags, presets -----------------------------------------------------------------------------------------------------

def test_flag_list():
    flags = load_flags()
    assert len(flags) >= 150
    for name in ("--host", "--port", "--api-key", "--served-model-name", "--chat-template",
                 "--enable-auto-tool-choice", "--tool-call-parser", "--uvicorn-log-level", "--kv-cache-memory-bytes",
                 "--device-memory-utilization", "--enable-lora", "--speculative-config", "--limit-mm-per-prompt"):
        assert name in flags, name
    assert lookup("-tp").name == "--tensor-parallel-size" and lookup("-O").name == "--compilation-config"
    assert lookup("--max_model_len").name == "--max-model-len"
    assert closest_flag("--max-model-length")[0] == "--max-model-len"
    assert renamed("--max-context-len-to-capture")["renamed_to"] == "--max-seq-len-to-capture"
    assert renamed("--max-seq-len-to-capture")["until"] == "0.11.0"
    assert renamed("--task")["renamed_to"] == "--runner"
    assert renamed("--swap-space")["until"] == "0.18.0"


def test_gpu_presets_case_insensitive():
    assert load_gpu("h100").name == load_gpu("H100-80GB").name == load_gpu("nvidia-h100-80gb-hbm3").name
    assert load_gpu("rtx 4090").memory_bytes == pytest.approx(23.65 * GIB)
    assert load_gpu("l4").compute_capability == "8.9"
    assert load_model("Llama 3.1 8B").arch.name == "meta-llama/Llama-3.1-8B-Instruct"


# --- against real start-ups ------------------------------------------------------------------------------------------------

def _bench():
    spec = importlib.util.spec_from_file_location("planner_accuracy", ROOT / "bench" / "planner_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["planner_accuracy"] = module
    spec.loader.exec_module(module)
    return module


def test_accuracy_against_real_startups():
    bench = _bench()
    data = bench.load()
    assert len(data["kv_pairs"]) >= 30
    assert all(p["source"].startswith("https://") for group in data.values() for p in group)
    # in sample: the start-ups the coefficients were read off; those added later and never fitted on are scored
    # out of sample in tests/test_truth_set.py
    fitted = {**data, "kv_pairs": [p for p in data["kv_pairs"] if not p.get("new")]}
    rows = bench.kv_errors(fitted)
    stats = bench.kv_summary(rows)
    median, p90, worst = stats["planner"]
    assert median <= 0.05, rows     # issue 15 targets: median <= 5%, p90 <= 15%, worst <= 30%
    assert p90 <= 0.15, rows
    assert worst <= 0.30, rows
    # the planner beats both published formulas it is measured against
    assert p90 < stats["checklist"][1] and p90 < stats["llm-d"][1]
    wmedian, _, wworst = bench.summary([r[3] for r in bench.weight_errors(data)])
    assert wmedian < 0.02 and wworst < 0.10


def test_measured_numbers_reproduce_vllms_tokens():
    # with vLLM's own measured KV memory, the token arithmetic must land on vLLM's count
    bench = _bench()
    for pair in bench.load()["kv_pairs"]:
        m = pair["measured"]
        if "num_gpu_blocks" not in m or "kv_cache_gib" not in m:
            continue
        inp = bench.plan_input(pair["config"])
        res = sizing.plan_memory(sizing.with_changes(inp, kv_cache_bytes=m["kv_cache_gib"] * GIB))
        assert res.kv_cache_tokens == pytest.approx(m["kv_cache_tokens"], rel=0.01), pair["id"]


def test_integer_suffixes_and_auto_length_from_the_command():
    # vLLM's suffixes: 1k = 1000, 1K = 1024, for --max-model-len and --max-num-batched-tokens
    data = run_json(["--gpu", "H100", "--vllm-version", "0.19.0", "--", "vllm", "serve", "llama-3.1-8b",
                     "--max-model-len", "16k", "--max-num-batched-tokens", "4K"])
    assert data["max_model_len"] == 16000 and data["max_num_batched_tokens"] == 4096
    data = run_json(["--gpu", "L4", "--model", "llama-3.1-8b", "--max-num-batched-tokens", "2k"])
    assert data["max_num_batched_tokens"] == 2000
    auto = run_json(["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "auto"])
    assert 0 < auto["max_model_len"] < 131072 and auto["fits"]
    assert any("--max-model-len auto" in a for a in auto["assumptions"])
    assert run(["--gpu", "L4", "--model", "llama-3.1-8b", "--max-num-batched-tokens", "lots"]).exit_code == 2


# Start-ups added for issue 26 (`new: true`, never fitted on) that the planner misses by more than 30%, and why
# (the sixth batch's report): both have a few GiB of KV memory, so a GiB-sized overhead the planner does not model
# is a large fraction of it.
KNOWN_LATE_MISSES = {
    # a cold start (first start of the image): the same card and flags give 5.47 GiB after warm restarts on 0.31.0,
    # and 5.93 vs 8.02 GiB cold vs warm on 0.28.0 -- the torch.compile cold-compile peak the planner does not add
    "qwen3-8b-awq-rtx5070ti-16384-0.8-v0.30.0",
    # the token count from the printed 2.42 GiB is exact; the memory is 3.14 GiB planned against 2.42, 0.72 GiB more
    # overhead than planned at 0.97 of a card whose total vLLM did not print (31.55 GiB scaled from nvidia-smi's
    # 32760 MiB, ~0.15 GiB either way) beside ~185 MiB of desktop processes, eager (no graphs), FlashInfer sampler
    # off; 0.72 GiB is 30.0% of so small a cache (both lengths print the same 2.42 GiB)
    "qwen3.8-27b-fp8-rtx5000ada-16384-0.97-v0.28.0",
    "qwen3.8-27b-fp8-rtx5000ada-7168-0.97-v0.28.0",
}


def test_truth_set_reaches_the_newest_releases():
    # issue 15 "Truth": full-budget start-ups after 0.19 (CUDA graphs inside the budget), across GPUs, TP/PP, dense,
    # MoE and quantized; each within the worst-case target, each source quoting the line it was read from
    bench = _bench()
    data = bench.load()
    rows = {r["id"]: r for r in bench.kv_errors(data)}
    late = [p for p in data["kv_pairs"] if sizing.releases.parse_version(str(p["config"]["vllm_version"])) >= (0, 20, 0)]
    assert len(late) >= 8
    assert any(sizing.releases.parse_version(str(p["config"]["vllm_version"])) >= (0, 30, 0) for p in late)
    assert {int(p["config"].get("tensor_parallel_size", 1)) for p in late} >= {1, 2, 4}
    assert any(p["config"].get("pipeline_parallel_size") for p in late)
    assert any(load_model(p["config"]["model"]).arch.is_moe for p in late)
    assert any("FP8" in p["config"]["model"] for p in late)
    for p in late:
        if p["id"] in KNOWN_LATE_MISSES:  # out-of-sample findings, kept as they are (no coefficient read off them)
            assert abs(rows[p["id"]]["errors"]["planner"]) > 0.30, f"{p['id']} is now within 30%: drop it from the list"
            continue
        assert abs(rows[p["id"]]["errors"]["planner"]) <= 0.30, p["id"]
        if p["source"].startswith("https://github.com/search"):
            assert p["quote"] and p["index"], p["id"]     # a code search for a verbatim line, and the index's id


def test_mamba2_unified_block_matches_vllm():
    # vLLM's 'Setting attention block size to N tokens': Nemotron-Nano-9B-v2's Mamba-2 state page (bf16 conv and
    # SSM state, 27 of 56 layers) needs a 672-token attention block (vllm-project/vllm#24280)
    blocks = _bench().block_errors(_bench().load())
    assert blocks and all(est == measured for _id, est, measured in blocks), blocks
    data = run_json(["--gpu", "H100", "--model", "nemotron-nano-9b-v2", "--max-model-len", "32768",
                     "--vllm-version", "0.27.1"])
    assert any(a.startswith("hybrid Mamba-2: 4 of 56 layers cache KV") and "block 672 tokens" in a
               for a in data["assumptions"])
    # the spelled-out product counts the 4 attention layers, not the 25 MLP-only ones
    text = run(["--gpu", "H100", "--model", "nemotron-nano-9b-v2", "--max-model-len", "32768"]).output
    assert "16,384 B (16 KiB) = 2 x 4 layers x 8 KV heads x 128 head dim x 2 bytes" in text


def test_model_runner_v2_coefficients_by_release():
    # dense models run on Model Runner V2 from 0.25 (its sampler peak is small, the profiled peak is the forward
    # pass); MoE models keep the Model Runner V1 coefficients until 0.29
    def plan(model: str, version: str) -> dict:
        return run_json(["--gpu", "H100", "--model", model, "--max-model-len", "8192", "--vllm-version", version])

    old, new = plan("llama-3.1-8b", "0.24.0"), plan("llama-3.1-8b", "0.27.1")
    assert not any("Model Runner V2" in a for a in old["assumptions"])
    assert any("Model Runner V2" in a for a in new["assumptions"])
    # H100, 1,024 sequences: the sampler's 1.88 GiB peak gives way to the 0.84 GiB forward pass, graphs 0.83 -> 0.69
    assert new["overhead_bytes"] < old["overhead_bytes"] - 1.0 * GIB
    assert not any("Model Runner V2" in a for a in plan("qwen3-30b-a3b", "0.27.1")["assumptions"])
    assert any("Model Runner V2" in a for a in plan("qwen3-30b-a3b", "0.29.0")["assumptions"])


def test_kv_cache_memory_bytes_must_fit_the_whole_gpu():
    # the fixed KV size is not capped by the utilization share: 8 GiB beside 15 GiB of weights overflows an L4
    cmd = ["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "16k", "--kv-cache-memory-bytes"]
    data = run_json([*cmd, "8G"])
    assert not data["starts"] and data["stage"] == "kv_cache_allocation"
    assert data["vllm_message"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB")
    fixed = next(tok for tok in data["command"].split() if tok.isdigit() and int(tok) > 1 << 30)
    assert 5 * GIB < int(fixed) < 7 * GIB
    assert not next(r for r in data["what_if"] if r["label"] == "as planned")["fits"]
    assert next(r for r in data["what_if"] if r["label"].startswith("TP=2"))["fits"]   # half the weights: it fits
    again = run_json([*cmd, fixed])
    assert again["starts"] and again["kv_cache_bytes"] == int(fixed)
    assert run(["--check", *cmd, "8G"]).exit_code == 1
    assert "whole GPU with the fixed KV cache" in run([*cmd, "8G"]).output
    # the planner's own option is vLLM's flag too, and the corrected command keeps it
    opt = run_json(["--gpu", "L4", "--model", "llama-3.1-8b", "--max-model-len", "16384", "--kv-cache-memory-bytes",
                    "5GiB"])
    assert opt["starts"] and opt["kv_cache_bytes"] == 5 * GIB and "--kv-cache-memory-bytes 5368709120" in opt["command"]


def test_length_spellings_by_release():
    # vLLM reads 16k / 16K from 0.8.4 and fits 'auto' / -1 from 0.14.0; older releases reject them at the CLI
    cmd = ["--gpu", "L4", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len"]
    old = run(["--vllm-version", "0.7.3", *cmd, "16k"])
    assert old.exit_code == 2 and "invalid int value: '16k'" in old.output
    assert run_json(["--vllm-version", "0.10.0", *cmd, "16K"])["max_model_len"] == 16384
    auto = run(["--vllm-version", "0.10.0", *cmd, "auto"])
    assert auto.exit_code == 2 and "invalid human_readable_int value: 'auto'" in auto.output
    assert run(["--vllm-version", "0.13.0", *cmd, "-1"]).exit_code == 2
    fitted = run_json(["--vllm-version", "0.14.0", *cmd, "-1"])
    assert 0 < fitted["max_model_len"] < 131072 and fitted["starts"]
    # the advice names 'auto' where the release has it
    assert "--max-model-len auto" in run_json(["--vllm-version", "0.33.0", *cmd, "65536"])["command_note"]
    assert "auto" not in run_json(["--vllm-version", "0.10.0", *cmd, "65536"])["command_note"]


def test_hybrid_prefix_caching_default_by_release():
    # vllm-project/vllm#50991 (in v0.28.0, not v0.27.x): prefix caching on by default for hybrid models, the state in
    # Mamba cache mode 'align', two state pages a request (MambaSpec.max_memory_usage_bytes); before, off: one page
    from diagnoser.vllm import kvcache, releases
    assert releases.default("hybrid_prefix_caching", (0, 27, 1)) is False
    assert releases.default("hybrid_prefix_caching", (0, 28, 0)) is True
    assert kvcache.state_pages_per_request("align") == 2 and kvcache.state_pages_per_request("none") == 1
    spec = load_model("Qwen/Qwen3.8-27B")
    base = dict(arch=spec.arch, gpu_bytes=95.01 * GIB, max_model_len=8192, dtype="bfloat16",
                kv_cache_bytes=31.24 * GIB)
    new = sizing.plan_memory(sizing.PlanInput(version=(0, 29, 0), **base))
    old = sizing.plan_memory(sizing.PlanInput(version=(0, 27, 1), **base))
    off = sizing.plan_memory(sizing.PlanInput(version=(0, 29, 0), enable_prefix_caching=False, **base))
    assert (new.state_pages, old.state_pages, off.state_pages) == (2, 1, 1)
    # the RTX PRO 6000 start-up of 0.29.0 printed 314,187 tokens, 38.35x, from 31.24 GiB
    assert new.kv_cache_tokens == 314187 and round(new.max_concurrency, 2) == 38.35
    assert off.kv_cache_tokens == 381513
    # 2 x RTX 3090, TP2, fp8 KV, 131,072 tokens: one more state page a request is 3 groups x 16 layers x a
    # 1568-token page of 1,024 B a token = 0.072 GiB a rank
    fp8 = sizing.plan_memory(sizing.PlanInput(arch=load_model("Qwen/Qwen3.8-27B-FP8").arch, gpu_bytes=23.57 * GIB,
                                              tensor_parallel_size=2, kv_cache_dtype="fp8", quantization="fp8",
                                              max_model_len=131072, enable_prefix_caching=True, version=(0, 27, 1),
                                              kv_cache_bytes=4.99 * GIB))
    assert fp8.block_size == 1568 and round(3 * 16 * 1568 * 1024 / GIB, 3) == 0.072
    assert round(fp8.max_concurrency, 2) == 2.31


def test_qwen3_5_vision_tower_counted_unless_language_model_only():
    # config.json vision_config (depth 27, hidden 1152, intermediate 4304, patch 16, temporal 2, merge 2, 2304
    # positions) as vLLM's qwen3_vl.py Qwen3_VisionTransformer builds it; out_hidden_size 5120 (27B), 2048 (35B-A3B)
    assert load_model("Qwen/Qwen3.8-27B").arch.extra_params == 460_730_096
    assert load_model("Qwen/Qwen3.6-35B-A3B").arch.extra_params == 446_571_248
    arch = load_model("Qwen/Qwen3.8-27B-FP8").arch
    base = dict(arch=arch, gpu_bytes=31.55 * GIB, max_model_len=16384, quantization="fp8", version=(0, 28, 0))
    full = sizing.plan_memory(sizing.PlanInput(**base))
    text = sizing.plan_memory(sizing.PlanInput(language_model_only=True, **base))
    # the tower stays in the model dtype in an FP8 checkpoint: 460,730,096 x 2 B
    assert full.weights_bytes - text.weights_bytes == pytest.approx(460_730_096 * 2, rel=1e-6)
    assert sizing.serve_extras({"--language-model-only": True}, {})["language_model_only"] is True
    assert sizing.serve_extras({"--limit-mm-per-prompt": '{"image": 0, "video": 0}'}, {})["language_model_only"]
    assert "language_model_only" not in sizing.serve_extras({"--limit-mm-per-prompt": '{"image": 2}'}, {})
