"""`vllm-doctor rules` (the rules, or with --test a rule pack's cases run) and `vllm-doctor explain ID` (a
rule's page, or `compare`'s, `scan`'s, `plan`'s help).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from diagnoser.cli.files import rules_with

if TYPE_CHECKING:
    from diagnoser.rules.loader import Rule


@click.command("rules")
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
@click.option("--test", "test_paths", multiple=True, type=click.Path(exists=True),
              help="Run the cases of the rules in this file or folder (repeatable): exit 1 if one fails.")
def rules_cmd(fmt: str, rule_paths: tuple[str, ...], test_paths: tuple[str, ...]) -> None:
    """List the rules: id, severity, stage, title (or, with --test, run a rule pack's cases)."""
    if test_paths:
        sys.exit(_test_rules(_pack_rules(rule_paths, test_paths), test_paths))
    rules = sorted(rules_with(rule_paths), key=lambda r: r.id)
    if fmt == "json":
        import json

        click.echo(json.dumps([{"id": r.id, "severity": r.severity, "stage": r.stage, "title": r.title}
                               for r in rules], indent=2))
        return
    width = max(len(r.id) for r in rules)
    for r in rules:
        click.echo(f"{r.id:<{width}}  {r.severity:<7}  {(r.stage or 'any'):<7}  {r.title}")


def _pack_rules(rule_paths: tuple[str, ...], test_paths: tuple[str, ...]) -> list[Rule]:
    """The rules a pack's cases run against: the pack's own in place of shipped ones of the same id (a copy of
    the shipped folder, or a fork of one rule, tests itself), with a note naming what it shadows."""
    from diagnoser.rules.loader import RuleError, load_pack

    try:
        rules, shadowed = load_pack(tuple(Path(p) for p in test_paths), tuple(Path(p) for p in rule_paths))
    except RuleError as exc:
        raise click.UsageError(str(exc)) from None
    if shadowed:
        named = ", ".join(shadowed[:5]) + (f" and {len(shadowed) - 5} more" if len(shadowed) > 5 else "")
        click.echo(f"vllm-doctor: note: the pack's rules shadow {len(shadowed)} shipped rule(s) of the same id "
                   f"while testing: {named}", err=True)
    return sorted(rules, key=lambda r: r.id)


def _test_rules(rules: list[Rule], test_paths: tuple[str, ...]) -> int:
    """`rules --test`: one line per case (ok / FAIL and why), a summary, exit 1 when any case fails."""
    from diagnoser.analysis.selftest import case_results

    wanted = {str(q.resolve()) for p in test_paths
              for q in (sorted(Path(p).glob("*.yaml")) if Path(p).is_dir() else [Path(p)])}
    passed = failed = 0
    for rule in rules:
        if str(Path(rule.path).resolve()) not in wanted:
            continue
        for name, failure in case_results(rule, rules):
            if failure:
                failed += 1
                click.echo(f"FAIL  {rule.id}: {name}")
                for msg in failure.splitlines():
                    click.echo(f"      {msg}")
            else:
                passed += 1
                click.echo(f"ok    {rule.id}: {name}")
    click.echo(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


@click.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
def explain_cmd(rule_id: str, rule_paths: tuple[str, ...]) -> None:
    """Print a rule's page: what it means, why it happens, how the fix is computed (or `compare`'s, `scan`'s,
    `plan`'s)."""
    rules = {r.id: r for r in rules_with(rule_paths)}
    rule = rules.get(rule_id) or rules.get(rule_id.strip().lower())
    command = click.get_current_context().find_root().command
    if rule is None and rule_id in ("compare", "scan", "plan") and isinstance(command, click.Group):
        # a command's page: its help (what it reads, prints, and its exit codes)
        sub = command.get_command(click.get_current_context(), rule_id)
        if sub is not None:
            with click.Context(sub, info_name=f"vllm-doctor {rule_id}") as ctx:
                click.echo(sub.get_help(ctx))
            return
    if rule is None:
        from rapidfuzz import process

        wanted = rule_id.strip().lower()
        close = [r for r in rules if wanted in r] or [
            g[0] for g in process.extract(wanted, list(rules), limit=4, score_cutoff=60)]
        hint = f" Did you mean {', '.join(repr(c) for c in close[:6])}?" if close else ""
        raise click.UsageError(f"unknown rule {rule_id!r}.{hint} `vllm-doctor rules` lists them.")
    click.echo(f"{rule.id}  ({rule.severity}, stage: {rule.stage or 'from the log'})")
    click.echo(rule.title)
    click.echo("")
    import textwrap  # only `rules explain` needs it

    click.echo(textwrap.dedent(rule.explanation).strip())
    phrases = [p.phrase for p in rule.patterns if p.phrase]
    if phrases:
        click.echo("\nRecognised messages (fuzzy-matched, so rewordings still count):")
        for ph in phrases:
            click.echo(f"  - {ph}")
    if rule.fixes:
        click.echo("\nFixes it can compute:")
        for fx in rule.fixes:
            click.echo(f"  - {fx.flag or fx.env}")
    if rule.references:
        click.echo("\nReferences:")
        for ref in rule.references:
            click.echo(f"  - {ref}")
