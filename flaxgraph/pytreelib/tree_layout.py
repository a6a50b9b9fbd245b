"""The cached pytree view of a ``Pytree`` (``Layout``, ``Aux``), as cheap as JAX's containers.

Why and when a layout is valid: the package README, "The cached pytree view". Source:
the per-class field layouts of ``jax.tree_util.register_dataclass``; the data/static
semantics of Flax NNX 0.12 ``nnx.Pytree``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax

from flaxgraph.graphlib.registry import (
    ARRAY,
    DICT,
    NODE,
    PLAIN_STATIC,
    PYTREE,
    REGISTRY,
    SEQUENCE,
    VARIABLE,
    pytree_children,
)
from flaxgraph.pytreelib.attribute_kinds import DATA_TYPES


class Aux(tuple):
    """The aux data of a flattened ``Pytree``: ``(names, statics, kinds)`` and a ``build`` recipe.

    ``build`` is ``(names, statics, kinds, (0, layout))``, what ``unflatten`` needs ready-made.
    """

    build: tuple[Any, ...] | None = None

    def __reduce__(self) -> Any:
        # Pickled (a treedef sent to another process) as the plain tuple: the layout
        # holds getters that do not pickle, and is rebuilt on first use anyway.
        return (tuple, (tuple(self),))


class Layout:
    """How one structure of a ``Pytree`` flattens.

    Attributes:
      kinds: the object's ``_obj_kinds`` when the layout was made.
      size: number of attributes.
      n_types: size of the data-type registry when the layout was made.
      names: the children's attribute names, in order.
      keys: the children's JAX keys (``GetAttrKey``, ``SequenceKey`` for int names).
      get: ``__dict__ -> tuple of the children's values`` (C-level where possible).
      aux: the treedef's aux data (an ``Aux`` pointing back to this layout).
      volatile: ``(name, is_data)`` of the attributes checked again on every flatten.
    """

    __slots__ = ("kinds", "size", "n_types", "names", "keys", "get", "aux", "volatile")

    def __init__(
        self,
        kinds: Any,
        children: list[tuple[Any, Any]],
        statics: list[tuple[Any, Any]],
        volatile: tuple[tuple[Any, bool], ...],
    ):
        self.kinds = kinds
        self.volatile = volatile
        self.size = len(children) + len(statics)
        self.n_types = len(DATA_TYPES)
        self.names = tuple(n for n, _ in children)
        self.keys = tuple(_attr_key(n) for n in self.names)
        self.get = _getter(self.names)
        aux = Aux((self.names, tuple(statics), kinds))
        aux.build = (self.names, tuple(statics), kinds, (0, self))
        self.aux = aux


def _getter(names: tuple[Any, ...]) -> Callable[[dict[Any, Any]], tuple[Any, ...]]:
    if not names:
        return lambda d: ()
    if len(names) == 1:
        name = names[0]
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


def _attr_key(name: Any) -> Any:
    # nnx.List stores its items under int keys; GetAttrKey only takes strings.
    if isinstance(name, str):
        return jax.tree_util.GetAttrKey(name)
    return jax.tree_util.SequenceKey(name)


def is_stable(value: Any, pytree_type: type) -> bool:
    """Whether ``value``'s data-ness changes only on assignment (no lists, dicts, pytrees)."""
    t = type(value)
    if t in PLAIN_STATIC:  # Python constants
        return True
    kind = REGISTRY.kind_of(value)  # the graph engine's classification
    if kind is VARIABLE or kind is ARRAY or isinstance(value, pytree_type):
        return True
    if t is tuple:
        return all(is_stable(v, pytree_type) for v in value)
    if kind is SEQUENCE or kind is DICT:
        return False
    # (a graph node of a type that is also a JAX pytree node may hold containers)
    return kind is not PYTREE and (kind is not NODE or pytree_children(value) is None)


__all__ = ["Aux", "Layout", "is_stable"]
