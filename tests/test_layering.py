"""The package's layering, read from the source with ``ast`` (nothing is imported).

Every ``import`` and ``from … import`` of ``flaxgraph/**/*.py`` counts, at module
level or inside a function (a lazy import still ties the layers together). An
import of a module reaches that module; ``from pkg import name`` reaches
``pkg.name`` when it is a module, else ``pkg``. Importing one's own parent
package is not an edge (Python runs the parent first anyway).

* No circle: no module reaches itself.
* Display sits above the core: only ``flaxgraph/visualization/show*.py`` and the package's
  ``__init__.py`` (which re-exports ``display``) import the display modules; the
  core reaches display code through ``flaxgraph/renderers.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "flaxgraph"


def _modules() -> dict[str, Path]:
    modules = {}
    for file in PACKAGE.rglob("*.py"):
        parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return modules


MODULES = _modules()


def _imported_names(module: str, file: Path) -> list[str]:
    """The dotted names ``module`` imports, relative imports resolved."""
    is_package = file.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                package = package if is_package else package[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return names


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, file in MODULES.items():
        for name in _imported_names(module, file):
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                edges[module].add(name)
    return edges


EDGES = _edges()


def _cycle_through(start: str) -> list[str] | None:
    """A shortest import path from ``start`` back to itself, if any (breadth-first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(EDGES[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in parents:
                    parents[target] = module
                    following.append(target)
        frontier = following
    return None


def _is_display(module: str) -> bool:
    return module == "flaxgraph.visualization" or module.startswith("flaxgraph.visualization.")


def test_the_walk_sees_the_package():
    # Guards against a walk that silently finds nothing (then every check passes).
    assert "flaxgraph.pytreelib.objects" in MODULES and "flaxgraph.visualization.show" in MODULES
    assert "flaxgraph.variablelib.variable" in EDGES["flaxgraph.pytreelib.objects"]
    assert "flaxgraph.graphlib.registry" in EDGES["flaxgraph.graphlib.walk"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_circle(module: str) -> None:
    cycle = _cycle_through(module)
    assert cycle is None, (
        f"{module} imports itself through " + " -> ".join(cycle) + ". Move the shared piece "
        "to the lower layer, or let the lower layer look it up in a registry the upper "
        "one fills (see flaxgraph/renderers.py)."
    )


def test_only_display_and_the_package_import_display():
    offenders = {
        module: sorted(t for t in targets if _is_display(t))
        for module, targets in EDGES.items()
        if module != "flaxgraph" and not _is_display(module)
    }
    offenders = {m: t for m, t in offenders.items() if t}
    assert not offenders, (
        f"Core modules import display modules: {offenders}. Display sits above the core: "
        "call RENDERERS (flaxgraph/renderers.py) instead; flaxgraph/visualization/show.py registers "
        "the renderers."
    )


def test_the_core_reaches_display_through_the_registry():
    for core in (
        "flaxgraph.pytreelib.objects",
        "flaxgraph.variablelib.variable",
        "flaxgraph.statelib",
    ):
        assert "flaxgraph.renderers" in EDGES[core]
    assert "flaxgraph.renderers" in EDGES["flaxgraph.graphlib.graphdefs"]
    assert "flaxgraph.renderers" in EDGES["flaxgraph.visualization.show"]


def test_a_lazy_import_inside_a_function_counts(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text(
        "def f():\n    from flaxgraph.visualization.show import display\n", encoding="utf-8"
    )
    assert "flaxgraph.visualization.show" in _imported_names("flaxgraph.m", file)


def test_relative_imports_resolve(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text("from . import registry\nfrom ..statelib import State\n", encoding="utf-8")
    names = _imported_names("flaxgraph.graphlib.m", file)
    assert "flaxgraph.graphlib.registry" in names and "flaxgraph.statelib" in names
