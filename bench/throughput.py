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
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
RATIO_TARGET = 0.5            #: issue 13: at least half of grep's speed
RSS_TARGET_MB = 64.0

from synthlog import FAILURES, GENERATOR_VERSION, MB, write_log  # noqa: E402 - bench/ is the script's folder


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
    from diagnoser.analysis.pipeline import prefilter_for
    from diagnoser.rules.loader import builtin_rules

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


#: A tiny process that spawns the measured command and reports its wall time, peak RSS and CPU time. Linux keeps the
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
    fh.write(f"{wall} {os.waitstatus_to_exitcode(status)} {ru.ru_maxrss} {ru.ru_utime + ru.ru_stime}")
"""
MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024   #: ru_maxrss is bytes on macOS, KiB on Linux


def run_measured(cmd: list[str], stdout, env: dict | None = None) -> tuple[float, int, float]:
    """Run one fresh process: (wall seconds, exit code, its own peak RSS in MB)."""
    probe, err = OUT / "launcher.out", OUT / "last-stderr.txt"
    with err.open("wb") as fh:
        subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(probe), *cmd], stdout=stdout, stderr=fh,
                       env=env, check=True)
    wall, code, maxrss, _cpu = probe.read_text().split()
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
    from diagnoser.analysis.pipeline import prefilter_for
    from diagnoser.rules.loader import builtin_rules

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
    from diagnoser.analysis.pipeline import diagnose, prefilter_for
    from diagnoser.ingest.reader import ReadStats, read_lines
    from diagnoser.ingest.redact import Redactor
    from diagnoser.rules.loader import builtin_rules

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
