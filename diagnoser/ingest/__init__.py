"""Ingest: bytes in, clean lines out (the first layer; it knows nothing of rules or findings).

In the order data flows:
- sources.py: a file (compressed or not), stdin or text opened as one byte stream.
- wrappers.py: the wrappers log shippers put around vLLM's lines (Docker JSON, CRI, journald, kubectl,
  Loki, chat quoting), decoded back to what vLLM printed.
- reader.py: the stream cut into lines, hard-wrapped pastes joined, each line given its number; only lines
  that can matter are decoded (the prefilter below).
- keywords.py: the prefilter: which lines hold a keyword any rule, landmark or stats line needs (hyperscan
  when installed, one regex otherwise).
- dense.py: keyword-dense logs (stats lines every second) decided once per line shape.
- redact.py: secrets replaced before anything else sees a line.
"""
