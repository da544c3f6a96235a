"""`vllm-doctor plan`: vLLM's flags as click options, built when `plan` is the command (its options and the
planner load only then); the body is diagnoser.plan.run.run_plan.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import click

from diagnoser.errors import DoctorError


def _batched_tokens(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """--max-num-batched-tokens: vLLM's integer with suffixes (8k = 8000, 8K = 8192), at least 1."""
    from diagnoser.plan.resolve import parse_token_count

    if value is None:
        return None
    try:
        return parse_token_count(value)
    except DoctorError as exc:
        raise click.BadParameter(str(exc)) from None


@functools.cache
def plan_command() -> click.Command:
    """`vllm-doctor plan`: the options of vLLM's flags; the body is diagnoser.plan.run.run_plan."""
    from diagnoser.plan.resolve import KV_DTYPES

    @click.command("plan", context_settings={"ignore_unknown_options": False, "help_option_names": ["-h", "--help"]})
    @click.option("--model", "-m", "model_ref", help="config.json path, a folder with one, a repo id or a preset name.")
    @click.option("--gpu", "gpu_name", help="GPU preset (T4, L4, A10G, RTX 3090, RTX 4090, L40S, A100-40GB, "
                  "A100-80GB, H100, H200, B200, MI300X, ...).")
    @click.option("--gpu-memory", "gpu_memory", help="GPU memory instead of a preset: 24GB (10^9), 24GiB (2^30), "
                  "24G (= GiB), 22528MiB.")
    @click.option("--gpu-memory-utilization", type=float, help="vLLM's flag (default 0.92 from 0.20, 0.9 before).")
    @click.option("--max-model-len", help="vLLM's flag (default: the model's maximum); 16384 or 16K.")
    @click.option("--kv-cache-dtype", type=click.Choice(KV_DTYPES), help="vLLM's flag (default auto = model dtype).")
    @click.option("--dtype", type=click.Choice(["auto", "half", "float16", "bfloat16", "float", "float32"]),
                  help="vLLM's flag (default auto).")
    @click.option("--quantization", "-q", help="vLLM's flag (awq, gptq, fp8, compressed-tensors, bitsandbytes, ...).")
    @click.option("--tensor-parallel-size", "-tp", type=click.IntRange(1), help="vLLM's flag (default 1).")
    @click.option("--pipeline-parallel-size", "-pp", type=click.IntRange(1), help="vLLM's flag (default 1).")
    @click.option("--max-num-seqs", type=click.IntRange(1), help="vLLM's flag (default: per release and GPU).")
    @click.option("--max-num-batched-tokens", callback=_batched_tokens,
                  help="vLLM's flag (default: per release); 8192 or 8K.")
    @click.option("--enforce-eager", is_flag=True, default=None, help="vLLM's flag: no CUDA graphs.")
    @click.option("--kv-cache-memory-bytes", help="vLLM's flag (0.10.2+): a fixed KV cache per GPU, in bytes or a size "
                  "(8GiB); the utilization share no longer caps it.")
    @click.option("--weights", help="Weight memory per GPU (replaces the estimate), e.g. 16GB.")
    @click.option("--overhead", help="Activations + CUDA graphs + non-torch memory (replaces the estimate).")
    @click.option("--vllm-version", default="latest", show_default=True,
                  help="Release whose defaults and formulas to use (e.g. 0.7.3); a list (0.7.3,0.8.2) plans each "
                  "release side by side with what moved and the fix.")
    @click.option("--log", "log_path", type=click.Path(dir_okay=False), help="A startup log: its measured numbers "
                  "replace the estimates.")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @click.option("--check", is_flag=True, help="CI gate: exit 1 when it will not start or concurrency is below "
                  "--min-concurrency; 0 otherwise.")
    @click.option("--min-concurrency", type=float, default=None, help="Requests of --max-model-len that must fit "
                  "at once (with --check).")
    @click.option("--from-file", "from_file", is_flag=True, help="The arguments are launch config files: shell "
                  "scripts running `vllm serve` (also Dockerfiles, compose files, Kubernetes manifests) or vLLM YAML "
                  "configs (`vllm serve --config`). A comment `# vllm-doctor: gpu=L4` in a file pins its GPU.")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    def plan(**opts: Any) -> None:
        """Predict whether a vLLM configuration starts, and size its KV cache.

        \b
          vllm-doctor plan --model llama-3.1-8b --gpu L4 --max-model-len 16384
          vllm-doctor plan --gpu L4 -- vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384
          vllm-doctor plan --log server.log          measured numbers replace the estimates
          vllm-doctor plan --check --gpu L4 --from-file deploy/serve-vllm.sh deploy/vllm.yaml
        """
        from diagnoser.plan.run import run_plan

        try:
            code = run_plan(opts, click.echo)
        except DoctorError as exc:   # the library's own errors become click's usage errors only here (exit 2)
            raise click.UsageError(str(exc)) from None
        sys.exit(code)

    return plan
