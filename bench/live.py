#!/usr/bin/env python3
"""Live benchmark: how soon a finding reaches stderr, and what --tee costs against cat.

    python bench/live.py                  # latency x 9 (median, worst) + 200 MB --tee vs cat (median of 3)
    python bench/live.py --size-mb 50     # a smaller log for the throughput part

Latency: a producer writes a healthy start-up into `vllm-doctor --tee --format jsonl`'s stdin, waits until
the doctor has read it (its stage events on stderr: the copy on stdout now starts before the rules load, so
the echo no longer says the doctor is up), pauses, then writes one failure line (vLLM's KV-cache ValueError)
and times until the finding appears on the doctor's stderr. Goal: <= 100 ms.

Throughput: the 200 MB synthetic serving log of bench/throughput.py (shared generator and cache) through
`vllm-doctor --tee < LOG | cat > /dev/null` and `cat LOG | cat > /dev/null`, page cache warm, fresh
processes, interleaved; the time is until the reader of the copy sees its end (what a user of the copy
waits for; the doctor then finishes the diagnosis, its report on stderr), and ratio = cat's time / the
doctor's. Goal: >= 0.5x. Also: the doctor's own exit (the diagnosis done), and the input piped
(`cat LOG | vllm-doctor --tee | reader`, the copy spilled to a temporary file the diagnosis reads behind
it), against `cat LOG | cat | reader` (cat in the doctor's place: a pipe's extra hop costs cat too) and
against the one-hop `cat < LOG | reader`. The output is checked to be the input byte for byte (outside the
timing).
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
    doc = subprocess.Popen([*throughput.doctor_command(), "--tee", "--format", "jsonl"], stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert doc.stdin is not None and doc.stderr is not None
    fd = doc.stderr.fileno()
    try:
        doc.stdin.write(STARTUP)
        doc.stdin.flush()
        buf = b""
        while b'"fine_stage":"memory_profiling"' not in buf:  # the doctor has read the start-up's last landmark
            ready, _, _ = select.select([fd], [], [], 30)
            if not ready:
                raise RuntimeError(f"the doctor did not read the start-up within 30 s: {buf!r}")
            buf += os.read(fd, 65536)
        time.sleep(1.0)  # a server's log has pauses; then the failure
        t0 = time.perf_counter()
        doc.stdin.write(FAILURE)
        doc.stdin.flush()
        buf = b""
        while b'"rule":"kv-cache-too-small"' not in buf:
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


#: The reader of the copy: reads to the end, prints when the first byte and the end came (CLOCK_MONOTONIC,
#: the same clock in every process) and the byte count.
READER = ("import fcntl, os, time\n"
          "try:\n"
          "    fcntl.fcntl(0, 1031, 1 << 20)  # F_SETPIPE_SZ: 1 MB, fewer wake-ups for cat and the doctor alike\n"
          "except OSError:\n"
          "    pass\n"
          "buf, first, n = bytearray(1 << 20), None, 0\n"
          "while True:\n"
          "    got = os.readv(0, [buf])\n"
          "    if not got:\n"
          "        break\n"
          "    first = time.monotonic() if first is None else first\n"
          "    n += got\n"
          "print(first, time.monotonic(), n)\n")


def copy_times(cmd: list[str], src: Path, piped: bool = False) -> tuple[float, float, float]:
    """`cmd < src | reader` (or `cat src | cmd | reader`): seconds until the reader got the first byte, until
    it saw the end of the copy, and until cmd exited (its diagnosis done)."""
    with src.open("rb") as fin:
        t0 = time.monotonic()
        feeder = subprocess.Popen(["cat", str(src)], stdout=subprocess.PIPE) if piped else None
        proc = subprocess.Popen(cmd, stdin=feeder.stdout if feeder else fin, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        if feeder is not None:
            feeder.stdout.close()
        reader = subprocess.Popen([sys.executable, "-c", READER], stdin=proc.stdout, stdout=subprocess.PIPE)
        proc.stdout.close()
        first, end, count = reader.communicate()[0].split()
        proc.wait()
        done = time.monotonic() - t0
        if feeder is not None:
            feeder.wait()
        if int(count) != src.stat().st_size:
            raise RuntimeError(f"{cmd[0]}: copied {int(count)} of {src.stat().st_size} bytes")
        return float(first) - t0, float(end) - t0, done


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
        doctor = [*throughput.doctor_command(), "--tee"]
        runs: dict[str, list[tuple[float, float, float]]] = {"cat": [], "tee": [], "piped": [], "catpiped": []}
        plain = []
        for _ in range(args.repeat):  # interleaved: the machine's load changes under a long run
            runs["cat"].append(copy_times(["cat"], path))
            runs["tee"].append(copy_times(doctor, path))
            runs["piped"].append(copy_times(doctor, path, piped=True))
            runs["catpiped"].append(copy_times(["cat"], path, piped=True))
            plain.append(wall([*throughput.doctor_command(), "-"], path))
        med = statistics.median

        def rate(name: str) -> tuple[float, float, float, float]:
            """Median end of copy, median steady copy time (first byte to end), first byte, exit."""
            rs = runs[name]
            return (med(r[1] for r in rs), med(r[1] - r[0] for r in rs), med(r[0] for r in rs),
                    med(r[2] for r in rs))

        cat_end, cat_steady, _, _ = rate("cat")
        tee_end, tee_steady, tee_first, tee_done = rate("tee")
        piped_end, piped_steady, _, piped_done = rate("piped")
        catpiped_end, catpiped_steady, _, _ = rate("catpiped")
        out = Path(str(path) + ".tee")
        wall(doctor, path, str(out))
        same = out.read_bytes() == path.read_bytes()
        out.unlink()
        mb = size / 1e6
        print(f"--tee throughput on {mb:.0f} MB (`--tee < LOG | reader`, first byte to the end of the copy): doctor "
              f"{mb / tee_steady:.0f} MB/s, cat {mb / cat_steady:.0f} MB/s, ratio {cat_steady / tee_steady:.2f}x "
              f"(goal >= 0.5x); output identical: {same}")
        print(f"  wall, start to the end of the copy (start-up included: first byte after {tee_first * 1000:.0f} ms): "
              f"{tee_end:.2f} s against cat's {cat_end:.2f} s, ratio {cat_end / tee_end:.2f}x")
        print(f"  the diagnosis done (the doctor exited) after {tee_done:.2f} s; the file mode (`vllm-doctor - < LOG`, "
              f"the serving series too) {med(plain):.2f} s")
        print(f"  input piped (`cat LOG | vllm-doctor --tee | reader`): copy {mb / piped_steady:.0f} MB/s, ratio "
              f"{catpiped_steady / piped_steady:.2f}x against `cat LOG | cat | reader` ({mb / catpiped_steady:.0f} "
              f"MB/s; wall {catpiped_end / piped_end:.2f}x), {cat_steady / piped_steady:.2f}x against the one-hop "
              f"cat (goal >= 0.5x); exited after {piped_done:.2f} s")
    finally:
        if not args.keep and not reused:
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
