# ruff: noqa: E501 - the templates are vLLM log lines, as long as vLLM prints them
"""Synthetic serving logs and /metrics scrapes: the long serving fixtures, and the big log of the serving bench.

    python bench/serving_logs.py fixtures      (re)write the serving fixtures in fixtures/
    python bench/serving_logs.py big OUT 1000  a ~1000 MB V1 serving log at OUT (stats every 10 s)

Every line is shaped like vLLM's own (catalog B.stats.v0 / B.stats.v1, A4.v0.preempted, uvicorn access
lines, Prometheus text exposition); the scenario (load, saturation, storms) is a deterministic schedule, so
fixtures/expected.yaml can state each window exactly.
"""

from __future__ import annotations

import calendar
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAY0 = calendar.timegm((2026, 5, 19, 9, 0, 0, 0, 0, 0))


def hms(t: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.gmtime(t))


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


V1_START = """INFO {t0} [__init__.py:244] Automatically detected platform cuda.
INFO {t0} [api_server.py:1395] vLLM API server version {version}
INFO {t0} [cli_args.py:325] non-default args: {{'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 16384, 'gpu_memory_utilization': 0.9, 'max_num_seqs': 128{dp}}}
INFO {t0} [config.py:1472] Using max model len 16384
(EngineCore_0 pid=2211) INFO {t0} [core.py:69] Initializing a V1 LLM engine (v{version}) with config: model='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=16384, tensor_parallel_size=1, pipeline_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto
(EngineCore_0 pid=2211) INFO {t0} [gpu_model_runner.py:1770] Starting to load model meta-llama/Llama-3.1-8B-Instruct...
(EngineCore_0 pid=2211) INFO {t1} [gpu_model_runner.py:1801] Model loading took 14.9889 GiB and 6.204 seconds
(EngineCore_0 pid=2211) INFO {t1} [gpu_worker.py:232] Available KV cache memory: 2.46 GiB
(EngineCore_0 pid=2211) INFO {t1} [kv_cache_utils.py:716] GPU KV cache size: 20,160 tokens
(EngineCore_0 pid=2211) INFO {t1} [kv_cache_utils.py:720] Maximum concurrency for 16,384 tokens per request: 1.23x
(EngineCore_0 pid=2211) INFO {t1} [gpu_model_runner.py:2326] Graph capturing finished in 5 secs, took 0.52 GiB
INFO {t1} [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000
INFO:     Started server process [2104]
INFO:     Application startup complete.
"""

V0_START = """INFO {t0} api_server.py:527] vLLM API server version 0.6.3.post1
INFO {t0} api_server.py:528] args: Namespace(host=None, port=8000, model='mistralai/Mistral-7B-Instruct-v0.3', max_model_len=8192, gpu_memory_utilization=0.9, swap_space=4, max_num_seqs=256, tensor_parallel_size=1, enable_prefix_caching=False)
INFO {t0} llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: model='mistralai/Mistral-7B-Instruct-v0.3', dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=1, pipeline_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto
INFO {t1} model_runner.py:1067] Loading model weights took 13.5083 GB
INFO {t1} gpu_executor.py:122] # GPU blocks: 2237, # CPU blocks: 2048
INFO {t1} gpu_executor.py:126] Maximum concurrency for 8192 tokens per request: 4.37x
INFO {t1} model_runner.py:1523] Graph capturing finished in 14 secs.
INFO {t1} launcher.py:19] Available routes are:
INFO:     Started server process [7]
INFO:     Application startup complete.
"""


def v1_stats(t: float, p: float, g: float, r: int, w: int, kv: float, hit: float, eng: int | None = 0,
             pre: int = 0) -> str:
    head = f"Engine {eng:03d}: " if eng is not None else ""
    pre_part = f"Preemptions: {pre}, " if pre else ""
    proc = "" if eng is None else ""
    return (f"{proc}INFO {hms(t)} [loggers.py:123] {head}Avg prompt throughput: {p:.1f} tokens/s, "
            f"Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: {w} reqs, {pre_part}"
            f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {hit:.1f}%")


def v0_stats(t: float, p: float, g: float, r: int, s: int, w: int, kv: float, cpu: float) -> str:
    return (f"INFO {hms(t)} metrics.py:349] Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: "
            f"{g:.1f} tokens/s, Running: {r} reqs, Swapped: {s} reqs, Pending: {w} reqs, GPU KV cache usage: "
            f"{kv:.1f}%, CPU KV cache usage: {cpu:.1f}%.")


def access(rng: random.Random, status: int) -> str:
    reason = {200: "OK", 500: "Internal Server Error", 503: "Service Unavailable", 429: "Too Many Requests",
              400: "Bad Request"}[status]
    path = rng.choice(["/v1/chat/completions", "/v1/completions"])
    return f'INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 60000)} - "POST {path} HTTP/1.1" {status} {reason}'


def phase(k: int, plan: list[tuple[int, int, str]]) -> str:
    """The scenario phase of interval k: plan = [(first, last, name)], 'normal' elsewhere."""
    for first, last, name in plan:
        if first <= k <= last:
            return name
    return "normal"


def v1_log(hours: float, version: str, plan: list[tuple[int, int, str]], seed: int, dp: int = 1,
           preemption_field: bool = True, hot_engine: int = 0) -> str:
    rng = random.Random(seed)
    t = DAY0
    out = [V1_START.format(t0=hms(t), t1=hms(t + 40), version=version,
                           dp=f", 'data_parallel_size': {dp}" if dp > 1 else "").rstrip("\n")]
    t0 = t + 60
    n = int(hours * 360)
    queue = 0
    for k in range(n):
        ts = t0 + 10 * (k + 1)
        ph = phase(k, plan)
        for eng in range(dp):
            hot = eng == hot_engine
            p, g = rng.uniform(700, 1100), rng.uniform(1100, 1500)
            r, w, kv, pre = rng.randint(18, 30), 0, rng.uniform(35, 70), 0
            hit = rng.uniform(30, 45)
            if ph == "burst":
                r, kv = rng.randint(30, 40), rng.uniform(70, 88)
            if hot and ph == "saturation":
                queue = min(queue + rng.randint(1, 3), 80)
                r, w, kv = rng.randint(40, 46), queue, rng.uniform(96.0, 99.9)
            elif hot and ph == "storm":
                r, w, kv, pre = rng.randint(40, 46), rng.randint(20, 35), rng.uniform(98.5, 100.0), rng.randint(8, 25)
                g = rng.uniform(250, 450)
            elif hot and ph == "recovery":
                queue = max(queue - 12, 0)
                r, w, kv = rng.randint(30, 38), queue, rng.uniform(80, 94)
            if hot and ph in ("errors",):
                pass
            out.append(v1_stats(ts, p, g, r, w, kv, hit, eng, pre if preemption_field else 0))
        for _ in range(rng.randint(0, 2)):
            out.append(access(rng, 200))
        if ph == "errors":
            out.extend(access(rng, rng.choice([503, 503, 500])) for _ in range(rng.randint(4, 8)))
    return "\n".join(out) + "\n"


def v0_log(hours: float, plan: list[tuple[int, int, str]], seed: int) -> str:
    rng = random.Random(seed)
    out = [V0_START.format(t0=hms(DAY0), t1=hms(DAY0 + 50)).rstrip("\n")]
    t0 = DAY0 + 60
    total = 0
    for k in range(int(hours * 360)):
        ts = t0 + 10 * (k + 1)
        ph = phase(k, plan)
        p, g, r, s, w, kv, cpu = rng.uniform(600, 900), rng.uniform(900, 1200), rng.randint(20, 40), 0, 0, \
            rng.uniform(30, 75), 0.0
        if ph == "saturation":
            r, w, kv = rng.randint(60, 70), rng.randint(5, 40), rng.uniform(96, 99.9)
        elif ph == "storm":
            r, s, w, kv, cpu, g = rng.randint(50, 60), rng.randint(3, 12), rng.randint(30, 60), \
                rng.uniform(99, 100), rng.uniform(10, 40), rng.uniform(150, 300)
            for _ in range(rng.randint(40, 70)):
                total += 1
                if total % 50 == 1:
                    out.append(f"WARNING {hms(ts - 5)} scheduler.py:1481] Sequence group cmpl-{rng.getrandbits(32):08x}-0 "
                               "is preempted by PreemptionMode.SWAP mode because there is not enough KV cache space. "
                               "This can affect the end-to-end performance. Increase gpu_memory_utilization or "
                               f"tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={total}")
        out.append(v0_stats(ts, p, g, r, s, w, kv, cpu))
        if rng.random() < 0.3:
            out.append(access(rng, 200))
    return "\n".join(out) + "\n"


def healthy_busy(seed: int) -> str:
    rng = random.Random(seed)
    out = [V1_START.format(t0=hms(DAY0), t1=hms(DAY0 + 40), version="0.10.1.1", dp="").rstrip("\n")]
    for k in range(720):
        ts = DAY0 + 60 + 10 * (k + 1)
        out.append(v1_stats(ts, rng.uniform(900, 1300), rng.uniform(1300, 1600), rng.randint(38, 44), 0,
                            rng.uniform(86, 99.6), rng.uniform(40, 60)))
        out.append(access(rng, 200))
    return "\n".join(out) + "\n"


NEW_NAMES = {"kv": "vllm:kv_cache_usage_perc", "pre": "vllm:num_preemptions_total"}
OLD_NAMES = {"kv": "vllm:gpu_cache_usage_perc", "pre": "vllm:num_preemptions_total"}


def scrape(state: dict[str, float], names: dict[str, str], ts_ms: int | None = None, engine: bool = True) -> list[str]:
    lab = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"' if engine else \
        'model_name="meta-llama/Llama-3.1-8B-Instruct"'
    suffix = f" {ts_ms}" if ts_ms is not None else ""
    rows = [
        ("# HELP vllm:num_requests_running Number of requests in model execution batches.", None),
        ("# TYPE vllm:num_requests_running gauge", None),
        (f"vllm:num_requests_running{{{lab}}} {state['running']:.1f}", 1),
        ("# TYPE vllm:num_requests_waiting gauge", None),
        (f"vllm:num_requests_waiting{{{lab}}} {state['waiting']:.1f}", 1),
        (f"# TYPE {names['kv']} gauge", None),
        (f"{names['kv']}{{{lab}}} {state['kv'] / 100:.4f}", 1),
        ("# TYPE vllm:num_preemptions counter", None),
        (f"{names['pre']}{{{lab}}} {state['pre']:.1f}", 1),
        ("# TYPE vllm:prompt_tokens counter", None),
        (f"vllm:prompt_tokens_total{{{lab}}} {state['prompt']:.1f}", 1),
        ("# TYPE vllm:generation_tokens counter", None),
        (f"vllm:generation_tokens_total{{{lab}}} {state['gen']:.1f}", 1),
        (f'vllm:request_success_total{{finished_reason="stop",{lab}}} {state["ok"]:.1f}', 1),
        (f"vllm:e2e_request_latency_seconds_sum{{{lab}}} {state['e2e_sum']:.3f}", 1),
        (f"vllm:e2e_request_latency_seconds_count{{{lab}}} {state['ok']:.1f}", 1),
        ('vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",'
         'num_gpu_blocks="1260",enable_prefix_caching="True"} 1.0', 1),
        (f'http_requests_total{{handler="/v1/chat/completions",method="POST",status="2xx"}} {state["ok"]:.1f}', 1),
        (f'http_requests_total{{handler="/v1/chat/completions",method="POST",status="5xx"}} {state["err"]:.1f}', 1),
    ]
    return [text + (suffix if kind else "") for text, kind in rows]


def metrics_series(n: int, names: dict[str, str], hot: tuple[int, int], seed: int, openmetrics: bool) -> str:
    rng = random.Random(seed)
    st = {"running": 0, "waiting": 0, "kv": 0, "pre": 0.0, "prompt": 0.0, "gen": 0.0, "ok": 0.0, "err": 0.0,
          "e2e_sum": 0.0}
    out: list[str] = []
    for k in range(n):
        ts = DAY0 + 3600 + 15 * k
        hot_now = hot[0] <= k <= hot[1]
        st["running"] = rng.randint(40, 46) if hot_now else rng.randint(15, 30)
        st["waiting"] = rng.randint(10, 40) if hot_now else 0
        st["kv"] = rng.uniform(96, 99.8) if hot_now else rng.uniform(30, 70)
        st["pre"] += rng.randint(5, 20) if hot_now else 0
        st["prompt"] += 15 * rng.uniform(700, 1000)
        st["gen"] += 15 * (rng.uniform(300, 500) if hot_now else rng.uniform(1100, 1400))
        done = rng.randint(20, 40)
        st["ok"] += done
        st["e2e_sum"] += done * (rng.uniform(20, 40) if hot_now else rng.uniform(3, 6))
        if openmetrics:
            out.extend(scrape(st, names, ts_ms=int(ts * 1000)))
        else:
            out.append(f"# scrape at {iso(ts)}")
            out.extend(scrape(st, names, engine=False))
    if openmetrics:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def metrics_single() -> str:
    st = {"running": 44, "waiting": 17, "kv": 98.6, "pre": 1312.0, "prompt": 81234567.0, "gen": 40123456.0,
          "ok": 51234.0, "err": 12.0, "e2e_sum": 412345.5}
    return "\n".join(scrape(st, NEW_NAMES)) + "\n"


#: interval schedules (index of the 10 s interval after start-up) -> fixtures/expected.yaml's windows
V1_PLAN = [(300, 330, "burst"), (360, 431, "saturation"), (432, 449, "recovery"), (720, 749, "storm"),
           (900, 905, "errors")]
V0_PLAN = [(200, 229, "saturation"), (500, 529, "storm")]
DP_PLAN = [(120, 179, "saturation"), (180, 191, "recovery")]

FIXTURES = {
    "serving-v1-0.12-3h.log": lambda: v1_log(3, "0.12.0", V1_PLAN, seed=12),
    "serving-v1-0.9-nopreemption-field.log": lambda: v1_log(2.5, "0.9.2", V1_PLAN[:4], seed=9,
                                                               preemption_field=False),
    "serving-v0-0.6-2h.log": lambda: v0_log(2, V0_PLAN, seed=6),
    "serving-v1-dp2-0.10.log": lambda: v1_log(1, "0.10.1.1", DP_PLAN, seed=10, dp=2, hot_engine=1),
    "healthy-busy-v1-0.10.log": lambda: healthy_busy(seed=3),
    "metrics-single-0.11.prom": metrics_single,
    "metrics-series-old-names-0.7.prom": lambda: metrics_series(80, OLD_NAMES, (30, 49), seed=7, openmetrics=False),
    "metrics-openmetrics-0.11.txt": lambda: metrics_series(60, NEW_NAMES, (20, 29), seed=11, openmetrics=True),
}


def big(path: Path, megabytes: int) -> None:
    """A V1 serving log of about `megabytes` MB: stats every 10 s, request-logger and access lines between."""
    rng = random.Random(1)
    target = megabytes * 1_000_000
    written = 0
    k = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write(V1_START.format(t0=hms(DAY0), t1=hms(DAY0 + 40), version="0.12.0", dp=""))
        while written < target:
            ts = DAY0 + 60 + 10 * (k + 1)
            lines = []
            for i in range(60):
                rid = f"chatcmpl-{k:08x}{i:02x}"
                lines.append(f"INFO {hms(ts - 5)} [logger.py:41] Received request {rid}: prompt: 'Summarise the "
                             f"following text in three bullet points: {'lorem ipsum dolor sit amet ' * 8}', params: "
                             "SamplingParams(n=1, temperature=0.7, top_p=0.9, max_tokens=512), lora_request: None.")
                lines.append(access(rng, 200 if rng.random() > 0.001 else 500))
            sat = k % 360 > 300
            lines.append(v1_stats(ts, rng.uniform(700, 1100), rng.uniform(1100, 1500), 40 if sat else 25,
                                  rng.randint(5, 30) if sat else 0, 97.5 if sat else 60.0, 35.0))
            chunk = "\n".join(lines) + "\n"
            fh.write(chunk)
            written += len(chunk)
            k += 1


def main(argv: list[str]) -> None:
    if argv[:1] == ["fixtures"]:
        for name, make in FIXTURES.items():
            (ROOT / "fixtures" / name).write_text(make(), encoding="utf-8")
            print(name)
    elif argv[:1] == ["big"] and len(argv) == 3:
        big(Path(argv[1]), int(argv[2]))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
