"""The serving phase over time: one series per engine from stats lines, access lines and /metrics scrapes.

- series.py: `Series`, fed lines and raw blocks; the windows rules report, and the JSON's `series`.
- track.py: one engine's series (buckets, detectors, totals).
- stats_lines.py: vLLM's stats lines read (a plan per line shape) and access lines counted per interval.
- clock.py: the log's own clock (vLLM's year-less header time, or a shipper's ISO time).
- detectors.py: points, and the windows found on them (saturation, queue growth, collapse, error bursts).
- buckets.py: the downsampled points kept for charts.
- spill.py: closed windows in bounded memory (the rest spilled to a temporary file).
- facts.py: what a rule's `series:` entry sees of a window.
- metrics.py: Prometheus `/metrics` text, one scrape or many, read into samples.
"""
