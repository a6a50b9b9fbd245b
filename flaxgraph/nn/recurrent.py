"""Recurrent cells: ``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell``, ``SimpleCell``.

As Flax's module, it also gives ``RNNCellBase``, ``RNN``, ``Bidirectional``, ``RNNBase``,
``flip_sequences``, the initializers and the type names ``Array``, ``Carry``, ``Output``.

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> cell = nnx.LSTMCell(3, 5, rngs=nnx.Rngs(0))
>>> (c, h), y = cell(cell.initialize_carry((2, 3)), jnp.ones((2, 3)))
>>> c.shape, h.shape, y.shape
((2, 5), (2, 5), (2, 5))

Source: Flax NNX ``nnx.LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell``, ``SimpleCell``,
``modified_orthogonal`` (0.12): signatures, parameter layout, equations; Hochreiter &
Schmidhuber 1997, Cho et al. 2014.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from flaxgraph.nn.cell_base import RNNCellBase, check_carry
from flaxgraph.nn.common import EMPTY_METADATA
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.initializers import lecun_normal, orthogonal, zeros
from flaxgraph.nn.linear import Linear
from flaxgraph.nn.rnn import RNN, Bidirectional, RNNBase, flip_sequences
from flaxgraph.nn.rnn import concat_last_axis as _concatenate  # noqa: F401 (Flax's path)
from flaxgraph.nn.rnn import expand_dims_like as _expand_dims_like  # noqa: F401 (Flax's path)
from flaxgraph.nn.rnn import select_last_carry as _select_last_carry  # noqa: F401 (Flax's path)
from flaxgraph.rnglib.rngs import Rngs, RngStream
from flaxgraph.typing import PromoteDtypeFn as PromoteDtypeFn
from flaxgraph.typing import Shape as Shape

A = TypeVar("A")
Dtype = Any
Initializer = Callable[..., Any]
Array = jax.Array
Output = Any  # what a cell or an RNN returns for one step or a sequence (any pytree)
Carry = Any  # the state a cell passes from one step to the next (any pytree)

default_kernel_init = lecun_normal()
default_bias_init = zeros


def modified_orthogonal(
    key: jax.Array, shape: Sequence[int], dtype: Dtype = jnp.float32
) -> jax.Array:
    """An orthogonal matrix computed in ``float32`` and cast to ``dtype`` (QR has no half precision).

    Args:
      key: a PRNG key.
      shape: the matrix shape (the last axis is the column axis).
      dtype: the result's dtype (default ``float32``).

    Returns:
      An array of ``shape`` and ``dtype``.

    >>> import jax, jax.numpy as jnp
    >>> from flaxgraph.nn.recurrent import modified_orthogonal
    >>> modified_orthogonal(jax.random.key(0), (3, 3), jnp.bfloat16).dtype
    dtype(bfloat16)
    """
    return orthogonal()(key, tuple(shape), jnp.float32).astype(dtype)


default_recurrent_kernel_init = orthogonal()


class LSTMCell(RNNCellBase):
    r"""Long short-term memory cell.

    With input ``x`` and carry ``(c, h)``: ``i, f, o = gate_fn(..)``, ``g = activation_fn(..)``
    of ``Linear`` input projections ``ii, if_, ig, io`` (no bias) plus hidden ones
    ``hi, hf, hg, ho`` (with bias); ``c' = f * c + i * g``, ``h' = o * activation_fn(c')``.

    Args:
      in_features, hidden_features: the input and hidden sizes.
      gate_fn: default ``sigmoid``; activation_fn: default ``tanh``.
      kernel_init: input kernels' initializer (default ``lecun_normal()``).
      recurrent_kernel_init: hidden kernels' (default ``modified_orthogonal``).
      bias_init: default ``zeros``.
      dtype, param_dtype, promote_dtype: as in ``Linear``.
      carry_init: the carry's initializer (default ``zeros``).
      keep_rngs: keep a fork of the ``carry`` stream for ``initialize_carry``.
      rngs: an ``nnx.Rngs``.
      kernel_metadata, recurrent_kernel_metadata, bias_metadata: Param metadata.

    Call: ``carry = (c, h)``, each ``(*batch, hidden_features)``, and ``inputs``
    ``(*batch, in_features)``; returns ``((c', h'), h')``.

    Raises:
      LayerShapeError: inputs or carry of the wrong shape.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[..., Any] = jax.nn.sigmoid,
        activation_fn: Callable[..., Any] = jax.nn.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = modified_orthogonal,
        bias_init: Initializer = zeros,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: Callable[..., Any] = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        def dense_i() -> Linear:
            return Linear(
                in_features,
                hidden_features,
                use_bias=False,
                kernel_init=kernel_init,
                dtype=dtype,
                param_dtype=param_dtype,
                promote_dtype=promote_dtype,
                rngs=rngs,
                kernel_metadata=kernel_metadata,
            )

        def dense_h() -> Linear:
            return Linear(
                hidden_features,
                hidden_features,
                use_bias=True,
                kernel_init=recurrent_kernel_init,
                bias_init=bias_init,
                dtype=dtype,
                param_dtype=param_dtype,
                promote_dtype=promote_dtype,
                rngs=rngs,
                kernel_metadata=recurrent_kernel_metadata,
                bias_metadata=bias_metadata,
            )

        self.ii, self.if_, self.ig, self.io = dense_i(), dense_i(), dense_i(), dense_i()
        self.hi, self.hf, self.hg, self.ho = dense_h(), dense_h(), dense_h(), dense_h()
        self._store_common(
            in_features,
            hidden_features,
            gate_fn,
            activation_fn,
            dtype,
            param_dtype,
            carry_init,
            keep_rngs,
            rngs,
        )

    def __call__(
        self, carry: tuple[jax.Array, jax.Array], inputs: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        c, h = carry
        check_carry(self, inputs, c, h)
        i = self.gate_fn(self.ii(inputs) + self.hi(h))
        f = self.gate_fn(self.if_(inputs) + self.hf(h))
        g = self.activation_fn(self.ig(inputs) + self.hg(h))
        o = self.gate_fn(self.io(inputs) + self.ho(h))
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """The initial ``(c, h)``, each ``(*batch, hidden_features)``, for inputs ``(*batch, in_features)``.

        Keys come from ``rngs`` (its ``carry`` stream), else the kept stream, else a fixed key.
        """
        c = self._init_carry_part(input_shape, rngs, carry_init)
        h = self._init_carry_part(input_shape, rngs, carry_init)
        return c, h


class OptimizedLSTMCell(RNNCellBase):
    r"""An LSTM cell with its gate kernels concatenated: one matrix product each for inputs and carry.

    ``LSTMCell``'s equations on ``z = x @ dense_i.kernel + h @ dense_h.kernel + dense_h.bias``
    split into ``i, f, g, o`` (in that order); ``dense_i.kernel`` is ``(in, 4 * hidden)``,
    ``dense_h.kernel`` ``(hidden, 4 * hidden)``, each initialized as one matrix.

    Args: as ``LSTMCell``, with ``recurrent_kernel_init`` defaulting to ``orthogonal()``.

    Call: as ``LSTMCell``; returns ``((c', h'), h')`` in the promoted dtype.

    Raises:
      LayerShapeError: inputs or carry of the wrong shape.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> cell = nnx.OptimizedLSTMCell(3, 4, rngs=nnx.Rngs(0))
    >>> cell.dense_i.kernel.shape, cell.dense_h.kernel.shape, cell.dense_h.bias.shape
    ((3, 16), (4, 16), (16,))
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[..., Any] = jax.nn.sigmoid,
        activation_fn: Callable[..., Any] = jax.nn.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        bias_init: Initializer = zeros,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: Callable[..., Any] = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.dense_i = Linear(
            in_features,
            4 * hidden_features,
            use_bias=False,
            kernel_init=kernel_init,
            dtype=dtype,
            param_dtype=param_dtype,
            promote_dtype=promote_dtype,
            rngs=rngs,
            kernel_metadata=kernel_metadata,
        )
        self.dense_h = Linear(
            hidden_features,
            4 * hidden_features,
            use_bias=True,
            kernel_init=recurrent_kernel_init,
            bias_init=bias_init,
            dtype=dtype,
            param_dtype=param_dtype,
            promote_dtype=promote_dtype,
            rngs=rngs,
            kernel_metadata=recurrent_kernel_metadata,
            bias_metadata=bias_metadata,
        )
        self.promote_dtype = promote_dtype
        self._store_common(
            in_features,
            hidden_features,
            gate_fn,
            activation_fn,
            dtype,
            param_dtype,
            carry_init,
            keep_rngs,
            rngs,
        )

    def __call__(
        self, carry: tuple[jax.Array, jax.Array], inputs: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        c, h = carry
        check_carry(self, inputs, c, h)
        z = self.dense_i(inputs) + self.dense_h(h)
        i, f, g, o = jnp.split(z, 4, axis=-1)
        new_c = self.gate_fn(f) * c + self.gate_fn(i) * self.activation_fn(g)
        new_h = self.gate_fn(o) * self.activation_fn(new_c)
        return (new_c, new_h), new_h

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """The initial ``(c, h)``, as ``LSTMCell.initialize_carry``."""
        c = self._init_carry_part(input_shape, rngs, carry_init)
        h = self._init_carry_part(input_shape, rngs, carry_init)
        return c, h


class GRUCell(RNNCellBase):
    r"""Gated recurrent unit cell.

    ``dense_i = Linear(in, 3 * hidden)`` (with bias) and ``dense_h = Linear(hidden, 3 *
    hidden)`` (no bias), each split into ``(r, z, n)``: ``r, z = gate_fn(x_* + h_*)``,
    ``n = activation_fn(x_n + r * h_n)``, ``h' = (1 - z) * n + z * h``.

    Args: as ``LSTMCell``.

    Call: ``carry`` ``(*batch, hidden_features)`` and ``inputs`` ``(*batch, in_features)``;
    returns ``(h', h')``.

    Raises:
      LayerShapeError: inputs or carry of the wrong shape.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[..., Any] = jax.nn.sigmoid,
        activation_fn: Callable[..., Any] = jax.nn.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        bias_init: Initializer = zeros,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: Callable[..., Any] = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.dense_i = Linear(
            in_features,
            3 * hidden_features,
            use_bias=True,
            kernel_init=kernel_init,
            bias_init=bias_init,
            dtype=dtype,
            param_dtype=param_dtype,
            promote_dtype=promote_dtype,
            rngs=rngs,
            kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
        )
        self.dense_h = Linear(
            hidden_features,
            3 * hidden_features,
            use_bias=False,
            kernel_init=recurrent_kernel_init,
            dtype=dtype,
            param_dtype=param_dtype,
            promote_dtype=promote_dtype,
            rngs=rngs,
            kernel_metadata=recurrent_kernel_metadata,
        )
        self._store_common(
            in_features,
            hidden_features,
            gate_fn,
            activation_fn,
            dtype,
            param_dtype,
            carry_init,
            keep_rngs,
            rngs,
        )

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = carry
        check_carry(self, inputs, h)
        x_r, x_z, x_n = jnp.split(self.dense_i(inputs), 3, axis=-1)
        h_r, h_z, h_n = jnp.split(self.dense_h(h), 3, axis=-1)
        r = self.gate_fn(x_r + h_r)
        z = self.gate_fn(x_z + h_z)
        n = self.activation_fn(x_n + r * h_n)
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> jax.Array:
        """The initial ``h``, ``(*batch, hidden_features)`` (keys as ``LSTMCell.initialize_carry``)."""
        return self._init_carry_part(input_shape, rngs, carry_init)


class SimpleCell(RNNCellBase):
    """Elman cell: ``h' = activation_fn(dense_i(x) + dense_h(h) [+ h with residual])``.

    Args: as ``GRUCell`` (no ``gate_fn``), plus ``residual``; ``dtype`` defaults to
    ``float32``, as in Flax NNX.

    Call: as ``GRUCell``; returns ``(h', h')``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Dtype | None = jnp.float32,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        residual: bool = False,
        activation_fn: Callable[..., Any] = jax.nn.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        bias_init: Initializer = zeros,
        promote_dtype: Callable[..., Any] = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        # the recurrent kernel is drawn first, as in Flax NNX (same key, same Params)
        self.dense_h = Linear(
            hidden_features,
            hidden_features,
            use_bias=False,
            kernel_init=recurrent_kernel_init,
            dtype=dtype,
            param_dtype=param_dtype,
            promote_dtype=promote_dtype,
            rngs=rngs,
            kernel_metadata=recurrent_kernel_metadata,
        )
        self.dense_i = Linear(
            in_features,
            hidden_features,
            kernel_init=kernel_init,
            bias_init=bias_init,
            dtype=dtype,
            param_dtype=param_dtype,
            promote_dtype=promote_dtype,
            rngs=rngs,
            kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
        )
        self.residual = residual
        self._store_common(
            in_features,
            hidden_features,
            jax.nn.sigmoid,
            activation_fn,
            dtype,
            param_dtype,
            carry_init,
            keep_rngs,
            rngs,
        )

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        check_carry(self, inputs, carry)
        pre = self.dense_i(inputs) + self.dense_h(carry)
        if self.residual:
            pre = pre + carry
        new_h = self.activation_fn(pre)
        return new_h, new_h

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> jax.Array:
        """The initial ``h`` of shape ``(*batch, hidden_features)``."""
        return self._init_carry_part(input_shape, rngs, carry_init)


__all__ = [
    "RNN",
    "Array",
    "Bidirectional",
    "Carry",
    "GRUCell",
    "LSTMCell",
    "OptimizedLSTMCell",
    "Output",
    "RNNBase",
    "RNNCellBase",
    "SimpleCell",
    "default_bias_init",
    "default_kernel_init",
    "default_recurrent_kernel_init",
    "flip_sequences",
    "modified_orthogonal",
    "PromoteDtypeFn",
    "Shape",
]
