#!/usr/bin/env python3
"""Live benchmark: how soon a finding reaches stderr, and what --tee costs against cat.

    python bench/live.py                  # latency x 9 (median, worst) + 200 MB --tee vs cat (median of 3)
    python bench/live.py --size-mb 50     # a smaller log for the throughput part

Latency: a producer writes a healthy start-up into `vllm-doctor --tee`'s stdin, pauses, then writes one
failure line (vLLM's KV-cache ValueError) and times until the finding's line appears on the doctor's stderr.
Goal: <= 100 ms.

Throughput: the 200 MB synthetic serving log of bench/throughput.py (shared generator and cache) piped
through `vllm-doctor --tee > /dev/null` and through `cat > /dev/null`, page cache warm, fresh processes;
ratio = cat's wall time / the doctor's. Goal: >= 0.5x. The output is checked to be the input byte for byte
(a cmp against the log, outside the timing).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import throughput  # noqa: E402 - the shared log generator

#: a start-up up to the KV-cache sizing (the first 28 lines of a healthy V1 log)
STARTUP = b"".join((HERE.parent / "fixtures" / "healthy-v1-0.10.log").read_bytes().splitlines(keepends=True)[:28])
FAILURE = (b"(EngineCore_0 pid=2201) ERROR 08-30 10:03:11 [core.py:700] ValueError: To serve at least one request "
           b"with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
           b"available KV cache memory (4.62 GiB). Based on the available memory, the estimated maximum model "
           b"length is 37840. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
           b"initializing the engine.\n")


def latency_once() -> float:
    doc = subprocess.Popen([*throughput.doctor_command(), "--tee"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert doc.stdin is not None and doc.stderr is not None and doc.stdout is not None
    try:
        doc.stdin.write(STARTUP)
        doc.stdin.flush()
        echoed = b""
        while len(echoed) < len(STARTUP):  # the doctor is up and has read the start-up (its --tee echo)
            echoed += os.read(doc.stdout.fileno(), 65536)
        time.sleep(1.0)  # a server's log has pauses; then the failure
        t0 = time.perf_counter()
        doc.stdin.write(FAILURE)
        doc.stdin.flush()
        buf = b""
        fd = doc.stderr.fileno()
        while b"[kv-cache-too-small]" not in buf:
            ready, _, _ = select.select([fd], [], [], 10)
            if not ready:
                raise RuntimeError("no finding within 10 s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the doctor exited without the finding: {buf!r}")
            buf += chunk
        return time.perf_counter() - t0
    finally:
        doc.kill()
        doc.wait()


def wall(cmd: list[str], src: Path, dst: str = os.devnull) -> float:
    with src.open("rb") as fin, open(dst, "wb") as fout:
        t0 = time.perf_counter()
        subprocess.run(cmd, stdin=fin, stdout=fout, stderr=subprocess.DEVNULL, check=False)
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--latency-runs", type=int, default=9)
    ap.add_argument("--keep", action="store_true", help="keep the generated log in bench/out/")
    args = ap.parse_args()

    lat = [latency_once() * 1000 for _ in range(args.latency_runs)]
    print(f"latency line -> finding on stderr: median {statistics.median(lat):.0f} ms, worst {max(lat):.0f} ms "
          f"(goal <= 100 ms; {args.latency_runs} runs)")

    path, _, reused = throughput.ensure_log(args.size_mb, 1, "kv-cache-too-small", "requests")
    try:
        size = path.stat().st_size
        wall(["cat"], path)  # warm the page cache
        cat = statistics.median(wall(["cat"], path) for _ in range(args.repeat))
        tee = statistics.median(wall([*throughput.doctor_command(), "--tee"], path) for _ in range(args.repeat))
        plain = statistics.median(wall([*throughput.doctor_command(), "-"], path) for _ in range(args.repeat))
        out = Path(str(path) + ".tee")
        wall([*throughput.doctor_command(), "--tee"], path, str(out))
        same = out.read_bytes() == path.read_bytes()
        out.unlink()
        print(f"--tee throughput on {size / 1e6:.0f} MB: doctor {size / tee / 1e6:.0f} MB/s, cat "
              f"{size / cat / 1e6:.0f} MB/s, ratio {cat / tee:.2f}x (goal >= 0.5x); output identical: {same}")
        print(f"--tee against the same diagnosis without it: {plain / tee:.2f}x (what passing the bytes costs)")
    finally:
        if not args.keep and not reused:
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
