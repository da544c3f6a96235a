"""`vllm-doctor plan`: predict before launch whether a vLLM configuration starts, and size it.

Data flows one way, one module per step (the click command is in cli.py; this package raises errors.py's
exceptions only):

- resolve.py: each setting from the planner's option > the `vllm serve` command > the --log > the default,
  by one table that records where each value came from; value spellings (sizes, lengths) and bounds.
- verdict.py: does it start (the first check vLLM would fail), the message the planned release prints,
  and the flag changes that make it start.
- explain.py: the plan in words: the KV formula, every assumption, the text report.
- command.py: plan one configuration (`plan_config`), one per release (`--vllm-version A,B`), the command's body.
- files.py: `--from-file`, every launch in launch config files (the pre-commit hook).

Every figure comes from memory.py, the model and GPU from modelspec.py, the command line from serve_args.py.
"""

from diagnoser.plan.resolve import MissingInput, VllmRejects, parse_len, parse_size
from diagnoser.plan.run import Planned, plan_config, run_plan
from diagnoser.plan.verdict import Verdict

__all__ = ["MissingInput", "Planned", "Verdict", "VllmRejects", "parse_len", "parse_size", "plan_config",
           "run_plan"]
