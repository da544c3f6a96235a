"""The demo rule the rule-loading, self-check and attack tests start from (one text, mutated per test)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

#: The advice of the demo rule unless a test gives its own.
DEMO_ADVICE = "{% if count is known %}{{ count | tokens }} sparks{% endif %}"


def demo_rule(rule_id: str = "demo-rule", advice: str = DEMO_ADVICE, **extra: str) -> str:
    """A valid rule file matching "the demo engine exploded loudly with N sparks", with one named match case
    and one named near-miss; `extra` adds top-level YAML keys (key: value, the value as YAML text)."""
    text = textwrap.dedent(f"""\
        id: {rule_id}
        title: Demo
        severity: error
        stage: startup
        match:
          - phrase: "the demo engine exploded loudly"
        extract:
          - 'exploded loudly with (?P<count>\\d+) sparks'
        facts:
          count: int
        advice: {json.dumps(advice)}
        explanation: Demo.
        cases:
          match:
            - name: three sparks
              text: "the demo engine exploded loudly with 3 sparks"
              facts: {{count: 3}}
              line: 1
          near_miss:
            - name: a quiet engine
              text: "the demo engine is fine"
        """)
    for key, value in extra.items():
        text += f"{key}: {value}\n"
    return text


def write_rule(folder: Path, text: str, name: str = "demo-rule.yaml") -> Path:
    """`text` as the rule file `name` in `folder`."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path
