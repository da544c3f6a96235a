"""`vllm-doctor compare`: start-ups side by side (each start's memory budget, what moved between them, and the
flags that get the old KV cache back). comparison.py builds the model; report/compare/ renders it."""
