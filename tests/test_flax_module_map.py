"""Every public name of every ``flax.nnx`` module exists at the same dotted path in flaxgraph.

Real Flax code imports from Flax's submodules, not only from ``flax.nnx``
(``from flax.nnx.nn.linear import default_embed_init``, ``flax.nnx.transforms.iteration.
StateAxes``). This test reads the source of the installed Flax NNX 0.12.8 package (every
``.py`` file under ``flax/nnx``, ``bridge`` included) with :mod:`ast`, without importing it,
and checks that flaxgraph's module of the same dotted name exists and has each name.

What counts as a public name of a module ``flax.nnx.X`` (the policy, decided once here):

- a ``class`` or ``def`` in the module's body, or a name bound by an assignment there
  (constants, type aliases, module-level instances such as ``default_embed_init``);
- also the same definitions inside an ``if``/``else`` or ``try`` at module level
  (``flax.nnx.compat`` defines its graph-mode partials under ``if not TYPE_CHECKING``,
  ``flax.nnx`` its ``VariableState`` alias under ``if TYPE_CHECKING``);
- excluded: names starting with ``_``, every ``import``/``from ... import`` (a re-export is
  the other module's name, counted there), ``from m import *`` (so ``flax.nnx.graph``, a
  star re-export of ``graphlib``, has no names of its own but must exist as a module), and
  type variables (``TypeVar``/``ParamSpec``/``TypeVarTuple`` assignments);
- ``__all__`` adds nothing: where a module lists an imported name in ``__all__``
  (``flax.nnx.nn.activations`` lists JAX's activation functions) the name is a re-export.

The module of the same dotted name is found as :func:`flaxgraph.install_as_flax_nnx` finds
it: ``flax.nnx.a.b`` is the module ``flaxgraph.a.b``, or where flaxgraph keeps the module
under another file name, the module-valued attribute ``b`` of ``flaxgraph.a``.

Issue 29 counts 450 names with its own reading; the literal module bodies alone give 513 here,
and the definitions under module-level ``if``/``try`` bring 42 more (34 of them the
``compat`` partials). The test prints the figures it measured.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

flax = pytest.importorskip("flax", reason="the module map is read from Flax NNX's source")

FLAX_NNX = Path(flax.__file__).resolve().parent / "nnx"
TYPE_VARIABLE_MAKERS = frozenset({"TypeVar", "ParamSpec", "TypeVarTuple"})

# The names still missing, by dotted Flax module; it only shrinks, and is empty when the
# module map is complete (issue 29). A name listed here that flaxgraph has fails the test.
STILL_MISSING: dict[str, frozenset[str]] = {}


class FlaxModule(NamedTuple):
    """One module of Flax NNX's source and the public names it defines."""

    dotted: str  # 'flax.nnx.transforms.iteration'
    relative: str  # 'transforms.iteration' ('' for flax.nnx itself)
    names: frozenset[str]


def _is_type_variable(value: ast.expr | None) -> bool:
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name in TYPE_VARIABLE_MAKERS


def _bound_names(target: ast.expr) -> Iterator[str]:
    """The names an assignment target binds: ``a``, ``a, b``, ``[a, *b]`` (not ``x[k]``,
    ``x.a`` or ``globals()['a']``, which bind no module name)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _defined_names(body: list[ast.stmt]) -> Iterator[str]:
    for statement in body:
        if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield statement.name
        elif isinstance(statement, ast.Assign) and not _is_type_variable(statement.value):
            for target in statement.targets:
                yield from _bound_names(target)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            if not _is_type_variable(statement.value):
                yield statement.target.id
        elif isinstance(statement, ast.If):
            yield from _defined_names(statement.body)
            yield from _defined_names(statement.orelse)
        elif isinstance(statement, ast.Try):
            yield from _defined_names(statement.body)
            for handler in statement.handlers:
                yield from _defined_names(handler.body)
            yield from _defined_names(statement.orelse)
            yield from _defined_names(statement.finalbody)


def flax_modules() -> list[FlaxModule]:
    """Every module of the installed ``flax/nnx`` package with the public names it defines."""
    modules = []
    for path in sorted(FLAX_NNX.rglob("*.py")):
        parts = path.relative_to(FLAX_NNX).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = frozenset(n for n in _defined_names(tree.body) if not n.startswith("_"))
        relative = ".".join(parts)
        dotted = "flax.nnx" + (f".{relative}" if relative else "")
        modules.append(FlaxModule(dotted, relative, names))
    return modules


def flaxgraph_module(relative: str) -> types.ModuleType | None:
    """flaxgraph's module for ``flax.nnx.<relative>``, as the drop-in finds it, or ``None``."""
    module = importlib.import_module("flaxgraph")
    for part in relative.split(".") if relative else []:
        target = f"{module.__name__}.{part}"
        try:
            module = importlib.import_module(target)
            continue
        except ModuleNotFoundError as error:
            if error.name != target:
                raise
        value = getattr(module, part, None)
        if not isinstance(value, types.ModuleType):
            return None
        module = value
    return module


class MapReport(NamedTuple):
    total: int
    found: int
    missing_modules: list[str]
    missing_names: dict[str, list[str]]  # dotted Flax module -> names flaxgraph's lacks


def measure() -> MapReport:
    total = found = 0
    missing_modules: list[str] = []
    missing_names: dict[str, list[str]] = {}
    for flax_module in flax_modules():
        total += len(flax_module.names)
        module = flaxgraph_module(flax_module.relative)
        if module is None:
            missing_modules.append(flax_module.dotted)
            lacking = sorted(flax_module.names)
        else:
            with warnings.catch_warnings():  # a deprecated alias warns when read
                warnings.simplefilter("ignore", DeprecationWarning)
                lacking = sorted(n for n in flax_module.names if not hasattr(module, n))
        found += len(flax_module.names) - len(lacking)
        if lacking:
            missing_names[flax_module.dotted] = lacking
    return MapReport(total, found, missing_modules, missing_names)


def test_the_walk_reads_the_names_real_code_imports() -> None:
    by_name = {m.dotted: m.names for m in flax_modules()}
    assert "default_embed_init" in by_name["flax.nnx.nn.linear"]
    assert {"view", "capture"} <= by_name["flax.nnx.module"]
    assert "get_abstract_model" in by_name["flax.nnx.spmd"]
    assert "StateAxes" in by_name["flax.nnx.transforms.iteration"]
    assert "jit" in by_name["flax.nnx.compat"]  # defined under `if not TYPE_CHECKING`
    assert "A" not in by_name["flax.nnx.variablelib"]  # a TypeVar
    assert "relu" not in by_name["flax.nnx.nn.activations"]  # imported from JAX
    assert by_name["flax.nnx.graph"] == frozenset()  # a star re-export of graphlib
    assert "flax.nnx.bridge.wrappers" in by_name
    assert "globals" not in by_name["flax.nnx.graphlib"]  # globals()['RefMap'] = ... binds none


def test_every_flax_nnx_module_and_public_name_exists_in_flaxgraph() -> None:
    report = measure()
    print(
        f"flax.nnx module map: {report.found}/{report.total} names found, "
        f"{len(report.missing_modules)} modules missing"
    )
    unexpected = {
        module: [n for n in names if n not in STILL_MISSING.get(module, frozenset())]
        for module, names in report.missing_names.items()
    }
    unexpected = {module: names for module, names in unexpected.items() if names}
    stale = {
        module: sorted(n for n in names if n not in report.missing_names.get(module, []))
        for module, names in STILL_MISSING.items()
    }
    stale = {module: names for module, names in stale.items() if names}
    lines = [f"  {module}: {', '.join(names)}" for module, names in sorted(unexpected.items())]
    assert not unexpected, (
        f"flaxgraph lacks {sum(map(len, unexpected.values()))} public names of Flax NNX 0.12.8 "
        f"(modules missing: {', '.join(report.missing_modules) or 'none'}):\n" + "\n".join(lines)
    )
    assert not stale, f"now provided, remove them from STILL_MISSING: {stale}"


GUIDE = Path(__file__).resolve().parent.parent / "guides" / "from_flax.md"
INTERNAL_ROW = re.compile(
    r"^\| `(flax\.nnx\.[A-Za-z0-9_.]+)` \| (raises|differs|alias of `[^`]+`) \| (.+) \|$"
)


def internal_rows() -> dict[str, str]:
    """The guide's table of Flax-internal names: Flax name -> 'raises', 'differs' (a name
    with its own, reduced, meaning in flaxgraph) or 'alias of `x`'."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("<!-- flax-internal names")
    end = text.index("<!-- end of flax-internal names -->")
    rows = {}
    for line in text[start:end].splitlines():
        match = INTERNAL_ROW.match(line)
        if match:
            assert match[3].strip(), f"{match[1]} has no reason in the guide"
            rows[match[1]] = match[2]
    return rows


def _flaxgraph_value(dotted: str) -> object:
    module_path, _, name = dotted.rpartition(".")
    module = flaxgraph_module(module_path.removeprefix("flax.nnx").lstrip("."))
    assert module is not None, dotted
    return getattr(module, name)


def test_the_guide_lists_every_flax_internal_stand_in_and_alias() -> None:
    from flaxgraph.errors import FlaxInternalError
    from flaxgraph.flax_surface.stand_ins import stands_for

    rows = internal_rows()
    stand_ins = set()
    for flax_module in flax_modules():
        module = flaxgraph_module(flax_module.relative)
        for name in flax_module.names if module is not None else ():
            with warnings.catch_warnings():  # a deprecated alias warns when read
                warnings.simplefilter("ignore", DeprecationWarning)
                value = getattr(module, name, None)
            if stands_for(value) is not None:
                assert stands_for(value) == f"{flax_module.dotted}.{name}"
                stand_ins.add(stands_for(value))
    listed_raising = {name for name, status in rows.items() if status == "raises"}
    assert stand_ins == listed_raising, (
        f"stand-ins not in the guide: {sorted(stand_ins - listed_raising)}; listed as raising "
        f"but not stand-ins: {sorted(listed_raising - stand_ins)}"
    )
    for dotted, status in rows.items():
        value = _flaxgraph_value(dotted)
        if status == "raises":
            with pytest.raises(FlaxInternalError, match=re.escape(dotted)):
                value()  # type: ignore[operator]
        elif status.startswith("alias"):
            target = status.removeprefix("alias of `").removesuffix("`")
            assert value is _flaxgraph_value(target.replace("nnx.", "flax.nnx.", 1)), dotted
