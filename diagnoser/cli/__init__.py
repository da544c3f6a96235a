"""The command line, and the only part of the doctor that knows click.

- main.py: the `vllm-doctor` group (its default command `diagnose`), `rules`, `explain`, `check`, `plan`,
  `compare`, `run`; it maps the project's exceptions (errors.py) to exit code 2.
- scan.py: `vllm-doctor scan PATH...`, over fleet/.
"""
