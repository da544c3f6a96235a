"""Built-in rules (YAML), shipped as the package diagnoser.ruleset so that they travel inside the wheel."""
