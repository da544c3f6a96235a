"""The synthetic vLLM logs the benchmarks read: deterministic (seeded), written in about a second per 100 MB.

`write_log` writes a V1 server's start-up, hours of serving (request-logger, 'Added request', uvicorn access
and stats lines, or access + stats only) and a container restart whose engine fails (see bench/README.md).
The keyword-dense shapes of issue 16 (a V0 preemption storm, a file of only stats lines, one enormous line)
come from `write_dense`.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

GENERATOR_VERSION = 4          #: bump when the log's content changes, so stale cached logs are rewritten
MB = 1_000_000

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


DENSE = ("preemption", "stats", "stats-v1", "stats-v1-tag", "stats-flip", "long-line")
#: stats-flip's cycle of 16 intervals 10 s apart: (generation tokens/s, waiting, KV %); the three slow ones
#: open a throughput collapse (running 40 holds) and a saturation window, which close again (a window that a
#: rule reports every 16 lines: the series' worst case for memory)
FLIP = [(200.0, 0, 50.0)] * 6 + [(50.0, 10, 97.0), (40.0, 15, 98.0), (45.0, 20, 97.5)] + [(200.0, 0, 50.0)] * 7
#: other enormous lines, only when asked for (`--kind`): a JSON blob (accents, secrets now and then) and a log
#: flattened onto one line (stats, access, preemption records and a failure)
LONG = ("long-json", "long-flat")


def _long_record(kind: str, rng: random.Random, i: int) -> str:
    """One item of an enormous line of `kind` (LONG)."""
    ts = f"05-01 {10 + i // 360000 % 14:02d}:{i // 6000 % 60:02d}:{i // 100 % 60:02d}"
    r = rng.random()
    if kind == "long-json":
        if r < 0.001:
            return f'"api_key": "sk-{rng.getrandbits(128):032x}", "hf_token": "hf_{rng.getrandbits(140):035x}"'
        if r < 0.002:
            return (f'"url": "postgres://app:pw{rng.getrandbits(40):x}@db:5432/x", '
                    f'"note": "Bearer {rng.getrandbits(90):x}"')
        return f'"k{i}": "{_words(rng, rng.randint(2, 12))} é {rng.random():.6f}", "n{i}": {rng.randint(0, 99999)}'
    if r < 0.0005:
        return (f"{CORE}ERROR {ts} [core.py:123] EngineCore failed to start. Traceback (most recent call last): "
                'File "/x/core.py", line 12, in run torch.OutOfMemoryError: CUDA out of memory. Tried to allocate '
                "2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.2 GiB is free.")
    if r < 0.3:
        return (f"{API}INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: {rng.random() * 1000:.1f} "
                f"tokens/s, Avg generation throughput: {rng.random() * 300:.1f} tokens/s, Running: "
                f"{rng.randint(0, 64)} reqs, Waiting: {rng.randint(0, 5)} reqs, GPU KV cache usage: "
                f"{rng.random() * 90:.1f}%, Prefix cache hit rate: {rng.random() * 60:.1f}%")
    if r < 0.31:
        return (f"WARNING {ts} [scheduler.py:1] Sequence group {i} is preempted by PreemptionMode.RECOMPUTE mode "
                "because there is not enough KV cache space.")
    return f'{API}INFO:     10.0.{i % 256}.{i % 199}:{40000 + i % 9999} - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def write_dense(path: Path, kind: str, size_mb: float, seed: int = 1) -> dict:
    """A keyword-dense log: every line (or one enormous line) carries the doctor's keywords."""
    rng = random.Random(seed)
    target = int(size_mb * MB)
    written = lines = 0
    with path.open("w", encoding="utf-8", newline="\n") as out:
        if kind == "long-line":
            piece = "x" * 100 + " some words error here "
            out.write(piece * (target // len(piece)) + "\n")
            return {"kind": kind, "bytes": (target // len(piece)) * len(piece) + 1, "lines": 1}
        if kind in LONG:
            out.write("{" if kind == "long-json" else "")
            sep = ", " if kind == "long-json" else " "
            while written < target:
                text = _long_record(kind, rng, lines) + sep
                out.write(text)
                written += len(text.encode())
                lines += 1
            out.write("}\n" if kind == "long-json" else "\n")
            return {"kind": kind, "bytes": written + 2, "lines": 1}
        if kind == "preemption":
            out.write("INFO 05-01 10:00:00 llm_engine.py:70] Initializing an LLM engine (v0.6.3) with config: "
                      "model='org/model'\n")
            lines += 1
        while written < target:
            i = lines
            ts = f"05-01 {10 + i // 360000 % 14:02d}:{i // 6000 % 60:02d}:{i // 100 % 60:02d}"
            if kind == "preemption":
                text = (f"WARNING {ts} scheduler.py:1089] Sequence group {i} is preempted by "
                        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
                        "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
                        f"provide more KV cache memory. total_num_cumulative_preemption={i}\n")
            elif kind == "stats-flip":
                gen, waiting, kv = FLIP[i % len(FLIP)]
                t = datetime.fromtimestamp(1704067200 + 10 * i, tz=timezone.utc)  # from 2024-01-01, 10 s apart
                text = (f"{API}INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: "
                        f"{rng.random() * 1000:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: "
                        f"40 reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: "
                        f"{rng.random() * 60:.1f}%\n")
            elif kind in ("stats-v1", "stats-v1-tag"):
                tag = API if kind == "stats-v1-tag" else ""  # vLLM's coloured process tag, as 0.11 prints it
                text = (f"{tag}INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: {rng.random() * 1000:.1f} "
                        f"tokens/s, Avg generation throughput: {rng.random() * 300:.1f} tokens/s, Running: "
                        f"{rng.randint(0, 64)} reqs, Waiting: {rng.randint(0, 5)} reqs, GPU KV cache usage: "
                        f"{rng.random() * 90:.1f}%, Prefix cache hit rate: {rng.random() * 60:.1f}%\n")
            else:
                text = (f"INFO {ts} metrics.py:351] Avg prompt throughput: {rng.random() * 1000:.1f} tokens/s, Avg "
                        f"generation throughput: {rng.random() * 300:.1f} tokens/s, Running: {rng.randint(0, 64)} "
                        f"reqs, Swapped: 0 reqs, Pending: {rng.randint(0, 5)} reqs, GPU KV cache usage: "
                        f"{rng.random() * 90:.1f}%, CPU KV cache usage: 0.0%.\n")
            out.write(text)
            written += len(text)
            lines += 1
    return {"kind": kind, "bytes": written, "lines": lines}
