"""Analysis: clean lines in, findings out.

- pipeline.py: the one streaming pass (read -> track -> match -> advise) and the `Report` it returns.
- tracker.py: where the start-up is (its stage) and what the log said about itself (release, model, flags).
- matcher.py: the rules against each line: hits with typed facts.
- advise.py: hits -> ranked findings, each with its advice and fixes computed from the numbers.
- serving/: the serving phase over time (stats lines, access lines, /metrics scrapes).
"""
