"""Live modes: --tee passes the input through byte for byte; --until ready/failure exits at the right moment
while a producer is still writing; --timeout says where it was stuck; `run` runs the command and its exit
code is the verdict; --follow survives a file that appears late, is truncated or rotated.

No timing assertions beyond generous bounds: a producer that would take a minute must not be waited for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnoser.live.sources import FollowSource, PipeSource
from diagnoser.live.tee import FileTee, PipeTee
from diagnoser.live.watch import LiveOptions, Watch
from diagnoser.rules.loader import builtin_rules

from .conftest import FIXTURES

DOCTOR = [sys.executable, "-m", "diagnoser"]


class ChunkSource:
    """A scripted input: bytes chunks, and None for 'nothing came this poll' (idle ticks)."""

    def __init__(self, chunks):
        self.chunks = list(chunks)

    def read(self, timeout):
        if not self.chunks:
            return b""
        return self.chunks.pop(0)


def _tee(chunks) -> bytes:
    with tempfile.TemporaryFile() as out:
        watch = Watch(builtin_rules(), LiveOptions(tee=True), emit=lambda s: None, tee_fd=out.fileno())
        watch.run(ChunkSource(chunks))
        out.seek(0)
        return out.read()


LOG_BITS = st.sampled_from([b"\n", b"\r\n", b"\r", b"INFO 01-02 03:04:05 [core.py:1] ", b"ERROR ", b"Traceback",
                            b"CUDA out of memory", b'{"log":"x', b'"}\n', b"\xff\xfe", b"\x1b[31m", b" " * 7])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.binary(max_size=300), LOG_BITS), max_size=40), st.data())
def test_tee_output_is_the_input_byte_for_byte(pieces, data):
    """Arbitrary bytes, cut into arbitrary chunks with idle polls between them, partial last line or not."""
    stream = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    chunks, prev = [], 0
    for cut in [*cuts, len(stream)]:
        if cut > prev:
            chunks.append(stream[prev:cut])
        if data.draw(st.booleans()):
            chunks.append(None)
        prev = max(prev, cut)
    assert _tee(chunks) == stream


def _tee_pipe(chunks) -> bytes:
    """The same through a real pipe (the copier thread, PipeTee): None is a pause of the producer."""
    read_fd, write_fd = os.pipe()

    def produce():
        with os.fdopen(write_fd, "wb", buffering=0) as w:
            for chunk in chunks:
                if chunk is None:
                    time.sleep(0.003)
                else:
                    w.write(chunk)

    producer = threading.Thread(target=produce)
    producer.start()
    with tempfile.TemporaryFile() as out:
        watch = Watch(builtin_rules(), LiveOptions(tee=True), emit=lambda s: None, tee_fd=out.fileno())
        watch.run(PipeSource(read_fd))
        producer.join()
        os.close(read_fd)
        assert isinstance(watch.tee, PipeTee)
        out.seek(0)
        return out.read()


def _tee_file(stream: bytes) -> bytes:
    """The same from a regular file (FileTee: sendfile, the diagnosis reads the file behind the copy)."""
    with tempfile.TemporaryFile() as src, tempfile.TemporaryFile() as out:
        src.write(stream)
        src.seek(0)
        watch = Watch(builtin_rules(), LiveOptions(tee=True), emit=lambda s: None, tee_fd=out.fileno())
        watch.run(PipeSource(src.fileno()))
        assert isinstance(watch.tee, FileTee)
        assert watch.stats.bytes == len(stream)  # the diagnosis read every byte, once
        out.seek(0)
        return out.read()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.binary(max_size=300), LOG_BITS), max_size=40), st.data())
def test_tee_through_a_pipe_and_from_a_file_is_the_input_byte_for_byte(pieces, data):
    stream = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks, prev = [], 0
    for cut in [*cuts, len(stream)]:
        if cut > prev:
            chunks.append(stream[prev:cut])
        if data.draw(st.booleans()):
            chunks.append(None)
        prev = max(prev, cut)
    assert _tee_pipe(chunks) == stream
    assert _tee_file(stream) == stream


def test_tee_copy_runs_ahead_of_the_diagnosis_and_ends_with_the_input():
    """A partial line (a progress bar) is on stdout at once, before its newline; the copy's reader sees its
    end when the input ends (close_tee), with every byte; the diagnosis read them all too."""
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    watch = Watch(builtin_rules(), LiveOptions(tee=True), emit=lambda s: None, tee_fd=out_w, close_tee=True)
    runner = threading.Thread(target=watch.run, args=(PipeSource(read_fd),))
    runner.start()
    bar = b"Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.30s/it]\r"
    os.write(write_fd, bar)
    got = b""
    deadline = time.monotonic() + 20
    while len(got) < len(bar) and time.monotonic() < deadline:
        got += os.read(out_r, 65536)
    assert got == bar  # the producer is still running: no newline, no end, and yet it passed
    body = (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_bytes()
    os.write(write_fd, body)
    os.close(write_fd)
    while chunk := os.read(out_r, 65536):  # ends: the doctor replaced its copy's descriptor by /dev/null
        got += chunk
    runner.join(30)
    os.close(read_fd)
    os.close(out_r)
    os.close(out_w)
    assert got == bar + body
    assert watch.stats.bytes == len(bar + body)
    assert "kv-cache-too-small" in {h.rule.id for h in watch.matcher.hits}


def test_tee_of_a_file_argument_and_of_stdin_from_a_file_through_the_cli(tmp_path):
    raw = (FIXTURES / "weights-oom-v1-0.15.log").read_bytes()
    path = tmp_path / "server.log"
    path.write_bytes(raw)
    proc = subprocess.run([*DOCTOR, "--tee", str(path)], capture_output=True, timeout=60)
    assert proc.stdout == raw and proc.returncode == 1
    assert "[weights-oom]" in proc.stderr.decode() and "1 error(s)" in proc.stderr.decode()
    with path.open("rb") as fin:
        proc = subprocess.run([*DOCTOR, "--tee", "--until", "failure"], stdin=fin, capture_output=True, timeout=60)
    assert proc.stdout == raw and proc.returncode == 1  # an early verdict still copies the whole file


def test_tee_of_a_fixture_through_the_cli_is_identical():
    raw = (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_bytes()
    proc = subprocess.run([*DOCTOR, "--tee"], input=raw, capture_output=True, timeout=60)
    assert proc.stdout == raw
    assert proc.returncode == 1
    assert "[kv-cache-too-small]" in proc.stderr.decode()


PRODUCER = textwrap.dedent("""
    import sys, time
    lines = open(sys.argv[1], "rb").read().splitlines(keepends=True)
    out = sys.stdout.buffer
    stall_after = int(sys.argv[2]) if len(sys.argv) > 2 else len(lines)
    for i, line in enumerate(lines):
        if i == stall_after:
            break
        out.write(line); out.flush(); time.sleep(0.01)
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 60)  # a server that keeps running (or hangs)
""")


@pytest.fixture(scope="module")
def producer(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("live") / "producer.py"
    path.write_text(PRODUCER)
    return path


def _piped(producer, fixture, doctor_args, stall_after=None, timeout=45):
    """`producer | vllm-doctor ARGS`: returns (exit code, stdout, stderr, seconds until the doctor exited)."""
    args = [sys.executable, str(producer), str(FIXTURES / fixture)]  # an absolute path stays as it is
    if stall_after is not None:
        args.append(str(stall_after))
    prod = subprocess.Popen(args, stdout=subprocess.PIPE)
    start = time.monotonic()
    # files, not pipes: with --tee a drainer keeps copying the producer's output after the doctor exits
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            doc = subprocess.Popen([*DOCTOR, *doctor_args], stdin=prod.stdout, stdout=out, stderr=err)
            code = doc.wait(timeout)
            took = time.monotonic() - start
        finally:
            prod.kill()
            prod.wait()
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(), err.read().decode(), took


def test_until_ready_exits_0_while_the_server_keeps_running(producer):
    code, out, err, took = _piped(producer, "healthy-v1-0.10.log", ["--until", "ready", "--tee"])
    assert code == 0, err
    assert "vllm-doctor: ready at line" in err
    assert took < 40  # the producer runs for a minute more: the doctor did not wait for it
    assert "Starting vLLM API server" in out or "Application startup complete" in out


def test_until_ready_exits_1_on_a_certain_failure_with_the_diagnosis(producer):
    code, out, err, took = _piped(producer, "kv-cache-too-small-v1-0.16.log", ["--until", "ready"])
    assert code == 1, err
    assert "[kv-cache-too-small]" in err  # announced the moment it was read
    assert "Set --max-model-len" in out or "--max-model-len" in out  # the diagnosis, printed
    assert took < 40


def test_until_ready_jsonl_events(producer):
    code, out, err, _ = _piped(producer, "weights-oom-v1-0.15.log", ["--until", "ready", "--format", "jsonl"])
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["event"] for e in events]
    assert code == 1
    assert "stage" in kinds and "finding" in kinds and kinds[-1] == "summary"
    finding = next(e for e in events if e["event"] == "finding")
    assert finding["rule"] == "weights-oom" and finding["severity"] == "error"
    assert events[-1]["verdict"] == "failure" and events[-1]["exit_code"] == 1
    assert "loading" in [e["stage"] for e in events if e["event"] == "stage"]


def test_timeout_says_the_stage_and_for_how_long(producer):
    lines = (FIXTURES / "healthy-v1-0.10.log").read_text().splitlines()
    loading = next(i for i, line in enumerate(lines) if "Starting to load model" in line or "Loading weights" in line)
    code, _, err, took = _piped(producer, "healthy-v1-0.10.log", ["--until", "ready", "--timeout", "2"],
                                stall_after=loading + 1)
    assert code == 3, err
    assert "timeout after 2 s" in err and "stage loading (weight_loading)" in err
    assert took < 30


def test_log_that_ends_before_ready_is_a_failure(tmp_path):
    log = tmp_path / "partial.log"
    log.write_text("\n".join((FIXTURES / "healthy-v1-0.10.log").read_text().splitlines()[:12]) + "\n")
    proc = subprocess.run([*DOCTOR, "--until", "ready", str(log)], capture_output=True, timeout=60)
    assert proc.returncode == 1
    assert "ended before the server was ready" in proc.stderr.decode()


def test_run_the_command_ready(producer):
    proc = subprocess.run([*DOCTOR, "run", "--until", "ready", "--", sys.executable, str(producer),
                           str(FIXTURES / "healthy-v1-0.31.log")], capture_output=True, timeout=45)
    assert proc.returncode == 0, proc.stderr.decode()


def test_run_kill_on_failure_stops_the_command(producer, tmp_path):
    pidfile = tmp_path / "pid"
    script = tmp_path / "serve.py"
    script.write_text(f"import os; open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
                      + PRODUCER.replace("import sys, time", "import sys, time, os"))
    proc = subprocess.run([*DOCTOR, "run", "--until", "ready", "--kill-on-failure", "--", sys.executable, str(script),
                           str(FIXTURES / "no-cache-blocks-v1-0.32.log")], capture_output=True, timeout=45)
    assert proc.returncode == 1
    assert "[no-cache-blocks]" in proc.stderr.decode()
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the command still runs after --kill-on-failure")


def test_run_exit_code_when_the_command_fails_silently(tmp_path):
    proc = subprocess.run([*DOCTOR, "run", "--", sys.executable, "-c", "print('hello'); raise SystemExit(4)"],
                          capture_output=True, timeout=45)
    assert proc.returncode == 1
    assert "exited with status 4" in proc.stderr.decode()
    assert not proc.stdout.startswith(b"hello")  # without --tee the output is not echoed; the report is
    proc = subprocess.run([*DOCTOR, "run", "--tee", "--", sys.executable, "-c", "print('hello')"],
                          capture_output=True, timeout=45)
    assert proc.returncode == 0 and proc.stdout.startswith(b"hello\n")


def test_follow_a_file_that_appears_is_truncated_and_rotated(tmp_path):
    path = tmp_path / "vllm.log"
    src = FollowSource(str(path))

    def drain():
        got = b""
        for _ in range(5):
            data = src.read(0)
            if data:
                got += data
        return got

    assert src.read(0) is None  # not there yet
    path.write_bytes(b"one\n")
    assert drain() == b"one\n"
    with path.open("ab") as fh:
        fh.write(b"two\n")
    assert drain() == b"two\n"
    path.write_bytes(b"3\n")  # truncated (shorter than what was read) and rewritten
    assert drain() == b"3\n"
    os.rename(path, tmp_path / "vllm.log.1")  # rotated: the old file gets its last words, then the new one
    with (tmp_path / "vllm.log.1").open("ab") as fh:
        fh.write(b"last of old\n")
    assert drain() == b"last of old\n"
    path.write_bytes(b"new file\n")
    assert drain() == b"new file\n"


def test_follow_until_failure_cli(tmp_path):
    path = tmp_path / "vllm.log"
    doc = subprocess.Popen([*DOCTOR, "--follow", str(path), "--until", "failure", "--timeout", "40"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)
        with path.open("wb") as fh:
            for line in (FIXTURES / "tp-divisibility-0.6.log").read_bytes().splitlines(keepends=True):
                fh.write(line)
                fh.flush()
                time.sleep(0.005)
        out, err = doc.communicate(timeout=40)
    finally:
        doc.kill()
    assert doc.returncode == 1, err.decode()
    assert b"[tp-divisibility]" in err


def test_repeated_findings_are_one_with_a_running_count():
    said = []
    watch = Watch(builtin_rules(), LiveOptions(update_every=0), emit=said.append)
    stats = b"".join(
        b"WARNING 05-01 10:00:%02d [scheduler.py:1] Sequence group %d is preempted by PreemptionMode.RECOMPUTE mode "
        b"because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        b"gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        b"total_num_cumulative_preemption=%d\n" % (i, i, i + 1) for i in range(1, 30))
    watch.run(ChunkSource([stats[: len(stats) // 2], None, None, stats[len(stats) // 2:], None, None]))
    first = [s for s in said if "[preemption]" in s and "line" in s]
    assert len(first) == 1
    assert any("seen" in s and "times" in s for s in said)


# -- an unrecognized failure (only the fallback rule matches) is certain once the process goes down --------

HEAD = "".join((FIXTURES / "healthy-v1-0.10.log").read_text().splitlines(keepends=True)[:14])  # loading
_E = "(EngineCore_0 pid=3459) ERROR 08-30 10:02:24 [core.py:700] "
ENGINE_TRACEBACK = [
    _E + "EngineCore failed to start.", _E + "Traceback (most recent call last):",
    _E + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 691, in run_engine_core',
    _E + "    engine_core = EngineCoreProc(*args, **kwargs)",
    _E + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1990, in load_model',
    _E + "    self.model = model_loader.load_model(",
    _E + '  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/memory.py", line 192, in empty_cache',
    _E + "    torch._C._cuda_emptyCache()",
    _E + 'RuntimeError: t == DeviceType::CUDA INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/impl/CUDAGuardImpl.h"'
         ":25, please report a bug to PyTorch."]
_A = "(APIServer pid=3307) "
FRONTEND_TRACEBACK = [  # the front end's uncaught wrapper: its traceback starts at the module level
    _A + "Traceback (most recent call last):", _A + '  File "/usr/local/bin/vllm", line 8, in <module>',
    _A + "    sys.exit(main())",
    _A + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line 484, in '
         "_wait_for_engine_startup",
    _A + '    raise RuntimeError("Engine core initialization failed. "',
    _A + "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
V0_TRACEBACK = [  # one process, uncaught: `python -m vllm.entrypoints.openai.api_server`
    "Traceback (most recent call last):", '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/api_server.py", line 585, in <module>',
    "    uvloop.run(run_server(args))",
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", line 1066, in load_model',
    "    self.model = get_model(vllm_config=self.vllm_config)",
    'RuntimeError: t == DeviceType::CUDA INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/impl/CUDAGuardImpl.h":25, '
    "please report a bug to PyTorch."]


def _log(tmp_path, name, lines) -> Path:
    path = tmp_path / name
    path.write_text(HEAD + "\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("until", ["failure", "ready"])
def test_unrecognized_failure_is_certain_when_the_front_end_goes_down(producer, tmp_path, until):
    """The producer keeps running a minute after the tracebacks: the verdict must not wait for its end."""
    log = _log(tmp_path, "assert.log", ENGINE_TRACEBACK + FRONTEND_TRACEBACK)
    code, out, err, took = _piped(producer, log, ["--until", until, "--format", "jsonl"])
    assert code == 1, err
    assert took < 30
    summary = json.loads(out.splitlines()[-1])
    assert summary["verdict"] == "failure" and summary["exit_code"] == 1
    assert summary["findings"][0]["rule"] == "unrecognized-failure"
    assert summary["findings"][0]["stage"] == "loading"
    assert summary["findings"][0]["facts"]["exception"] == "RuntimeError"


def test_unrecognized_failure_of_one_process_uncaught_through_follow(tmp_path):
    """A followed file never ends: an uncaught traceback (from the module level) is the end of the process."""
    path = tmp_path / "vllm.log"
    doc = subprocess.Popen([*DOCTOR, "--follow", str(path), "--until", "failure", "--timeout", "40"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    start = time.monotonic()
    try:
        with path.open("w") as fh:
            for line in (HEAD + "\n".join(V0_TRACEBACK) + "\n").splitlines(keepends=True):
                fh.write(line)
                fh.flush()
                time.sleep(0.005)
        out, err = doc.communicate(timeout=40)
    finally:
        doc.kill()
    assert doc.returncode == 1, err.decode()
    assert time.monotonic() - start < 30  # not the 40 s timeout
    assert "[unrecognized-failure]" in out.decode() and "DeviceType::CUDA" in out.decode()


def test_an_exception_the_process_may_survive_is_not_certain(producer, tmp_path):
    """A traceback from inside a process, with nothing saying it went down: the doctor keeps waiting."""
    log = _log(tmp_path, "maybe.log", ENGINE_TRACEBACK[1:])  # no "failed to start", no front-end traceback
    code, _, err, _ = _piped(producer, log, ["--until", "failure", "--timeout", "5"])
    assert code == 3, err  # the timeout, not a failure verdict


def test_run_exits_when_the_command_exits_though_a_worker_holds_the_pipe(tmp_path):
    """`run`: the command is gone (a worker it left behind keeps the pipe open): no more output, no wait."""
    log = _log(tmp_path, "nvml.log", ENGINE_TRACEBACK)
    script = f"cat {log}; sleep 60 & exit 1"
    start = time.monotonic()
    proc = subprocess.run([*DOCTOR, "run", "--until", "ready", "--", "sh", "-c", script], capture_output=True,
                          timeout=45)
    assert proc.returncode == 1, proc.stderr.decode()
    assert time.monotonic() - start < 30
    assert "[unrecognized-failure]" in proc.stdout.decode()
