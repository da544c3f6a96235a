"""How far the planner's default estimates land from what vLLM measured at real start-ups.

    python bench/planner_accuracy.py [--data tests/data/startup_measurements.yaml]

For every (configuration, measured figures) pair it prints the planner's KV-token estimate (no measured number
is given to it: weights, overhead and KV room are all estimated) next to vLLM's figure, then the median and
worst relative error; the same for weights and one request's KV need.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from diagnoser import memory as mem
from diagnoser.modelspec import load_gpu, load_model

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "startup_measurements.yaml"


def load(path: Path = DATA) -> dict[str, Any]:
    """The measurement file."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def plan_input(config: dict[str, Any]) -> mem.PlanInput:
    """A pair's configuration -> the planner's input (estimates only)."""
    spec = load_model(config["model"])
    gpu_bytes, gpu_name = 0.0, ""
    if config.get("gpu") or not config.get("gpu_memory_gib"):
        gpu = load_gpu(config.get("gpu", "H100-80GB"))
        gpu_bytes, gpu_name = gpu.memory_bytes, gpu.name
    if config.get("gpu_memory_gib"):
        gpu_bytes = float(config["gpu_memory_gib"]) * mem.GIB
    return mem.PlanInput(
        arch=spec.arch, gpu_bytes=gpu_bytes, gpu_name=gpu_name,
        gpu_memory_utilization=config.get("gpu_memory_utilization"), max_model_len=config.get("max_model_len"),
        dtype=config.get("dtype", "auto"), tensor_parallel_size=int(config.get("tensor_parallel_size", 1)),
        version=mem.version_tuple(str(config.get("vllm_version", "latest"))), engine=config.get("engine"),
    )


def rel(estimate: float, measured: float) -> float:
    """Relative error of an estimate."""
    return (estimate - measured) / measured if measured else float("inf")


def kv_errors(data: dict[str, Any]) -> list[tuple[str, int, int, float]]:
    """(id, estimated tokens, measured tokens, relative error) for every KV pair."""
    out = []
    for pair in data["kv_pairs"]:
        res = mem.plan_memory(plan_input(pair["config"]))
        measured = int(pair["measured"]["kv_cache_tokens"])
        out.append((pair["id"], res.kv_cache_tokens, measured, rel(res.kv_cache_tokens, measured)))
    return out


def weight_errors(data: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(id, estimated GiB, measured GiB, relative error) wherever weights were measured."""
    out = []
    for group in ("kv_pairs", "request_pairs", "weight_pairs"):
        for pair in data.get(group, []):
            w = pair["measured"].get("weights_gib")
            if w is None:
                continue
            res = mem.plan_memory(plan_input({"gpu": "H100-80GB", **pair["config"]}))
            est = res.weights_bytes / mem.GIB
            out.append((pair["id"], est, float(w), rel(est, float(w))))
    return out


def request_errors(data: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(id, estimated GiB, measured GiB, relative error) of one request's KV need."""
    out = []
    for pair in data.get("request_pairs", []):
        res = mem.plan_memory(plan_input({"gpu": "H100-80GB", **pair["config"]}))
        est = res.request_kv_bytes / mem.GIB
        m = float(pair["measured"]["request_kv_gib"])
        out.append((pair["id"], est, m, rel(est, m)))
    return out


def summary(errors: list[float]) -> tuple[float, float]:
    """(median, worst) absolute relative error."""
    absolute = [abs(e) for e in errors]
    return statistics.median(absolute), max(absolute)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    data = load(args.data)
    rows = kv_errors(data)
    print(f"{'pair':42s} {'estimated':>12s} {'measured':>12s} {'error':>8s}")
    for pid, est, measured, err in rows:
        print(f"{pid:42s} {est:>12,} {measured:>12,} {err:>+8.1%}")
    med, worst = summary([r[3] for r in rows])
    print(f"KV cache tokens over {len(rows)} pairs: median error {med:.1%}, worst {worst:.1%}\n")
    wrows = weight_errors(data)
    for pid, est, measured, err in wrows:
        print(f"{pid:42s} {est:>10.2f} GiB {measured:>8.2f} GiB {err:>+8.1%}")
    med, worst = summary([r[3] for r in wrows])
    print(f"Weights over {len(wrows)} pairs: median error {med:.1%}, worst {worst:.1%}\n")
    for pid, est, measured, err in request_errors(data):
        print(f"{pid:42s} {est:>10.2f} GiB {measured:>8.2f} GiB {err:>+8.1%}  (one request's KV need)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
