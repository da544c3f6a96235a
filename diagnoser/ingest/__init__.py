"""Ingest: bytes in, clean lines out (the first layer; it knows nothing of rules or findings).

In the order data flows:
- sources.py: a file (compressed or not), stdin or text opened as one byte stream.
- reader.py: the stream cut into blocks of whole lines (an enormous line in pieces), each line given its number.
- wrappers.py: the wrappers log shippers put around vLLM's lines (Docker JSON, CRI, journald, kubectl,
  Loki, chat quoting), decoded back to what vLLM printed.
- unwrap.py: hard-wrapped pastes (a terminal's or chat window's cuts) joined again.
- prefilter.py: which lines of a block hold a keyword any rule, landmark or stats line needs (hyperscan
  when installed, one regex otherwise); keywords.py: the keyword indexes and engines under it.
- request_lines.py: request-logger and access lines, found in raw blocks and skipped.
- selection.py: which lines of a block are decoded (keyword lines, the lines after each, wrapped pieces).
- clean.py: one physical line decoded and cleaned (ANSI, control characters, `\r` frames, flattened pastes).
- line.py: the `Line` record, and the prefixes stripped from it (process, pid, rank, level, time).
- dense.py: keyword-dense logs (stats lines every second) decided once per line shape.
- redact.py: secrets replaced before anything else sees a line (the Redactor); redact_patterns.py: what a
  secret looks like; redact_hints.py: where one can be (hints, and where to try a pattern in a long text);
  redact_structured.py: a Python value or a line of JSON output redacted string by string.
"""
