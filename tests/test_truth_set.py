"""The planner scored out of sample (issue 26): leave-one-source-out refits, and the start-ups added for
configurations the coefficients were never read off (pre-Ampere GPUs, V0 long context, multimodal, 0.28+)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from diagnoser.vllm import coefficients, releases, sizing
from diagnoser.vllm.modelspec import compute_capability_of, load_model

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("planner_accuracy", ROOT / "bench" / "planner_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["planner_accuracy"] = module
    spec.loader.exec_module(module)
    return module


def _version(pair: dict) -> tuple[int, int, int]:
    return releases.parse_release(str(pair["config"]["vllm_version"]))


def test_new_startups_are_sourced_and_never_fitted_on():
    bench = _bench()
    data = bench.load()
    new = [p for p in data["kv_pairs"] if p.get("new")]
    assert len(new) >= 12
    for pair in new:
        assert pair["source"].startswith("https://"), pair["id"]
        if pair["source"].startswith("https://github.com/search"):
            assert pair["quote"] and pair["index"], pair["id"]
    # what they cover: GPUs below compute capability 8.0, V0 at long context, multimodal models, 0.28 and later
    pre_ampere = [p for p in new if (float(p["config"].get("compute_capability", 0)) or
                                     compute_capability_of(p["config"].get("gpu")) or 8.0) < 8.0]
    assert len(pre_ampere) >= 7
    assert sum(1 for p in new if int(p["config"].get("max_model_len") or 0) >= 32768 and _version(p) < (0, 11, 0)) >= 4
    assert sum(1 for p in new if load_model(p["config"]["model"]).arch.vision) >= 2
    assert sum(1 for p in new if _version(p) >= (0, 28, 0)) >= 3
    # the refits never read a new start-up: leaving one out changes nothing
    fitted = bench.refits(data, None)
    assert bench.refits({**data, "kv_pairs": [p for p in data["kv_pairs"] if not p.get("new")]}, None) == fitted


def test_leave_one_source_out_refits_without_the_source():
    bench = _bench()
    data = bench.load()
    sweep = next(p for p in data["kv_pairs"] if "llm-d-planner" in p["source"])
    res = sizing.plan_memory(bench.plan_input(sweep["config"]))
    shipped = coefficients.coefficient("non_torch_single_gib", res.inp.version)
    held_out = bench.coefficients_for(sweep, bench.refits(data, bench.origin(sweep)))
    # the 0.18+ non-torch coefficient was read off this sweep: without it, it is refitted from other sources
    assert "non_torch_single_gib" in held_out and held_out["non_torch_single_gib"] != shipped
    # the 0.17+ sampler figure comes from vLLM's source (Triton top-k/top-p), not from the sweep: never refitted
    assert "sampler_bytes_per_logit" not in held_out
    # the refit replaces the coefficient in the plan, nothing else
    again = sizing.plan_memory(bench.plan_input(sweep["config"], held_out))
    assert again.non_torch_bytes != res.non_torch_bytes
    assert again.weights_bytes == res.weights_bytes and again.activation_bytes == res.activation_bytes


def test_non_torch_figures_of_another_kind_inform_no_coefficient():
    # vLLM 0.6.4 prints as non_torch_memory everything torch has not allocated, the CUDA context included (V0
    # worker.py 0.6.4): an H100 at TP 1 shows 1.79 GiB where 0.6.5+ start-ups show 0.02-0.26 GiB of growth
    bench = _bench()
    data = bench.load()
    by_id = {p["id"]: p for p in data["kv_pairs"]}
    for pid in ("llama-3-8b-h100-v0.6.4-dev", "llama-3-8b-tp2-h100-v0.6.4-dev", "llama-3.1-70b-tp8-h200-v0.6.4"):
        pair = by_id[pid]
        res = sizing.plan_memory(bench.plan_input(pair["config"]))
        assert bench._non_torch_single(pair, res) is None and bench._non_torch_multi(pair, res) is None, pid
    grown = by_id["qwen2.5-14b-fp16-tp2-a100-40gb-v0.7.2"]
    res = sizing.plan_memory(bench.plan_input(grown["config"]))
    assert bench._non_torch_multi(grown, res) == pytest.approx(1.54 - 0.10)
    # held out, the 405B at 0.5.3 (TP 8) is planned with the growth figure of 0.7.2, not the 0.6.4 context figures
    big = by_id["llama-3.1-405b-fp8-tp8-h100-v0.5.3"]
    held_out = bench.coefficients_for(big, bench.refits(data, bench.origin(big)))
    assert held_out["non_torch_multi_gpu_gib"] == pytest.approx(1.44)


@pytest.mark.xfail(strict=True, reason="not met yet: gpt-oss-120b on an H100 (0.11.0) keeps 3.33 GiB after 64.38 GiB of weights; vLLM "
                   "0.11.0's image picks Marlin (65.90 GiB: no triton_kernels shipped), while 64.38 is the Triton layout of 0.12-0.16 "
                   "(vllm-project/vllm#33155 prints it at 0.14.1), and 1.5 GiB is 45% of the cache; "
                   "and V1 TP=2 non-torch memory at 0.11.0 (0.55 GiB measured) is not derived from source")
def test_out_of_sample_accuracy_on_the_new_startups():
    # issue 26 acceptance, on start-ups no coefficient was read off: median <= 5%, p90 <= 15%, worst <= 30%
    bench = _bench()
    rows = [r for r in bench.loso_errors(bench.load()) if r["new"]]
    median, p90, worst = bench.summary([r["errors"]["planner"] for r in rows])
    assert median <= 0.05, rows
    assert p90 <= 0.15, rows
    assert worst <= 0.30, rows
