"""flaxgraph's module map is Flax NNX's: the dotted paths Flax code writes resolve to real modules.

The internal modules carry Flax's names (``graphlib``, ``statelib``, ``variablelib``,
``filterlib``, ``rnglib``, ``pytreelib``, ``traversals``, ``transforms.general``…) and
no module of the package shares its name with a public function of ``nnx``, so
``nnx.state``, ``nnx.variables`` and ``nnx.display`` are the functions, always.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import flaxgraph as nnx


def _all_modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(nnx.__path__, prefix="flaxgraph."))


def test_no_module_shares_its_name_with_a_public_function():
    # For every (sub)package, its direct submodules against the package's public names.
    clashes = []
    for package_name in ["flaxgraph", *(m for m in _all_modules() if _is_package(m))]:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            value = getattr(package, info.name, None)
            if value is not None and not isinstance(value, types.ModuleType):
                clashes.append(f"{package_name}.{info.name} is a module and {value!r}")
    assert not clashes, "\n".join(clashes)


def _is_package(name: str) -> bool:
    return hasattr(importlib.import_module(name), "__path__")


@pytest.mark.parametrize(
    "path",
    [
        "statelib.State",
        "statelib.FlatState",
        "statelib.restore_int_paths",
        "graphlib.RefMap",
        "graphlib.flatten",
        "graphlib.unflatten",
        "graphlib.split",
        "graphlib.split_context",
        "graphlib.merge_context",
        "graphlib.GraphDef",
        "graphlib.FlatState",
        "graph.split",
        "graph.merge",
        "filterlib.Filter",
        "filterlib.to_predicate",
        "variablelib.Variable",
        "variablelib.VarDefaults",
        "rnglib.Rngs",
        "rnglib.RngStream",
        "pytreelib.Pytree",
        "object.Object",
        "traversals.flatten_mapping",
        "traversals.unflatten_mapping",
        "spmd.PARTITION_NAME",
        "extract.to_tree",
        "helpers.Sequential",
        "module.Module",
    ],
)
def test_flax_dotted_paths_resolve(path: str) -> None:
    value = nnx
    for part in path.split("."):
        value = getattr(value, part)
    assert value is not None


@pytest.mark.parametrize(
    "module",
    ["statelib", "graphlib", "filterlib", "variablelib", "rnglib", "pytreelib", "traversals"],
)
def test_from_flaxgraph_import_module(module: str) -> None:
    imported = importlib.import_module(f"flaxgraph.{module}")
    assert isinstance(imported, types.ModuleType)
    assert getattr(nnx, module) is imported


def test_public_functions_are_functions():
    for name in ("state", "variables", "display", "split", "merge", "update", "call", "graphdef"):
        assert inspect.isfunction(getattr(nnx, name)), name


def test_type_variables():
    from typing import TypeVar

    assert isinstance(nnx.A, TypeVar) and isinstance(nnx.M, TypeVar)
