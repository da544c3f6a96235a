"""The console script's entry point: imports nothing heavy, so even a broken install exits 2, never 0 or 1."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import run
    except Exception as exc:  # noqa: BLE001 - a broken install must not look like a diagnosis (exit 1)
        print(f"vllm-doctor: internal error: cannot load the tool ({type(exc).__name__}: {exc}); "
              "reinstall the package", file=sys.stderr)
        sys.exit(2)
    run()
