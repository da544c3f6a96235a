"""The packages import downwards only: a layer never reaches up to one built on it.

    cli  ->  plan, compare, live, fleet, report, api  ->  analysis  ->  rules, ingest  ->  vllm  ->  errors, datafiles, lazyre

Every import counts, also one inside a function (it is still an arrow a reader must follow) and one under
TYPE_CHECKING. Each failure names the module, the line and the import.

Also the package's shape (issue 27): no module over 600 lines, at most 10 modules at its root. The complexity
bound (25 a function) is ruff's C901, set in pyproject.toml.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "diagnoser"

#: what the lower layers may import of the project (besides themselves)
MAY_IMPORT = {
    "vllm": {"errors", "datafiles", "lazyre"},
    "ingest": {"vllm", "errors", "datafiles", "lazyre"},
    "rules": {"vllm", "errors", "datafiles", "safeyaml", "lazyre"},
    "analysis": {"rules", "ingest", "vllm", "errors", "datafiles", "lazyre", "(package)"},
}
#: what the upper layers must not import
MUST_NOT_IMPORT = {
    "report": {"cli", "plan", "live", "fleet", "launch"},
    "compare": {"cli", "report", "plan", "live", "fleet"},
    "live": {"cli", "plan", "compare", "fleet"},
    "plan": {"cli", "live", "fleet"},
    "fleet": {"cli", "plan", "compare", "live"},
    "launch": {"cli", "analysis", "report", "plan", "compare", "live", "fleet"},
}


def _layer(dotted: str) -> str:
    """`diagnoser.analysis.serving.clock` -> analysis; `diagnoser.errors` -> errors; `diagnoser` -> (package)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "(package)"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports() -> list[tuple[str, int, str]]:
    """(module, line, imported module) for every import of the project inside diagnoser/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from diagnoser import datafiles` imports the module diagnoser.datafiles
                names = ([f"diagnoser.{a.name}" for a in node.names] if node.module == "diagnoser"
                         else [node.module])
            else:
                continue
            found.extend((module, node.lineno, n) for n in names if n == "diagnoser" or n.startswith("diagnoser."))
    return found


IMPORTS = imports()


def _is_package(dotted: str) -> bool:
    return (PACKAGE.parent / dotted.replace(".", "/")).is_dir()


def _target(name: str) -> str:
    """The layer an imported name lives in; `from diagnoser import __version__` is the package itself."""
    parts = name.split(".")
    if len(parts) == 2 and not _is_package(name) and not (PACKAGE / f"{parts[1]}.py").is_file():
        return "(package)"
    return _layer(name)


def test_the_walk_sees_the_imports():
    pairs = {(_layer(m), _target(n)) for m, _, n in IMPORTS}
    assert ("analysis", "rules") in pairs and ("cli", "report") in pairs and ("vllm", "datafiles") in pairs


def offending(found: list[tuple[str, int, str]], layer: str, allowed: set[str] | None = None,
              forbidden: set[str] = frozenset()) -> list[str]:
    """The imports of `layer`'s modules outside `allowed` (when given) or inside `forbidden`, one line each."""
    return [f"{m}:{line} imports {n}" for m, line, n in found if _layer(m) == layer and (
        (allowed is not None and _target(n) not in allowed | {layer}) or _target(n) in forbidden)]


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_a_lower_layer_imports_only_what_is_below_it(layer):
    bad = offending(IMPORTS, layer, allowed=MAY_IMPORT[layer])
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("layer", sorted(MUST_NOT_IMPORT))
def test_an_upper_layer_does_not_reach_sideways_or_up(layer):
    bad = offending(IMPORTS, layer, forbidden=MUST_NOT_IMPORT[layer])
    assert bad == [], "\n".join(bad)


def _imports_click(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "click" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "click":
            return True
    return False


def test_only_the_command_line_imports_the_command_line_and_click():
    bad = [f"{m}:{line} imports {n}" for m, line, n in IMPORTS
           if _target(n) == "cli" and _layer(m) not in ("cli", "entry")]
    assert bad == [], "\n".join(bad)
    clicks = [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.rglob("*.py"))
              if p.parent.name != "cli" and _imports_click(p)]
    assert clicks == []


def test_an_upward_import_is_named_with_its_module_and_line():
    planted = [("diagnoser.vllm.x", 3, "diagnoser.analysis.pipeline"), ("diagnoser.vllm.y", 4, "diagnoser.errors"),
               ("diagnoser.report.z", 5, "diagnoser.cli.main")]
    assert offending(planted, "vllm", allowed=MAY_IMPORT["vllm"]) == [
        "diagnoser.vllm.x:3 imports diagnoser.analysis.pipeline"]
    assert offending(planted, "report", forbidden=MUST_NOT_IMPORT["report"]) == [
        "diagnoser.report.z:5 imports diagnoser.cli.main"]


#: issue 27: a module a newcomer can read in one sitting, and a package root that stays a short list
MAX_MODULE_LINES = 600
MAX_TOP_LEVEL_MODULES = 10


def test_no_module_is_over_600_lines():
    sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted(PACKAGE.rglob("*.py"))}
    assert len(sizes) > 50  # the walk sees the package
    over = [f"{path}: {n} lines" for path, n in sizes.items() if n > MAX_MODULE_LINES]
    assert over == [], "split these (one job a module):\n" + "\n".join(over)


def test_the_package_root_holds_at_most_10_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "api.py" in top and len(top) <= MAX_TOP_LEVEL_MODULES, top
