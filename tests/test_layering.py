"""The package's layering, read from the source with ``ast`` (nothing is imported).

Every ``import`` and ``from … import`` of ``flaxgraph/**/*.py`` counts, at module
level or inside a function (a lazy import still ties the layers together). An
import of a module reaches that module; ``from pkg import name`` reaches
``pkg.name`` when it is a module, else ``pkg``. Importing one's own parent
package is not an edge (Python runs the parent first anyway).

* The layer order: ``docs/design.md`` ("Layers") lists the package's modules and
  sub-packages in numbered layers, and the README's "Layout" chain states the same
  layers; each module imports only from its own layer and the layers before it. Every
  module of the package belongs to a layer, and every listed name exists.
* No circle: no module reaches itself.
* Flax's surface is the top layer: no module but the package root, ``run`` and
  ``pytest_plugin`` imports ``flaxgraph/flax_surface/``.
* Display sits above the core: only ``flaxgraph/visualization/show*.py`` and the package's
  ``__init__.py`` (which re-exports ``display``) import the display modules; the
  core reaches display code through ``flaxgraph/renderers.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flaxgraph"


def _modules() -> dict[str, Path]:
    modules = {}
    for file in PACKAGE.rglob("*.py"):
        parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return modules


MODULES = _modules()


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks (imports for type
    annotations only, which never run)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and (
            (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
        ):
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def _imported_names(module: str, file: Path, runtime_only: bool = False) -> list[str]:
    """The dotted names ``module`` imports, relative imports resolved (without the
    type-only imports under ``if TYPE_CHECKING:`` if ``runtime_only``)."""
    is_package = file.name == "__init__.py"
    names = []
    tree = ast.parse(file.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


def _edges(runtime_only: bool = False) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, file in MODULES.items():
        for name in _imported_names(module, file, runtime_only):
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                edges[module].add(name)
    return edges


EDGES = _edges()
# A circle of imports is one that runs: a type-only import back (``if TYPE_CHECKING:``,
# e.g. a module annotated with the type of the module that calls it) is no circle.
RUNTIME_EDGES = _edges(runtime_only=True)


def _cycle_through(start: str) -> list[str] | None:
    """A shortest import path from ``start`` back to itself, if any (breadth-first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(RUNTIME_EDGES[module]):
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


def _between_markers(text: str, source: str) -> str:
    start = text.find("<!-- layers")
    end = text.find("<!-- end of layers -->", start)
    assert start >= 0 and end >= 0, (
        f"{source} has no layer list between '<!-- layers' and '<!-- end of layers -->'."
    )
    return text[text.index("-->", start) + 3 : end]


def _names(text: str) -> list[str]:
    """The backquoted module or package names of ``text`` (``graphlib/`` -> ``graphlib``)."""
    return [n.rstrip("/") for n in re.findall(r"`([a-z_]+/?)`", text)]


def _design_layers() -> list[list[str]]:
    """The numbered layers of docs/design.md, each a list of names."""
    text = _between_markers(
        (ROOT / "docs" / "design.md").read_text(encoding="utf-8"), "docs/design.md"
    )
    return [_names(line) for line in text.splitlines() if re.match(r"\s*\d+\.\s", line)]


def _readme_layers() -> list[list[str]]:
    """The README's layer chain: names separated by arrows."""
    text = _between_markers((ROOT / "README.md").read_text(encoding="utf-8"), "README.md")
    return [_names(part) for part in text.split("→")]


LAYERS = _design_layers()
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _unit(module: str) -> str | None:
    """The layer entry a module belongs to: its top-level module or sub-package name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _is_display(module: str) -> bool:
    return module == "flaxgraph.visualization" or module.startswith("flaxgraph.visualization.")


def test_the_walk_sees_the_package():
    # Guards against a walk that silently finds nothing (then every check passes).
    assert "flaxgraph.pytreelib.objects" in MODULES and "flaxgraph.visualization.show" in MODULES
    assert "flaxgraph.graphlib.registry" in EDGES["flaxgraph.pytreelib.objects"]
    assert "flaxgraph.graphlib.registry" in EDGES["flaxgraph.graphlib.walk"]


def test_the_design_and_the_readme_state_the_same_layers():
    assert len(LAYERS) > 5 and all(LAYERS), LAYERS
    assert _readme_layers() == LAYERS, (
        "README.md's layer chain (section 'Layout') and docs/design.md's numbered layers "
        f"differ:\n  README: {_readme_layers()}\n  design: {LAYERS}\nState the same layers in both."
    )


def test_every_module_has_a_layer_and_every_layer_name_exists():
    units = {_unit(m) for m in MODULES} - {None}
    listed = [name for layer in LAYERS for name in layer]
    assert len(listed) == len(set(listed)), f"A name is listed in two layers: {listed}"
    missing, stale = sorted(units - set(listed)), sorted(set(listed) - units)
    assert not missing, (
        f"flaxgraph modules with no layer: {missing}. Add each to the layer of "
        "docs/design.md ('Layers') and README.md ('Layout') it belongs to."
    )
    assert not stale, (
        f"docs/design.md lists names that are not in flaxgraph/: {stale}. Remove or rename "
        "them there and in README.md."
    )


def _later_imports(module: str, targets: set[str]) -> dict[str, str | None]:
    """The targets of ``module``'s imports that sit in a later layer (or are the root)."""
    layer = LAYER_OF[_unit(module)]
    return {
        target: _unit(target)
        for target in sorted(targets)
        if _unit(target) is None or LAYER_OF.get(_unit(target), -1) > layer
    }


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _unit(m)))
def test_imports_follow_the_layer_order(module: str) -> None:
    unit = _unit(module)
    if unit not in LAYER_OF:
        pytest.skip(f"{unit} has no layer (reported by the test above)")
    later = _later_imports(module, EDGES[module])
    assert not later, (
        f"{module} (layer {LAYER_OF[unit] + 1} of docs/design.md) imports "
        + ", ".join(
            f"{t} (" + (f"layer {LAYER_OF[u] + 1}" if u in LAYER_OF else "the package root") + ")"
            for t, u in later.items()
        )
        + ", which come later. Import from earlier layers only: move the shared piece down, "
        "or let the lower layer look it up in a registry the upper one fills (see "
        "flaxgraph/renderers.py)."
    )


def test_a_later_layer_import_is_reported() -> None:
    # Guards the check itself: the engine importing the object model goes the wrong way,
    # the same layer and earlier layers are fine, the package root is always later.
    targets = {
        "flaxgraph.pytreelib.objects",
        "flaxgraph.statelib",
        "flaxgraph",
        "flaxgraph.graphlib.walk",
    }
    assert _later_imports("flaxgraph.graphlib.build", targets) == {
        "flaxgraph": None,
        "flaxgraph.pytreelib.objects": "pytreelib",
    }


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


ENGINE = ("graphlib", "statelib", "variablelib", "transforms", "pytreelib")
SURFACE_USERS = {"flaxgraph", "flaxgraph.run", "flaxgraph.pytest_plugin"}


def _is_surface(module: str) -> bool:
    return module == "flaxgraph.flax_surface" or module.startswith("flaxgraph.flax_surface.")


def test_no_module_below_flax_s_surface_imports_it():
    # Flax's module map sits on top: the engine and everything else define flaxgraph's own
    # concepts and never reach Flax's records, node protocol or stand-ins.
    offenders = {
        module: sorted(t for t in targets if _is_surface(t))
        for module, targets in EDGES.items()
        if module not in SURFACE_USERS and not _is_surface(module)
    }
    offenders = {m: t for m, t in offenders.items() if t}
    assert not offenders, (
        f"Modules below flax_surface import it: {offenders}. Flax's names with no "
        "counterpart in flaxgraph's design belong in flaxgraph/flax_surface/table.py."
    )
    engine = [m for m in MODULES if _unit(m) in ENGINE]
    assert len(engine) > 50 and all(LAYER_OF[_unit(m)] < LAYER_OF["flax_surface"] for m in engine)
    assert LAYER_OF["flax_surface"] == len(LAYERS) - 1, "flax_surface is the top layer"


def test_the_core_reaches_display_through_the_registry():
    for core in (
        "flaxgraph.pytreelib.objects",
        "flaxgraph.variablelib.variable",
        "flaxgraph.statelib.state",
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


def test_a_type_checking_import_is_no_circle_but_still_an_import(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text(
        "from typing import TYPE_CHECKING\nimport flaxgraph.errors\n"
        "if TYPE_CHECKING:\n    from flaxgraph.transforms.fastpath import Plan\n",
        encoding="utf-8",
    )
    assert "flaxgraph.transforms.fastpath.Plan" in _imported_names("flaxgraph.m", file)
    runtime = _imported_names("flaxgraph.m", file, runtime_only=True)
    assert "flaxgraph.errors" in runtime
    assert "flaxgraph.transforms.fastpath.Plan" not in runtime


def test_relative_imports_resolve(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text("from . import registry\nfrom ..statelib import State\n", encoding="utf-8")
    names = _imported_names("flaxgraph.graphlib.m", file)
    assert "flaxgraph.graphlib.registry" in names and "flaxgraph.statelib" in names


def _private_imports() -> list[str]:
    """``module: from other import _name`` for every import of another module's
    ``_underscore`` name (an ``as _alias`` of a public name is fine)."""
    found = []
    for module, file in MODULES.items():
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flaxgraph"):
                for alias in node.names:
                    name = alias.name
                    if name.startswith("_") and not name.startswith("__"):
                        found.append(f"{module}: from {node.module} import {name}")
    return found


def test_no_module_imports_another_modules_private_name():
    offenders = _private_imports()
    assert not offenders, (
        f"Imports of another module's private name: {offenders}. A name other modules "
        "use is public in its module (the module itself may be internal): drop the "
        "underscore where it is defined."
    )


def test_path_parts_is_defined_once():
    defined = [
        module
        for module, file in MODULES.items()
        for node in ast.parse(file.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "PathParts" for t in node.targets)
    ]
    assert defined == ["flaxgraph.typing"], defined
