"""`python -m diagnoser` is the same command as `vllm-doctor`."""

from diagnoser.entry import main as run

if __name__ == "__main__":
    run()
