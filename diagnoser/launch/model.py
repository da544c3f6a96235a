"""What the launch-file readers produce: one `Launch` per vLLM command found, gathered in a `LaunchFile`."""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnoser.launch.pins import image_version
from diagnoser.launch.shell import MAX_WORDS, Word, too_many_words
from diagnoser.lazyre import lazy

#: A word the shell (or compose, or Kubernetes) would expand: its value is unknown here.
DYNAMIC_RE = lazy(r"\$[\w{(@*#?!$-]|`")


def literal_word(text: str, line: int) -> Word:
    """A word given literally (a YAML or JSON list item): no shell reads it, but `$VAR` still marks it unknown."""
    return Word(text, line, text, bool(DYNAMIC_RE.search(text)))


def literal_words(texts: list[str], line: int) -> list[Word]:
    """An exec-form or YAML list of words, with the shell lexer's bound on how many a launch may hold."""
    if len(texts) > MAX_WORDS:
        raise too_many_words(line, "words in one command")
    return [literal_word(t, line) for t in texts]


def literal_env(env: dict[str, str]) -> dict[str, str]:
    """The variables whose values are known (no `$VAR` in them)."""
    return {k: v for k, v in env.items() if not DYNAMIC_RE.search(v)}


@dataclass
class Launch:
    """One vLLM launch found in a file: the command line for the planner's parser, and what to tell."""

    line: int
    kind: str                      # a KINDS name (shell, vllm-config, dockerfile, ...), or compose / kubernetes
    tokens: list[str]              # ['VAR=1', 'vllm', 'serve', 'MODEL', '--flag', 'value', ...]
    notes: list[str] = field(default_factory=list)
    image: str = ""                # the container image that runs it, when the file names one

    @property
    def image_version(self) -> str | None:
        """'0.8.5' for vllm/vllm-openai:v0.8.5 (a vLLM image with a release tag), else None."""
        return image_version(self.image)


@dataclass
class LaunchFile:
    path: str
    launches: list[Launch]
    pins: dict[str, str] = field(default_factory=dict)
    skip_reason: str | None = None   # set when the file holds no launch or asks to be skipped


def with_image(launches: list[Launch], image: str) -> list[Launch]:
    """Launches found inside a container (a `sh -c` script): the container's image runs them."""
    for launch in launches:
        launch.image = launch.image or image
    return launches
