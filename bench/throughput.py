#!/usr/bin/env python3
"""Throughput benchmark: vllm-doctor against grep on a large synthetic vLLM V1 serving log.

    python bench/throughput.py                 # 200 MB log, 3 repeats, median, then delete the log
    python bench/throughput.py --keep          # keep bench/out/<log> for the next run (reused if unchanged)
    python bench/throughput.py --profile       # also: per-keyword prefilter hits, reader/pipeline split, cProfile

The log (deterministic for a given --seed and --size-mb) is a V1 server's start-up, hours of request-logger,
'Added request', uvicorn access and periodic stats lines, then a container restart whose engine fails (the
failure the doctor must report, so that it cannot pass by skipping work).

Measured, each --repeat times, median reported (machines are noisy), page cache warm:
  grep    grep -F -i -c -f bench/out/keywords.txt LOG, in LC_ALL=C and C.UTF-8; the faster is the reference
          (keywords = the doctor's own prefilter, one per line)
  doctor  vllm-doctor --format json LOG   (a fresh process each run; its peak RSS via wait4)
  wc -l LOG and cat LOG > /dev/null       (baselines: line counting, raw read)
MB = 10**6 bytes. Exit 1 when the doctor's report misses the failure or miscounts the lines; with --strict
also when a target (ratio >= 0.3, RSS <= 64 MB) is missed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
GENERATOR_VERSION = 4          #: bump when the log's content changes, so stale cached logs are rewritten
RATIO_TARGET = 0.3
RSS_TARGET_MB = 64.0
MB = 1_000_000

# --------------------------------------------------------------------------------------------------------
# The synthetic log
# --------------------------------------------------------------------------------------------------------

API = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m "
CORE = "\x1b[1;36m(EngineCore_DP0 pid=187)\x1b[0;0m "
API2 = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m "           # same pid after the container restart
CORE2 = "\x1b[1;36m(EngineCore_DP0 pid=189)\x1b[0;0m "
MODEL = "Qwen/Qwen2.5-7B-Instruct"
VERSION = "0.11.2"
SITE = "/usr/local/lib/python3.12/dist-packages"

_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more can about said what "
    "out up into them some could time these two may then do first any my now such like our over man me even "
    "most made after also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great old year off "
    "come since against go came right used take three request model server latency cluster deployment "
    "kubernetes python function variable database query index schema migration customer invoice summary "
    "report quarterly revenue growth forecast contract clause liability warranty translation paragraph "
    "explain describe compare rewrite improve optimise refactor document test benchmark dataset training "
    "inference token context window prompt answer question policy compliance audit security network"
)
WORDS = _WORDS.split()

CODE_SNIPPETS = (
    "def load(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "for i, row in enumerate(rows):\n    total += row['amount'] * rates[row['currency']]\n",
    "SELECT customer_id, SUM(amount) FROM invoices WHERE created_at > NOW() - INTERVAL '30 days' GROUP BY 1;\n",
    "const res = await fetch(url, {method: 'POST', body: JSON.stringify(payload)});\n",
    "kubectl rollout restart deployment/api -n prod && kubectl get pods -w\n",
)

# user text that happens to carry the doctor's keywords: code assistants see pasted stack traces all day
TRACEBACKS = (
    "I get this error when I run it:\nTraceback (most recent call last):\n  File \"app/main.py\", line 42, in "
    "<module>\n    main()\n  File \"app/main.py\", line 37, in main\n    user = users[payload['id']]\n"
    "KeyError: 'id'\nHow do I fix it?",
    "Our training job crashed with:\nTraceback (most recent call last):\n  File \"train.py\", line 211, in "
    "<module>\n    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 23.64 GiB of which 1.12 GiB is free.\nWhat batch size should I use?",
    "Why does this raise an exception?\nTraceback (most recent call last):\n  File \"<stdin>\", line 1, in "
    "<module>\nValueError: invalid literal for int() with base 10: 'abc'",
)
ERROR_PHRASES = (
    "Add proper error handling to this function.",
    "The build fails with a linker error, what does it mean?",
    "Rewrite the exception handling so that it retries three times.",
    "Is there an error in this contract clause?",
    "We upgraded the SDK to version 1.4 and now the tests fail.",
    "Summarise the incident report: the service returned error 503 for twenty minutes.",
)
SYSTEM = "You are a helpful assistant."


def _words(rng: random.Random, n: int) -> str:
    out, line = [], []
    for _ in range(n):
        line.append(rng.choice(WORDS))
        if len(line) >= rng.randint(8, 20):
            out.append(" ".join(line).capitalize() + ".")
            line = []
    if line:
        out.append(" ".join(line).capitalize() + ".")
    return " ".join(out)


def _user_text(rng: random.Random) -> str:
    """One user message: prose (log-normal length), sometimes code, sometimes keyword-bearing text."""
    n = int(min(6000, max(12, rng.lognormvariate(6.5, 0.9))))
    parts = [_words(rng, n)]
    r = rng.random()
    if r < 0.15:
        parts.append("\n\n```\n" + rng.choice(CODE_SNIPPETS) + "```\n")
    r = rng.random()
    if r < 0.04:
        parts.append("\n\n" + rng.choice(TRACEBACKS))
    elif r < 0.14:
        parts.append(" " + rng.choice(ERROR_PHRASES))
    return "".join(parts)


def _pool(rng: random.Random, size: int) -> list[tuple[str, str, int, bool]]:
    """(prompt repr, prompt_token_ids text, n tokens, chat?) built once and reused by many requests."""
    pool = []
    for _ in range(size):
        chat = rng.random() < 0.8
        user = _user_text(rng)
        if chat:
            prompt = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                      "<|im_start|>assistant\n")
            head = [151644, 8948, 198]
        else:
            prompt, head = user, []
        n = max(8, len(prompt) // 4)
        ids = head + [rng.randrange(200, 151000) for _ in range(n - len(head))]
        pool.append((repr(prompt), ", ".join(map(str, ids)), n, chat))
    return pool


SAMPLING = ("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            "temperature={t}, top_p={p}, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
            "bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens={m}, min_tokens=0, "
            "logprobs=None, prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
            "truncate_prompt_tokens=None, structured_outputs=None, extra_args=None)")


class Clock:
    """Log time: 'MM-DD HH:MM:SS' strings, advancing."""

    def __init__(self, start: datetime) -> None:
        self.t = start.timestamp()
        self._sec = -1
        self._str = ""

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def __str__(self) -> str:
        sec = int(self.t)
        if sec != self._sec:
            self._sec = sec
            self._str = datetime.fromtimestamp(sec).strftime("%m-%d %H:%M:%S")
        return self._str


def _tqdm(prefix: str, label: str, total: int, rng: random.Random) -> str:
    """A tqdm bar as a captured log holds it: every frame on one physical line, separated by \\r."""
    frames = []
    for i in range(0, total + 1):
        pct = 100 * i // total
        bar = "█" * (pct // 10) + " " * (10 - pct // 10)
        rate = "?it/s" if i == 0 else f"{rng.uniform(8, 30):5.2f}it/s"
        frames.append(f"{label}: {pct:3d}%|{bar}| {i}/{total} [00:0{i * 6 // total}<00:00, {rate}]")
    return prefix + "\r".join(frames) + "\n"


def _startup(clock: Clock, rng: random.Random, api: str, core: str, args: dict, gpu_util: float,
             max_len: int, kv_gib: float | None) -> list[str]:
    """Start-up lines up to the KV cache figures (kv_gib None: the caller writes what comes next)."""
    def at(p: str, level: str, src: str, msg: str) -> str:
        return f"{p}{level} {clock} [{src}] {msg}\n"

    out = [
        at(api, "INFO", "api_server.py:1839", f"vLLM API server version {VERSION}"),
        at(api, "INFO", "utils.py:233", f"non-default args: {args!r}"),
        at(api, "INFO", "model.py:547", "Resolved architecture: Qwen2ForCausalLM"),
        at(api, "INFO", "model.py:1510", f"Using max model len {max_len}"),
        at(api, "INFO", "scheduler.py:205", "Chunked prefill is enabled with max_num_batched_tokens=8192."),
    ]
    clock.advance(6)
    out += [
        at(core, "INFO", "core.py:93",
           f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{MODEL}', speculative_config=None, "
           f"tokenizer='{MODEL}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
           "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
           f"max_seq_len={max_len}, download_dir=None, load_format=auto, tensor_parallel_size=1, "
           "pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
           "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, structured_outputs_config="
           "StructuredOutputsConfig(backend='auto'), observability_config=ObservabilityConfig(), seed=0, "
           f"served_model_name={MODEL}, enable_prefix_caching=True, chunked_prefill_enabled=True, "
           "pooler_config=None, compilation_config={'level': 3, 'cudagraph_mode': [2, 1]}"),
        at(core, "INFO", "parallel_state.py:1208",
           "world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://10.0.0.2:41231 backend=nccl"),
        at(core, "INFO", "topk_topp_sampler.py:55", "Using FlashInfer for top-p & top-k sampling."),
        at(core, "INFO", "gpu_model_runner.py:2602", f"Starting to load model {MODEL}..."),
        at(core, "INFO", "cuda.py:366", "Using Flash Attention backend on V1 engine."),
        at(core, "INFO", "weight_utils.py:392", "Using model weights format ['*.safetensors']"),
    ]
    for i in range(5):
        pct = 100 * i // 4
        out.append(f"{core}Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/4 "
                   f"[00:0{i}<00:0{4 - i}, {rng.uniform(1, 2):.2f}it/s]\n")
    out.append(core + "\n")
    clock.advance(4)
    out += [
        at(core, "INFO", "default_loader.py:267", "Loading weights took 2.71 seconds"),
        at(core, "INFO", "gpu_model_runner.py:2653", "Model loading took 14.2488 GiB and 3.354 seconds"),
        at(core, "INFO", "backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache/"
           "5c1d2f0a3b/rank_0_0/backbone for vLLM's torch.compile"),
        at(core, "INFO", "backends.py:559", "Dynamo bytecode transform time: 5.61 s"),
        at(core, "INFO", "backends.py:218", "Compiling a graph for dynamic shape takes 18.37 s"),
        at(core, "INFO", "monitor.py:34", "torch.compile takes 23.98 s in total"),
    ]
    clock.advance(25)
    if kv_gib is None:
        return out
    tokens = int(kv_gib * 1024 / 0.0546875) // 16 * 16
    out += [
        at(core, "INFO", "gpu_worker.py:298", f"Available KV cache memory: {kv_gib:.2f} GiB"),
        at(core, "INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {tokens:,} tokens"),
        at(core, "INFO", "kv_cache_utils.py:1091",
           f"Maximum concurrency for {max_len:,} tokens per request: {tokens / max_len:.2f}x"),
        _tqdm(core, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", 67, rng),
        _tqdm(core, "Capturing CUDA graphs (decode, FULL)", 35, rng),
    ]
    clock.advance(8)
    out += [
        at(core, "INFO", "gpu_model_runner.py:3480", "Graph capturing finished in 6 secs, took 0.53 GiB"),
        at(core, "INFO", "core.py:210", "init engine (profile, create kv cache, warmup model) took 45.63 seconds"),
        at(api, "INFO", "loggers.py:147",
           f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: {tokens // 16}"),
        at(api, "INFO", "api_server.py:1634", "Supported_tasks: ['generate']"),
        at(api, "INFO", "api_server.py:1912", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
        at(api, "INFO", "launcher.py:34", "Available routes are:"),
    ]
    for route, methods in (("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/health", "GET"),
                           ("/metrics", "GET"), ("/tokenize", "POST"), ("/v1/models", "GET"),
                           ("/version", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")):
        out.append(at(api, "INFO", "launcher.py:42", f"Route: {route}, Methods: {methods}"))
    out += [f"{api}INFO:     Started server process [1]\n", f"{api}INFO:     Waiting for application startup.\n",
            f"{api}INFO:     Application startup complete.\n"]
    return out


def _too_long(clock: Clock, n_tokens: int) -> list[str]:
    """A rejected request: the V1 front end logs the ValueError with its traceback, then a 400."""
    def e(msg: str) -> str:
        return f"{API}ERROR {clock} [serving_chat.py:257] {msg}\n"
    return [
        e("Error in preprocessing prompt inputs"),
        e("Traceback (most recent call last):"),
        e(f'  File "{SITE}/vllm/entrypoints/openai/serving_chat.py", line 239, in create_chat_completion'),
        e("    ) = await self._preprocess_chat("),
        e(f'  File "{SITE}/vllm/entrypoints/openai/serving_engine.py", line 1004, in _validate_input'),
        e("    raise ValueError("),
        e(f"ValueError: This model's maximum context length is 32768 tokens. However, your request has "
          f"{n_tokens} input tokens. Please reduce the length of the input messages."),
        f"{API}INFO:     10.0.0.{7}:{41000 + n_tokens % 20000} - \"POST /v1/chat/completions HTTP/1.1\" "
        "400 Bad Request\n",
    ]


def _kv_failure(clock: Clock) -> list[str]:
    """The restarted engine cannot fit one 131072-token request: V1 kv-cache-too-small with its traceback."""
    def e(msg: str) -> str:
        return f"{CORE2}ERROR {clock} [core.py:708] {msg}\n"
    value = ("ValueError: To serve at least one request with the models's max seq len (131072), (7.00 GiB KV "
             "cache is needed, which is larger than the available KV cache memory (3.75 GiB). Based on the "
             "available memory, the estimated maximum model length is 70208. Try increasing "
             "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    frames = [
        ("v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        ("v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
        ("v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
        ("v1/engine/core.py", 199, "_initialize_kv_caches", "kv_cache_configs = get_kv_cache_configs(vllm_config,"),
        ("v1/core/kv_cache_utils.py", 1243, "get_kv_cache_configs", "check_enough_kv_cache_memory(vllm_config,"),
        ("v1/core/kv_cache_utils.py", 716, "check_enough_kv_cache_memory", "raise ValueError("),
    ]
    out = [f"{CORE2}INFO {clock} [gpu_worker.py:298] Available KV cache memory: 3.75 GiB\n",
           e("EngineCore failed to start."), e("Traceback (most recent call last):")]
    for path, no, func, code in frames:
        out += [e(f'  File "{SITE}/vllm/{path}", line {no}, in {func}'), e(f"    {code}")]
    out.append(e(value))
    out += [f"{CORE2}Process EngineCore_DP0:\n", f"{CORE2}Traceback (most recent call last):\n"]
    for path, no, func, code in frames:
        out += [f'{CORE2}  File "{SITE}/vllm/{path}", line {no}, in {func}\n', f"{CORE2}    {code}\n"]
    out.append(f"{CORE2}{value}\n")
    out += [
        f"{API2}Traceback (most recent call last):\n",
        f'{API2}  File "/usr/local/bin/vllm", line 10, in <module>\n',
        f"{API2}    sys.exit(main())\n",
        f'{API2}  File "{SITE}/vllm/v1/engine/core_client.py", line 505, in __init__\n',
        f"{API2}    self._init_engines_direct(\n",
        f'{API2}  File "{SITE}/vllm/v1/engine/utils.py", line 843, in wait_for_engine_startup\n',
        f"{API2}    raise RuntimeError(\n",
        f"{API2}RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': 1}\n",
    ]
    return out


def _oom_failure(clock: Clock) -> list[str]:
    """The restarted engine runs out of memory capturing CUDA graphs (max_num_seqs 512, utilization 0.98)."""
    def e(msg: str) -> str:
        return f"{CORE2}ERROR {clock} [core.py:708] {msg}\n"
    frames = [
        ("v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        ("v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
        ("v1/engine/core.py", 214, "_initialize_kv_caches",
         "self.model_executor.initialize_from_config(kv_cache_configs)"),
        ("v1/worker/gpu_worker.py", 394, "compile_or_warm_up_model",
         "cuda_graph_memory_bytes = self.model_runner.capture_model()"),
        ("v1/worker/gpu_model_runner.py", 3444, "capture_model", "self._capture_cudagraphs("),
        ("v1/worker/gpu_model_runner.py", 3510, "_capture_cudagraphs", "self._dummy_run(num_tokens,"),
        ("v1/worker/gpu_model_runner.py", 2931, "_dummy_run", "outputs = self.model("),
    ]
    value = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacity "
             "of 79.19 GiB of which 312.44 MiB is free. Including non-PyTorch memory, this process has 78.87 GiB "
             "memory in use. Of the allocated memory 76.61 GiB is allocated by PyTorch, and 1.02 GiB is reserved "
             "by PyTorch but unallocated.")
    out = [_tqdm(CORE2, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", 23, random.Random(5))[:-1]
           + "\n", e("EngineCore failed to start."), e("Traceback (most recent call last):")]
    for path, no, func, code in frames:
        out += [e(f'  File "{SITE}/vllm/{path}", line {no}, in {func}'), e(f"    {code}")]
    out.append(e(value))
    out.append(f"{API2}RuntimeError: Engine core initialization failed. See root cause above. "
               "Failed core proc(s): {'EngineCore_DP0': 1}\n")
    return out


FAILURES = {
    # name: (rule the doctor must report, restart args, gpu util, max len, startup kv (None: failure writes it))
    "kv-cache-too-small": ("kv-cache-too-small", {"max_model_len": 131072, "gpu_memory_utilization": 0.25},
                           0.25, 131072, None, _kv_failure),
    "warmup-oom": ("warmup-oom", {"max_num_seqs": 512, "gpu_memory_utilization": 0.98}, 0.98, 32768, 61.40,
                   _oom_failure),
}


def write_log(path: Path, size_mb: float, seed: int, failure: str, mix: str = "requests") -> dict:
    """Write the log; return its metadata (bytes, lines, where the failure starts, what it is)."""
    rng = random.Random(seed)
    clock = Clock(datetime(2025, 11, 24, 11, 49, 12))
    target = int(size_mb * MB)
    pool = _pool(rng, 600) if mix == "requests" else []
    written = lines = 0
    stats = {"requests": 0, "stats_lines": 0, "rejected": 0}

    with path.open("wb") as fh:
        def emit(chunk: list[str]) -> None:
            nonlocal written, lines
            data = "".join(chunk).encode("utf-8")
            fh.write(data)
            written += len(data)
            lines += data.count(b"\n")

        args = {"model_tag": MODEL, "host": "0.0.0.0", "model": MODEL, "max_model_len": 32768,
                "gpu_memory_utilization": 0.9, "max_num_seqs": 64}
        if mix == "requests":
            args["enable_log_requests"] = True
        # request logging on: ~3 requests/s of long request-logger lines; off: a busy server's access log
        gap = 0.35 if mix == "requests" else 0.02
        reject = 0.0003 * gap / 0.35
        emit(_startup(clock, rng, API, CORE, args, 0.9, 32768, 54.32))

        next_stats = clock.t + 10.0
        next_scrape = clock.t + 15.0
        load = 0.3            # KV usage random walk: mostly calm, with saturation episodes
        batch: list[str] = []
        batch_bytes = 0
        while written + batch_bytes < target:
            clock.advance(rng.expovariate(1 / gap))
            while clock.t >= next_stats:
                load = min(1.0, max(0.02, load + rng.gauss(0.0, 0.06) + (0.08 if rng.random() < 0.02 else 0)))
                kv = min(99.9, load * 100)
                running = max(1, int(64 * min(1.0, load * 1.1)))
                waiting = int(max(0.0, (load - 0.93) * 600)) if kv >= 93 else 0
                batch.append(f"{API}INFO {clock} [loggers.py:123] Engine 000: Avg prompt throughput: "
                             f"{rng.uniform(500, 15000):.1f} tokens/s, Avg generation throughput: "
                             f"{rng.uniform(300, 2500):.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} "
                             f"reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: "
                             f"{rng.uniform(5, 60):.1f}%\n")
                stats["stats_lines"] += 1
                next_stats += 10.0
                if load > 0.97:
                    load -= 0.1
            if clock.t >= next_scrape:
                port = rng.randrange(30000, 60000)
                batch.append(f'{API}INFO:     10.0.0.9:{port} - "GET /metrics HTTP/1.1" 200 OK\n')
                next_scrape += 15.0
            if mix == "requests":
                prompt, ids, _, chat = rng.choice(pool)
            else:
                chat = rng.random() < 0.8
            ip = f"10.0.{rng.randrange(0, 4)}.{rng.randrange(2, 250)}:{rng.randrange(30000, 65000)}"
            endpoint = "/v1/chat/completions" if chat else "/v1/completions"
            if rng.random() < reject:
                rejected = _too_long(clock, 32769 + rng.randrange(0, 20000))
                batch += rejected
                batch_bytes += sum(map(len, rejected))
                stats["rejected"] += 1
                continue
            if mix == "requests":
                rid = ("chatcmpl-" if chat else "cmpl-") + f"{rng.getrandbits(128):032x}"
                params = SAMPLING.format(t=rng.choice((0.0, 0.2, 0.7, 1.0)), p=rng.choice((1.0, 0.95, 0.8)),
                                         m=rng.choice((256, 512, 1024, 2048, 4096)))
                chunk = (
                    f"{API}INFO {clock} [logger.py:43] Received request {rid}: prompt: {prompt}, params: "
                    f"{params}, prompt_token_ids: [{ids}], prompt_embeds shape: None, lora_request: None.\n"
                    f"{API}INFO {clock} [async_llm.py:320] Added request {rid}.\n"
                    f'{API}INFO:     {ip} - "POST {endpoint} HTTP/1.1" 200 OK\n'
                )
            else:
                chunk = f'{API}INFO:     {ip} - "POST {endpoint} HTTP/1.1" 200 OK\n'
            batch.append(chunk)
            batch_bytes += len(chunk)
            stats["requests"] += 1
            if batch_bytes > 4 * MB:
                emit(batch)
                batch, batch_bytes = [], 0
        emit(batch)

        # the container restarts with new flags, and the engine fails
        rule, rargs, util, max_len, kv_gib, tail = FAILURES[failure]
        emit([f"{API}INFO:     Shutting down\n", f"{API}INFO:     Waiting for application shutdown.\n",
              f"{API}INFO:     Application shutdown complete.\n", f"{API}INFO:     Finished server process [1]\n"])
        clock.advance(40)
        args2 = {**args, **rargs}
        startup = _startup(clock, rng, API2, CORE2, args2, util, max_len, kv_gib)
        if kv_gib is not None:   # the warmup OOM happens in capture: keep the lines up to the KV figures
            startup = startup[: next(i for i, s in enumerate(startup) if "Capturing CUDA graphs" in s)]
        emit(startup)
        failure_line = lines + 1
        emit(tail(clock))

    return {"generator": GENERATOR_VERSION, "seed": seed, "size_mb": size_mb, "failure": failure, "mix": mix,
            "expected_rule": rule, "bytes": written, "lines": lines, "failure_line": failure_line, **stats}


def ensure_log(size_mb: float, seed: int, failure: str, mix: str) -> tuple[Path, dict, bool]:
    """The cached log if it is the same size/seed/generator and intact; else write it. (path, meta, reused)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"serving-{size_mb:g}MB-seed{seed}-{mix}-{failure}.log"
    meta_path = path.with_suffix(".json")
    if path.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        if (meta.get("generator") == GENERATOR_VERSION and meta.get("seed") == seed
                and meta.get("size_mb") == size_mb and meta.get("bytes") == path.stat().st_size):
            return path, meta, True
    t0 = time.perf_counter()
    meta = write_log(path, size_mb, seed, failure, mix)
    meta["write_seconds"] = round(time.perf_counter() - t0, 2)
    meta_path.write_text(json.dumps(meta, indent=2))
    return path, meta, False


# --------------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------------

def prefilter_keywords() -> list[str]:
    from diagnoser.engine import prefilter_for
    from diagnoser.rules import builtin_rules

    return [k.decode() for k in prefilter_for(builtin_rules()).keywords]


def doctor_command() -> list[str]:
    """The installed console script beside this interpreter, else `python -m diagnoser`."""
    script = Path(sys.executable).parent / "vllm-doctor"
    if script.exists():
        return [str(script)]
    found = shutil.which("vllm-doctor")
    if found and "shims" not in found:
        return [found]
    return [sys.executable, "-m", "diagnoser"]


#: A tiny process that spawns the measured command and reports its wall time and rusage. Linux keeps the
#: high-water RSS across exec, so a child spawned straight from this (large) process would report this
#: process's RSS as its own; spawned from a ~10 MB launcher, the figure is the command's own.
LAUNCHER = """
import os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as fh:
    fh.write(f"{wall} {os.waitstatus_to_exitcode(status)} {ru.ru_maxrss}")
"""
MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024   #: ru_maxrss is bytes on macOS, KiB on Linux


def run_measured(cmd: list[str], stdout, env: dict | None = None) -> tuple[float, int, float]:
    """Run one fresh process: (wall seconds, exit code, its own peak RSS in MB)."""
    probe, err = OUT / "launcher.out", OUT / "last-stderr.txt"
    with err.open("wb") as fh:
        subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(probe), *cmd], stdout=stdout, stderr=fh,
                       env=env, check=True)
    wall, code, maxrss = probe.read_text().split()
    return float(wall), int(code), int(maxrss) * MAXRSS_UNIT / MB


def measure(path: Path, keywords_file: Path, repeat: int) -> dict:
    """Each tool `repeat` times, interleaved, page cache warm; medians and the doctor's report.

    grep's output goes to a file, never to /dev/null: GNU grep notices a /dev/null stdout and stops at the
    first match (even with -c), which would time nothing.
    """
    size = path.stat().st_size
    doctor = doctor_command()
    grep = ["grep", "-F", "-i", "-c", "-f", str(keywords_file), str(path)]
    tools: dict[str, tuple[list[str], dict | None, Path | None]] = {
        "cat > /dev/null": (["cat", str(path)], None, None),
        "wc -l": (["wc", "-l", str(path)], None, OUT / "wc.out"),
        "grep (LC_ALL=C)": (grep, {**os.environ, "LC_ALL": "C"}, OUT / "grep-c.out"),
        "grep (LC_ALL=C.UTF-8)": (grep, {**os.environ, "LC_ALL": "C.UTF-8"}, OUT / "grep-utf8.out"),
        "doctor": ([*doctor, "--format", "json", str(path)], None, OUT / "doctor-report.json"),
    }
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)   # warm the page cache
    times: dict[str, list[float]] = {k: [] for k in tools}
    rss: dict[str, list[float]] = {k: [] for k in tools}
    for _ in range(repeat):
        for name, (cmd, env, out) in tools.items():
            if out is None:
                wall, code, peak = run_measured(cmd, subprocess.DEVNULL, env)
            else:
                with out.open("wb") as fh:
                    wall, code, peak = run_measured(cmd, fh, env)
            if code not in (0, 1):   # the doctor exits 1 when it finds an error; grep when nothing matched
                sys.exit(f"{name} exited {code}: {' '.join(cmd)}\n"
                         + (OUT / "last-stderr.txt").read_text(errors="replace")[-2000:])
            times[name].append(wall)
            rss[name].append(peak)
    # the doctor's fixed cost: interpreter, imports, rule loading
    times["doctor --version"], rss["doctor --version"] = [], []
    for _ in range(repeat):
        wall, _, peak = run_measured([*doctor, "--version"], subprocess.DEVNULL)
        times["doctor --version"].append(wall)
        rss["doctor --version"].append(peak)
    results: dict = {}
    for name, runs in times.items():
        med = statistics.median(runs)
        results[name] = {"seconds": [round(t, 3) for t in runs], "median_s": round(med, 3),
                         "mb_per_s": None if name.endswith("--version") else round(size / MB / med, 1),
                         "peak_rss_mb": round(max(rss[name]), 1)}
    # the reference grep is the faster locale (which one wins depends on the grep build)
    greps = [k for k in results if k.startswith("grep")]
    results["_grep_ref"] = max(greps, key=lambda k: results[k]["mb_per_s"])
    results["_grep_lines"] = int((OUT / "grep-c.out").read_text().split()[0])
    results["_doctor_cmd"] = doctor
    results["_report"] = json.loads((OUT / "doctor-report.json").read_text())
    return results


def check_report(report: dict, meta: dict) -> list[str]:
    """What is wrong with the doctor's JSON for this log (empty: it did the work)."""
    problems = []
    if report.get("input", {}).get("lines") != meta["lines"]:
        problems.append(f"input.lines is {report.get('input', {}).get('lines')}, the log has {meta['lines']}")
    findings = report.get("findings", [])
    hits = [f for f in findings if f.get("rule") == meta["expected_rule"]
            and (f.get("line") or 0) >= meta["failure_line"]]
    if not hits:
        got = [(f.get("rule"), f.get("line")) for f in findings]
        problems.append(f"no {meta['expected_rule']} finding at line >= {meta['failure_line']}; findings: {got}")
    return problems


# --------------------------------------------------------------------------------------------------------
# Profiling (in-process; --profile)
# --------------------------------------------------------------------------------------------------------

def keyword_hits(path: Path, keywords: list[str]) -> tuple[dict[str, int], int, int]:
    """Lines each keyword selects (and lines selected by any), on lower-cased 1 MiB blocks like the reader."""
    kws = [k.encode() for k in keywords]
    counts = dict.fromkeys(keywords, 0)
    any_lines = total = 0
    carry = b""
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            block, carry = data[:cut], data[cut:]
            low = block.lower()
            total += low.count(b"\n")
            starts: set[int] = set()
            for kw, name in zip(kws, keywords, strict=True):
                i = low.find(kw)
                while i != -1:
                    counts[name] += 1
                    starts.add(low.rfind(b"\n", 0, i) + 1)
                    end = low.find(b"\n", i)
                    if end == -1:
                        break
                    i = low.find(kw, end)
            any_lines += len(starts)
    return counts, any_lines, total


def line_kinds(path: Path) -> dict[str, list[int]]:
    """Prefilter-selected lines by kind: {kind: [lines, bytes]}. Where the hits (and the decoding) come from."""
    from diagnoser.engine import prefilter_for
    from diagnoser.rules import builtin_rules

    pre = prefilter_for(builtin_rules())
    kinds: dict[str, list[int]] = {}
    carry = b""
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            block, carry = data[:cut], data[cut:]
            for s in pre.hit_lines(block):
                head = block[s:s + 200]
                if b"Received request" in head:
                    kind = "request logger"
                elif b"Engine 000:" in head:
                    kind = "stats"
                elif b'"POST ' in head or b'"GET ' in head:
                    kind = "access"
                else:
                    kind = "other"
                entry = kinds.setdefault(kind, [0, 0])
                entry[0] += 1
                entry[1] += block.find(b"\n", s) - s
    return kinds


def profile(path: Path, keywords: list[str], top: int) -> dict:
    from diagnoser.engine import diagnose, prefilter_for
    from diagnoser.reader import ReadStats, read_lines
    from diagnoser.redact import Redactor
    from diagnoser.rules import builtin_rules

    size = path.stat().st_size
    out: dict = {}
    counts, any_lines, total = keyword_hits(path, keywords)
    out["lines"] = total
    out["selected_lines"] = any_lines
    out["keyword_lines"] = dict(sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: -kv[1]))
    out["selected_by_kind"] = line_kinds(path)

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def read_only() -> None:
        with path.open("rb") as fh:
            while fh.read(1 << 20):
                pass

    def read_lower() -> None:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                chunk.lower()

    pre = prefilter_for(builtin_rules())

    def hit_lines() -> None:
        carry = b""
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                data = carry + chunk
                cut = data.rfind(b"\n") + 1
                pre.hit_lines(data[:cut])
                carry = data[cut:]

    stats = ReadStats()

    def reader() -> None:
        with path.open("rb") as fh:
            for _ in read_lines(fh, pre, None, stats):
                pass

    def reader_redact() -> None:
        with path.open("rb") as fh:
            for _ in read_lines(fh, pre, Redactor(), ReadStats()):
                pass

    def pipeline() -> None:
        with path.open("rb") as fh:
            diagnose(fh, str(path))

    stages = {}
    for name, fn in (("read 1 MiB blocks", read_only), ("read + bytes.lower()", read_lower),
                     ("Prefilter.hit_lines", hit_lines), ("read_lines (no redaction)", reader),
                     ("read_lines + Redactor", reader_redact),
                     ("diagnose (whole pipeline)", pipeline)):
        s = timed(fn)
        stages[name] = {"seconds": round(s, 3), "mb_per_s": round(size / MB / s, 1)}
    out["stages"] = stages
    out["decoded_lines"] = stats.decoded_lines

    prof = cProfile.Profile()
    with path.open("rb") as fh:
        prof.enable()
        diagnose(fh, str(path))
        prof.disable()
    pstats_path = OUT / "doctor.pstats"
    prof.dump_stats(str(pstats_path))
    buf = io.StringIO()
    ps = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime")
    ps.print_stats(top)
    out["cprofile_tottime"] = buf.getvalue()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(top)
    out["cprofile_cumulative"] = buf.getvalue()
    out["pstats_file"] = str(pstats_path)
    return out


# --------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=200, help="log size in MB (10**6 bytes); default 200")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, median reported; default 3")
    ap.add_argument("--seed", type=int, default=1, help="generator seed; default 1")
    ap.add_argument("--failure", choices=sorted(FAILURES), default="kv-cache-too-small",
                    help="the failure at the end of the log; default kv-cache-too-small")
    ap.add_argument("--mix", choices=("requests", "access"), default="requests",
                    help="requests: request logging on, long 'Received request' lines (default); access: request "
                         "logging off, the serving part is uvicorn access and stats lines")
    ap.add_argument("--keep", action="store_true", help="keep the log in bench/out/ (reused when unchanged)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile the doctor in-process: keyword hits, stage split, cProfile top")
    ap.add_argument("--top", type=int, default=25, help="cProfile rows with --profile; default 25")
    ap.add_argument("--no-measure", action="store_true", help="skip the timed runs (with --profile)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)

    path, meta, reused = ensure_log(args.size_mb, args.seed, args.failure, args.mix)
    how = "reused" if reused else f"written in {meta['write_seconds']} s"
    print(f"log: {path} ({meta['bytes'] / MB:.1f} MB, {meta['lines']:,} lines, {meta['requests']:,} requests, "
          f"{meta['stats_lines']:,} stats lines; failure '{meta['expected_rule']}' at line "
          f"{meta['failure_line']:,}; {how})")
    keywords = prefilter_keywords()
    keywords_file = OUT / "keywords.txt"
    keywords_file.write_text("".join(k + "\n" for k in keywords))
    print(f"keywords: {len(keywords)} (the doctor's prefilter) in {keywords_file}")

    code = 0
    summary: dict = {"log": meta, "keywords": len(keywords)}
    try:
        if not args.no_measure:
            res = measure(path, keywords_file, max(1, args.repeat))
            report = res.pop("_report")
            summary["doctor_cmd"] = res.pop("_doctor_cmd")
            grep_ref = res.pop("_grep_ref")
            grep_lines = res.pop("_grep_lines")
            summary["results"] = res
            print(f"\n{'tool':<24}{'median s':>10}{'MB/s':>10}{'peak RSS MB':>13}   runs (s)")
            for name, r in res.items():
                mbs = f"{r['mb_per_s']:.1f}" if r["mb_per_s"] else "-"
                print(f"{name:<24}{r['median_s']:>10.3f}{mbs:>10}{r['peak_rss_mb']:>13.1f}   "
                      + " ".join(f"{t:.3f}" for t in r["seconds"]))
            print(f"(grep matched {grep_lines:,} lines; reference grep: {grep_ref}; RSS of the small tools is the "
                  "launcher's floor)")
            problems = check_report(report, meta)
            findings = [(f.get("rule"), f.get("severity"), f.get("line")) for f in report.get("findings", [])]
            print(f"\ndoctor findings: {findings}")
            primary = findings[0][0] if findings else None
            if primary != meta["expected_rule"]:
                print(f"note: primary finding is {primary}, expected {meta['expected_rule']}")
            for p in problems:
                print(f"CHECK FAILED: {p}")
            if problems:
                code = 1
            doctor, grep = res["doctor"], res[grep_ref]
            ratio = doctor["mb_per_s"] / grep["mb_per_s"]
            rss = doctor["peak_rss_mb"]
            ok_ratio, ok_rss = ratio >= RATIO_TARGET, rss <= RSS_TARGET_MB
            summary.update(ratio=round(ratio, 3), peak_rss_mb=rss, check_problems=problems, grep_ref=grep_ref,
                           targets={"ratio": ok_ratio, "rss": ok_rss})
            print(f"targets: ratio >= {RATIO_TARGET}x {'met' if ok_ratio else 'MISSED'}; "
                  f"peak RSS <= {RSS_TARGET_MB:g} MB {'met' if ok_rss else 'MISSED'}; "
                  f"report check {'passed' if not problems else 'FAILED'}")
            if args.strict and not (ok_ratio and ok_rss):
                code = code or 1
        if args.profile:
            prof = profile(path, keywords, args.top)
            summary["profile"] = {k: v for k, v in prof.items() if not k.startswith("cprofile")}
            print(f"\nprefilter: {prof['selected_lines']:,} of {prof['lines']:,} lines selected "
                  f"({100 * prof['selected_lines'] / max(1, prof['lines']):.2f}%); "
                  f"{prof['decoded_lines']:,} lines decoded (with follow lines)")
            print("selected lines by kind: " + ", ".join(
                f"{k} {n:,} ({b / MB:.1f} MB)" for k, (n, b) in prof["selected_by_kind"].items()))
            print("lines per keyword (top 15): " + ", ".join(
                f"{k!r} {v:,}" for k, v in list(prof["keyword_lines"].items())[:15]))
            print(f"\n{'stage':<30}{'s':>8}{'MB/s':>10}")
            for name, r in prof["stages"].items():
                print(f"{name:<30}{r['seconds']:>8.3f}{r['mb_per_s']:>10.1f}")
            print("\ncProfile of diagnose(), by own time:")
            print(prof["cprofile_tottime"])
            print(f"(cumulative view and raw data: {prof['pstats_file']})")
            (OUT / "profile-cumulative.txt").write_text(prof["cprofile_cumulative"])
    finally:
        (OUT / "results.json").write_text(json.dumps(summary, indent=2))
        if not args.keep:
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)

    if "ratio" in summary:
        print(f"doctor {summary['results']['doctor']['mb_per_s']:.1f} MB/s, "
              f"grep {summary['results'][summary['grep_ref']]['mb_per_s']:.1f} MB/s, ratio {summary['ratio']:.3f}x, "
              f"peak RSS {summary['peak_rss_mb']:.1f} MB")
    return code


if __name__ == "__main__":
    sys.exit(main())
