"""`vllm-doctor plan --from-file`: launch config files (shell scripts, vLLM YAML configs, Dockerfiles, compose
files, Kubernetes manifests), the `# vllm-doctor:` pin comment, exit codes, and the pre-commit hook as defined."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from click.testing import CliRunner

from diagnoser.cli.plan import plan_command
from diagnoser.launch import parse_pins, read_launch_file, shell_words, simple_commands

ROOT = Path(__file__).resolve().parent.parent
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


def run(args: list[str]):
    return CliRunner().invoke(plan_command(), args)


def plan_json(args: list[str]) -> list[dict]:
    result = run(["--format", "json", *args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def one(tmp_path: Path, name: str, text: str, *args: str) -> dict:
    entries = plan_json(["--from-file", *args, write(tmp_path, name, text)])
    assert len(entries) == 1, entries
    return entries[0]


# --- shell scripts ------------------------------------------------------------------------------------------------

SCRIPT = """
    #!/usr/bin/env bash
    # Serve Llama 3.1 8B on one L4.
    set -euo pipefail
    export HF_HOME=/models      # where the weights live
    echo "starting vllm serve for $MODEL"
    exec vllm serve meta-llama/Llama-3.1-8B-Instruct \\
        --max-model-len 16384 \\
        --gpu-memory-utilization=0.92 \\
        --enable-prefix-caching \\
        --port 8000   # the OpenAI port
    # vllm serve some/other-model --max-model-len 999999
    """


def test_shell_script_with_continuations_and_comments(tmp_path):
    entry = one(tmp_path, "serve-vllm.sh", SCRIPT, "--gpu", "L4")
    assert entry["kind"] == "shell" and entry["line"] == 6
    assert entry["model"] == MODEL and entry["max_model_len"] == 16384 and entry["gpu_memory_utilization"] == 0.92
    assert entry["starts"] is True and entry["gpu"] == "L4"
    # the same figures as the command line given to the planner directly
    direct = json.loads(run(["--format", "json", "--gpu", "L4", "--", "vllm", "serve", MODEL, "--max-model-len",
                             "16384", "--gpu-memory-utilization=0.92"]).stdout)
    assert entry["kv_cache_tokens"] == direct["kv_cache_tokens"]
    assert entry["max_concurrency"] == direct["max_concurrency"]


def test_shell_tokenizer_reads_like_sh():
    words = [w.text for w in shell_words("A=1 vllm serve 'm o' \"x $Y\" a\\ b --n=2 2>&1 | tee log # c\n")
             if not w.op]
    assert words == ["A=1", "vllm", "serve", "m o", "x $Y", "a b", "--n=2", "tee", "log"]
    cmds = simple_commands(shell_words("a; b && c\nd # e\n"))
    assert [[w.text for w in c] for c, _ in cmds] == [["a"], ["b"], ["c"], ["d"]]
    # a heredoc body is data, not commands
    cmds = simple_commands(shell_words("cat <<EOF\nvllm serve x\nEOF\nls\n"))
    assert [[w.text for w in c] for c, _ in cmds] == [["cat"], ["ls"]]


def test_a_comment_inside_a_continued_command_ends_it_as_the_shell_does(tmp_path):
    entry = one(tmp_path, "serve-vllm.sh", """
        vllm serve meta-llama/Llama-3.1-8B-Instruct \\
          --gpu-memory-utilization 0.92 \\
          # --enforce-eager \\
          --max-model-len 16384
        """, "--gpu", "L4")
    # bash runs `vllm serve MODEL --gpu-memory-utilization 0.92`, then `--max-model-len 16384` as a command
    assert entry["max_model_len"] == 131072 and entry["starts"] is False
    note = " ".join(entry["notes"])
    assert "--max-model-len 16384 never reaches vLLM" in note and "comment on line 3" in note


def test_variables_are_not_expanded_and_fall_back_to_defaults(tmp_path):
    entry = one(tmp_path, "serve-vllm.sh", """
        MAX_LEN=16384
        vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len "$MAX_LEN" \\
          --tensor-parallel-size ${TP:-1} --gpu-memory-utilization 0.9 $EXTRA_ARGS
        """, "--gpu", "A100-80GB")
    assert entry["max_model_len"] == 131072            # vLLM's default: the model's maximum
    assert entry["gpu_memory_utilization"] == 0.9 and entry["tensor_parallel_size"] == 1
    notes = entry["notes"]
    assert any('--max-model-len "$MAX_LEN"' in n and "unknown" in n and "vLLM's default" in n for n in notes)
    assert any("--tensor-parallel-size ${TP:-1}" in n for n in notes)
    assert any("$EXTRA_ARGS" in n for n in notes)


def test_model_from_a_variable_needs_a_pin(tmp_path):
    text = """
        python3 -m vllm.entrypoints.openai.api_server --model "$MODEL" --max-model-len 8192
        """
    path = write(tmp_path, "serve-vllm.sh", text)
    result = run(["--check", "--gpu", "L4", "--from-file", path])
    assert result.exit_code == 2
    assert "serve-vllm.sh" in result.output and "# vllm-doctor: model=NAME" in result.output
    pinned = one(tmp_path, "pinned-vllm.sh", "# vllm-doctor: model=llama-3.1-8b\n" + textwrap.dedent(text),
                 "--gpu", "L4")
    assert pinned["model"] == MODEL and pinned["max_model_len"] == 8192 and pinned["starts"] is True


def test_api_server_env_docker_run_and_bash_c(tmp_path):
    path = write(tmp_path, "launch-vllm.sh", """
        VLLM_USE_V1=1 nohup python -u -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-7B-Instruct \\
          --max-model-len 8192 > server.log 2>&1 &
        docker run --gpus all -p 8000:8000 --name vllm-llama -e HF_TOKEN=x vllm/vllm-openai:v0.8.5 \\
          --model meta-llama/Llama-3.1-8B-Instruct --max-model-len 4096
        bash -c "vllm serve mistralai/Mistral-7B-Instruct-v0.3 --max-model-len 8192"
        pip install vllm
        """)
    launches = read_launch_file(path).launches
    assert [launch.line for launch in launches] == [1, 3, 5]
    assert launches[0].tokens[:4] == ["VLLM_USE_V1=1", "python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--max-model-len" in launches[0].tokens and "server.log" not in launches[0].tokens
    assert launches[1].tokens[:2] == ["vllm", "serve"] and launches[1].image_version == "0.8.5"
    assert launches[2].tokens[2] == "mistralai/Mistral-7B-Instruct-v0.3"
    entries = plan_json(["--gpu", "L4", "--from-file", path])
    assert [e["line"] for e in entries] == [1, 3, 5]
    assert entries[1]["vllm_version"] == "0.8.5"           # the image's release
    assert any("vllm/vllm-openai:v0.8.5" in n for n in entries[1]["notes"])


# --- vLLM YAML configs -------------------------------------------------------------------------------------------

def test_yaml_config_with_both_spellings(tmp_path):
    entry = one(tmp_path, "vllm-config.yaml", """
        model: meta-llama/Llama-3.1-8B-Instruct
        max_model_len: 16384              # underscore spelling
        gpu-memory-utilization: 0.92      # hyphen spelling
        tensor_parallel_size: 2
        enable-prefix-caching: true
        enforce_eager: false
        port: 8000
        """, "--gpu", "L4")
    assert entry["kind"] == "vllm-config"
    assert entry["model"] == MODEL and entry["max_model_len"] == 16384
    assert entry["gpu_memory_utilization"] == 0.92 and entry["tensor_parallel_size"] == 2
    assert entry["enforce_eager"] is False
    assert not any("0.5.1" in n for n in entry["notes"])     # YAML keys: no underscore-spelling complaint
    assert "--tensor-parallel-size 2" in entry["command"]


def test_yaml_config_with_a_misspelled_key_will_not_start(tmp_path):
    path = write(tmp_path, "vllm.yaml", "model: meta-llama/Llama-3.1-8B-Instruct\nmax-model-lenn: 8192\n")
    result = run(["--check", "--gpu", "L4", "--from-file", path])
    assert result.exit_code == 1
    assert "will not start: vllm serve: error: unrecognized arguments: --max-model-lenn" in result.output
    assert "did you mean --max-model-len?" in result.output


def test_config_referenced_by_a_script_is_merged_under_its_flags(tmp_path):
    write(tmp_path, "deploy/cfg.yaml", "max_model_len: 65536\ngpu-memory-utilization: 0.95\nmodel: other/model\n")
    entry = one(tmp_path, "deploy/serve-vllm.sh",
                "vllm serve meta-llama/Llama-3.1-8B-Instruct --config cfg.yaml --max-model-len 32768\n",
                "--gpu", "H100")
    assert entry["model"] == MODEL and entry["max_model_len"] == 32768       # the command line wins
    assert entry["gpu_memory_utilization"] == 0.95                           # the config fills in the rest


# --- Dockerfiles, compose, Kubernetes ------------------------------------------------------------------------------

def test_dockerfile_compose_and_kubernetes(tmp_path):
    docker = read_launch_file(write(tmp_path, "Dockerfile.vllm", """
        FROM vllm/vllm-openai:v0.10.1
        ENV VLLM_USE_V1=1
        CMD ["meta-llama/Llama-3.1-8B-Instruct", \\
             "--max-model-len", "8192"]
        """)).launches
    assert len(docker) == 1 and docker[0].kind == "dockerfile"
    assert docker[0].tokens == ["VLLM_USE_V1=1", "vllm", "serve", MODEL, "--max-model-len", "8192"]
    assert docker[0].image_version == "0.10.1"

    compose = read_launch_file(write(tmp_path, "docker-compose.vllm.yml", """
        services:
          llm:
            image: vllm/vllm-openai:latest
            command: --model meta-llama/Llama-3.1-8B-Instruct --max-model-len ${MAX_LEN:-16384}
            environment:
              - HF_TOKEN=${HF_TOKEN}
          web:
            image: nginx
            command: ["nginx", "-g", "daemon off;"]
        """)).launches
    assert len(compose) == 1 and compose[0].kind == "compose" and compose[0].line == 3
    assert compose[0].tokens == ["vllm", "serve", "--model", MODEL]
    assert "${MAX_LEN:-16384}" in compose[0].notes[0] and compose[0].image_version is None

    k8s = read_launch_file(write(tmp_path, "k8s/vllm-deployment.yaml", """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: vllm}
        spec:
          template:
            spec:
              containers:
                - name: vllm
                  image: vllm/vllm-openai:v0.9.2
                  command: ["vllm", "serve"]
                  args: ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "16384", "-tp", "$(TP)"]
                - name: sidecar
                  image: vllm/vllm-openai:v0.9.2
                  command: ["/bin/sh", "-c"]
                  args:
                    - |
                      pip list
                      vllm serve Qwen/Qwen2.5-7B-Instruct \\
                        --max-model-len 32768
        """)).launches
    assert [launch.kind for launch in k8s] == ["kubernetes", "kubernetes"]
    assert k8s[0].tokens == ["vllm", "serve", MODEL, "--max-model-len", "16384"]
    assert "line 11: -tp $(TP)" in k8s[0].notes[0]
    assert k8s[1].tokens == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "32768"]
    assert k8s[1].line == 18


def test_yaml_strings_are_read_as_shell_only_where_they_are_commands(tmp_path):
    launches = read_launch_file(write(tmp_path, "ci-vllm.yaml", """
        name: smoke
        description: "Start it with vllm serve MODEL --max-model-len 4096; don't forget the GPU"
        facts: {prog: vllm serve}
        jobs:
          smoke:
            steps:
              - run: pip install vllm
              - run: |
                  echo "it's starting"
                  vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 &
        notes: the vllm serve command takes the model as a positional argument
        """)).launches
    assert [(launch.line, launch.kind) for launch in launches] == [(10, "yaml")]
    assert launches[0].tokens == ["vllm", "serve", MODEL, "--max-model-len", "8192"]


def test_windows_line_endings_and_unterminated_quotes(tmp_path):
    crlf = tmp_path / "crlf-vllm.sh"
    crlf.write_bytes(b"vllm serve llama-3.1-8b \\\r\n  --max-model-len 8192\r\n")
    assert read_launch_file(str(crlf)).launches[0].tokens[-2:] == ["--max-model-len", "8192"]
    # sh runs the commands before an unterminated quote, then stops with a syntax error
    before = write(tmp_path, "a-vllm.sh", "vllm serve llama-3.1-8b --max-model-len 8192\necho 'oops\n")
    assert len(read_launch_file(before).launches) == 1


# --- the pin comment and the GPU -----------------------------------------------------------------------------------

def test_gpu_pin_comment(tmp_path):
    pinned = one(tmp_path, "vllm.yaml", """
        # vllm-doctor: gpu=A100-80GB
        model: meta-llama/Llama-3.1-8B-Instruct
        """)
    assert pinned["gpu"] == "A100-80GB" and pinned["gpu_source"] == "pinned in the file" and pinned["starts"]
    # the pin wins over the command line's --gpu (the hook's args are the repository-wide default)
    over = one(tmp_path, "vllm.yaml", "model: meta-llama/Llama-3.1-8B-Instruct  # vllm-doctor: gpu=H100\n",
               "--gpu", "L4")
    assert over["gpu"] == "H100-80GB"
    spaced = one(tmp_path, "serve-vllm.sh", """
        # vllm-doctor: gpu="RTX 4090", vllm-version=0.8.5
        vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192
        """)
    assert spaced["gpu"] == "RTX 4090" and spaced["vllm_version"] == "0.8.5"
    sized = one(tmp_path, "serve-vllm.sh", "# vllm-doctor: gpu-memory=24GB\nvllm serve llama-3.1-8b\n")
    assert sized["gpu_memory_bytes"] == 24 * 10**9
    assert parse_pins("x  # vllm-doctor: skip\n") == ({}, True)
    # prose that mentions the comment is not a pin
    assert parse_pins("Write a comment `# vllm-doctor: gpu=L4` in the file.\n# vllm-doctor: see the docs\n") == \
        ({}, False)


def test_no_gpu_at_all_is_exit_2_naming_the_file_and_both_ways(tmp_path):
    path = write(tmp_path, "serve-vllm.sh", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n")
    result = run(["--check", "--from-file", path])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1
    assert path in lines[0] and "--gpu" in lines[0] and "# vllm-doctor: gpu=L4" in lines[0]


def test_bad_pins_are_exit_2(tmp_path):
    for text in ("# vllm-doctor: gpux=L4\nvllm serve llama-3.1-8b\n",
                 "# vllm-doctor: gpu=L5\nvllm serve llama-3.1-8b\n",
                 "# vllm-doctor: vllm-version=latest-ish\nvllm serve llama-3.1-8b\n"):
        path = write(tmp_path, "serve-vllm.sh", text)
        result = run(["--check", "--from-file", path])
        assert result.exit_code == 2, text
        assert path in result.output


# --- skipping, errors, exit codes, output -------------------------------------------------------------------------

def test_a_file_with_no_vllm_command_is_skipped(tmp_path):
    path = write(tmp_path, "setup-vllm.sh", """
        pip install vllm
        echo "then run: vllm serve MODEL"
        vllm-doctor plan --gpu L4 -- vllm serve llama-3.1-8b
        """)
    result = run(["--check", "--gpu", "L4", "--from-file", path])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert re.fullmatch(r"vllm-doctor: .*setup-vllm\.sh: skipped: no vLLM launch .*\n", result.output)
    # also without a GPU: a file with nothing to plan needs none
    assert run(["--check", "--from-file", path]).exit_code == 0
    # a Helm template is not YAML until rendered: skipped, not an error
    helm = write(tmp_path, "templates/vllm.yaml", "spec:\n  {{- if .Values.x }}\n  args: [vllm serve]\n")
    assert run(["--check", "--gpu", "L4", "--from-file", helm]).exit_code == 0
    assert "skip" in run(["--from-file", write(tmp_path, "x-vllm.sh", "# vllm-doctor: skip\nvllm serve x\n")]
                         ).output


def test_unreadable_files_are_exit_2(tmp_path):
    missing = str(tmp_path / "nope-vllm.sh")
    result = run(["--check", "--gpu", "L4", "--from-file", missing])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "nope-vllm.sh" in result.output and "cannot read" in result.output
    assert run(["--check", "--gpu", "L4", "--from-file", str(tmp_path)]).exit_code == 2      # a directory
    bad = write(tmp_path, "bad-vllm.yaml", "model: [unclosed\nvllm: 1\n")
    result = run(["--check", "--gpu", "L4", "--from-file", bad])
    assert result.exit_code == 2 and "bad-vllm.yaml: not valid YAML (line 2" in result.output
    quote = write(tmp_path, "q-vllm.sh", "vllm serve 'llama-3.1-8b\n")
    assert run(["--check", "--gpu", "L4", "--from-file", quote]).exit_code == 2
    assert run(["--check", "--gpu", "L4", "--from-file"]).exit_code == 2                   # no file at all
    # exit 2 wins over exit 1, and the other files are still planned
    good = write(tmp_path, "ok-vllm.sh", "vllm serve llama-3.1-8b --max-model-len 8192\n")
    result = run(["--check", "--gpu", "L4", "--from-file", good, missing])
    assert result.exit_code == 2 and "ok-vllm.sh: starts" in result.output


def test_a_config_that_will_not_fit_is_exit_1(tmp_path):
    big = write(tmp_path, "big-vllm.sh", f"vllm serve {MODEL} --gpu-memory-utilization 0.92\n")
    small = write(tmp_path, "small-vllm.yaml", f"model: {MODEL}\nmax-model-len: 16384\n")
    result = run(["--check", "--gpu", "L4", "--from-file", big, small])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{big}: will not start: one request of 131,072 tokens needs 16.00 GiB of KV cache")
    assert lines[1].startswith("  fix (") and "--max-model-len" in lines[1]
    assert re.fullmatch(rf"{re.escape(small)}: starts, \d\.\d\d requests of 16,384 at once \(L4\)", lines[2])
    assert run(["--check", "--gpu", "L4", "--from-file", small]).exit_code == 0
    below = run(["--check", "--gpu", "L4", "--min-concurrency", "4", "--from-file", small])
    assert below.exit_code == 1 and "below --min-concurrency 4" in below.output
    # without --check it is a report: exit 0, as for every `plan`
    assert run(["--gpu", "L4", "--from-file", big]).exit_code == 0
    # weights larger than the GPU
    huge = write(tmp_path, "huge-vllm.sh", "vllm serve meta-llama/Llama-3.1-70B-Instruct --max-model-len 4096\n")
    result = run(["--check", "--gpu", "L4", "--from-file", huge])
    assert result.exit_code == 1 and "will not start: the weights alone are larger than the GPU" in result.output


def test_several_files_text_report_and_summary(tmp_path):
    a = write(tmp_path, "a-vllm.sh", f"vllm serve {MODEL} --max-model-len 16384\n")
    b = write(tmp_path, "b-vllm.yaml", f"model: {MODEL}\n")
    result = run(["--gpu", "L4", "--from-file", a, b])
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith(f"== {a}: starts, ")
    assert f"\n== {b}: will not start: " in out
    assert out.count("vllm-doctor plan: meta-llama/Llama-3.1-8B-Instruct on L4") == 2       # a full report each
    summary = out.split("Summary:\n", 1)[1].splitlines()
    assert summary[0].startswith(f"  {a}: starts, ") and summary[1].startswith(f"  {b}: will not start: ")


def test_planner_options_apply_to_every_file(tmp_path):
    path = write(tmp_path, "serve-vllm.sh", f"vllm serve {MODEL} --max-model-len 131072\n")
    entry = plan_json(["--gpu", "L4", "--max-model-len", "8192", "--from-file", path])[0]
    assert entry["max_model_len"] == 8192 and entry["starts"] is True


# --- the pre-commit hook, as defined --------------------------------------------------------------------------------

def _hook_command() -> tuple[list[str], re.Pattern[str]]:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    hook = next(h for h in hooks if h["id"] == "vllm-doctor-plan")
    entry = shlex.split(hook["entry"])
    assert entry[:4] == ["vllm-doctor", "plan", "--check", "--from-file"]
    if shutil.which(entry[0]) is None:          # not installed on PATH: the same command through Python
        entry = [sys.executable, "-m", "diagnoser", *entry[1:]]
    return entry, re.compile(hook["files"])


def test_the_pre_commit_hook_entry_on_files(tmp_path):
    entry, files = _hook_command()
    write(tmp_path, "deploy/serve-vllm.sh", f"""
        # vllm-doctor: gpu=L4
        vllm serve {MODEL} \\
          --max-model-len 16384 \\
          --gpu-memory-utilization 0.92
        """)
    write(tmp_path, "deploy/vllm.yaml", f"model: {MODEL}\nmax_model_len: 8192\n")
    write(tmp_path, "deploy/vllm-notes.sh", "echo nothing to see\n")
    write(tmp_path, "deploy/Dockerfile.vllm", f'FROM vllm/vllm-openai:v0.10.1\nCMD ["{MODEL}", "--max-model-len", "8192"]\n')
    write(tmp_path, "deploy/app.py", "print('vllm serve')\n")
    staged = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    selected = [p for p in staged if files.search(p)]
    assert selected == ["deploy/Dockerfile.vllm", "deploy/serve-vllm.sh", "deploy/vllm-notes.sh", "deploy/vllm.yaml"]

    def hook(args: list[str], names: list[str]) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.run([*entry, *args, *names], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env=env)

    ok = hook(["--gpu", "L4"], selected)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "deploy/serve-vllm.sh: starts, " in ok.stdout and "deploy/vllm.yaml: starts, " in ok.stdout
    assert "deploy/Dockerfile.vllm: starts, " in ok.stdout
    assert "deploy/vllm-notes.sh: skipped" in ok.stderr

    # a change that raises --max-model-len past what fits stops the commit
    write(tmp_path, "deploy/vllm.yaml", f"model: {MODEL}\nmax_model_len: 131072\n")
    bad = hook(["--gpu", "L4"], selected)
    assert bad.returncode == 1
    assert "deploy/vllm.yaml: will not start: one request of 131,072 tokens" in bad.stdout

    # no args and no pin in a file: exit 2, one line naming it
    nogpu = hook([], ["deploy/vllm.yaml"])
    assert nogpu.returncode == 2
    assert nogpu.stderr.count("\n") == 1 and "deploy/vllm.yaml" in nogpu.stderr and "gpu=L4" in nogpu.stderr
    # the pinned script needs no args
    assert hook([], ["deploy/serve-vllm.sh"]).returncode == 0
