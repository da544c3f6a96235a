"""`check` fails a start-up that never happened (issue 29, item 14).

A CI gate that passes when vLLM was never there is a bypass: a missing binary, a missing Python module, an
image that could not be pulled, a process the kernel killed right after `+ vllm serve ...`, and a start-up cut
off after its first lines all exited 0 ("no problems found"). Each now fails the gate (exit 1) and says that
the server did not start; a complete healthy start-up still passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "example-kv-cache-too-small.log"
HEALTHY = ROOT / "fixtures" / "healthy-v1-0.10.log"

NEVER_STARTED = {
    "bash-not-found": "+ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n"
                      "bash: line 1: vllm: command not found\n",
    "sh-not-found": "/bin/sh: 1: vllm: not found\n",
    "exec-not-found": "exec: \"vllm\": executable file not found in $PATH: unknown\n",
    "no-module": "/usr/bin/python3: No module named vllm\n",
    "no-module-traceback": "Traceback (most recent call last):\n  File \"/app/serve.py\", line 3, in <module>\n"
                           "    from vllm.entrypoints.openai.api_server import run_server\n"
                           "ModuleNotFoundError: No module named 'vllm'\n",
    "docker-pull": "Unable to find image 'vllm/vllm-openai:v0.99.0' locally\n"
                   "docker: Error response from daemon: manifest for vllm/vllm-openai:v0.99.0 not found: manifest "
                   "unknown: manifest unknown.\nSee 'docker run --help'.\n",
    "k8s-pull": "Warning  Failed     12s (x3 over 51s)  kubelet  Failed to pull image \"vllm/vllm-openai:v0.99.0\": "
                "rpc error: code = NotFound desc = failed to pull and unpack image\n"
                "Warning  Failed     12s (x3 over 51s)  kubelet  Error: ErrImagePull\n"
                "Normal   BackOff    1s (x4 over 50s)   kubelet  Back-off pulling image \"vllm/vllm-openai:v0.99.0\"\n",
    "killed": "+ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\nKilled\n",
    "killed-exit-137": "+ vllm serve meta-llama/Llama-3.1-8B-Instruct\n/entrypoint.sh: line 4:    17 Killed"
                       "                  vllm serve meta-llama/Llama-3.1-8B-Instruct\n",
}


@pytest.mark.parametrize("case", sorted(NEVER_STARTED))
def test_check_fails_when_vllm_never_started(tmp_path, doctor, case):
    log = tmp_path / f"{case}.log"
    log.write_text(NEVER_STARTED[case], encoding="utf-8")
    res = doctor("check", "--format", "text", "--no-color", str(log), cwd=tmp_path)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "start" in (res.stdout + res.stderr).lower(), res.stdout


@pytest.mark.parametrize("lines", [3, 12, 30])
def test_check_fails_a_start_up_cut_short(tmp_path, doctor, lines):
    text = HEALTHY.read_text(encoding="utf-8").splitlines()[:lines]
    log = tmp_path / "cut.log"
    log.write_text("\n".join(text) + "\n", encoding="utf-8")
    res = doctor("check", "--format", "text", "--no-color", str(log), cwd=tmp_path)
    assert res.returncode == 1, (res.stdout, res.stderr)


def test_a_complete_healthy_start_up_still_passes(tmp_path, doctor):
    res = doctor("check", "--format", "text", "--no-color", str(HEALTHY), cwd=tmp_path)
    assert res.returncode == 0, (res.stdout, res.stderr)
