"""The command line, and the only part of the doctor that knows click.

- main.py: the `vllm-doctor` group, its table of commands (each imported when it is the command) and the
  entry point that maps the project's exceptions (errors.py) to exit code 2;
- diagnose.py: `diagnose` (the default command) and `check`, once or live, and their report;
- run.py: `run -- CMD`, a command's output diagnosed live;
- rules.py: `rules` and `explain`;
- compare.py: `compare`; plan.py: `plan`; scan.py: `scan PATH...`, over fleet/;
- files.py: what they read and write (logs or stdin, rule packs, -o).
"""
