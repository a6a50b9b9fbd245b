"""A Variable's per-axis metadata through transforms that add or remove an axis.

``vmap`` and ``scan`` (and ``transform_metadata``) remove a mapped axis from their
inputs and add one to their outputs. A Variable's per-axis metadata must follow
the array's rank, so on each such step the transform calls ``remove_axis_of`` /
``add_axis_of`` here with its ``transform_metadata`` mapping:

* the sharding names (``out_sharding``, where ``sharding=``/``sharding_names=``
  are stored too) get
  ``transform_metadata[PARTITION_NAME]`` inserted at (or removed from) the axis;
* every other key of ``transform_metadata`` that names a tuple in the Variable's
  metadata gets that key's value inserted at (or removed from) the axis, e.g.
  ``transform_metadata={PARTITION_NAME: 'layers', 'nickname': 'nick'}`` turns
  ``nickname=('in', 'out')`` into ``('nick', 'in', 'out')``;
* then the Variable's own hook runs: ``var.add_axis(index, axis_name)`` /
  ``var.remove_axis(index, axis_name)`` with the partition name (``None`` when
  there is none). The base hooks do nothing; a subclass overrides them to react.

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph.variablelib.axes import add_axis_of, remove_axis_of
  >>> v = nnx.Param(jnp.ones((2, 3)), out_sharding=('a', 'b'), tags=('x', 'y'))
  >>> add_axis_of(v, 0, {nnx.PARTITION_NAME: 'layers', 'tags': 't'})
  >>> v.out_sharding, v.tags
  (('layers', 'a', 'b'), ('t', 'x', 'y'))
  >>> remove_axis_of(v, 0, {nnx.PARTITION_NAME: 'layers', 'tags': 't'})
  >>> v.out_sharding, v.tags
  (('a', 'b'), ('x', 'y'))

An index counts from the front (``0`` is the first axis) or, when negative, from
the back of the *result* for an insertion (``-1`` appends) and of the current
names for a removal; inserting past the end pads with ``None``. Names shorter
than the array's rank stand for trailing ``None``\\ s, so a removal past their
end changes nothing. ``add_axis_of`` and ``remove_axis_of`` are inverses.

Source: Flax NNX 0.12 ``nnx.spmd.add_axis``/``remove_axis`` (the transform side)
and ``Variable.add_axis(axis_index, axis_name)``/``remove_axis`` (the hooks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ``var`` below is an ``nnx.Variable``; it is not imported (variable.py imports this
# module, and its ``add_axis``/``remove_axis`` hooks call ``insert_axis_metadata`` and
# ``drop_axis_metadata``), only its ``_var_metadata`` dict and its hooks are used.

PARTITION_NAME = "partition_name"
"""Key of ``transform_metadata`` naming the mesh axis a vmap/scan axis maps to."""


def _inserted(names: tuple[Any, ...], index: int, value: object) -> tuple[Any, ...]:
    idx = index if index >= 0 else len(names) + 1 + index
    padded = names + (None,) * max(0, idx - len(names))
    return (*padded[:idx], value, *padded[idx:])


def _removed(names: tuple[Any, ...], index: int) -> tuple[Any, ...]:
    idx = index if index >= 0 else len(names) + index
    return names[:idx] + names[idx + 1 :]


def _axis_keys(var: Any, transform_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``{metadata key: value to insert}`` of the tuples ``var`` keeps per axis."""
    stored = var._var_metadata
    name = transform_metadata.get(PARTITION_NAME)
    keys = {"out_sharding": name} if isinstance(stored.get("out_sharding"), tuple) else {}
    for k, v in transform_metadata.items():
        if k not in (PARTITION_NAME, "out_sharding") and isinstance(stored.get(k), tuple):
            keys[k] = v
    return keys


def insert_axis_metadata(var: Any, index: int, transform_metadata: Mapping[str, Any]) -> None:
    """Inserts the axis into ``var``'s per-axis metadata (no hook is called)."""
    stored = var._var_metadata
    changes = {
        k: _inserted(stored[k], index, v) for k, v in _axis_keys(var, transform_metadata).items()
    }
    if changes:
        object.__setattr__(var, "_var_metadata", {**stored, **changes})


def drop_axis_metadata(var: Any, index: int, transform_metadata: Mapping[str, Any]) -> None:
    """Removes the axis from ``var``'s per-axis metadata (no hook is called)."""
    stored = var._var_metadata
    changes = {
        k: _removed(stored[k], index)
        for k in _axis_keys(var, transform_metadata)
        if stored[k] and -len(stored[k]) <= index < len(stored[k])
    }
    if changes:
        object.__setattr__(var, "_var_metadata", {**stored, **changes})


def add_axis_of(var: Any, index: int, transform_metadata: Mapping[str, Any]) -> None:
    """What a transform does to ``var`` when it adds an axis at ``index``: the
    per-axis metadata gets the axis, then ``var.add_axis(index, partition_name)`` runs.

    Args:
      var: the Variable (changed in place).
      index: the position of the new axis in the value.
      transform_metadata: the transform's ``transform_metadata``
        (``{PARTITION_NAME: 'layers', ...}``).

    Example: see the module docstring. Source: Flax NNX 0.12 ``nnx.spmd.add_axis``.
    """
    insert_axis_metadata(var, index, transform_metadata)
    var.add_axis(index, transform_metadata.get(PARTITION_NAME))


def remove_axis_of(var: Any, index: int, transform_metadata: Mapping[str, Any]) -> None:
    """What a transform does to ``var`` when it removes the axis at ``index``: the
    per-axis metadata loses the axis, then ``var.remove_axis(index, partition_name)`` runs.

    Args:
      var: the Variable (changed in place).
      index: the position of the removed axis in the value.
      transform_metadata: the transform's ``transform_metadata``.

    Example: see the module docstring. Source: Flax NNX 0.12 ``nnx.spmd.remove_axis``.
    """
    drop_axis_metadata(var, index, transform_metadata)
    var.remove_axis(index, transform_metadata.get(PARTITION_NAME))


def _rank(var: Any) -> int | None:
    """The rank of ``var``'s value, or ``None`` when it has none (a pytree value)."""
    shape = getattr(var.raw_value, "shape", None)
    return len(shape) if isinstance(shape, tuple) else None


def pad_stacked_axis(var: Any, index: int) -> None:
    """A transform without a partition name adds an axis at ``index``: sharding names
    that cover no more than the unstacked rank get ``None`` there, so they keep the
    stacked array's rank (``('a', None)`` on a kernel stacked at 0 becomes
    ``(None, 'a', None)``). Names that already cover the stacked axis are kept.

    Called with ``var`` holding the *unstacked* value (inside the transform).
    Source: flax#5112 (an optimizer over a stacked, sharded model).
    """
    rank = _rank(var)
    if rank is None:
        return
    stored = var._var_metadata
    names = stored.get("out_sharding")
    if isinstance(names, tuple) and len(names) <= rank:
        new = _inserted(names, index, None)
        object.__setattr__(var, "_var_metadata", {**stored, "out_sharding": new})


def drop_stacked_axis(var: Any, index: int) -> None:
    """The inverse of ``pad_stacked_axis`` on the way in: sharding names with the
    stacked array's rank and ``None`` at the removed axis lose it. Names with a mesh
    axis there are kept (as in Flax, without a partition name the metadata is the
    user's then). Called with ``var`` holding the *unstacked* value."""
    rank = _rank(var)
    if rank is None:
        return
    stored = var._var_metadata
    names = stored.get("out_sharding")
    if isinstance(names, tuple) and len(names) == rank + 1 and names[index] is None:
        new = _removed(names, index)
        object.__setattr__(var, "_var_metadata", {**stored, "out_sharding": new})
