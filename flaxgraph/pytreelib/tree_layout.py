"""The pytree view of a ``Pytree`` at the cost of JAX's own containers.

Flattening a ``Pytree`` (``jax.tree.flatten(module)``, ``jax.jit(f)(module)``)
decides, per attribute, whether it is a child (data) or part of the treedef
(static), in name order (see ``flaxgraph/pytreelib/objects.py``). Deciding that
walks every attribute's value; doing it on every flatten is what made flattening
a Module cost several times what flattening a dict costs.

The decision is therefore kept on the object as a ``Layout``: the children's names,
their JAX keys, a C-level getter for their values and the treedef's aux data. It is
valid while the object's *structure version* is unchanged (any assignment that
could change which attributes are data bumps it: a new, deleted or swapped
attribute, a new kind), the attribute count is the same and no data type was
registered since. Values whose data-ness can change *without* an assignment (a
plain list or dict mutated in place, other pytree nodes holding such containers)
are *volatile*: their data-ness is decided again on every flatten (and the layout
made again if it changed).

The aux data is an ``Aux``: a tuple ``(names, statics, kinds)`` as before (equal to
the plain tuple, so treedefs compare as they did) that also carries its ``Layout``,
so ``jax.tree.unflatten`` gives the objects it builds a valid layout at once and the
next flatten of those objects is a lookup.

Source: the field layouts of ``jax.tree_util.register_dataclass`` (fields decided
per class, not per call); data/static semantics of Flax NNX 0.12 ``nnx.Pytree``.
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
    PYTREE,
    REGISTRY,
    SEQUENCE,
    VARIABLE,
    pytree_children,
)
from flaxgraph.pytreelib.attribute_kinds import DATA_TYPES

_STABLE_SCALARS = frozenset({int, float, str, bool, complex, bytes, type(None), type(Ellipsis)})


class Aux(tuple):
    """The aux data of a flattened ``Pytree``: ``(names, statics, kinds)``, equal to
    the same plain tuple, plus what ``unflatten`` needs ready-made (``build``: a
    plain tuple ``(names, statics, kinds, fresh)``, where ``fresh`` is ``(0,
    layout)``, the layout an object unflattened from it caches at structure
    version 0)."""

    build: tuple[Any, ...] | None = None

    def __reduce__(self) -> Any:
        # Pickled (a treedef sent to another process) as the plain tuple: the layout
        # holds getters that do not pickle, and is rebuilt on first use anyway.
        return (tuple, (tuple(self),))


class Layout:
    """How one structure of a ``Pytree`` flattens (see the module docstring).

    Attributes:
      kinds: the object's ``_obj_kinds`` when the layout was made.
      size: number of attributes.
      n_types: size of the data-type registry when the layout was made.
      names: the children's attribute names, in order.
      keys: the children's JAX keys (``GetAttrKey``, ``SequenceKey`` for int names).
      get: ``__dict__ -> tuple of the children's values`` (C-level where possible).
      aux: the treedef's aux data (an ``Aux`` pointing back to this layout).
      volatile: ``(name, is_data)`` of the attributes whose data-ness can change
        without an assignment: checked again on every flatten.
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
    """Whether ``value``'s data-ness can only change by assigning the attribute:
    arrays, Variables, graph objects, JAX leaves (plain scalars, functions, dtypes…)
    and tuples of those; not lists or dicts (mutable in place) nor other pytree
    nodes (they may hold such containers)."""
    t = type(value)
    if t in _STABLE_SCALARS:
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
