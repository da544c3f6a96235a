"""vllm-doctor: diagnose vLLM server logs (what failed, at which stage, the numbers, the computed fix)."""

__version__ = "0.1.0"
