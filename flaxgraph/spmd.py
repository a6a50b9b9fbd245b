"""Flax NNX's ``nnx.spmd``: sharding helpers, abstract models and the axis helpers of transforms.

Sharding names, boxes and ``PartitionSpec``/``NamedSharding`` conversions are defined in
:mod:`flaxgraph.partitioning`; ``get_abstract_model``, ``as_abstract`` and
``abstract_with_sharding`` in :mod:`flaxgraph.abstract` (they run ``nnx.eval_shape``, so they
sit above the transforms). This module gathers them at Flax's path
(``from flax.nnx.spmd import get_abstract_model``) with ``add_axis`` and ``remove_axis``
(defined in :mod:`flaxgraph.variablelib.tree_axes`), what a transform does to the Variables of a
tree when it adds or removes an axis.

Example::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph import spmd
  >>> state = {'w': nnx.Param(jnp.ones((2, 3)), out_sharding=('a', 'b'))}
  >>> _ = spmd.add_axis(state, 0, {nnx.PARTITION_NAME: 'layers'})
  >>> state['w'].out_sharding
  ('layers', 'a', 'b')
  >>> _ = spmd.remove_axis(state, 0, {nnx.PARTITION_NAME: 'layers'})
  >>> state['w'].out_sharding
  ('a', 'b')

Source: Flax NNX 0.12.8 ``flax.nnx.spmd`` (its module map; ``add_axis``/``remove_axis``
behaviour read from its public source); the "Axis Metadata" FLIP flax#2434.
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
