"""Analysis: clean lines in, findings out.

- pipeline.py: the one streaming pass (read -> track -> match -> advise) and the `Report` it returns.
- tracker.py: where the start-up is (its stage) and what the log said about itself (release, model, flags).
- matcher.py: the rules against each line, step by step (keyword gate, stage gate, match, facts, when): hits.
  - window.py: the lines a wrap cut one message onto, joined back.
  - phrase.py: a rule's phrase matched fuzzily on a line.
  - extract.py: regex groups on a line or its window -> typed facts.
  - expressions.py: the rules' `when`/`derive` expressions evaluated over facts.
  - hits.py: a `Hit` (one rule at one place), and the hits that another on the same line shadows.
  - fold.py: an aggregate rule's repeated hits folded into one finding's figures, in constant memory.
- advise.py: hits -> ranked findings, each with its advice and fixes computed from the numbers.
- serving/: the serving phase over time (stats lines, access lines, /metrics scrapes).
- selftest.py: a rule's inline cases (`cases.match`, `cases.near_miss`) run through the pipeline.
- contract.py: a Report as the JSON contract (schema_version 1) every machine-readable format is built from.
"""
