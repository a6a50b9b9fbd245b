"""Flax NNX's ``nnx.spmd``: sharding helpers, abstract models and the axis helpers of transforms.

Gathers :mod:`flaxgraph.partitioning`, :mod:`flaxgraph.abstract` and ``add_axis``/
``remove_axis`` (:mod:`flaxgraph.variablelib.tree_axes`: what a transform does to a
tree's Variables when it adds or removes an axis) at Flax's path.

Example::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph import spmd
  >>> state = {'w': nnx.Param(jnp.ones((2, 3)), out_sharding=('a', 'b'))}
  >>> _ = spmd.add_axis(state, 0, {nnx.PARTITION_NAME: 'layers'})
  >>> state['w'].out_sharding
  ('layers', 'a', 'b')

Source: Flax NNX 0.12.8 ``flax.nnx.spmd``; the "Axis Metadata" FLIP flax#2434.
"""

from __future__ import annotations

from flaxgraph.abstract import abstract_with_sharding, as_abstract, get_abstract_model
from flaxgraph.partitioning import (
    PARTITION_NAME,
    AxisMetadata,
    Partitioned,
    get_named_sharding,
    get_partition_spec,
    get_var_pspec,
    map_boxes,
    with_partitioning,
    with_sharding_constraint,
)
from flaxgraph.variablelib.tree_axes import add_axis, remove_axis

__all__ = [
    "PARTITION_NAME",
    "AxisMetadata",
    "Partitioned",
    "abstract_with_sharding",
    "add_axis",
    "as_abstract",
    "get_abstract_model",
    "get_named_sharding",
    "get_partition_spec",
    "get_var_pspec",
    "map_boxes",
    "remove_axis",
    "with_partitioning",
    "with_sharding_constraint",
]
