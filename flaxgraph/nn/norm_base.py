"""What the normalization layers share: moments, standardization, the affine
step and the ``scale``/``bias`` Params.

* ``moments(x, axes, ...)``: mean and variance over ``axes`` in at least
  ``float32`` (``E[x²] - E[x]²`` clipped at 0 with ``use_fast_variance``,
  ``E[(x - E[x])²]`` otherwise), optionally masked and averaged across a named
  axis (``jax.lax.pmean``).
* ``standardize``: ``(x - mean) * rsqrt(var + epsilon)``.
* ``affine``: ``y * scale + bias`` with the Params reshaped to the feature axes.
* ``NormBase``: creates ``scale``/``bias`` and checks the feature axes' size.

  >>> import jax.numpy as jnp
  >>> from flaxgraph.nn.norm_base import moments
  >>> mean, var = moments(jnp.array([[1.0, 3.0]]), (1,), axis_name=None,
  ...                     axis_index_groups=None, use_fast_variance=False, mask=None)
  >>> mean, var
  (Array([[2.]], dtype=float32), Array([[1.]], dtype=float32))

Source: Flax NNX normalization layers (0.12), documented behaviour.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.module_class import Module
from flaxgraph.nn.common import make_param
from flaxgraph.nn.dtypes import canonicalize_dtype, stats_dtype
from flaxgraph.nn.errors import normalize_axis, shape_error
from flaxgraph.rnglib.rngs import Rngs

Initializer = Callable[..., Any]


def moments(
    x: jax.Array,
    axes: tuple[int, ...],
    *,
    axis_name: Any,
    axis_index_groups: Any,
    use_fast_variance: bool,
    mask: jax.Array | None,
    use_mean: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """``(mean, var)`` of ``x`` over ``axes`` (kept as size-1 axes), in at least
    ``float32``, averaged across ``axis_name`` if given. Without ``use_mean`` the
    mean is 0 and ``var`` is ``E[x²]``."""
    x = x.astype(stats_dtype(x.dtype))

    def pmean(values: Any) -> Any:
        if axis_name is None:
            return values
        return lax.pmean(values, axis_name, axis_index_groups=axis_index_groups)

    # The means drop the reduced axes and are reshaped to ``x``'s shape with 1 on
    # them afterwards: a mean with ``keepdims`` expands by a ``broadcast_in_dim``,
    # whose transpose in the gradient is one more sum, over a size-1 axis.
    reduced = {a % x.ndim for a in axes}
    stats_shape = tuple(1 if a in reduced else n for a, n in enumerate(x.shape))

    def mean_of(v: jax.Array) -> jax.Array:
        return jnp.mean(v, axes, where=mask)

    def kept(v: jax.Array) -> jax.Array:
        return jnp.reshape(v, stats_shape)

    if not use_mean:
        mean_sq = pmean(mean_of(jnp.square(x)))
        return kept(jnp.zeros_like(mean_sq)), kept(mean_sq)
    if use_fast_variance:
        # ``x²`` is formed before either mean (the order Flax NNX uses). The order of
        # the forward operations is the order in which the gradient's terms for ``x``
        # are summed; in this order XLA fuses a deep stack of unscanned normalized
        # blocks without duplicating the backward chain into each layer's fusion
        # (compile time linear in depth, not quadratic), and the gradient's rounding is
        # Flax's.
        squares = jnp.square(x)
        mean, mean_sq = pmean((mean_of(x), mean_of(squares)))
        return kept(mean), kept(jnp.maximum(0.0, mean_sq - jnp.square(mean)))
    mean = kept(pmean(mean_of(x)))
    return mean, kept(pmean(mean_of(jnp.square(x - mean))))


def standardize(x: jax.Array, mean: jax.Array, var: jax.Array, epsilon: float) -> jax.Array:
    """``(x - mean) * rsqrt(var + epsilon)`` in the statistics' dtype."""
    return (x.astype(mean.dtype) - mean) * lax.rsqrt(var + epsilon)


def affine(
    y: jax.Array,
    scale: jax.Array | None,
    bias: jax.Array | None,
    feature_shape: tuple[int, ...],
    dtype: Any,
) -> jax.Array:
    """``y * scale + bias`` with the parameters reshaped to ``feature_shape`` (the
    inputs' shape with 1 on non-feature axes), cast to ``dtype``."""
    if scale is not None:
        y = y * jnp.reshape(scale, feature_shape).astype(y.dtype)
    if bias is not None:
        y = y + jnp.reshape(bias, feature_shape).astype(y.dtype)
    return y.astype(dtype)


class NormBase(Module):
    """Parameters and dtype handling shared by the normalization layers."""

    _describe_fields: ClassVar[tuple[str, ...]] = ("num_features",)
    if TYPE_CHECKING:  # set by the subclasses' __init__
        num_features: int
        dtype: Any
        promote_dtype: Callable[..., Any]

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

    def _params(self, x: jax.Array) -> tuple[jax.Array | None, jax.Array | None, Any]:
        scale = None if self.scale is None else self.scale.value
        bias = None if self.bias is None else self.bias.value
        x, scale, bias = self.promote_dtype((x, scale, bias), dtype=self.dtype)
        return scale, bias, canonicalize_dtype(x, scale, bias, dtype=self.dtype)

    def _feature_axes(
        self, x: jax.Array, axes: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Normalized feature axes and the broadcast shape of the parameters.

        Raises:
          LayerShapeError: the feature axes do not hold ``num_features`` entries.
        """
        feature_axes = tuple(sorted({normalize_axis(self, a, x.ndim, x.shape) for a in axes}))
        if math.prod(x.shape[a] for a in feature_axes) != self.num_features:
            where = (
                "last dimension"
                if feature_axes == (x.ndim - 1,)
                else f"feature axes {axes} of total size"
            )
            raise shape_error(self, f"inputs with {where} {self.num_features}", x.shape)
        shape = tuple(x.shape[a] if a in feature_axes else 1 for a in range(x.ndim))
        return feature_axes, shape


__all__ = ["NormBase", "affine", "moments", "standardize"]
