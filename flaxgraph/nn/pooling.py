"""Pooling functions: ``avg_pool``, ``max_pool``, ``min_pool`` and the general ``pool``.

Inputs are channels-last ``(*batch, *spatial, features)`` with ``len(window_shape)``
spatial axes; each window is reduced per feature.

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
>>> nnx.max_pool(x, (2, 2), strides=(2, 2))[0, :, :, 0]
Array([[ 5.,  7.],
       [13., 15.]], dtype=float32)

Source: Flax NNX ``nnx.avg_pool``/``max_pool``/``min_pool``/``pool`` (0.12);
``jax.lax.reduce_window``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.nn.errors import shape_error

PaddingLike = str | Sequence[tuple[int, int]]


def pool(
    inputs: jax.Array,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: PaddingLike,
) -> jax.Array:
    """Reduces every window of ``inputs`` with ``reduce_fn`` starting from ``init``.

    Args:
      inputs: ``(*batch, *spatial, features)``.
      init: the reduction's identity (``0`` for sums, ``-inf`` for max).
      reduce_fn: e.g. ``jax.lax.add`` or ``jax.lax.max``.
      window_shape: the window size per spatial axis.
      strides: the step per spatial axis (default 1 everywhere).
      padding: ``'SAME'``, ``'VALID'`` or one ``(low, high)`` pair per spatial axis.

    Returns:
      ``(*batch, *out_spatial, features)``.

    Raises:
      LayerShapeError: inputs with fewer than ``len(window_shape) + 1`` axes.
      ValueError: ``strides`` or ``padding`` pairs of the wrong length.
    """
    x = jnp.asarray(inputs)
    window = tuple(window_shape)
    n = len(window)
    strides = (1,) * n if strides is None else tuple(strides)
    if len(strides) != n:
        raise ValueError(f"pool: strides {strides} must have one entry per window axis ({n}).")
    if x.ndim < n + 1:
        raise shape_error(
            None,
            f"inputs of rank >= {n + 1} (*batch, {n} spatial axes, features)",
            x.shape,
            who=f"pool(window_shape={window})",
        )
    lead = (1,) * (x.ndim - n - 1)
    if not isinstance(padding, str):
        pairs = tuple(tuple(p) for p in padding)
        if len(pairs) != n:
            raise ValueError(
                f"pool: padding {padding!r} must have one (low, high) pair per window axis."
            )
        padding = ((0, 0),) * len(lead) + pairs + ((0, 0),)  # type: ignore[assignment]
    return lax.reduce_window(
        x, init, reduce_fn, lead + window + (1,), lead + strides + (1,), padding
    )


def avg_pool(
    inputs: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PaddingLike = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """The mean of every window.

    Args and returns as ``pool``; ``count_include_pad`` (default True) divides by the full
    window size even over padding, else by the number of real entries.
    """
    x = jnp.asarray(inputs)
    summed = pool(x, 0.0, lax.add, window_shape, strides, padding)
    if count_include_pad:
        return summed / math.prod(window_shape)
    counts = pool(jnp.ones(x.shape, summed.dtype), 0.0, lax.add, window_shape, strides, padding)
    return summed / counts


def max_pool(
    inputs: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PaddingLike = "VALID",
) -> jax.Array:
    """The maximum of every window (args and returns as ``pool``)."""
    return pool(inputs, -jnp.inf, lax.max, window_shape, strides, padding)


def min_pool(
    inputs: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: PaddingLike = "VALID",
) -> jax.Array:
    """The minimum of every window (args and returns as ``pool``)."""
    return pool(inputs, jnp.inf, lax.min, window_shape, strides, padding)


__all__ = ["avg_pool", "max_pool", "min_pool", "pool"]
