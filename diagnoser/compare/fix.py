"""The flags that give the before start's KV cache back on the after release: release defaults that rose
(batch sizes), the utilization share CUDA graphs now take inside the budget, the capture sizes, a top-up
from free GPU memory, a shorter --max-model-len when one request still does not fit; and alternatives that
change more than the budget (not put in the corrected command).
"""

from __future__ import annotations

import math

from diagnoser.compare.budget import plan_input
from diagnoser.compare.model import Fix, Start
from diagnoser.compare.moved import QUIET_GIB, gib, quiet, why
from diagnoser.vllm import memory as mem
from diagnoser.vllm import profiling, weights
from diagnoser.vllm import releases as rel

#: the highest --gpu-memory-utilization a fix proposes
UTILIZATION_CEILING = 0.98


def _activation_return(after: Start, seqs: int | None, batched: int | None) -> float | None:
    """GiB the activation peak drops by with these batch settings on the after release (planner arithmetic)."""
    inp = plan_input(after)
    if inp is None:
        return None
    base = profiling.activation_bytes(after.arch, inp.max_num_batched_tokens, inp.max_num_seqs,
                                inp.tensor_parallel_size, weights.resolve_dtype_bytes(after.arch, inp.dtype))
    new = profiling.activation_bytes(after.arch, batched or inp.max_num_batched_tokens, seqs or inp.max_num_seqs,
                               inp.tensor_parallel_size, weights.resolve_dtype_bytes(after.arch, inp.dtype))
    return max(0.0, (base - new) / mem.GIB)


def fixes_for(before: Start, after: Start, max_kv_loss: float) -> tuple[list[Fix], list[Fix]]:
    """The flags that restore the before start's KV budget on the after release (in the command), and
    alternatives (not in it)."""
    kb, ka = before.get("kv_cache_gib"), after.get("kv_cache_gib")
    if kb is None or ka is None:
        return [], []
    lost = kb - ka
    if (lost <= 0 or quiet(kb, ka)) and not after.failed:
        return [], []
    known = not (before.assumed_version or after.assumed_version)
    fixes = _default_fixes(before, after, known)
    util_fix, new_util = _utilization_fix(before, after, known, lost)
    fixes += util_fix + _capture_size_fix(before, after, known)
    alts = _alternatives(after, known, kb, lost)
    fixes = _top_up(fixes, after, kb * (1 - max_kv_loss) - (ka + sum(f.returns_gib for f in fixes)), new_util)
    return fixes + _length_fix(after, ka + sum(f.returns_gib for f in fixes)), alts


def _default_fixes(before: Start, after: Start, known: bool) -> list[Fix]:
    """--max-num-seqs / --max-num-batched-tokens back to the before release's defaults, when a new default
    (not the user) raised them."""
    sb, sa = before.settings, after.settings
    act_delta = max(0.0, (after.get("activation_peak_gib") or 0.0) - (before.get("activation_peak_gib") or 0.0))
    seqs_b, seqs_a = int(sb["max_num_seqs"]["value"]), int(sa["max_num_seqs"]["value"])
    bt_b, bt_a = int(sb["max_num_batched_tokens"]["value"]), int(sa["max_num_batched_tokens"]["value"])
    seqs_fix = known and seqs_a > seqs_b and sa["max_num_seqs"]["source"] == "default"
    bt_fix = known and bt_a > bt_b and sa["max_num_batched_tokens"]["source"] == "default" and \
        bool(sa["enable_chunked_prefill"]["value"])
    r_seqs = _activation_return(after, seqs_b, None) if seqs_fix else None
    r_both = _activation_return(after, seqs_b if seqs_fix else None, bt_b if bt_fix else None)
    fixes: list[Fix] = []
    if seqs_fix:
        returns = r_seqs if r_seqs is not None else act_delta
        reason = f"vLLM {rel.version_str(after.version)} runs up to {seqs_a} sequences at once " \
                 f"({why(after, 'max_num_seqs', before)}) and sizes its profiling run and sampler warmup for " \
                 f"them; {seqs_b} is what {before.label} ran"
        fixes.append(Fix("--max-num-seqs", str(seqs_b), returns, reason))
    if bt_fix:
        returns = (r_both - (r_seqs or 0.0)) if r_both is not None else (0.0 if seqs_fix else act_delta)
        fixes.append(Fix("--max-num-batched-tokens", str(bt_b), max(0.0, returns),
                         f"the token budget per step rose {bt_b} → {bt_a} "
                         f"({why(after, 'max_num_batched_tokens', before)}); the profiling forward pass runs "
                         "that many tokens"))
    return fixes


def _utilization_fix(before: Start, after: Start, known: bool, lost: float) -> tuple[list[Fix], float]:
    """--gpu-memory-utilization raised by the share CUDA graphs now take inside the budget, or back to the
    before start's share; with the utilization the command then has."""
    sb, sa = before.settings, after.settings
    total = after.get("gpu_total_gib") or 0.0
    util_a = after.get("gpu_memory_utilization") or 0.0
    util_b = before.get("gpu_memory_utilization") or 0.0
    graphs_now = after.get("cuda_graph_budget_gib") or 0.0
    graphs_moved = known and sa["cuda_graphs_in_budget"]["value"] and not sb["cuda_graphs_in_budget"]["value"]
    if graphs_moved and graphs_now > 0 and total:
        new_util = math.ceil((util_a + graphs_now / total) * 1000) / 1000  # vLLM suggests 4 decimals
        if new_util > UTILIZATION_CEILING:
            return [], util_a
        since = sa["cuda_graphs_in_budget"].get("since", "this release")
        return [Fix("--gpu-memory-utilization", f"{new_util:g}", (new_util - util_a) * total,
                    f"since vLLM {since} the budget also holds the CUDA graphs ({gib(graphs_now)}), "
                    "which before were captured outside it; raising the share by as much uses the same "
                    "GPU memory as before")], new_util
    if graphs_moved and util_a and after.context is not None and \
            after.context.utilization_without_graphs is not None:
        # no GPU total in either log: vLLM's own suggestion, the utilization plus the share the graphs took
        new_util = math.ceil((2 * util_a - after.context.utilization_without_graphs) * 1000) / 1000
        if new_util > UTILIZATION_CEILING:
            return [], new_util  # what the top-up then starts from (as the budget vLLM suggested)
        return [Fix("--gpu-memory-utilization", f"{new_util:g}", max(0.0, lost),
                    f"since vLLM {sa['cuda_graphs_in_budget'].get('since')} the budget also holds the CUDA "
                    f"graphs ({util_a:g} is now worth {after.context.utilization_without_graphs:g} without "
                    "them, as vLLM printed); raising the share by as much uses the same GPU memory as "
                    "before (pass --gpu for the GiB figures)")], new_util
    if util_b > util_a and total:
        return [Fix("--gpu-memory-utilization", f"{util_b:g}", (util_b - util_a) * total,
                    f"the budget share fell {util_b:g} → {util_a:g} "
                    f"({why(after, 'gpu_memory_utilization', before)})")], util_b
    return [], util_a


def _capture_size_fix(before: Start, after: Start, known: bool) -> list[Fix]:
    """The capture-size flag back to the before start's largest batch, when graphs grew inside the budget."""
    graphs_now = after.get("cuda_graph_budget_gib") or 0.0
    graphs_then = before.get("cuda_graph_budget_gib") or 0.0
    if not (known and graphs_now - graphs_then >= QUIET_GIB and before.settings["cuda_graphs_in_budget"]["value"]):
        return []
    flag = rel.default("capture_size_flag", after.version, engine=after.engine)
    sizes_b = before.settings["cudagraph_capture_sizes"]["value"] or []
    if not (flag and sizes_b and flag != "--compilation-config"):
        return []
    value = str(max(sizes_b))
    return [Fix(flag, value, graphs_now - graphs_then,
                f"CUDA graphs grew {gib(graphs_then)} → {gib(graphs_now)}; capturing up to batch "
                f"{value} again, as the before start did")]


def _alternatives(after: Start, known: bool, kb: float, lost: float) -> list[Fix]:
    """Flags that also return memory but change more than the budget (not put in the command)."""
    alts: list[Fix] = []
    graphs_now = after.get("cuda_graph_budget_gib") or 0.0
    if graphs_now > 0:
        alts.append(Fix("--enforce-eager", None, graphs_now,
                        "no CUDA graphs at all: returns their whole budget share, but decoding runs eagerly "
                        "(expect noticeably lower throughput, most at small batch sizes)"))
    if known and rel.default("kv_cache_memory_bytes_flag", after.version) and kb > 0:
        alts.append(Fix("--kv-cache-memory-bytes", str(int(kb * mem.GIB)), max(0.0, lost),
                        "fixes the KV cache at the before start's size and skips the utilization budget; only "
                        "safe when that much GPU memory is really free"))
    return alts


def _top_up(fixes: list[Fix], after: Start, short: float, new_util: float) -> list[Fix]:
    """What the fixes still leave short of the allowed loss, taken from a higher utilization if the GPU has it."""
    total = after.get("gpu_total_gib") or 0.0
    if short <= QUIET_GIB or not total:
        return fixes
    util_a = after.get("gpu_memory_utilization") or 0.0
    extra = mem.utilization_for(short, total, new_util, UTILIZATION_CEILING)
    if extra is None:
        return fixes
    return [f for f in fixes if f.flag != "--gpu-memory-utilization"] + [
        Fix("--gpu-memory-utilization", f"{extra:g}", (extra - util_a) * total,
            f"the rest of the loss: {gib(short)} more budget ({util_a:g} → {extra:g} of "
            f"{gib(total)}), if that much of the GPU is free")]


def _length_fix(after: Start, kv_then: float) -> list[Fix]:
    """The --max-model-len that fits when the restored KV cache still cannot hold one request."""
    need_request = after.get("request_kv_gib") or 0.0
    if not (need_request and kv_then < need_request and after.get("max_model_len")):
        return []
    max_len = int(after.get("max_model_len") or 0)
    fit = mem.max_len_that_fits(kv_then, need_request, max_len)
    if not fit:
        return []
    return [Fix("--max-model-len", str(fit), 0.0,
                f"{gib(kv_then)} of KV cache holds one request of {mem.human_tokens(fit)} tokens; "
                f"{mem.human_tokens(max_len)} needs {gib(need_request)}, more than this release leaves")]
