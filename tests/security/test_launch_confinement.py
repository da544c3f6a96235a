"""A launch file cannot make `plan` read other files: `--config` resolves only inside the launch file's own
folder tree (no absolute path, no `..` out of it, no `~`, no symlink out), and a config's unknown keys are
named, never echoed with their values (issue 29, item 1).

The attacker writes serve.sh in a pull request; the pre-commit hook runs `plan --from-file` on it in the
victim's checkout, where ~/.docker/config.json and ~/.kube/config hold credentials.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: what the victim's credential files hold: none of it may reach an output
DOCKER_AUTH = "dXNlcjpzM2NyM3RQYXNzd29yZA=="
KUBE_KEY = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFcEFJQkFBS0NBUUVB"
SECRETS = (DOCKER_AUTH, KUBE_KEY, "registry.corp.example", "prod-cluster", "plaintextpw7")


def victim(tmp_path: Path) -> tuple[Path, Path]:
    """A home with credentials, and a checkout (repo/deploy) beside it: (home, deploy folder)."""
    home = tmp_path / "home" / "u"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(json.dumps(
        {"auths": {"registry.corp.example": {"auth": DOCKER_AUTH}}, "credsStore": "plaintextpw7"}))
    (home / ".kube").mkdir()
    (home / ".kube" / "config").write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: prod-cluster\n  cluster: {server: https://k8s.corp}\n"
        f"users:\n- name: admin\n  user:\n    client-key-data: {KUBE_KEY}\n")
    # a flat YAML mapping of vLLM flag names (what is_vllm_config accepts), with a credential among them
    (home / "secrets.yaml").write_text(f"max_model_len: 4096\nmax_num_seqs: 8\nregistry_auth: {DOCKER_AUTH}\n")
    deploy = tmp_path / "repo" / "deploy"
    deploy.mkdir(parents=True)
    return home, deploy


def plan(doctor, launch: Path, home: Path, fmt: str) -> tuple[int, str]:
    env_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)  # `~` in the launch file is the victim's home
    try:
        res = doctor("plan", "--gpu", "L4", "--format", fmt, "--from-file", str(launch), cwd=launch.parent)
    finally:
        if env_home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = env_home
    return res.returncode, res.stdout + res.stderr


def outside_references(home: Path, deploy: Path) -> dict[str, str]:
    """--config spellings that leave the launch file's folder tree -> what they point at."""
    (deploy / "link.yaml").symlink_to(home / "secrets.yaml")
    (deploy / "sub").mkdir()
    (deploy / "sub" / "up").symlink_to(home)
    rel = os.path.relpath(home / ".docker" / "config.json", deploy)
    return {
        "dot-dot": rel,
        "dot-dot-yaml": os.path.relpath(home / "secrets.yaml", deploy),
        "absolute": str(home / ".docker" / "config.json"),
        "absolute-yaml": str(home / "secrets.yaml"),
        "tilde": "~/.kube/config",
        "tilde-yaml": "~/secrets.yaml",
        "symlink-file": "link.yaml",
        "symlink-folder": "sub/up/secrets.yaml",
        "inside-then-out": "sub/../../../home/u/secrets.yaml",
        "quoted-equals": f"'{home / 'secrets.yaml'}'",
    }


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("how", ["dot-dot", "dot-dot-yaml", "absolute", "absolute-yaml", "tilde", "tilde-yaml",
                                 "symlink-file", "symlink-folder", "inside-then-out", "quoted-equals"])
def test_config_outside_the_launch_files_folder_is_never_read(tmp_path, doctor, how, fmt):
    home, deploy = victim(tmp_path)
    ref = outside_references(home, deploy)[how]
    launch = deploy / "serve.sh"
    flag = f"--config={ref}" if how == "quoted-equals" else f"--config {ref}"
    launch.write_text(f"#!/bin/sh\nexec vllm serve {MODEL} --max-model-len 8192 {flag}\n")
    code, out = plan(doctor, launch, home, fmt)
    assert code in (0, 1), out
    for secret in SECRETS:
        assert secret not in out, (how, secret, out)
    assert "auths" not in out and "registry_auth" not in out and "client-key-data" not in out, out
    # the plan says it did not read it, and plans the command line as written (its --max-model-len)
    assert "outside" in out, out
    assert "8192" in out or "8,192" in out, out


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_config_inside_the_tree_still_counts_and_its_unknown_keys_are_named_without_values(tmp_path, doctor,
                                                                                              fmt):
    home, deploy = victim(tmp_path)
    (deploy / "conf").mkdir()
    (deploy / "conf" / "vllm.yaml").write_text(
        "max_model_len: 6144\ngpu_memory_utilization: 0.85\n"
        f"registry_auth: {DOCKER_AUTH}\nextra_headers: {{Authorization: plaintextpw7}}\n")
    launch = deploy / "serve.sh"
    launch.write_text(f"vllm serve {MODEL} --config conf/vllm.yaml\n")
    code, out = plan(doctor, launch, home, fmt)
    assert code in (0, 1), out
    assert DOCKER_AUTH not in out and "plaintextpw7" not in out, out
    # vLLM refuses the unknown keys: the plan says so, naming them
    assert "registry-auth" in out or "registry_auth" in out, out
    assert "extra-headers" in out or "extra_headers" in out, out
    if fmt == "json":
        doc = json.loads(out[: out.rindex("]") + 1])
        assert doc[0]["starts"] is False and doc[0]["stage"] == "cli"


def test_a_config_inside_the_tree_is_merged(tmp_path, doctor):
    home, deploy = victim(tmp_path)
    (deploy / "vllm.yaml").write_text("max_model_len: 6144\ngpu_memory_utilization: 0.85\n")
    launch = deploy / "serve.sh"
    launch.write_text(f"vllm serve {MODEL} --config ./vllm.yaml\n")
    code, out = plan(doctor, launch, home, "json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc[0]["starts"] is True, doc
    assert "--max-model-len 6144" in doc[0]["command"] and "0.85" in doc[0]["command"], doc[0]["command"]
