"""The rule language: YAML signatures (the shipped ones are in the top-level rules/ folder, installed as
`diagnoser.ruleset`) loaded, checked, and run without ever running code.

- model.py: what a loaded rule is (`Rule`, `Pattern`, `Extractor`, `Fix`) and `RuleError` ("path: key: what to change").
- checks.py: a rule document checked part by part and built into a `Rule` (`parse_rule`).
- loader.py: rule files and folders read and loaded (the shipped rules once per process and trusted: the
  suite checks them with `checked_builtin_rules`; `--rules` packs fully checked).
- regexcheck.py: regex shapes that backtrack without end, refused at load.
- sandbox.py: the jinja2 sandbox that renders advice and evaluates `derive`/`when`, bounded in time and size.
- functions.py: the `fn.*` helpers templates call (pure functions over plain values).

A rule's inline cases are run through the pipeline by analysis/selftest.py (this package imports no analysis).
"""
