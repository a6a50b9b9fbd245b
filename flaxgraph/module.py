"""Flax NNX's ``nnx.module``: ``Module`` and the functions Flax keeps beside it.

Defined in :mod:`flaxgraph.module_class`, :mod:`flaxgraph.views`,
:mod:`flaxgraph.capturing` and :mod:`flaxgraph.graphlib.descendants`; gathered here at
Flax's path, with Flax's small helpers.

Example::

  >>> import flaxgraph as nnx
  >>> from flaxgraph.module import Module, view, first_from
  >>> Module is nnx.Module and view is nnx.view
  True
  >>> first_from(None, 3, 4, error_msg='none given')
  3

Source: Flax NNX 0.12.8 ``flax.nnx.module``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from flaxgraph.capturing import capture
from flaxgraph.graphlib.descendants import iter_children, iter_module_children
from flaxgraph.module_class import M, Module, iter_modules
from flaxgraph.pytreelib import PytreeMeta
from flaxgraph.typing import PathParts
from flaxgraph.views import view, view_info, with_attributes

__all__ = [
    "M",
    "Module",
    "ModuleMeta",
    "StateMapping",
    "capture",
    "first_from",
    "iter_children",
    "iter_module_children",
    "iter_modules",
    "tuple_init",
    "tuple_reduce",
    "view",
    "view_info",
    "with_attributes",
]

A = TypeVar("A")

StateMapping = Mapping[PathParts, Any]
"""A mapping from paths to values (a flat state)."""


class ModuleMeta(PytreeMeta):
    """Flax's metaclass of ``Module`` (flaxgraph's is ``type``), for code that derives its own
    metaclass from it.
    """


def tuple_reduce(xs: tuple[Any, ...], x: Any) -> tuple[Any, ...]:
    """``xs + (x,)``: ``Module.sow``'s default reduce function."""
    return (*xs, x)


def tuple_init() -> tuple[()]:
    """``()``: ``Module.sow``'s default initial value."""
    return ()


def first_from(*args: A | None, error_msg: str) -> A:
    """The first argument that is not ``None``; ``ValueError(error_msg)`` if all are."""
    for arg in args:
        if arg is not None:
            return arg
    raise ValueError(error_msg)
