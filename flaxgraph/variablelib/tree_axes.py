"""``add_axis``/``remove_axis`` over every Variable of a tree (Flax's ``nnx.spmd`` functions).

One Variable at a time is :mod:`flaxgraph.variablelib.axes`. Source: Flax NNX 0.12.8
``flax.nnx.spmd.add_axis``/``remove_axis``.

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> from flaxgraph.variablelib.tree_axes import add_axis, remove_axis
>>> state = {'w': nnx.Param(jnp.ones((2, 3)), out_sharding=('a', 'b'))}
>>> add_axis(state, 0, {nnx.PARTITION_NAME: 'layers'})['w'].out_sharding
('layers', 'a', 'b')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import jax

from flaxgraph.variablelib.axes import add_axis_of, remove_axis_of
from flaxgraph.variablelib.variable import is_variable

__all__ = ["add_axis", "remove_axis"]

A = TypeVar("A")


def add_axis(tree: A, index: int, transform_metadata: Mapping[Any, Any]) -> A:
    """Adds an axis at ``index`` to every Variable of ``tree`` (``axes.add_axis_of``), in place.

    Args:
      tree: a pytree of Variables (a State, a dict…).
      index: the position of the new axis.
      transform_metadata: ``{nnx.PARTITION_NAME: name, ...}``.

    Returns:
      ``tree`` (the same Variables, changed).
    """
    for leaf in jax.tree.leaves(tree, is_leaf=is_variable):
        if is_variable(leaf):
            add_axis_of(leaf, index, transform_metadata)
    return tree


def remove_axis(tree: A, index: int, transform_metadata: Mapping[Any, Any]) -> A:
    """Removes the axis ``index`` from every Variable of ``tree``; the inverse of ``add_axis``.

    Args:
      tree: a pytree of Variables, changed in place.
      index: the position of the removed axis.
      transform_metadata: as given to ``add_axis``.

    Returns:
      ``tree`` (the same Variables, changed).

    Raises:
      ValueError: a Variable's sharding names hold another name than the partition name
        at ``index`` (as Flax).
    """
    for leaf in jax.tree.leaves(tree, is_leaf=is_variable):
        if is_variable(leaf):
            remove_axis_of(leaf, index, transform_metadata)
    return tree
