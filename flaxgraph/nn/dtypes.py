"""Dtype rules shared by the layers: which dtype a computation runs in.

See the package README, "Layer conventions".

>>> import jax.numpy as jnp
>>> from flaxgraph.nn.dtypes import promote_dtype
>>> x, w = promote_dtype((jnp.ones(2, jnp.bfloat16), jnp.ones(2)), dtype=None)
>>> x.dtype, w.dtype
(dtype('float32'), dtype('float32'))

Source: Flax NNX ``nnx.nn.dtypes.canonicalize_dtype``/``promote_dtype``;
``jax.numpy.result_type``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax.numpy as jnp

T = TypeVar("T")

Dtype = Any


def canonicalize_dtype(*args: Any, dtype: Dtype | None = None, inexact: bool = True) -> Any:
    """The dtype a computation over ``args`` runs in.

    Args:
      *args: arrays (or scalars; ``None`` skipped).
      dtype: an explicit dtype, returned as is.
      inexact: promote an integer or bool result with ``float32``.

    Returns:
      A numpy dtype.

    Raises:
      ValueError: ``inexact`` and an explicit integer ``dtype``.
    """
    if dtype is None:
        arrays = [a for a in args if a is not None]
        dtype = jnp.result_type(*arrays) if arrays else jnp.float32
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    elif inexact and not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(f"Expected an inexact (floating or complex) dtype, got {dtype}.")
    return jnp.dtype(dtype)


def promote_dtype(args: T, /, *, dtype: Dtype | None = None, inexact: bool = True) -> T:
    """Casts each array of the tuple ``args`` to ``canonicalize_dtype(*args, dtype=dtype)`` (``None`` stays)."""
    values = tuple(args)  # type: ignore[arg-type, var-annotated]
    target = canonicalize_dtype(*values, dtype=dtype, inexact=inexact)
    return tuple(None if a is None else jnp.asarray(a, target) for a in values)  # type: ignore[return-value]


def stats_dtype(dtype: Any) -> Any:
    """The dtype statistics (means, variances) are computed in: at least ``float32``."""
    return jnp.promote_types(dtype, jnp.float32)


__all__ = ["canonicalize_dtype", "promote_dtype", "stats_dtype"]
