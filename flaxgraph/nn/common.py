"""Argument helpers shared by the layers: tuples, mode flags, parameter creation.

See the package README, "Layer conventions".
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from flaxgraph.variablelib.variable import Param

EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})
"""The default of every ``*_metadata`` argument: no metadata."""

Initializer = Callable[..., Any]


def canonicalize_tuple(value: int | Sequence[int], name: str = "value") -> tuple[int, ...]:
    """``value`` (an int, NumPy int or int array, or a sequence of ints) as a tuple of Python ints;
    ``TypeError`` otherwise (bools, floats and strings are not ints)."""
    if _is_int(value):
        return (operator.index(value),)  # type: ignore[arg-type]
    try:
        out = tuple(cast(Sequence[int], value))
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of ints, got {value!r}.") from None
    if not all(_is_int(v) for v in out):
        raise TypeError(f"{name} must be an int or a sequence of ints, got {value!r}.")
    return tuple(operator.index(v) for v in out)


def _is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (a Python or NumPy int, not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def expand_to(
    value: int | Sequence[int] | None, n: int, name: str, default: int = 1
) -> tuple[int, ...]:
    """An int or ``None`` repeated ``n`` times, or a length-``n`` sequence, as a tuple (``ValueError`` otherwise)."""
    if value is None:
        return (default,) * n
    if isinstance(value, int):
        return (value,) * n
    out = canonicalize_tuple(value, name)
    if len(out) != n:
        raise ValueError(
            f"{name} must have {n} entries (one per spatial dimension), got {value!r}."
        )
    return out


def first_from(*values: Any, error_msg: str) -> Any:
    """The first value that is not ``None``; ``ValueError(error_msg)`` if all are."""
    for v in values:
        if v is not None:
            return v
    raise ValueError(error_msg)


def make_param(
    init: Initializer,
    key: jax.Array,
    shape: tuple[int, ...],
    dtype: Any,
    metadata: Mapping[str, Any],
) -> Param[Any]:
    """``Param(init(key, shape, dtype), **metadata)``."""
    return Param(init(key, shape, dtype), **dict(metadata))


def make_reshaped_param(
    init: Initializer,
    key: jax.Array,
    init_shape: tuple[int, ...],
    shape: tuple[int, ...],
    dtype: Any,
    metadata: Mapping[str, Any],
) -> Param[Any]:
    """``make_param`` initialized with ``init_shape`` (e.g. a 2-D view) and reshaped to ``shape``; boxes kept."""
    value = init(key, init_shape, dtype)
    value = jax.tree.map(lambda v: jnp.reshape(v, shape), value)
    return Param(value, **dict(metadata))


def op_options(preferred_element_type: Any = None, out_sharding: Any = None) -> dict[str, Any]:
    """The keyword arguments of a ``dot_general``/``einsum``/``conv`` call that are set, and only those."""
    options: dict[str, Any] = {}
    if preferred_element_type is not None:
        options["preferred_element_type"] = preferred_element_type
    if out_sharding is not None:
        options["out_sharding"] = out_sharding
    return options


def broadcast_right(value: jax.Array, ndim: int) -> jax.Array:
    """``value`` reshaped with leading 1s to rank ``ndim`` (the tests raise on rank promotion)."""
    return jnp.reshape(value, (1,) * (ndim - value.ndim) + tuple(value.shape))


__all__ = [
    "EMPTY_METADATA",
    "broadcast_right",
    "canonicalize_tuple",
    "expand_to",
    "first_from",
    "make_param",
    "make_reshaped_param",
    "op_options",
]
