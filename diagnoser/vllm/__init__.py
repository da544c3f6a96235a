"""What the doctor knows about vLLM, as pure functions over bundled data (no log, no I/O beyond data/):
the planner, `compare` and the rules' advice all use this package.

- memory.py: the budget arithmetic (units, what fits, utilization), the `mem.` rule templates see.
- archspec.py: a model's shape (ArchSpec); kvcache.py: KV bytes per token and per request, hybrid pages;
  weights.py: parameters and their bytes; profiling.py: activations, non-torch memory, CUDA graphs.
- sizing.py: one `vllm serve` configuration sized as a start-up: flags -> KV-cache tokens;
  coefficients.py: what each release's profiling costs (sampler, non-torch, CUDA graphs);
  what_if.py: a plan re-planned with flags changed or at other lengths (what-if rows, length table).
- modelspec.py: model and GPU specs (a config.json, a folder, a bundled preset).
- releases.py: the version parser and what each release defaults (data/releases.yaml).
- flags.py: the `vllm serve` flag list (data/vllm_flags.yaml), renamed and removed flags.
- serve_args.py: a `vllm serve` command line read and written (and its `LLM(...)` spelling).
- stages.py: the stages a start-up moves through; units.py: sizes as vLLM prints them.
"""
