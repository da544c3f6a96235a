"""`vllm-doctor compare`: start-ups side by side (each start's memory budget, what moved between them, and the
flags that get the old KV cache back); report/compare/ renders it.

- model.py: what a comparison is (figures, starts, changes, fixes, pairs) and its JSON;
- starts.py: a start from a log or from the planner's prediction for a release;
- budget.py: the figures a start did not print, derived or estimated;
- moved.py: the diff of two starts and the sentence naming what took the KV cache;
- fix.py: the flags that give the KV cache back;
- comparison.py: each start against the first, and the gate (`compare_reports`, `compare_plans`).
"""
