"""Live: diagnose a log while it is written.

- watch.py: `--follow`, `--until`, `vllm-doctor run -- CMD` (findings as they happen, a verdict at the end).
- sources.py: where the bytes come from (a pipe, a followed file) and the Feed the reader pulls them through.
- command.py: `vllm-doctor run`'s command: started, signalled, waited for, stopped or drained.
- tee.py: `--tee`, the input passed to stdout byte for byte while the diagnosis reads it.
"""
