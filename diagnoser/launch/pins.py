"""What a launch file pins for the planner: the `# vllm-doctor:` comment's settings, and the vLLM release an
image tag names (`vllm/vllm-openai:v0.8.5` -> 0.8.5)."""

from __future__ import annotations

import re
import shlex

from diagnoser.launch.shell import LaunchFileError
from diagnoser.lazyre import lazy
from diagnoser.vllm import versions

PIN_KEYS = ("gpu", "gpu-memory", "model", "vllm-version")
PIN_RE = lazy(r"(?:^|\s)#\s*vllm-doctor:\s*(.*?)\s*$")


def parse_pins(text: str) -> tuple[dict[str, str], bool]:
    """`# vllm-doctor: gpu=L4 model=llama-3.1-8b` lines -> ({'gpu': 'L4', 'model': ...}, skip?).

    A comment that names no setting (prose that mentions the tool) is not a pin; one that names a setting and
    something else is a mistake, reported with its line.
    """
    pins: dict[str, str] = {}
    skip = False
    for no, line in enumerate(text.splitlines(), 1):
        m = PIN_RE.search(line)
        if not m:
            continue
        body = m.group(1).replace(",", " ")
        try:
            items = shlex.split(body)
        except ValueError:
            items = body.split()
        keys = [it.partition("=")[0].strip().lower().replace("_", "-") for it in items]
        if not any(k in (*PIN_KEYS, "skip") for k in keys) and \
                not all(re.fullmatch(r"[\w-]+=\S+", it) for it in items):
            continue                  # prose, not a pin
        for item, key in zip(items, keys, strict=True):
            _, eq, value = item.partition("=")
            if key == "skip" and not eq:
                skip = True
                continue
            if key not in PIN_KEYS or not eq or not value.strip():
                raise LaunchFileError(
                    f"line {no}: {item!r} in the vllm-doctor comment is not a setting; write "
                    "'# vllm-doctor: gpu=L4' (also gpu-memory=24GiB, model=NAME, vllm-version=X.Y.Z, skip)")
            pins[key] = value.strip()
    return pins, skip


def vllm_image(image: str) -> bool:
    """An image that runs vLLM (vllm/vllm-openai, a registry mirror of it, a team's my-vllm image)."""
    return "vllm" in image.rsplit("/", 1)[-1].lower() or image.lower().startswith("vllm/")


def image_version(image: str) -> str | None:
    """The release a vLLM image's tag names: 'vllm/vllm-openai:v0.8.5' -> '0.8.5'; None for latest or a digest.

    >>> image_version("vllm/vllm-openai:v0.8.5"), image_version("vllm/vllm-openai:latest")
    ('0.8.5', None)
    """
    named = (image or "").split("@", 1)[0]
    last = named.rsplit("/", 1)[-1]
    if ":" not in last or not vllm_image(named.rsplit(":", 1)[0]):
        return None
    ref = versions.parse_image_tag(last.rsplit(":", 1)[1])
    if ref is None:
        return None
    # the release as vLLM prints it (v0.10.1.1 -> 0.10.1.1); a build variant after a dash (-cu128) is not part of it
    text = ref.text[1:] if ref.text[:1] in "vV" else ref.text
    return text.split("-", 1)[0] if ref.local and "-" in text else text
