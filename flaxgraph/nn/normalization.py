"""Normalization layers (``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``InstanceNorm``, ``BatchNorm``).

As Flax's module, it also gives ``SpectralNorm`` and ``WeightNorm`` (from
``normalization_wrappers``). See the package README, "Normalization".

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> bn = nnx.BatchNorm(3, momentum=0.9, rngs=nnx.Rngs(0))
>>> y = bn(jnp.arange(6.0).reshape(2, 3))       # training: batch statistics
>>> bn.mean.value
Array([0.15, 0.25, 0.35], dtype=float32)

Source: Flax NNX ``nnx.LayerNorm``/``RMSNorm``/``GroupNorm``/``InstanceNorm``/
``BatchNorm`` (0.12); Ba et al. 2016, Zhang & Sennrich 2019, Wu & He 2018, Ulyanov et
al. 2016, Ioffe & Szegedy 2015.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from flaxgraph.nn.common import EMPTY_METADATA, canonicalize_tuple, first_from
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import check_min_rank
from flaxgraph.nn.initializers import ones, zeros
from flaxgraph.nn.norm_base import NormBase as NormBase
from flaxgraph.nn.norm_base import abs_sq as _abs_sq  # noqa: F401 (Flax's path)
from flaxgraph.nn.norm_base import canonicalize_axes as _canonicalize_axes
from flaxgraph.nn.norm_base import check_axes as _check_axes
from flaxgraph.nn.norm_base import check_features as _check_features
from flaxgraph.nn.norm_base import compute_stats as _compute_stats
from flaxgraph.nn.norm_base import l2_normalize_array as _l2_normalize  # noqa: F401 (Flax's path)
from flaxgraph.nn.norm_base import normalize_stats as _normalize
from flaxgraph.nn.normalization_wrappers import SpectralNorm as SpectralNorm
from flaxgraph.nn.normalization_wrappers import WeightNorm as WeightNorm
from flaxgraph.rnglib.rngs import Rngs
from flaxgraph.typing import Array as Array
from flaxgraph.typing import PromoteDtypeFn as PromoteDtypeFn
from flaxgraph.variablelib.variable import BatchStat

Dtype = Any
Initializer = Callable[..., Any]
Axes = int | Sequence[int]


def _stats(layer: NormBase, x: jax.Array, axes: Any, mask: Any, use_mean: bool = True) -> Any:
    """``compute_stats`` of ``x`` over ``axes`` as ``layer`` is configured."""
    return _compute_stats(
        x,
        axes,
        layer.dtype,
        layer.axis_name,
        layer.axis_index_groups,
        use_mean=use_mean,
        use_fast_variance=layer.use_fast_variance,
        mask=mask,
    )


def _standardize(
    layer: NormBase,
    x: jax.Array,
    scale: Any,
    bias: Any,
    reduction_axes: Any,
    feature_axes: Any,
    mask: Any,
    use_mean: bool = True,
) -> jax.Array:
    """``x`` normalized with its own statistics over ``reduction_axes``, as ``layer`` is configured."""
    mean, var = _stats(layer, x, reduction_axes, mask, use_mean)
    e = layer.epsilon
    return _normalize(x, mean, var, scale, bias, reduction_axes, feature_axes, layer.dtype, e)


class LayerNorm(NormBase):
    """Layer normalization: each example standardized over its feature axis.

    Args:
      num_features: size of the normalized features (the ``scale``/``bias`` size).
      epsilon: added to the variance (default ``1e-6``).
      dtype: output dtype (default: promoted from inputs and params).
      param_dtype: parameters' dtype (default ``float32``).
      use_bias, use_scale: learn a ``bias``/``scale`` of shape ``(num_features,)``.
      bias_init, scale_init: their initializers (``zeros``/``ones``).
      reduction_axes: axes of the statistics (default ``-1``).
      feature_axes: axes of ``scale``/``bias`` (default ``-1``); sizes multiply to
        ``num_features``.
      axis_name, axis_index_groups: average the statistics across a named axis.
      use_fast_variance: ``E[x**2] - E[x]**2`` (default) instead of ``E[(x - E[x])**2]``.
      promote_dtype: the dtype promotion function.
      rngs: ``nnx.Rngs`` for the initializers.
      bias_metadata, scale_metadata: metadata of the Params.

    Call: ``x`` whose feature axes hold ``num_features`` entries, optional boolean
    ``mask`` of ``x``'s shape; returns ``x``'s shape.

    Raises:
      LayerShapeError: the feature axes do not hold ``num_features``, or an axis is out
        of range.

    >>> import numpy as np, jax.numpy as jnp, flaxgraph as nnx
    >>> ln = nnx.LayerNorm(4, rngs=nnx.Rngs(0))
    >>> print(np.asarray(ln(jnp.array([[1.0, 2.0, 3.0, 4.0]]))).round(3))
    [[-1.342 -0.447  0.447  1.342]]
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = zeros,
        scale_init: Initializer = ones,
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
        scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self._init_params(
            num_features,
            use_scale=use_scale,
            use_bias=use_bias,
            scale_init=scale_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
            bias_metadata=bias_metadata,
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.reduction_axes = canonicalize_tuple(reduction_axes, "reduction_axes")
        self.feature_axes = canonicalize_tuple(feature_axes, "feature_axes")
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        scale = self.scale[...] if self.scale else None
        bias = self.bias[...] if self.bias else None
        _check_features(self, x, self.feature_axes, scale, bias)
        _check_axes(self, x, self.reduction_axes)
        x, scale, bias = self.promote_dtype((x, scale, bias), dtype=self.dtype)
        return _standardize(self, x, scale, bias, self.reduction_axes, self.feature_axes, mask)


class RMSNorm(LayerNorm):
    """Root-mean-square normalization: ``y = x / sqrt(mean(x**2) + epsilon) * scale``.

    Arguments, call and errors as ``LayerNorm`` (no bias).

    >>> import numpy as np, jax.numpy as jnp, flaxgraph as nnx
    >>> print(np.asarray(nnx.RMSNorm(2, rngs=nnx.Rngs(0))(jnp.array([3.0, 4.0]))).round(3))
    [0.849 1.131]
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_scale: bool = True,
        scale_init: Initializer = ones,
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        super().__init__(
            num_features,
            epsilon=epsilon,
            dtype=dtype,
            param_dtype=param_dtype,
            use_bias=False,
            use_scale=use_scale,
            scale_init=scale_init,
            reduction_axes=reduction_axes,
            feature_axes=feature_axes,
            axis_name=axis_name,
            axis_index_groups=axis_index_groups,
            use_fast_variance=use_fast_variance,
            promote_dtype=promote_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
        )

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        # as Flax NNX's RMSNorm, ``mask`` may also be given positionally
        x = jnp.asarray(x)
        scale = self.scale[...] if self.scale else None
        _check_features(self, x, self.feature_axes, scale)
        _check_axes(self, x, self.reduction_axes)
        x, scale = self.promote_dtype((x, scale), dtype=self.dtype)
        axes = self.reduction_axes
        return _standardize(self, x, scale, None, axes, self.feature_axes, mask, use_mean=False)


class GroupNorm(NormBase):
    """Group normalization: statistics per example and group of features.

    Args:
      num_features: size of the feature (last) axis.
      num_groups: number of groups (default 32); must divide ``num_features``.
      group_size: features per group, instead of ``num_groups`` (pass ``num_groups=None``).
      epsilon: added to the variance (default ``1e-6``).
      reduction_axes: further axes of the statistics (default: all but the first).
      others: as in ``LayerNorm``.

    Call: ``x`` of shape ``(..., num_features)``, optional ``mask``; returns ``x``'s shape.

    Raises:
      ValueError: at construction, both or neither of ``num_groups``/``group_size``, or a
        group count that does not divide ``num_features``.
      LayerShapeError: the last axis is not ``num_features``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> gn = nnx.GroupNorm(4, num_groups=2, rngs=nnx.Rngs(0))
    >>> gn(jnp.array([[1.0, 3.0, 10.0, 20.0]])).round(3)
    Array([[-1., 1., -1., 1.]], dtype=float32)
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("num_features", "num_groups")

    def __init__(
        self,
        num_features: int,
        num_groups: int | None = 32,
        group_size: int | None = None,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = zeros,
        scale_init: Initializer = ones,
        reduction_axes: Axes | None = None,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
        scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        if (num_groups is None) == (group_size is None):
            raise ValueError(
                "GroupNorm: give exactly one of num_groups and group_size (to use group_size, "
                "pass num_groups=None to override the default of 32)."
            )
        if group_size is not None:
            if num_features % group_size:
                raise ValueError(
                    f"GroupNorm: group_size {group_size} must divide num_features {num_features}."
                )
            num_groups = num_features // group_size
        if num_groups is None or num_groups <= 0 or num_features % num_groups:
            raise ValueError(
                f"GroupNorm: num_groups {num_groups} must be positive and divide num_features "
                f"{num_features}."
            )
        self._init_params(
            num_features,
            use_scale=use_scale,
            use_bias=use_bias,
            scale_init=scale_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
            bias_metadata=bias_metadata,
        )
        self.num_features = num_features
        self.num_groups = num_groups
        self.group_size = num_features // num_groups
        self.feature_axis = -1
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.reduction_axes = (
            None if reduction_axes is None else canonicalize_tuple(reduction_axes, "reduction_axes")
        )
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        if self.reduction_axes is not None:
            reduction_axes = self.reduction_axes
        else:
            reduction_axes = (*range(1, x.ndim - 1), -1)
        _check_axes(self, x, reduction_axes)
        reduction_axes = _canonicalize_axes(x.ndim, reduction_axes)
        if x.ndim - 1 not in reduction_axes:
            raise ValueError(
                f"GroupNorm: reduction_axes {self.reduction_axes} must include the feature "
                "(last) axis."
            )
        group_shape = (*x.shape[:-1], self.num_groups, self.group_size)
        if mask is not None:
            mask = mask.reshape((*mask.shape[:-1], self.num_groups, self.group_size))
        scale = self.scale[...] if self.scale else None
        bias = self.bias[...] if self.bias else None
        _check_features(self, x, (self.feature_axis,), scale, bias)
        x, scale, bias = self.promote_dtype((x, scale, bias), dtype=self.dtype)
        mean, var = _stats(self, x.reshape(group_shape), [*reduction_axes[:-1], -1], mask)
        # the statistics come per (batch, group): each group's repeated over its features
        mean = jnp.repeat(mean, self.group_size, axis=1)
        var = jnp.repeat(var, self.group_size, axis=1)
        return _normalize(
            x, mean, var, scale, bias, reduction_axes[:-1], (self.feature_axis,), self.dtype,
            self.epsilon,
        )  # fmt: skip


class InstanceNorm(NormBase):
    """Instance normalization: statistics per example and feature, over every other axis but the batch's.

    Args:
      num_features: total size of the feature axes (the ``scale``/``bias`` size).
      epsilon: added to the variance (default ``1e-6``).
      feature_axes: axes of ``scale``/``bias``, not reduced (default ``-1``).
      others: as in ``LayerNorm``.

    Call: ``x`` of rank >= 2 (batch first), optional boolean ``mask``; returns ``x``'s
    shape in the promoted dtype (or ``dtype``).

    Raises:
      LayerShapeError: the feature axes do not hold ``num_features``, an axis is out of
        range, or ``x`` has no axis besides the batch axis.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> x = jnp.array([[[1.0, 10.0], [3.0, 30.0]]])     # (batch, length, channels)
    >>> nnx.InstanceNorm(2, rngs=nnx.Rngs(0))(x).round(3)
    Array([[[-1., -1.],
            [ 1.,  1.]]], dtype=float32)
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = zeros,
        scale_init: Initializer = ones,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
        scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self._init_params(
            num_features,
            use_scale=use_scale,
            use_bias=use_bias,
            scale_init=scale_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
            bias_metadata=bias_metadata,
        )
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.feature_axes = canonicalize_tuple(feature_axes, "feature_axes")
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        check_min_rank(self, x, 2, "batch, ..., features")
        _check_axes(self, x, self.feature_axes)
        feature_axes = _canonicalize_axes(x.ndim, self.feature_axes)
        if 0 in feature_axes:
            raise ValueError(
                f"InstanceNorm: feature_axes {self.feature_axes} include the leading axis, "
                "which is the batch axis; give feature axes after it."
            )
        reduction_axes = [i for i in range(1, x.ndim) if i not in feature_axes]
        scale = self.scale[...] if self.scale else None
        bias = self.bias[...] if self.bias else None
        _check_features(self, x, feature_axes, scale, bias)
        x, scale, bias = self.promote_dtype((x, scale, bias), dtype=self.dtype)
        return _standardize(self, x, scale, bias, reduction_axes, feature_axes, mask)


class BatchNorm(NormBase):
    """Batch normalization with running statistics.

    Training (``use_running_average=False``) uses the batch's statistics over every axis
    but ``axis`` and updates ``mean <- momentum * mean + (1 - momentum) * batch_mean``
    (and ``var`` alike); evaluation uses the running averages. ``Module.train()``/``eval()``
    set ``use_running_average``; a call argument overrides it.

    Args:
      num_features: size of the feature axis.
      use_running_average: the default mode (default False: training).
      axis: the feature axis (default ``-1``).
      momentum: decay of the running averages (default 0.99).
      epsilon: added to the variance (default ``1e-5``).
      axis_name, axis_index_groups: average the batch statistics across a named axis.
      others: as in ``LayerNorm``.

    Attributes:
      mean, var: float32 ``BatchStat`` of shape ``(num_features,)``, initially 0 and 1.

    Call: ``x`` with ``num_features`` entries on ``axis``, optional
    ``use_running_average`` and ``mask``; returns ``x``'s shape.

    Raises:
      LayerShapeError: ``x.shape[axis]`` is not ``num_features``.
      ValueError: ``use_running_average`` is None both at call and on the layer.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("num_features", "axis")

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool | None = False,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = zeros,
        scale_init: Initializer = ones,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
        scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.mean = BatchStat(jnp.zeros((num_features,), jnp.float32))
        self.var = BatchStat(jnp.ones((num_features,), jnp.float32))
        self._init_params(
            num_features,
            use_scale=use_scale,
            use_bias=use_bias,
            scale_init=scale_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
            scale_metadata=scale_metadata,
            bias_metadata=bias_metadata,
        )
        self.num_features = num_features
        self.use_running_average = use_running_average
        self.axis = axis
        self.momentum = momentum
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def set_view(self, use_running_average: bool | None = None) -> None:
        """Used by ``nnx.view`` to configure a copy of the layer.

        Args:
          use_running_average: if True, the stored batch statistics will be
            used instead of computing the batch statistics on the input.
        """
        if use_running_average is not None:
            self.use_running_average = use_running_average

    def __call__(
        self,
        x: jax.Array,
        use_running_average: bool | None = None,
        *,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        x = jnp.asarray(x)
        use_running_average = first_from(
            use_running_average,
            self.use_running_average,
            error_msg="BatchNorm: use_running_average is None on the layer and in the call; "
            "pass use_running_average=True/False or call .train()/.eval().",
        )
        _check_axes(self, x, (self.axis,))
        feature_axes = _canonicalize_axes(x.ndim, self.axis)
        reduction_axes = tuple(i for i in range(x.ndim) if i not in feature_axes)
        scale = self.scale[...] if self.scale is not None else None
        bias = self.bias[...] if self.bias is not None else None
        _check_features(self, x, feature_axes, self.mean[...])
        x, mean, var, scale, bias = self.promote_dtype(
            (x, self.mean[...], self.var[...], scale, bias), dtype=self.dtype
        )
        if not use_running_average:
            mean, var = _stats(self, x, reduction_axes, mask)
            # the running statistics carry no gradient, as in Flax NNX 0.12
            stop = jax.lax.stop_gradient
            self.mean[...] = stop(self.momentum * self.mean[...] + (1 - self.momentum) * mean)
            self.var[...] = stop(self.momentum * self.var[...] + (1 - self.momentum) * var)
        return _normalize(
            x, mean, var, scale, bias, reduction_axes, feature_axes, self.dtype, self.epsilon
        )
