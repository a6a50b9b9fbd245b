"""Linear layers: ``Linear``, ``LinearGeneral`` and ``Einsum``.

As Flax's module, it also gives ``Conv``, ``ConvTranspose``, ``canonicalize_padding``
(from ``conv``), ``Embed``, ``default_embed_init`` (from ``embed``) and the type names
``Array``, ``Axis``, ``Size``.

Source: Flax NNX ``nnx.Linear``, ``nnx.LinearGeneral``, ``nnx.Einsum`` (0.12):
signatures and behaviour; ``jax.lax.dot_general``, ``jnp.einsum``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.module_class import Module
from flaxgraph.nn.common import (
    EMPTY_METADATA,
    broadcast_right,
    canonicalize_tuple,
    make_param,
    make_reshaped_param,
    op_options,
)
from flaxgraph.nn.conv import Conv as Conv
from flaxgraph.nn.conv import ConvTranspose as ConvTranspose
from flaxgraph.nn.conv import canonicalize_padding as canonicalize_padding
from flaxgraph.nn.conv import conv_dimension_numbers as _conv_dimension_numbers  # noqa: F401 (Flax's path)
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.embed import Embed as Embed
from flaxgraph.nn.embed import default_embed_init as default_embed_init
from flaxgraph.nn.errors import check_last_dim, normalize_axis, shape_error
from flaxgraph.nn.initializers import lecun_normal, zeros
from flaxgraph.rnglib.rngs import Rngs
from flaxgraph.typing import ConvGeneralDilatedT as ConvGeneralDilatedT
from flaxgraph.typing import DotGeneralT as DotGeneralT
from flaxgraph.typing import EinsumT as EinsumT
from flaxgraph.typing import LaxPadding as LaxPadding
from flaxgraph.typing import PaddingLike as PaddingLike
from flaxgraph.typing import PrecisionLike as PrecisionLike
from flaxgraph.typing import PromoteDtypeFn as PromoteDtypeFn
from flaxgraph.typing import Shape as Shape

default_kernel_init = lecun_normal()
default_bias_init = zeros

Dtype = Any
Initializer = Callable[..., Any]
Array = jax.Array
Axis = int  # an axis index
Size = int  # an axis length


def _normalize_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """``axes`` made non-negative for rank ``ndim`` and sorted (Flax's private name; no range check)."""
    return tuple(sorted(axis + ndim if axis < 0 else axis for axis in axes))


def _canonicalize_tuple(x: Sequence[int] | int) -> tuple[int, ...]:
    """An iterable as a tuple, anything else as a 1-tuple (Flax's private name)."""
    if isinstance(x, Iterable):
        return tuple(x)
    return (x,)


class Linear(Module):
    """A linear transformation over the last axis: ``y = x @ kernel + bias``.

    Args:
      in_features: size of the inputs' last axis.
      out_features: size of the outputs' last axis.
      use_bias: add a ``bias`` Param of shape ``(out_features,)`` (default True).
      dtype: computation dtype (default: promoted from inputs and params).
      param_dtype: parameters' dtype (default ``float32``).
      precision: ``jax.lax.Precision`` of the matrix product.
      kernel_init: ``kernel`` ``(in_features, out_features)`` initializer (``lecun_normal()``).
      bias_init: ``bias`` initializer (``zeros``).
      dot_general: the matrix-product function (default ``jax.lax.dot_general``).
      promote_dtype: the dtype promotion function.
      preferred_element_type: passed to ``dot_general``.
      rngs: ``nnx.Rngs``; ``params`` (or ``default``) draws the initializers' keys.
      kernel_metadata, bias_metadata: Param metadata, e.g. ``{'out_sharding': (None, 'model')}``.

    Call: ``inputs`` ``(..., in_features)`` returns ``(..., out_features)``; ``out_sharding``
    (default none) is passed to ``dot_general``.

    Raises:
      LayerShapeError (a ``ValueError``): the inputs' last axis is not ``in_features``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> layer = nnx.nn.Linear(2, 3, kernel_metadata={'out_sharding': (None, 'model')},
    ...                       rngs=nnx.Rngs(0))
    >>> layer.kernel.out_sharding, layer(jnp.ones((5, 2))).shape
    ((None, 'model'), (5, 3))
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("in_features", "out_features")

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        dot_general: Callable[..., jax.Array] = lax.dot_general,
        promote_dtype: Callable[..., Any] = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.kernel = make_param(
            kernel_init, rngs.params(), (in_features, out_features), param_dtype, kernel_metadata
        )
        self.bias = (
            make_param(bias_init, rngs.params(), (out_features,), param_dtype, bias_metadata)
            if use_bias
            else None
        )
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        x = jnp.asarray(inputs)
        # The kernel's own size: inside shard_map it is the local shard of in_features.
        kernel = self.kernel[...]
        check_last_dim(self, x, kernel.shape[0])
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = self.promote_dtype((x, kernel, bias), dtype=self.dtype)
        extra = op_options(self.preferred_element_type, out_sharding)
        y = self.dot_general(
            x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=self.precision, **extra
        )
        if bias is not None:
            y = y + broadcast_right(bias, y.ndim)
        return y


def _kernel_axes_check(n_in: int, axis: tuple[int, ...]) -> None:
    if len(axis) != n_in:
        raise ValueError(
            f"LinearGeneral: axis {axis} must have one entry per in_features dimension ({n_in})."
        )


class LinearGeneral(Module):
    """A linear transformation contracting several axes into several output axes.

    The kernel is ``batch_shape + in_features + out_features``, the bias
    ``batch_shape + out_features``; each index along a ``batch_axis`` has its own kernel slice.

    Args:
      in_features: size(s) of the contracted input axes (an int or a tuple).
      out_features: size(s) of the new output axes (an int or a tuple).
      axis: the input axes to contract (default ``-1``), one per ``in_features``.
      batch_axis: ``{input_axis: size}`` of axes with separate kernels (default none).
      others: as in ``Linear``; the initializers see the 2-D view
        ``(prod(batch) * prod(in), prod(out))``, as in Flax.
      dot_general: the contraction function (default ``jax.lax.dot_general``).
      dot_general_cls: a factory called at each call for the contraction; takes precedence
        over ``dot_general`` (default none).

    Call: ``inputs`` whose ``axis`` have sizes ``in_features`` (and ``out_sharding``);
    returns ``batch axes + other input axes + out_features`` (``dot_general``'s order).

    Raises:
      ValueError: at construction, ``axis`` and ``in_features`` differ in length.
      LayerShapeError: an input axis in ``axis``/``batch_axis`` is missing or mis-sized.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> nnx.nn.LinearGeneral(6, (2, 3), rngs=nnx.Rngs(0))(jnp.ones((4, 5, 6))).shape
    (4, 5, 2, 3)
    >>> out = nnx.nn.LinearGeneral((2, 3), 6, axis=(-2, -1), rngs=nnx.Rngs(0))
    >>> out(jnp.ones((4, 5, 2, 3))).shape
    (4, 5, 6)
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("in_features", "out_features", "axis")

    def __init__(
        self,
        in_features: int | Sequence[int],
        out_features: int | Sequence[int],
        *,
        axis: int | Sequence[int] = -1,
        batch_axis: Mapping[int, int] = EMPTY_METADATA,  # type: ignore[assignment]
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        precision: Any = None,
        promote_dtype: Callable[..., Any] = promote_dtype,
        dot_general: Callable[..., jax.Array] | None = None,
        dot_general_cls: Callable[[], Callable[..., jax.Array]] | None = None,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.in_features = canonicalize_tuple(in_features, "in_features")
        self.out_features = canonicalize_tuple(out_features, "out_features")
        self.axis = canonicalize_tuple(axis, "axis")
        _kernel_axes_check(len(self.in_features), self.axis)
        self.batch_axis = tuple(sorted(dict(batch_axis).items()))
        batch_shape = tuple(size for _, size in self.batch_axis)
        n_in, n_out = math.prod(self.in_features), math.prod(self.out_features)
        kernel_shape = batch_shape + self.in_features + self.out_features

        # As Flax's: one initialization of the 2-D view (prod(batch) * prod(in), prod(out))
        # (with batch axes, fan-in counts them too), the bias from a 1-D view.
        n_batch = math.prod(batch_shape)
        self.kernel = make_reshaped_param(
            kernel_init,
            rngs.params(),
            (n_batch * n_in, n_out),
            kernel_shape,
            param_dtype,
            kernel_metadata,
        )
        bias_shape = batch_shape + self.out_features
        self.bias = (
            make_reshaped_param(
                bias_init,
                rngs.params(),
                (math.prod(bias_shape),),
                bias_shape,
                param_dtype,
                bias_metadata,
            )
            if use_bias
            else None
        )
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.dot_general = dot_general
        self.dot_general_cls = dot_general_cls
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        x = jnp.asarray(inputs)
        ndim = x.ndim
        # Flax's batch_axis is a mapping, flaxgraph's sorted (axis, size) pairs: both work.
        batch_axis = tuple(sorted(dict(self.batch_axis).items()))
        axes = tuple(normalize_axis(self, a, ndim, x.shape) for a in self.axis)
        batch_dims = tuple(
            normalize_axis(self, a, ndim, x.shape, "batch axis") for a, _ in batch_axis
        )
        n_batch = len(batch_dims)
        kernel = self.kernel[...]
        bias = self.bias[...] if self.bias is not None else None
        # The check reads the kernel's shape (kernel[...] is read anyway), not self's.
        expected = tuple(kernel.shape[n_batch : n_batch + len(axes)])
        if tuple(x.shape[a] for a in axes) != expected:
            raise shape_error(self, f"inputs with sizes {expected} at axes {self.axis}", x.shape)
        for (given_axis, size), a in zip(batch_axis, batch_dims):
            if x.shape[a] != size:
                raise shape_error(
                    self, f"inputs with size {size} at batch axis {given_axis}", x.shape
                )
        x, kernel, bias = self.promote_dtype((x, kernel, bias), dtype=self.dtype)
        contract = tuple(range(n_batch, n_batch + len(axes)))
        dimension_numbers = ((axes, contract), (batch_dims, tuple(range(n_batch))))
        if self.dot_general_cls is not None:  # a fresh instance per call, as Flax's
            dot_general = self.dot_general_cls()
        elif self.dot_general is not None:
            dot_general = self.dot_general
        else:
            dot_general = lax.dot_general
        extra = op_options(self.preferred_element_type, out_sharding)
        y = dot_general(x, kernel, dimension_numbers, precision=self.precision, **extra)
        if bias is not None:
            n_free = ndim - len(axes) - n_batch
            batch_shape = bias.shape[:n_batch]
            y = y + jnp.reshape(bias, batch_shape + (1,) * n_free + self.out_features)
        return y


def _parse_einsum(einsum_str: str) -> tuple[str, str, str]:
    s = einsum_str.replace(" ", "")
    if "->" not in s or s.count(",") != 1 or s.count("->") != 1:
        raise ValueError(
            f"Einsum equation {einsum_str!r} must have the form 'inputs,kernel->outputs' "
            "(exactly two operands and an explicit output), e.g. 'btd,dnh->btnh'."
        )
    operands, out = s.split("->")
    lhs, rhs = operands.split(",")
    return lhs, rhs, out


def _letter_sizes(spec: str, shape: tuple[int, ...]) -> dict[str, int] | None:
    """Letter -> size for an einsum operand spec (``None`` if the rank cannot match)."""
    if "..." in spec:
        before, after = spec.split("...")
        if len(before) + len(after) > len(shape):
            return None
        pairs = list(zip(before, shape)) + list(zip(after, shape[len(shape) - len(after) :]))
    else:
        if len(spec) != len(shape):
            return None
        pairs = list(zip(spec, shape))
    return dict(pairs)


class Einsum(Module):
    """``y = einsum(einsum_str, inputs, kernel) + bias``.

    Args:
      einsum_str: two operands and an explicit output, e.g. ``'btd,dnh->btnh'``.
      kernel_shape: the kernel's shape (one size per letter of the kernel operand).
      bias_shape: the bias's shape (an int for one axis), aligned with the output's
        trailing axes, or ``None`` for no bias.
      others: as in ``Linear``.
      einsum_op: the einsum function (default ``jnp.einsum``).

    Call: ``inputs`` matching the first operand; ``einsum_str`` overrides the constructor's;
    ``out_sharding`` goes to ``einsum_op``. Returns the equation's output.

    Raises:
      ValueError: a malformed equation, or a ``kernel_shape`` of the wrong rank.
      LayerShapeError: the inputs' rank does not match, or a shared axis has another size.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> layer = nnx.nn.Einsum('nta,hab->nthb', (8, 2, 4), (8, 4), rngs=nnx.Rngs(0))
    >>> layer(jnp.ones((16, 11, 2))).shape
    (16, 11, 8, 4)
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("einsum_str", "kernel_shape", "bias_shape")

    def __init__(
        self,
        einsum_str: str,
        kernel_shape: Sequence[int],
        bias_shape: int | Sequence[int] | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        promote_dtype: Callable[..., Any] = promote_dtype,
        einsum_op: Callable[..., jax.Array] = jnp.einsum,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        _, kernel_spec, _ = _parse_einsum(einsum_str)
        kernel_shape = tuple(kernel_shape)
        if bias_shape is not None:
            bias_shape = canonicalize_tuple(bias_shape, "bias_shape")
        if _letter_sizes(kernel_spec, kernel_shape) is None:
            raise ValueError(
                f"Einsum: kernel_shape {kernel_shape} does not match the kernel operand "
                f"{kernel_spec!r} of {einsum_str!r}."
            )
        self.kernel = make_param(
            kernel_init, rngs.params(), kernel_shape, param_dtype, kernel_metadata
        )
        self.bias = (
            make_param(bias_init, rngs.params(), bias_shape, param_dtype, bias_metadata)
            if bias_shape is not None
            else None
        )
        self.einsum_str = einsum_str
        self.kernel_shape = kernel_shape
        self.bias_shape = bias_shape
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.einsum_op = einsum_op
        self.preferred_element_type = preferred_element_type

    def __call__(
        self, inputs: jax.Array, einsum_str: str | None = None, out_sharding: Any = None
    ) -> jax.Array:
        einsum_str = self.einsum_str if einsum_str is None else einsum_str
        lhs, rhs, _ = _parse_einsum(einsum_str)
        x = jnp.asarray(inputs)
        kernel = self.kernel[...]
        kernel_sizes = _letter_sizes(rhs, tuple(kernel.shape))
        if kernel_sizes is None:
            raise ValueError(
                f"{einsum_str!r}: the kernel operand {rhs!r} does not match the kernel shape "
                f"{tuple(kernel.shape)}."
            )
        input_sizes = _letter_sizes(lhs, tuple(x.shape))
        if input_sizes is None:
            raise shape_error(self, f"inputs matching {lhs!r} of {einsum_str!r}", x.shape)
        for letter, size in input_sizes.items():
            if kernel_sizes.get(letter, size) != size:
                raise shape_error(
                    self,
                    f"inputs with size {kernel_sizes[letter]} for {letter!r} in {lhs!r} "
                    f"(shared with the kernel)",
                    x.shape,
                )
        bias = self.bias[...] if self.bias is not None else None
        x, kernel, bias = self.promote_dtype((x, kernel, bias), dtype=self.dtype)
        extra = op_options(self.preferred_element_type, out_sharding)
        y = self.einsum_op(einsum_str, x, kernel, precision=self.precision, **extra)
        if bias is not None:
            if bias.ndim > y.ndim:
                raise shape_error(self, f"outputs of rank >= {bias.ndim} for the bias", y.shape)
            y = y + broadcast_right(bias, y.ndim)
        return y
