"""Issue 17: `plan` refuses nonsense inputs with one line naming the value and the valid range (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
         "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnoser", "plan", *args], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("args, names", [
    (["--vllm-version", "abc"], ["--vllm-version 'abc'", "0.10.1"]),
    (["--gpu-memory", "0"], ["--gpu-memory 0", "between 1 GiB and 4096 GiB"]),
    (["--gpu-memory", "1e30"], ["--gpu-memory 1e30", "between 1 GiB and 4096 GiB"]),
    (["--max-model-len", "0"], ["--max-model-len 0", "from 1 to"]),
])
def test_nonsense_options_are_one_line_errors(args, names):
    base = ["--model", "llama-3.1-8b"] + ([] if "--gpu-memory" in args else ["--gpu", "L4"])
    out = plan(*base, *args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    for name in names:
        assert name in out.stderr


@pytest.mark.parametrize("key, value", [("num_key_value_heads", 0), ("num_hidden_layers", -32)])
def test_a_config_with_impossible_numbers_is_refused(tmp_path, key, value):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA, key: value}))
    out = plan("--model", str(config), "--gpu", "L4")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and str(config) in out.stderr and str(value) in out.stderr


def test_a_release_number_with_a_suffix_is_accepted():
    out = plan("--model", "llama-3.1-8b", "--gpu", "L4", "--vllm-version", "0.6.6.post1")
    assert out.returncode == 0 and "vLLM 0.6.6" in out.stdout


def test_a_quantization_fix_points_at_a_checkpoint_never_adds_the_flag():
    # Llama-3.1-405B on 4 x H100: neither fp8 weights nor more of the same GPUs are in the table; a 4-bit checkpoint is
    args = ("--model", "llama-3.1-405b", "--gpu", "H100", "-tp", "4", "--max-model-len", "4096")
    out = plan(*args, "--format", "json")
    data = json.loads(out.stdout)
    assert data["quantization"] is None            # a bf16 checkpoint
    assert data["command"] is None                 # the same command again would fail the same way
    assert "-AWQ" in data["command_note"] and "GPTQ" in data["command_note"]
    assert "--quantization awq" not in out.stdout
    text = plan(*args).stdout
    assert "No command line change is enough: load a 4-bit checkpoint" in text and "--quantization awq" not in text
    # where vLLM's own fp8 quantization of the 16-bit checkpoint is enough (Llama-3.1-70B on one H100 with vLLM 0.28;
    # from 0.29 the FULL CUDA graphs' estimate for 1024 sequences takes the room fp8 frees), that flag is the fix: a
    # smaller change than another checkpoint or a second GPU
    data = json.loads(plan("--model", "llama-3.1-70b", "--gpu", "H100", "--max-model-len", "4096",
                           "--vllm-version", "0.28.0", "--format", "json").stdout)
    assert data["command"].endswith("--quantization fp8") and "--quantization awq" not in data["command"]


def test_the_log_budget_table_adds_up_with_an_unaccounted_row():
    from .conftest import FIXTURES

    log = str(FIXTURES / "example-kv-cache-too-small.log")
    data = json.loads(plan("--log", log, "--gpu", "L4", "--format", "json").stdout)
    parts = data["weights_bytes"] + data["overhead_bytes"] + data["other_bytes"] + data["kv_cache_bytes"]
    assert data["other_bytes"] != 0 and parts == pytest.approx(data["budget_bytes"], abs=2)
    text = plan("--log", log, "--gpu", "L4").stdout
    assert "other / unaccounted" in text and "what vLLM's own figures leave unexplained" in text
