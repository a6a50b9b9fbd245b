"""What the normalization layers share: the statistics, the normalization step and the Params.

The helpers have the signatures and arithmetic (in the same order) of Flax NNX 0.12.8's
private helpers of ``flax.nnx.nn.normalization``, which re-exports them under Flax's names
(third-party code imports them from there), so the layers give Flax's bits.

>>> import jax.numpy as jnp
>>> from flaxgraph.nn.norm_base import compute_stats
>>> compute_stats(jnp.array([[1.0, 3.0]]), 1, None, use_fast_variance=False)
(Array([2.], dtype=float32), Array([1.], dtype=float32))

Source: Flax NNX normalization layers and their helpers (0.12).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.module_class import Module
from flaxgraph.nn.common import make_param
from flaxgraph.nn.dtypes import canonicalize_dtype
from flaxgraph.nn.errors import normalize_axis, shape_error
from flaxgraph.rnglib.rngs import Rngs

Initializer = Callable[..., Any]


def canonicalize_axes(rank: int, axes: Any) -> tuple[int, ...]:
    """``axes`` (an int or ints, negative from ``rank``) as a tuple of distinct non-negative axes."""
    given = axes if isinstance(axes, Iterable) else (axes,)
    return tuple({axis + rank if axis < 0 else axis for axis in given})


def abs_sq(x: jax.Array) -> jax.Array:
    """``|x|²`` elementwise (real² + imag² for complex ``x``)."""
    if jnp.iscomplexobj(x):
        return lax.square(lax.real(x)) + lax.square(lax.imag(x))
    return lax.square(x)


def compute_stats(
    x: jax.Array,
    axes: Any,
    dtype: Any,
    axis_name: str | None = None,
    axis_index_groups: Any = None,
    use_mean: bool = True,
    use_fast_variance: bool = True,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``(mean, var)`` of ``x`` over ``axes`` in at least float32, masked and averaged across ``axis_name``
    if given (``use_fast_variance``: ``max(0, E[|x|²] - |E[x]|²)``; no ``use_mean``: mean 0)."""
    compute = jnp.promote_types(jnp.result_type(x) if dtype is None else dtype, jnp.float32)
    x = jnp.asarray(x, compute)
    reduced = canonicalize_axes(x.ndim, axes)

    def averaged(*values: jax.Array) -> tuple[jax.Array, ...]:
        means = tuple(v.mean(reduced, where=mask) for v in values)
        if axis_name is None:
            return means
        if len(means) == 1:
            return (lax.pmean(means[0], axis_name, axis_index_groups=axis_index_groups),)
        stacked = lax.pmean(
            jnp.stack(means, axis=0), axis_name, axis_index_groups=axis_index_groups
        )
        return tuple(stacked[i] for i in range(len(means)))

    if not use_mean:
        (var,) = averaged(abs_sq(x))
        return jnp.zeros_like(var), var
    if use_fast_variance:
        mean, mean_sq = averaged(x, abs_sq(x))
        return mean, jnp.maximum(0.0, mean_sq - abs_sq(mean))
    (mean,) = averaged(x)
    (var,) = averaged(abs_sq(x - jnp.expand_dims(mean, reduced)))
    return mean, var


def normalize_stats(
    x: jax.Array,
    mean: jax.Array,
    var: jax.Array,
    scale: jax.Array | None,
    bias: jax.Array | None,
    reduction_axes: Any,
    feature_axes: Any,
    dtype: Any,
    epsilon: float,
) -> jax.Array:
    """``(x - mean) * (rsqrt(var + epsilon) * scale) + bias``, broadcast and cast to ``dtype``."""
    reduced = canonicalize_axes(x.ndim, reduction_axes)
    features = canonicalize_axes(x.ndim, feature_axes)
    stats_shape = tuple(1 if a in reduced else n for a, n in enumerate(x.shape))
    feature_shape = tuple(n if a in features else 1 for a, n in enumerate(x.shape))
    y = x - mean.reshape(stats_shape)
    multiplier = lax.rsqrt(var.reshape(stats_shape) + epsilon)
    present = [x]
    if scale is not None:
        scale = scale.reshape(feature_shape)
        multiplier = multiplier * scale
        present.append(scale)
    y = y * multiplier
    if bias is not None:
        bias = bias.reshape(feature_shape)
        y = y + bias
        present.append(bias)
    return jnp.asarray(y, canonicalize_dtype(*present, dtype=dtype))


def l2_normalize_array(x: jax.Array, axis: Any = None, eps: float = 1e-12) -> jax.Array:
    """``x / sqrt(sum(x²) over axis + eps)`` (``axis=None``: over every entry)."""
    return x * lax.rsqrt((x * x).sum(axis=axis, keepdims=True) + eps)


class NormBase(Module):
    """Parameters and dtype handling shared by the normalization layers."""

    _describe_fields: ClassVar[tuple[str, ...]] = ("num_features",)
    if TYPE_CHECKING:  # set by the subclasses' __init__
        num_features: int
        dtype: Any
        promote_dtype: Callable[..., Any]
        epsilon: float
        axis_name: Any
        axis_index_groups: Any
        use_fast_variance: bool

    def _init_params(
        self,
        num_features: int,
        *,
        use_scale: bool,
        use_bias: bool,
        scale_init: Initializer,
        bias_init: Initializer,
        param_dtype: Any,
        rngs: Rngs,
        scale_metadata: Mapping[str, Any],
        bias_metadata: Mapping[str, Any],
    ) -> None:
        shape = (num_features,)
        self.scale = (
            make_param(scale_init, rngs.params(), shape, param_dtype, scale_metadata)
            if use_scale
            else None
        )
        self.bias = (
            make_param(bias_init, rngs.params(), shape, param_dtype, bias_metadata)
            if use_bias
            else None
        )


def check_axes(module: Any, x: jax.Array, axes: Any) -> None:
    """Raises ``LayerShapeError`` if an axis of ``axes`` is out of range for ``x``."""
    for axis in axes if isinstance(axes, Iterable) else (axes,):
        normalize_axis(module, axis, x.ndim, x.shape)


def check_features(module: Any, x: jax.Array, axes: Any, *params: jax.Array | None) -> None:
    """Raises ``LayerShapeError`` unless ``x``'s ``axes`` multiply to the first given parameter's size."""
    sizes = [p.size for p in params if p is not None]
    if not sizes:
        return
    given = axes if isinstance(axes, Iterable) else (axes,)
    features = sorted({normalize_axis(module, a, x.ndim, x.shape) for a in given})
    if math.prod(x.shape[a] for a in features) != sizes[0]:
        where = (
            "last dimension"
            if features == [x.ndim - 1]
            else f"feature axes {tuple(given)} of total size"
        )
        raise shape_error(module, f"inputs with {where} {sizes[0]}", x.shape)


__all__ = ["NormBase"]
