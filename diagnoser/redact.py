"""Redact secrets when reading, before matching: no finding, fact, excerpt or format can then carry one.

Each secret becomes a typed marker (`«redacted:hf_token»`) and is counted, so a report says how many were
removed without saying what they were.
"""

from __future__ import annotations

import re
from collections import Counter

MARK = "«redacted:{kind}»"

#: (kind, pattern, group holding the secret or 0 for the whole match). Order matters: specific first.
PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("hf_token", re.compile(r"\b(hf_[A-Za-z0-9]{20,})\b"), 1),
    ("hf_token", re.compile(r"\b(api_org_[A-Za-z0-9]{20,})\b"), 1),
    ("api_key", re.compile(r"\b(sk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{16,})\b"), 1),
    ("bearer", re.compile(r"(?i)\b(?:Authorization:\s*)?Bearer\s+([A-Za-z0-9._~+/=-]{8,})"), 1),
    ("api_key", re.compile(r"(?i)(?<![\w-])--api[-_]key(?:=|\s+)(?!«)(['\"]?)([^\s'\"]+)\1"), 2),
    ("env_secret", re.compile(
        r"\b(?:HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN|VLLM_API_KEY|OPENAI_API_KEY|"
        r"AWS_SECRET_ACCESS_KEY|AWS_SESSION_TOKEN|WANDB_API_KEY)\s*[=:]\s*(?!«)(['\"]?)([^\s'\",}]+)\1"), 2),
    ("api_key", re.compile(
        r"(?i)(['\"]?\b(?:api_key|hf_token|token|secret|password|access_token|auth_token)\b['\"]?\s*[=:]\s*)"
        r"(?!None\b|null\b|False\b|True\b|«)(['\"])([^'\"]{3,})\2"), 3),
    ("api_key", re.compile(
        r"(?i)(\b(?:api_key|hf_token)\b\s*=\s*)(?!None\b|null\b|«)([^\s,)'\"]{3,})"), 2),
    ("url_password", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)"), 2),
)


class Redactor:
    """Callable text filter that counts what it removed, by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        if not _maybe_secret(text):
            return text
        for kind, pattern, group in PATTERNS:
            text = pattern.sub(lambda m, k=kind, g=group: self._replace(m, k, g), text)
        return text

    def _replace(self, m: re.Match[str], kind: str, group: int) -> str:
        self.counts[kind] += 1
        start, end = m.span(group)
        whole_start = m.start()
        return m.group(0)[: start - whole_start] + MARK.format(kind=kind) + m.group(0)[end - whole_start:]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


_HINTS = ("hf_", "api_", "sk-", "bearer", "token", "key", "secret", "password", "://")


def _maybe_secret(text: str) -> bool:
    """Cheap pre-check so the common line pays one lower() and a few `in` tests."""
    low = text.lower()
    return any(h in low for h in _HINTS)
