"""Reading launch files for `plan --from-file`: the shell lexer (shell.py); the rest is in launchfile.py."""
