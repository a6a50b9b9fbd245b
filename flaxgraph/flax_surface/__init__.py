"""Flax NNX's surface: its module map as one table, on top of flaxgraph's own packages.

The engine (``graphlib``, ``statelib``, ``variablelib``, ``transforms``, ``pytreelib``)
defines flaxgraph's concepts only. Flax's dotted names that have no counterpart there (its
node protocol, records, type aliases, and stand-ins for its internal machinery) are
answered by :data:`table.MODULE_MAP`. :func:`install`, which ``import flaxgraph`` runs,
puts each name at its Flax path (``flaxgraph.graphlib.GraphNodeImpl``,
``flaxgraph.transforms.compilation.JitFn``) and creates the modules that only gather names
(``flaxgraph.spmd``, ``flaxgraph.transforms.iteration``); the drop-in binding
(``drop_in.py``) reads the same table. The package README says how it is cut.

Example::

  >>> import flaxgraph as nnx
  >>> from flaxgraph.transforms.iteration import StateAxes
  >>> StateAxes is nnx.StateAxes and nnx.graph is nnx.graphlib
  True

Source: the module map of Flax NNX 0.12.8; Python's import system (``sys.modules``).
"""

from __future__ import annotations

import importlib
import sys
import types

from flaxgraph.flax_surface.stand_ins import (
    internal_class,
    internal_function,
    internal_object,
)
from flaxgraph.flax_surface.table import MODULE_MAP, StandIn, flaxgraph_path

__all__ = ["install"]


def _value(spec: str | StandIn, module: str, name: str) -> object:
    """The object a table entry names: ``'module:attribute'``, or a new stand-in."""
    if isinstance(spec, StandIn):
        if spec.kind == "class":
            return internal_class(module, name, spec.instead)
        if spec.kind == "object":
            return internal_object(module, name, spec.instead)
        stand_in = internal_function(module, name, spec.instead)
        if spec.kind == "primitive":
            stand_in.bind = stand_in  # type: ignore[attr-defined]  # a primitive is bound
        return stand_in
    home, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(home), attribute)


def install() -> None:
    """Puts every name of :data:`~flaxgraph.flax_surface.table.MODULE_MAP` at its Flax path.

    Creates the modules no file holds and registers each under its path in
    ``sys.modules``, so ``import flaxgraph.spmd`` works. ``import flaxgraph`` calls it;
    calling it again changes nothing a user can see (the same names, new stand-ins).
    """
    for flax_module, row in MODULE_MAP.items():
        path = flaxgraph_path(flax_module)
        if row.lazy:
            continue
        if row.doc is not None:
            module = sys.modules.get(path) or types.ModuleType(path, row.doc)
        else:
            module = importlib.import_module(row.module)
        for name, spec in row.names.items():
            setattr(module, name, _value(spec, path, name))
        if row.doc is not None:
            module.__all__ = sorted(row.names)  # type: ignore[attr-defined]
        if path != module.__name__ or row.doc is not None:
            parent, _, child = path.rpartition(".")
            sys.modules[path] = module
            setattr(importlib.import_module(parent), child, module)
