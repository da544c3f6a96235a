"""Live: diagnose a log while it is written.

- watch.py: `--follow`, `--until`, `vllm-doctor run -- CMD` (findings as they happen, a verdict at the end).
- tee.py: `--tee`, the input passed to stdout byte for byte while the diagnosis reads it.
"""
