"""Built-in rules (YAML). A Python package only so that they ship inside the wheel."""
