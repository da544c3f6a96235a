"""`python -m diagnoser` is the same command as `vllm-doctor`."""

from .cli import run

if __name__ == "__main__":
    run()
