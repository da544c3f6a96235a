"""Loading rules: the shipped rules once per process, and rule files or folders given with `--rules`.

Each file is read as YAML and checked into a `Rule` (checks.py); ids must be unique across everything
loaded, and every `overrides` must name a loaded rule. Unreadable files and invalid YAML are `RuleError`s
too, naming the file and the line.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from diagnoser.rules.checks import parse_rule
from diagnoser.rules.model import Rule, RuleError


def load_rule_file(path: Path, trusted: bool = False) -> Rule:
    """Read and validate one rule file; unreadable or invalid YAML is a RuleError too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(str(path), "(file)", f"cannot read: {exc}") from None
    import yaml  # here, not at the top: a run with the cached rules never parses YAML

    from diagnoser import safeyaml

    try:
        data = safeyaml.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(yaml)"
        raise RuleError(str(path), where, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_rule(data, str(path), trusted)


def builtin_rules_dir() -> Path:
    """Rules ship inside the package (diagnoser.ruleset); a source checkout keeps them in ./rules."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "ruleset", package.parent / "rules"):
        if (candidate / "__init__.py").is_file():
            return candidate
    from importlib import resources  # an unusual install (zipped, or a finder without plain folders)

    try:
        pkg = resources.files("diagnoser.ruleset")
        if pkg.is_dir() and any(p.name.endswith(".yaml") for p in pkg.iterdir()):
            return Path(str(pkg))
    except (ModuleNotFoundError, TypeError):
        pass
    return package.parent / "rules"


def _rule_paths(extra: tuple[Path, ...]) -> list[Path]:
    paths: list[Path] = []
    for p in extra:
        paths.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return paths


def _add_rules(rules: dict[str, Rule], paths: list[Path], trusted: bool = False,
               shadowed: list[str] | None = None) -> None:
    """Load and fully validate each file into `rules` (by id); ids must be unique, overrides must exist.

    `trusted`: the shipped rules, whose regexes run without the per-match timeout rule packs get.
    `shadowed`: these files may replace a rule already in `rules` (a pack under test); its id is listed there."""
    added = []
    for p in paths:
        rule = load_rule_file(p, trusted=trusted)
        if rule.id in rules and Path(rules[rule.id].path).resolve() != p.resolve():
            if shadowed is None or any(r.id == rule.id for r in added):
                raise RuleError(str(p), "id", f"{rule.id!r} is already defined in {rules[rule.id].path}")
            shadowed.append(rule.id)
        rules[rule.id] = rule
        added.append(rule)
    for rule in added:
        for other in rule.overrides:
            if other not in rules:
                raise RuleError(rule.path, "overrides", f"{other!r} is not a rule id (`vllm-doctor rules` lists them)")


def load_rules(extra: tuple[Path, ...] = ()) -> list[Rule]:
    """Built-in rules plus any extra files or folders (always fully validated); ids must be unique."""
    rules = {r.id: r for r in builtin_rules()}
    _add_rules(rules, _rule_paths(extra))
    return list(rules.values())


def load_pack(pack: tuple[Path, ...], extra: tuple[Path, ...] = ()) -> tuple[list[Rule], list[str]]:
    """The rules a pack's cases run against (`rules --test`): the shipped rules and `extra`, with the pack's
    rules in place of those of the same id (so a copy of the shipped folder tests itself); and the ids the pack
    shadows."""
    rules = {r.id: r for r in load_rules(extra)}
    shadowed: list[str] = []
    _add_rules(rules, _rule_paths(pack), shadowed=shadowed)
    return list(rules.values()), shadowed


@lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    """The shipped rules, loaded once per process (their regexes run untimed: the suite checks each one)."""
    loaded: dict[str, Rule] = {}
    _add_rules(loaded, sorted(builtin_rules_dir().glob("*.yaml")), trusted=True)
    return tuple(loaded.values())
