"""Flax NNX's ``nnx.module``: ``Module`` and the functions Flax keeps beside it.

The class is defined in :mod:`flaxgraph.module_class`, ``view``/``view_info``/
``with_attributes`` in :mod:`flaxgraph.views`, ``capture`` in :mod:`flaxgraph.capturing`,
``iter_children``/``iter_module_children`` in :mod:`flaxgraph.graphlib.descendants`; this module
gathers them at Flax's path (``from flax.nnx.module import view, capture``), with Flax's small
helpers.

Example::

  >>> import flaxgraph as nnx
  >>> from flaxgraph.module import Module, view, first_from
  >>> Module is nnx.Module and view is nnx.view
  True
  >>> first_from(None, 3, 4, error_msg='none given')
  3

Source: Flax NNX 0.12.8 ``flax.nnx.module`` (its module map, behaviour read from its public
source).
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
    """Flax's metaclass of ``Module``. flaxgraph's ``Module`` needs no metaclass (its
    metaclass is ``type``), so this exists for code that derives its own metaclass from
    Flax's (``class Meta(ModuleMeta, abc.ABCMeta)``) and uses it with a ``Module``."""


def tuple_reduce(xs: tuple[Any, ...], x: Any) -> tuple[Any, ...]:
    """``xs + (x,)``: the reduce function that ``Module.sow`` uses by default.

    Example::

      >>> tuple_reduce((1,), 2)
      (1, 2)
    """
    return (*xs, x)


def tuple_init() -> tuple[()]:
    """``()``: the initial value that ``Module.sow`` uses by default."""
    return ()


def first_from(*args: A | None, error_msg: str) -> A:
    """The first argument that is not ``None``.

    Args:
      *args: candidates, in order of preference (e.g. a call argument, then an attribute).
      error_msg: the message of the error raised when every candidate is ``None``.

    Returns:
      The first non-``None`` argument.

    Raises:
      ValueError: every argument is ``None`` (message: ``error_msg``).
    """
    for arg in args:
        if arg is not None:
            return arg
    raise ValueError(error_msg)
