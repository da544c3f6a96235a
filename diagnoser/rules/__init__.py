"""The rule language: YAML signatures (the shipped ones are in the top-level rules/ folder, installed as
`diagnoser.ruleset`) loaded, checked, and run without ever running code.

- loader.py: a rule file validated into a `Rule` (`RuleError` says "path: key: what to change").
- regexcheck.py: regex shapes that backtrack without end, refused at load.
- sandbox.py: the jinja2 sandbox that renders advice and evaluates `derive`/`when`, bounded in time and size.
- functions.py: the `fn.*` helpers templates call (pure functions over plain values).
- selftest.py: a rule's inline cases (`cases.match`, `cases.near_miss`) run against the rule.
"""
