"""diagnoser/launch/: the kinds registry, Dockerfiles read with dockerfile-parse (the `# escape=` bug of
issue 14), the join-cost bound, and the argument reading shared with serve_args."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnoser.launch import KINDS, Kind, LaunchFileError, read_launch_file
from diagnoser.launch.dockerfile import MAX_JOIN_COST, is_dockerfile

from .test_plan_files import MODEL, write

ESCAPED = """
    # escape=`
    FROM vllm/vllm-openai:v0.10.1
    ENV VLLM_USE_V1=1
    CMD ["meta-llama/Llama-3.1-8B-Instruct", `
         # a comment inside the continued instruction (Docker drops it)
         "--max-model-len", "16384", `
         "--gpu-memory-utilization", "0.9"]
    """


def test_an_escape_directive_keeps_every_continued_line(tmp_path):
    # the hand-written reader only knew `\\` continuations and dropped `--max-model-len 16384`
    launches = read_launch_file(write(tmp_path, "Dockerfile", ESCAPED)).launches
    assert len(launches) == 1 and launches[0].kind == "dockerfile" and launches[0].line == 4
    assert launches[0].tokens == ["VLLM_USE_V1=1", "vllm", "serve", MODEL, "--max-model-len", "16384",
                                  "--gpu-memory-utilization", "0.9"]
    assert launches[0].image_version == "0.10.1"


def test_an_escape_directive_end_to_end(tmp_path):
    path = write(tmp_path, "Containerfile", ESCAPED)
    out = subprocess.run([sys.executable, "-m", "diagnoser", "plan", "--format", "json", "--gpu", "L4",
                          "--from-file", path], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode in (0, 1), out.stderr
    entry = json.loads(out.stdout)[0]
    assert entry["max_model_len"] == 16384 and entry["gpu_memory_utilization"] == 0.9
    assert any("vLLM 0.10.1" in n for n in entry["notes"])


def test_the_final_stage_runs_and_exec_entrypoint_takes_cmd(tmp_path):
    launches = read_launch_file(write(tmp_path, "Dockerfile.vllm", """
        FROM python:3.11 AS build
        CMD ["vllm", "serve", "some/other-model"]
        FROM --platform=linux/amd64 vllm/vllm-openai:v0.9.2 AS final
        ENV VLLM_USE_V1=0 HF_HOME="/models x"
        ENV VLLM_ATTENTION_BACKEND FLASHINFER
        ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        CMD ["--model", "meta-llama/Llama-3.1-8B-Instruct", \\
             "--max-model-len", "8192"]
        """)).launches
    assert [(x.line, x.image) for x in launches] == [(7, "vllm/vllm-openai:v0.9.2")]
    assert launches[0].tokens == ["VLLM_USE_V1=0", "VLLM_ATTENTION_BACKEND=FLASHINFER", "python3", "-m",
                                  "vllm.entrypoints.openai.api_server", "--model", MODEL, "--max-model-len", "8192"]


@pytest.mark.parametrize("entry", ['["/bin/sh", "-c"]', '["/bin/bash", "-lc"]'])
def test_a_shell_entrypoint_runs_the_cmd_script(entry, tmp_path):
    launches = read_launch_file(write(tmp_path, "Dockerfile", f"""
        FROM vllm/vllm-openai:v0.8.5
        ENTRYPOINT {entry}
        CMD ["vllm serve {MODEL} --max-model-len $LEN -tp 2"]
        """)).launches
    assert launches[0].tokens == ["vllm", "serve", MODEL, "-tp", "2"]
    assert "--max-model-len $LEN" in launches[0].notes[0] and launches[0].image_version == "0.8.5"


def test_a_long_real_instruction_is_within_the_join_budget(tmp_path):
    # 2,000 continued lines (real ones have tens) are read; a million are refused (tests/security)
    run = "RUN " + " && \\\n    ".join(f"apt-get install -y --no-install-recommends package-number-{i}"
                                        for i in range(2_000))
    path = write(tmp_path, "Dockerfile", f"FROM vllm/vllm-openai:v0.9.2\n{run}\nCMD [\"{MODEL}\"]\n")
    assert len(Path(path).read_text()) > 100_000 and MAX_JOIN_COST < 10 ** 9
    assert read_launch_file(path).launches[0].tokens == ["vllm", "serve", MODEL]


def test_a_12_mb_one_line_dockerfile_is_read_in_one_pass(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("FROM vllm/vllm-openai\nCMD vllm serve org/m " + "--x 1 " * 2_000_000 + "\n")
    with pytest.raises(LaunchFileError, match="more than 50,000 shell words"):
        read_launch_file(str(path))


def test_which_files_are_dockerfiles():
    assert is_dockerfile("dockerfile", "") and is_dockerfile("serve.containerfile", "")
    assert is_dockerfile("build", "# syntax=docker/dockerfile:1\nARG V=1\nFROM vllm/vllm-openai:v$V\n")
    assert not is_dockerfile("serve.sh", "vllm serve m\n")


def test_the_registry_picks_the_first_kind_that_claims_a_file(tmp_path, monkeypatch):
    assert [k.name for k in KINDS] == ["yaml", "dockerfile", "shell"]
    assert KINDS[-1].claims("anything", "")
    from diagnoser import launch

    def from_procfile(text: str, base: Path | None):
        return launch.from_shell(text.partition(":")[2], base, kind="procfile")

    kind = Kind("procfile", lambda name, text: name == "procfile", from_procfile)
    monkeypatch.setattr(launch, "KINDS", (kind, *KINDS))
    got = read_launch_file(write(tmp_path, "Procfile", f"web: vllm serve {MODEL} --max-model-len 4096\n"))
    assert [(x.kind, x.tokens) for x in got.launches] == [("procfile", ["vllm", "serve", MODEL, "--max-model-len",
                                                                        "4096"])]


def test_a_yaml_step_with_a_list_flag_or_an_unknown_flag_is_a_launch(tmp_path):
    # the positional count comes from serve_args: `--served-model-name a b` takes both words (nargs +),
    # and a misspelled flag with its value is a command to check, not prose
    launches = read_launch_file(write(tmp_path, "ci.yaml", f"""
        steps:
          - run: vllm serve {MODEL} --served-model-name a b --max-model-len 1024
          - run: vllm serve {MODEL} --max-model-lenn 1024
          - run: vllm serve is the command that starts the server
        """)).launches
    assert [x.line for x in launches] == [2, 3]
    assert launches[0].tokens[-4:] == ["a", "b", "--max-model-len", "1024"]


def test_a_config_key_set_to_true_does_not_swallow_the_next_setting(tmp_path):
    write(tmp_path, "cfg.yaml", "tensor_parallel_size: 4\nmax_model_len: true\nenable_prefix_caching: false\n")
    got = read_launch_file(write(tmp_path, "serve.sh", f"vllm serve {MODEL} --config cfg.yaml -tp 2\n"))
    tokens = got.launches[0].tokens
    assert tokens == ["vllm", "serve", MODEL, "-tp", "2", "--max-model-len", "--no-enable-prefix-caching"]


def test_a_list_value_with_an_unexpanded_element_is_left_out_whole(tmp_path):
    got = read_launch_file(write(tmp_path, "serve-vllm.sh", f"""
        vllm serve {MODEL} --cuda-graph-sizes 1 2 $MORE --max-model-lenn $LEN -tp 2
        """)).launches[0]
    # a partial capture list is not planned; a misspelled flag stays for the planner to report
    assert got.tokens == ["vllm", "serve", MODEL, "--max-model-lenn", "-tp", "2"]
    assert got.notes[0].startswith("line 1: --cuda-graph-sizes 1 2 $MORE: the value is not expanded here")
    assert got.notes[1] == "line 1: $LEN is not expanded here; whatever it adds to the command is not planned"


def test_dockerfile_parse_is_imported_only_to_read_a_dockerfile(tmp_path):
    script = write(tmp_path, "serve.sh", f"vllm serve {MODEL}\n")
    docker = write(tmp_path, "Dockerfile", f'FROM vllm/vllm-openai\nCMD ["{MODEL}"]\n')
    code = ("import sys; import diagnoser.cli.main, diagnoser.plan; from diagnoser.launch import read_launch_file; "
            "seen = ['dockerfile_parse' in sys.modules]; read_launch_file(sys.argv[1]); "
            "seen.append('dockerfile_parse' in sys.modules); read_launch_file(sys.argv[2]); "
            "seen.append('dockerfile_parse' in sys.modules); print(seen)")
    out = subprocess.run([sys.executable, "-c", code, script, docker], capture_output=True, text=True, timeout=60,
                         check=True)
    assert out.stdout.split() == ["[False,", "False,", "True]"]


def test_a_multi_megabyte_env_line_is_refused_in_one_pass(tmp_path):
    # dockerfile-parse's own ENV splitter took minutes on this; the shell lexer refuses it in about a second
    path = tmp_path / "Dockerfile"
    path.write_text("FROM vllm/vllm-openai\nENV VLLM_USE_V1=1 " + " ".join(f'K{i}="v {i}"' for i in range(800_000))
                    + f'\nCMD ["{MODEL}"]\n')
    with pytest.raises(LaunchFileError, match="line 2: more than 50,000 shell words"):
        read_launch_file(str(path))


@pytest.mark.parametrize("name, text", [
    ("Dockerfile", "FROM vllm/vllm-openai\nCMD " + json.dumps([MODEL, *(["--enforce-eager"] * 60_000)]) + "\n"),
    ("compose.yaml", "services:\n  vllm:\n    image: vllm/vllm-openai\n    command: "
                     + json.dumps([MODEL, *(["--enforce-eager"] * 60_000)]) + "\n"),
])
def test_a_list_of_words_has_the_shell_lexers_bound(name, text, tmp_path):
    # an exec-form CMD or a YAML command list is not lexed, so it is bounded on its own (1M words took 30 s)
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LaunchFileError, match="more than 50,000 words in one command"):
        read_launch_file(str(path))


PIECES = ["FROM ", "vllm/vllm-openai:v0.9.2", "ENV ", "VLLM_USE_V1=1", "ENTRYPOINT ", "CMD ", "[", "]", '"', "'",
          ",", "\\", "`", "\n", " ", "# escape=`\n", "#", "vllm", "serve", MODEL, "--max-model-len", "8192", "$X",
          "${Y:-1}", "$(", ")", "sh", "-c", "=", "{", "}", ":", "- ", "command: ", "services:", "  ", "\t", "\r\n"]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["Dockerfile", "compose.yaml", "serve.sh"]),
       st.lists(st.sampled_from(PIECES), max_size=60).map("".join))
def test_any_launch_file_is_read_or_refused_with_one_message(name, text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8")
        try:
            got = read_launch_file(str(path))
        except LaunchFileError as exc:
            assert str(exc) and "\n" not in str(exc)
            return
    for launch in got.launches:
        assert launch.line >= 1 and all(isinstance(t, str) for t in launch.tokens)
