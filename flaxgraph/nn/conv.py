"""Convolutions: ``Conv`` and ``ConvTranspose`` over channels-last inputs.

Inputs are ``(*batch, *spatial, features)`` with ``len(kernel_size)`` spatial axes and
zero or more batch axes; the kernel is ``(*kernel_size, in_features //
feature_group_count, out_features)``. Padding is ``'SAME'``, ``'VALID'``,
``'CIRCULAR'`` (periodic), ``'CAUSAL'`` (1-D, all on the left), an int ``p``, a
sequence of ints, or of ``(low, high)`` pairs.

Source: Flax NNX ``nnx.Conv``/``nnx.ConvTranspose``/``canonicalize_padding`` (0.12):
signatures and behaviour; ``jax.lax.conv_general_dilated``, ``jax.lax.conv_transpose``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.module_class import Module
from flaxgraph.nn.common import (
    EMPTY_METADATA,
    broadcast_right,
    canonicalize_tuple,
    expand_to,
    make_param,
    op_options,
)
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import check_last_dim, check_min_rank
from flaxgraph.nn.initializers import lecun_normal, zeros
from flaxgraph.rnglib.rngs import Rngs
from flaxgraph.typing import LaxPadding, PaddingLike

default_kernel_init = lecun_normal()
default_bias_init = zeros

Dtype = Any
Initializer = Callable[..., Any]
Padding = str | tuple[tuple[int, int], ...]


def canonicalize_padding(padding: PaddingLike, rank: int) -> LaxPadding:
    """``padding`` in a form ``jax.lax.conv_general_dilated`` accepts.

    Args:
      padding: a string (returned as is), an int ``p`` (``(p, p)`` on every axis), or
        ``rank`` entries, each an int or a ``(low, high)`` tuple.
      rank: the number of spatial axes.

    Returns:
      The string, or a list of ``rank`` ``(low, high)`` tuples of ints.

    Raises:
      ValueError: ``padding`` is none of these.

    >>> from flaxgraph.nn.linear import canonicalize_padding
    >>> canonicalize_padding(1, 2), canonicalize_padding([0, (1, 2)], 2)
    ([(1, 1), (1, 1)], [(0, 0), (1, 2)])
    """
    if isinstance(padding, str):
        return padding
    if isinstance(padding, int):
        return [(padding, padding)] * rank
    if isinstance(padding, Sequence) and len(padding) == rank:
        pairs = [
            (entry, entry) if isinstance(entry, int) else entry
            for entry in padding
            if isinstance(entry, int) or (isinstance(entry, tuple) and len(entry) == 2)
        ]
        if len(pairs) == rank:
            return pairs
    raise ValueError(
        f"Invalid padding {padding!r}: expected a string, an int, or a sequence of {rank} "
        f"entries (one per spatial axis), each an int or a (low, high) tuple."
    )


def _padding_pairs(padding: PaddingLike, rank: int) -> Padding:
    """A hashable ``padding``: an upper-case string or one ``(low, high)`` per axis (ValueError if malformed)."""
    if isinstance(padding, str):
        return padding.upper()
    entries = [padding] if isinstance(padding, int) else list(padding)
    if len(entries) == 1:
        entries = entries * rank
    if len(entries) != rank:
        raise ValueError(
            f"padding {padding!r} must have {rank} entries (one per spatial axis) or one."
        )
    pairs = []
    for entry in entries:
        if isinstance(entry, int):
            pairs.append((entry, entry))
        else:
            pair = tuple(entry)
            if len(pair) != 2 or not all(isinstance(p, int) for p in pair):
                raise ValueError(f"padding entry {entry!r} must be an int or a (low, high) pair.")
            pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def conv_dimension_numbers(input_shape: Sequence[int]) -> lax.ConvDimensionNumbers:
    """The dimension numbers of a channels-last convolution of inputs ``(batch, *spatial, features)``.

    >>> conv_dimension_numbers((8, 5, 5, 3)).lhs_spec
    (0, 3, 1, 2)
    """
    return _dimension_numbers(len(input_shape) - 2)


def _dimension_numbers(n_spatial: int) -> lax.ConvDimensionNumbers:
    """Channels-last inputs/outputs, ``(*spatial, in, out)`` kernels."""
    lhs = (0, n_spatial + 1, *range(1, n_spatial + 1))
    rhs = (n_spatial + 1, n_spatial, *range(n_spatial))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def _flatten_batch(
    module: Any, x: jax.Array, n_spatial: int, in_features: int
) -> tuple[jax.Array, tuple[int, ...] | None]:
    """Checks ``x``; returns it as ``(batch, *spatial, features)`` and the batch shape to restore (or None)."""
    check_min_rank(module, x, n_spatial + 1, f"*batch, {n_spatial} spatial axes, features")
    check_last_dim(module, x, in_features)
    if x.ndim == n_spatial + 1:
        return x[None], None
    batch_shape = tuple(x.shape[: x.ndim - n_spatial - 1])
    return jnp.reshape(x, (-1, *x.shape[x.ndim - n_spatial - 1 :])), batch_shape


def _operands(module: Any, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """The promoted inputs, (masked) kernel and bias of ``module`` (a function, so a stand-in ``self`` works)."""
    kernel = module.kernel[...]
    if module.mask is not None:
        kernel = kernel * module.mask
    bias = module.bias[...] if module.bias is not None else None
    return module.promote_dtype((x, kernel, bias), dtype=module.dtype)


def _restore_batch(y: jax.Array, batch_shape: tuple[int, ...] | None) -> jax.Array:
    if batch_shape is None:
        return y[0]
    return jnp.reshape(y, batch_shape + tuple(y.shape[1:]))


class _ConvBase(Module):
    """Shared storage and call plumbing of ``Conv`` and ``ConvTranspose``."""

    _describe_fields: ClassVar[tuple[str, ...]] = ("in_features", "out_features", "kernel_size")
    if TYPE_CHECKING:  # set by the subclasses' __init__
        mask: jax.Array | None
        dtype: Any
        promote_dtype: Callable[..., Any]
        preferred_element_type: Any

    def _init_params(
        self,
        kernel_shape: tuple[int, ...],
        out_features: int,
        use_bias: bool,
        param_dtype: Any,
        kernel_init: Initializer,
        bias_init: Initializer,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any],
        bias_metadata: Mapping[str, Any],
    ) -> None:
        self.kernel = make_param(
            kernel_init, rngs.params(), kernel_shape, param_dtype, kernel_metadata
        )
        self.bias = (
            make_param(bias_init, rngs.params(), (out_features,), param_dtype, bias_metadata)
            if use_bias
            else None
        )


class Conv(_ConvBase):
    """An N-D convolution (cross-correlation).

    Args:
      in_features: the inputs' feature (last) axis size.
      out_features: the number of output features.
      kernel_size: one int per spatial axis (an int: 1-D).
      strides: an int or one per spatial axis (default 1).
      padding: see the module docstring (default ``'SAME'``).
      input_dilation: an int or one per axis (``lhs_dilation``; default 1).
      kernel_dilation: an int or one per axis (atrous; default 1).
      feature_group_count: feature groups convolved separately (default 1).
      use_bias: add a ``bias`` Param ``(out_features,)`` (default True).
      mask: an optional array of the kernel's shape multiplied into the kernel.
      others: as in ``Linear``.
      conv_general_dilated: the convolution (default ``jax.lax.conv_general_dilated``).

    Call: ``inputs`` ``(*batch, *spatial, in_features)``, optional ``out_sharding``;
    returns ``(*batch, *out_spatial, out_features)``.

    Raises:
      ValueError: at construction, features not divisible by ``feature_group_count``,
        ``'CAUSAL'`` for a non-1-D kernel, a ``mask`` of another shape, bad ``padding``.
      LayerShapeError: fewer than ``len(kernel_size) + 1`` axes or a last axis other
        than ``in_features``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> conv = nnx.Conv(4, 4, 3, padding='CIRCULAR', feature_group_count=4,
    ...                 rngs=nnx.Rngs(0))   # depthwise, periodic, 1-D
    >>> conv.kernel.shape, conv(jnp.ones((10, 4))).shape
    ((3, 1, 4), (10, 4))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] | None = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: int | Sequence[int] | None = 1,
        kernel_dilation: int | Sequence[int] | None = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        mask: jax.Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        conv_general_dilated: Callable[..., jax.Array] = lax.conv_general_dilated,
        promote_dtype: Callable[..., Any] = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        kernel_size = canonicalize_tuple(kernel_size, "kernel_size")
        n = len(kernel_size)
        if in_features % feature_group_count or out_features % feature_group_count:
            raise ValueError(
                f"Conv: in_features ({in_features}) and out_features ({out_features}) must be "
                f"divisible by feature_group_count ({feature_group_count})."
            )
        self.padding = _padding_pairs(padding, n)
        if self.padding == "CAUSAL" and n != 1:
            raise ValueError(
                f"Conv: 'CAUSAL' padding needs a 1-D kernel, got kernel_size {kernel_size}."
            )
        kernel_shape = (*kernel_size, in_features // feature_group_count, out_features)
        if mask is not None and tuple(mask.shape) != kernel_shape:
            raise ValueError(
                f"Conv: mask shape {tuple(mask.shape)} must equal the kernel shape {kernel_shape}."
            )
        self._init_params(
            kernel_shape,
            out_features,
            use_bias,
            param_dtype,
            kernel_init,
            bias_init,
            rngs,
            kernel_metadata,
            bias_metadata,
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = expand_to(strides, n, "strides")
        self.input_dilation = expand_to(input_dilation, n, "input_dilation")
        self.kernel_dilation = expand_to(kernel_dilation, n, "kernel_dilation")
        self.feature_group_count = feature_group_count
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.conv_general_dilated = conv_general_dilated
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        x = jnp.asarray(inputs)
        n = len(self.kernel_size)
        x, batch_shape = _flatten_batch(self, x, n, self.in_features)
        padding: Any = self.padding
        dilated = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.kernel_dilation)]
        if padding == "CIRCULAR":
            pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in dilated] + [(0, 0)]
            x = jnp.pad(x, pads, mode="wrap")
            padding = "VALID"
        elif padding == "CAUSAL":
            padding = ((dilated[0] - 1, 0),)
        x, kernel, bias = _operands(self, x)
        y = self.conv_general_dilated(
            x,
            kernel,
            window_strides=self.strides,
            padding=padding,
            lhs_dilation=self.input_dilation,
            rhs_dilation=self.kernel_dilation,
            dimension_numbers=_dimension_numbers(n),
            feature_group_count=self.feature_group_count,
            precision=self.precision,
            **op_options(self.preferred_element_type, out_sharding),
        )
        if bias is not None:
            y = y + broadcast_right(bias, y.ndim)
        return _restore_batch(y, batch_shape)


def _circular_wrap(y: jax.Array, periods: Sequence[int], transpose_kernel: bool) -> jax.Array:
    """Wraps ``y`` periodically onto ``periods`` positions along each spatial axis.

    Pads each axis to whole periods, then sums them: Flax NNX 0.12.8's operations in its
    order, so the bits agree under ``jit`` (a scatter-add sums in another order).
    """
    pads = [(0, 0)]
    for size, period in zip(y.shape[1:-1], periods):
        diff = -(size - period) % (2 * period)
        small, large = diff // 2, (diff + 1) // 2
        pads.append((small, large) if transpose_kernel else (large, small))
    pads.append((0, 0))
    y = jnp.pad(y, pads)
    for axis, period in enumerate(periods, start=1):
        y = y.reshape((*y.shape[:axis], -1, period, *y.shape[axis + 1 :])).sum(axis=axis)
    return y


class ConvTranspose(_ConvBase):
    """An N-D transposed convolution (upsamples by ``strides``).

    Args:
      others: as in ``Conv``.
      strides: an int or one per spatial axis (default 1).
      padding: ``'SAME'`` (size ``input * stride``), ``'VALID'`` (``(input - 1) * stride +
        dilated_kernel``), ``'CIRCULAR'`` (the ``'VALID'`` result wrapped onto ``input *
        stride``, centred), or pairs as for ``jax.lax.conv_transpose``.
      kernel_dilation: an int or one per spatial axis (default 1).
      transpose_kernel: compute the exact transpose of a ``Conv`` with the same kernel,
        then of shape ``(*kernel_size, out_features, in_features)``.

    Call: ``inputs`` ``(*batch, *spatial, in_features)``; returns
    ``(*batch, *out_spatial, out_features)``.

    Raises:
      ValueError: at construction, ``'CAUSAL'``, a ``mask`` of another shape, bad ``padding``.
      LayerShapeError: as in ``Conv``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> up = nnx.ConvTranspose(3, 2, (2, 2), strides=2, rngs=nnx.Rngs(0))
    >>> up(jnp.ones((1, 4, 4, 3))).shape
    (1, 8, 8, 2)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] | None = None,
        *,
        padding: PaddingLike = "SAME",
        kernel_dilation: int | Sequence[int] | None = None,
        use_bias: bool = True,
        mask: jax.Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        transpose_kernel: bool = False,
        promote_dtype: Callable[..., Any] = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        kernel_size = canonicalize_tuple(kernel_size, "kernel_size")
        n = len(kernel_size)
        self.padding = _padding_pairs(padding, n)
        if self.padding == "CAUSAL":
            raise ValueError("ConvTranspose: 'CAUSAL' padding is only supported by Conv.")
        features = (out_features, in_features) if transpose_kernel else (in_features, out_features)
        kernel_shape = (*kernel_size, *features)
        if mask is not None and tuple(mask.shape) != kernel_shape:
            raise ValueError(
                f"ConvTranspose: mask shape {tuple(mask.shape)} must equal the kernel shape "
                f"{kernel_shape}."
            )
        self._init_params(
            kernel_shape,
            out_features,
            use_bias,
            param_dtype,
            kernel_init,
            bias_init,
            rngs,
            kernel_metadata,
            bias_metadata,
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = expand_to(strides, n, "strides")
        self.kernel_dilation = expand_to(kernel_dilation, n, "kernel_dilation")
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.transpose_kernel = transpose_kernel
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array) -> jax.Array:
        x = jnp.asarray(inputs)
        n = len(self.kernel_size)
        # The features check reads the kernel's shape (as Flax's, no self.in_features).
        kernel_shape = self.kernel[...].shape
        in_features = kernel_shape[-1] if self.transpose_kernel else kernel_shape[-2]
        x, batch_shape = _flatten_batch(self, x, n, in_features)
        circular = self.padding == "CIRCULAR"
        in_spatial = x.shape[1 : n + 1]
        x, kernel, bias = _operands(self, x)
        y = lax.conv_transpose(
            x,
            kernel,
            self.strides,
            "VALID" if circular else self.padding,
            rhs_dilation=self.kernel_dilation,
            dimension_numbers=_dimension_numbers(n),
            transpose_kernel=self.transpose_kernel,
            precision=self.precision,
            **op_options(self.preferred_element_type),
        )
        if circular:
            periods = [size * stride for size, stride in zip(in_spatial, self.strides)]
            y = _circular_wrap(y, periods, self.transpose_kernel)
        if bias is not None:
            y = y + broadcast_right(bias, y.ndim)
        return _restore_batch(y, batch_shape)
