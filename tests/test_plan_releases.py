"""Issue 26: the planner on configurations it has not seen.

The release, engine and defaults a plan uses (version strings as vLLM and images print them, the V0 fallback on
GPUs below compute capability 8.0, the LLM class's defaults, an unknown release planned as a range), and advice
that agrees with the plan's own what-if table.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli.plan import plan_command
from diagnoser.launch import image_version
from diagnoser.vllm import releases, versions

GIB = 1 << 30

#: Mistral-Small-24B-Instruct-2501's public config.json (the numbers the arithmetic reads)
MISTRAL_SMALL_24B = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 5120,
    "intermediate_size": 32768, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 32768, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "sliding_window": None,
}


def run(args: list[str]):
    return CliRunner().invoke(plan_command(), args)


def run_json(args: list[str], codes: tuple[int, ...] = (0, 1)) -> dict:
    result = run(["--format", "json", *args])
    assert result.exit_code in codes, result.output
    return json.loads(result.stdout)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


# --- version strings ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "release", "words"), [
    ("0.26.1rc1.dev156+g0eec856cc", (0, 26, 1), "development build"),
    ("v0.10.1.1", (0, 10, 1), "patch of 0.10.1"),
    ("0.6.3.post1", (0, 6, 3), "post-release"),
    ("0.10.1+cu128", (0, 10, 1), "CUDA 12.8"),
    ("0.11.0rc2", (0, 11, 0), "release candidate 2"),
    ("v0.8.5", (0, 8, 5), ""),
])
def test_version_strings_map_to_a_release_with_a_note(text, release, words):
    ref = versions.parse(text)
    assert ref is not None and ref.release == release
    note = ref.note()
    assert (words in note) if words else note == ""


def test_a_source_build_version_is_planned_not_refused():
    # what `vllm --version` prints for a source build: exit 2 before; now planned with 0.26.1's data and said so
    data = run_json(["--gpu", "L4", "--model", "qwen2.5-1.5b", "--max-model-len", "4096",
                     "--vllm-version", "0.26.1rc1.dev156+g0eec856cc"])
    assert data["vllm_version"] == "0.26.1"
    assert any("development build" in n and "0.26.1" in n for n in data["notes"]), data["notes"]


@pytest.mark.parametrize(("image", "version"), [
    ("vllm/vllm-openai:v0.10.1.1", "0.10.1.1"),
    ("vllm/vllm-openai:v0.6.3.post1", "0.6.3.post1"),
    ("vllm/vllm-openai:v0.8.5.post1", "0.8.5.post1"),
    ("vllm/vllm-openai:v0.10.1-cu128", "0.10.1"),
    ("vllm/vllm-openai:latest", None),
])
def test_image_tags_name_their_release(image, version):
    assert image_version(image) == version


def test_compose_image_tag_sets_the_release_and_the_advice_fits_it(tmp_path):
    # v0.10.1.1 was silently ignored: the plan used the newest release and suggested `--max-model-len auto`, which
    # 0.10.1.1 refuses (it exists from 0.14.0)
    path = write(tmp_path, "docker-compose.yml", """
        services:
          vllm:
            image: vllm/vllm-openai:v0.10.1.1
            command: ["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory-utilization", "0.9"]
        """)
    result = run(["--format", "json", "--gpu", "L4", "--from-file", path])
    entries = json.loads(result.stdout)
    assert len(entries) == 1, entries
    entry = entries[0]
    assert entry["vllm_version"] == "0.10.1"
    assert any("0.10.1.1" in n and "patch of 0.10.1" in n for n in entry["notes"]), entry["notes"]
    assert "--max-model-len auto" not in (entry["command"] or "")
    assert "auto" not in json.dumps([r["flags"] for r in entry["what_if"]])


# --- the engine a release runs -----------------------------------------------------------------------------------

def test_v1_falls_back_to_v0_below_compute_capability_8():
    # 0.8.0 .. 0.10.1.1: EngineArgs._is_v1_supported_oracle sends a T4 (sm 7.5) to V0 (XFormers); 0.10.2 runs V1
    t4 = run_json(["--gpu", "T4", "--vllm-version", "0.8.2", "--model", "qwen2.5-1.5b", "--max-model-len", "4096",
                   "--dtype", "half"])
    assert t4["engine"] == "V0"
    assert t4["max_num_seqs"] == 256            # V1's 1024 rows of sampler are not profiled on a T4
    assert any("compute capability" in a and "V0" in a for a in t4["assumptions"]), t4["assumptions"]
    l4 = run_json(["--gpu", "L4", "--vllm-version", "0.8.2", "--model", "qwen2.5-1.5b", "--max-model-len", "4096"])
    assert l4["engine"] == "V1"
    later = run_json(["--gpu", "T4", "--vllm-version", "0.10.2", "--model", "qwen2.5-1.5b", "--max-model-len", "4096",
                      "--dtype", "half"])
    assert later["engine"] == "V1"
    # VLLM_USE_V1=1 keeps V1 (1024 rows of sampler in the profiled peak): V0's cache is gigabytes larger
    forced = run_json(["--gpu", "T4", "--vllm-version", "0.8.2", "--dtype", "half", "--", "VLLM_USE_V1=1", "vllm",
                       "serve", "Qwen/Qwen2.5-1.5B-Instruct", "--max-model-len", "4096"])
    assert forced["engine"] == "V1" and forced["max_num_seqs"] == 1024
    assert t4["kv_cache_bytes"] - forced["kv_cache_bytes"] > 3 * GIB


def test_engine_choice_is_one_function_with_its_reason():
    choice = releases.engine_choice((0, 8, 2), compute_capability=7.5)
    assert choice.engine == "V0" and "compute capability" in choice.reason
    assert releases.engine_choice((0, 8, 2), compute_capability=8.9).engine == "V1"
    assert releases.engine_choice((0, 9, 2), use_v1="0").engine == "V0"
    gone = releases.engine_choice((0, 11, 0), use_v1="0")
    assert gone.engine == "V1" and "VLLM_USE_V1" in gone.reason      # V0 is removed: the variable is not read
    assert releases.engine_choice((0, 9, 0), dtype="float32").engine == "V0"
    assert releases.engine_choice((0, 7, 3)).engine == "V0"


def test_vllm_use_v1_0_after_v0_is_gone_says_so():
    data = run_json(["--gpu", "L4", "--vllm-version", "0.11.0", "--", "VLLM_USE_V1=0", "vllm", "serve",
                     "Qwen/Qwen2.5-1.5B-Instruct", "--max-model-len", "4096"])
    assert data["engine"] == "V1"
    assert any("VLLM_USE_V1" in n for n in data["notes"] + data["assumptions"])


# --- defaults by entry point -------------------------------------------------------------------------------------

def test_llm_class_defaults_differ_from_vllm_serve():
    # UsageContext.LLM_CLASS gets 16384-token chunks on an H100 where `vllm serve` gets 8192 (2048/8192 on small GPUs)
    serve = run_json(["--gpu", "H100", "--vllm-version", "0.10.2", "--model", "qwen2.5-7b", "--max-model-len", "4096"])
    llm = run_json(["--gpu", "H100", "--vllm-version", "0.10.2", "--model", "qwen2.5-7b", "--max-model-len", "4096",
                    "--entry", "llm"])
    assert (serve["max_num_batched_tokens"], llm["max_num_batched_tokens"]) == (8192, 16384)
    small = run_json(["--gpu", "L4", "--vllm-version", "0.10.2", "--model", "qwen2.5-7b", "--max-model-len", "4096",
                      "--entry", "llm"])
    assert small["max_num_batched_tokens"] == 8192


def test_release_data_cites_vllm_source_for_engine_and_entry_defaults():
    data = releases.load()
    cc = data.settings["v1_min_compute_capability"]
    assert [(e.since, e.value) for e in cc] == [((0, 1, 0), None), ((0, 8, 0), 8.0), ((0, 10, 2), None)]
    assert all(e.source for e in cc[1:])
    llm = [e for e in data.settings["max_num_batched_tokens"] if e.entry == "llm"]
    assert llm and all("LLM_CLASS" in e.source or "entry points" in e.source for e in llm)


# --- an unknown release ------------------------------------------------------------------------------------------

def test_without_a_release_the_plan_shows_the_range_it_could_run_on():
    data = run_json(["--gpu", "L4", "--model", "qwen2.5-7b", "--max-model-len", "16384"])
    span = data["release_range"]
    assert span["oldest"] != span["newest"]
    assert span["kv_cache_bytes"]["min"] < span["kv_cache_bytes"]["max"]
    assert any("no release given" in n for n in data["notes"]), data["notes"]
    text = run(["--gpu", "L4", "--model", "qwen2.5-7b", "--max-model-len", "16384"]).output
    assert "releases" in text and span["oldest"] in text


# --- advice that agrees with the what-if table ---------------------------------------------------------------------

def test_first_fix_is_one_the_table_shows_working(tmp_path):
    cfg = tmp_path / "mistral-small-24b"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(MISTRAL_SMALL_24B), encoding="utf-8")
    data = run_json(["--gpu", "L40S", "--model", str(cfg), "--max-model-len", "32768", "--vllm-version", "0.10.1"])
    assert not data["fits"]
    working = [r for r in data["what_if"] if r["fits"]]
    labels = [r["label"] for r in data["what_if"]]
    assert any("fp8 weights" in label for label in labels), labels
    assert any(r["label"].startswith("TP=2") for r in working)
    # the first fix offered is a command the table shows starting, the smallest change first: TP=2 or fp8 weights,
    # not "no command line change is enough"
    assert "No command line change is enough" not in data["command_note"]
    assert data["command"] and ("--tensor-parallel-size 2" in data["command"] or "fp8" in data["command"])


def test_no_length_fits_is_said_in_words(tmp_path):
    cfg = tmp_path / "mistral-small-24b"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(MISTRAL_SMALL_24B), encoding="utf-8")
    text = run(["--gpu", "L40S", "--model", str(cfg), "--max-model-len", "32768", "--vllm-version", "0.10.1"]).output
    assert "Largest --max-model-len that fits (multiple of 1024): 0" not in text
    assert "no --max-model-len fits" in text.lower()
