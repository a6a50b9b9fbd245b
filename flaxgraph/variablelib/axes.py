"""A Variable's per-axis metadata through transforms that add or remove an axis.

The rule: the package README, "Axis metadata through transforms". Source: Flax NNX
0.12 ``nnx.spmd.add_axis``/``remove_axis`` and ``Variable.add_axis``/``remove_axis``;
the "Axis Metadata" FLIP (flax#2434).

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> from flaxgraph.variablelib.axes import add_axis_of, remove_axis_of
>>> v = nnx.Param(jnp.ones((2, 3)), out_sharding=('a', 'b'), tags=('x', 'y'))
>>> add_axis_of(v, 0, {nnx.PARTITION_NAME: 'layers', 'tags': 't'})
>>> v.out_sharding, v.tags
(('layers', 'a', 'b'), ('t', 'x', 'y'))
>>> remove_axis_of(v, 0, {nnx.PARTITION_NAME: 'layers', 'tags': 't'})
>>> v.out_sharding, v.tags
(('a', 'b'), ('x', 'y'))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ``var`` is an ``nnx.Variable``, not imported: variable.py imports this module.

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
    """Adds the axis ``index`` to ``var``'s per-axis metadata, then calls ``var.add_axis``.

    Args:
      var: the Variable.
      index: the position of the new axis in the value.
      transform_metadata: the transform's ``transform_metadata`` (``{PARTITION_NAME: ...}``).
    """
    insert_axis_metadata(var, index, transform_metadata)
    var.add_axis(index, transform_metadata.get(PARTITION_NAME))


def remove_axis_of(var: Any, index: int, transform_metadata: Mapping[str, Any]) -> None:
    """Removes the axis ``index`` from ``var``'s per-axis metadata, then calls ``var.remove_axis``.

    Args:
      var: the Variable (changed in place).
      index: the position of the removed axis in the value.
      transform_metadata: the transform's ``transform_metadata``.
    """
    drop_axis_metadata(var, index, transform_metadata)
    var.remove_axis(index, transform_metadata.get(PARTITION_NAME))


def _rank(var: Any) -> int | None:
    """The rank of ``var``'s value, or ``None`` when it has none (a pytree value)."""
    shape = getattr(var._var_raw, "shape", None)
    return len(shape) if isinstance(shape, tuple) else None


def pad_stacked_axis(var: Any, index: int) -> None:
    """No partition name: ``None`` at ``index`` in sharding names short of the stacked rank.

    ``var`` holds the unstacked value. Source: flax#5112.
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
    """The inverse of ``pad_stacked_axis``: stacked-rank names lose a ``None`` at ``index``."""
    rank = _rank(var)
    if rank is None:
        return
    stored = var._var_metadata
    names = stored.get("out_sharding")
    if isinstance(names, tuple) and len(names) == rank + 1 and names[index] is None:
        new = _removed(names, index)
        object.__setattr__(var, "_var_metadata", {**stored, "out_sharding": new})
