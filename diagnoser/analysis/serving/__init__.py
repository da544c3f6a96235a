"""The serving phase over time: one series per engine from stats lines, access lines and /metrics scrapes.

- series.py: the windows (saturation, preemption, queue growth, collapse, error bursts) rules report.
- metrics.py: Prometheus `/metrics` text, one scrape or many, read into samples.
"""
