"""The six stages a vLLM start-up moves through, and the catalog's finer names that map onto them."""

from __future__ import annotations

STAGES: tuple[str, ...] = ("cli", "config", "loading", "startup", "warmup", "serving")

#: The catalog's fine stage names (vllm-log-catalog, section A) -> the six coarse stages.
FINE_TO_STAGE: dict[str, str] = {
    "arg_parsing": "cli",
    "config": "config",
    # the workers start once the engine has its config: device checks (dtype, free memory) are start-up
    "worker_init": "startup",
    "model_init": "loading",
    "weight_loading": "loading",
    "distributed_init": "startup",
    "engine_init": "startup",
    "memory_profiling": "startup",
    "kv_cache_allocation": "startup",
    "cuda_graph_capture": "warmup",
    "sampler_warmup": "warmup",
    "pooler_warmup": "warmup",
    "compile": "warmup",
    "serving": "serving",
    "request_handling": "serving",
    "shutdown": "serving",
}


def coarse(fine: str | None) -> str | None:
    """Map a fine stage (or an already coarse one) onto the six stages."""
    if fine is None:
        return None
    if fine in STAGES:
        return fine
    return FINE_TO_STAGE.get(fine)


def order(stage: str | None) -> int:
    """Position of a stage in the start-up sequence (-1 when unknown)."""
    c = coarse(stage)
    return STAGES.index(c) if c in STAGES else -1
