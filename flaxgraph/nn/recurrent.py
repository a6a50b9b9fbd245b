"""Recurrent layers: the cells ``LSTMCell``, ``GRUCell``, ``SimpleCell``, and
``RNN``/``Bidirectional`` that run a cell over a sequence.

A cell maps ``(carry, x_t) -> (new_carry, y_t)`` for one time step;
``cell.initialize_carry(input_shape)`` builds the initial carry for inputs of
shape ``(*batch, features)``. ``RNN(cell)`` runs the cell over the time axis
with flaxgraph's ``nnx.scan`` (one compiled step, not a Python loop), carrying
the cell's own state too (e.g. a dropout stream inside the cell advances every
step).

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> rnn = nnx.RNN(nnx.LSTMCell(3, 5, rngs=nnx.Rngs(0)))
  >>> rnn(jnp.ones((2, 7, 3))).shape          # (batch, time, features)
  (2, 7, 5)

Source: Flax NNX ``nnx.LSTMCell``, ``nnx.GRUCell``, ``nnx.SimpleCell``,
``nnx.RNN``, ``nnx.Bidirectional`` (0.12) public signatures and documented
equations; Hochreiter & Schmidhuber 1997, Cho et al. 2014.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from flaxgraph.filters import Filter
from flaxgraph.module import Module
from flaxgraph.nn.common import EMPTY_METADATA, first_from
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import LayerShapeError, check_last_dim, check_min_rank, describe
from flaxgraph.nn.initializers import lecun_normal, orthogonal, zeros
from flaxgraph.nn.linear import Linear
from flaxgraph.nn.stochastic import own_stream
from flaxgraph.rngs import Rngs, RngStream
from flaxgraph.transforms.lift_types import StateAxes
from flaxgraph.transforms.scan import Carry, scan

Dtype = Any
Initializer = Callable[..., Any]
Carry_ = Any

default_kernel_init = lecun_normal()
default_recurrent_kernel_init = orthogonal()


class RNNCellBase(Module):
    """Base class of recurrent cells.

    Subclasses define ``__call__(carry, inputs) -> (new_carry, outputs)`` and
    ``initialize_carry(input_shape, rngs=None)``, and have ``in_features`` and
    ``hidden_features`` attributes.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("in_features", "hidden_features")

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of an input are features (1)."""
        return 1

    def _init_carry_part(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None,
        carry_init: Initializer | None,
    ) -> jax.Array:
        batch = tuple(input_shape)[: len(input_shape) - self.num_feature_axes]
        init = carry_init if carry_init is not None else self.carry_init
        if isinstance(rngs, Rngs):
            key = rngs["carry"]()
        elif isinstance(rngs, RngStream):
            key = rngs()
        elif self.rngs is not None:
            key = self.rngs()
        else:
            key = jax.random.key(0)  # the default zeros init ignores it
        return init(key, (*batch, self.hidden_features), self.param_dtype)  # type: ignore[no-any-return]

    def _check(self, h: jax.Array, inputs: jax.Array) -> None:
        check_last_dim(self, inputs, self.in_features)
        if h.shape[-1] != self.hidden_features or h.shape[:-1] != inputs.shape[:-1]:
            raise LayerShapeError(
                f"{describe(self)} expected a carry of shape {(*inputs.shape[:-1], self.hidden_features)} "
                f"for inputs of shape {tuple(inputs.shape)}, got shape {tuple(h.shape)}.",
                self,
            )

    def _store_common(
        self,
        in_features: int,
        hidden_features: int,
        gate_fn: Callable[..., Any],
        activation_fn: Callable[..., Any],
        dtype: Any,
        param_dtype: Any,
        carry_init: Initializer | None,
        keep_rngs: bool,
        rngs: Rngs,
    ) -> None:
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.carry_init = zeros if carry_init is None else carry_init
        self.rngs = own_stream(rngs, "carry") if keep_rngs else None


class LSTMCell(RNNCellBase):
    r"""Long short-term memory cell.

    With input ``x``, carry ``(c, h)``::

      i = gate_fn(ii(x) + hi(h))        # input gate
      f = gate_fn(if_(x) + hf(h))       # forget gate
      g = activation_fn(ig(x) + hg(h))  # candidate
      o = gate_fn(io(x) + ho(h))        # output gate
      c' = f * c + i * g
      h' = o * activation_fn(c')

    ``ii, if_, ig, io`` are ``Linear(in_features, hidden_features)`` without bias,
    ``hi, hf, hg, ho`` are ``Linear(hidden_features, hidden_features)`` with bias.

    Args:
      in_features, hidden_features: the input and hidden sizes.
      gate_fn: default ``sigmoid``; activation_fn: default ``tanh``.
      kernel_init: the input kernels' initializer (default ``lecun_normal()``).
      recurrent_kernel_init: the hidden kernels' (default ``orthogonal()``).
      bias_init: default ``zeros``.
      dtype, param_dtype, promote_dtype: as in ``Linear``.
      carry_init: the carry's initializer (default ``zeros``).
      keep_rngs: keep a fork of the ``carry`` stream for ``initialize_carry``.
      rngs: an ``nnx.Rngs``.
      kernel_metadata, recurrent_kernel_metadata, bias_metadata: Param metadata.

    Call: ``carry = (c, h)`` each ``(*batch, hidden_features)`` and ``inputs``
    ``(*batch, in_features)``; returns ``((c', h'), h')``.

    Raises:
      LayerShapeError: inputs or carry of the wrong shape.

    Source: Flax NNX ``nnx.LSTMCell``.
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
        self._check(h, inputs)
        self._check(c, inputs)
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
        """The initial ``(c, h)``, each ``(*batch, hidden_features)`` for inputs of
        shape ``(*batch, in_features)``. Keys come from ``rngs`` (its ``carry``
        stream), else the kept stream, else a fixed key (fine for the default
        ``zeros``)."""
        c = self._init_carry_part(input_shape, rngs, carry_init)
        h = self._init_carry_part(input_shape, rngs, carry_init)
        return c, h


class GRUCell(RNNCellBase):
    r"""Gated recurrent unit cell.

    With input ``x`` and carry ``h``, ``dense_i = Linear(in, 3 * hidden)`` (with
    bias) and ``dense_h = Linear(hidden, 3 * hidden)`` (no bias), each output split
    into ``(r, z, n)`` parts::

      r = gate_fn(x_r + h_r)            # reset gate
      z = gate_fn(x_z + h_z)            # update gate
      n = activation_fn(x_n + r * h_n)  # candidate
      h' = (1 - z) * n + z * h

    Args: as ``LSTMCell``.

    Call: ``carry`` ``(*batch, hidden_features)`` and ``inputs`` ``(*batch,
    in_features)``; returns ``(h', h')``.

    Raises:
      LayerShapeError: inputs or carry of the wrong shape.

    Source: Flax NNX ``nnx.GRUCell``; Cho et al. (2014).
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
        self._check(h, inputs)
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
        """The initial ``h`` of shape ``(*batch, hidden_features)`` (keys as in
        ``LSTMCell.initialize_carry``)."""
        return self._init_carry_part(input_shape, rngs, carry_init)


class SimpleCell(RNNCellBase):
    """Elman cell: ``h' = activation_fn(dense_i(x) + dense_h(h))`` (plus ``h`` with
    ``residual=True``); ``dense_i`` has a bias, ``dense_h`` none.

    Args: as ``GRUCell`` (no ``gate_fn``), plus ``residual``.

    Call: as ``GRUCell``; returns ``(h', h')``.

    Source: Flax NNX ``nnx.SimpleCell``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Dtype | None = None,
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
        self._check(carry, inputs)
        new_h = self.activation_fn(self.dense_i(inputs) + self.dense_h(carry))
        if self.residual:
            new_h = new_h + carry
        return new_h, new_h

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> jax.Array:
        """The initial ``h`` of shape ``(*batch, hidden_features)``."""
        return self._init_carry_part(input_shape, rngs, carry_init)


def flip_sequences(
    inputs: jax.Array, seq_lengths: jax.Array | None, num_batch_dims: int
) -> jax.Array:
    """Reverses time-major ``inputs`` ``(time, *batch, *features)`` along time; with
    ``seq_lengths`` (shape ``batch``) only the first ``seq_lengths[b]`` steps of
    each sequence are reversed, the padding stays in place."""
    if seq_lengths is None:
        return jnp.flip(inputs, axis=0)
    steps = inputs.shape[0]
    t = jnp.reshape(jnp.arange(steps), (steps,) + (1,) * num_batch_dims)
    lengths = jnp.asarray(seq_lengths)[None]
    idx = jnp.where(t < lengths, lengths - 1 - t, t)
    idx = jnp.reshape(idx, idx.shape + (1,) * (inputs.ndim - idx.ndim))
    return jnp.take_along_axis(inputs, idx, axis=0)


def _keep_where(valid: jax.Array, new: Any, old: Any) -> Any:
    def select(n: jax.Array, o: jax.Array) -> jax.Array:
        v = jnp.reshape(valid, valid.shape + (1,) * (n.ndim - valid.ndim))
        return jnp.where(v, n, o)

    return jax.tree.map(select, new, old)


class RNN(Module):
    """Runs a recurrent cell over the time axis (with ``nnx.scan``).

    Args:
      cell: an ``RNNCellBase`` (``LSTMCell``, ``GRUCell``, …).
      time_major: inputs are ``(time, *batch, features)`` instead of the default
        ``(*batch, time, features)``.
      return_carry: also return the final carry: ``(carry, outputs)``.
      reverse: process the sequence from its end (the outputs are then in
        processing order, the first output is for the last step).
      keep_order: with ``reverse``, put the outputs back in input order.
      unroll: steps unrolled per scan iteration (``jax.lax.scan``'s ``unroll``).
      state_axes: how the cell's state crosses steps, ``{filter: nnx.Carry | None}``
        (default ``{...: nnx.Carry}``: all of it is carried, so a dropout stream
        inside the cell advances every step).

    Call: ``inputs``; optional ``initial_carry`` (default
    ``cell.initialize_carry`` with ``rngs``), ``seq_lengths`` (shape ``batch``: the
    carry stops changing after each sequence's length; ``reverse`` flips only the
    valid steps), and per-call ``return_carry``, ``time_major``, ``reverse``,
    ``keep_order``. Returns the stacked outputs ``(*batch, time, hidden)`` (or
    time-major), and the final carry first with ``return_carry``.

    Raises:
      LayerShapeError: inputs without time and feature axes, or a feature axis
        that does not match the cell.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> rnn = nnx.RNN(nnx.GRUCell(2, 4, rngs=nnx.Rngs(0)), return_carry=True)
      >>> carry, ys = rnn(jnp.ones((3, 6, 2)))
      >>> carry.shape, ys.shape
      ((3, 4), (3, 6, 4))

    Source: Flax NNX ``nnx.RNN``; ``jax.lax.scan`` through ``nnx.scan``.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("cell",)

    def __init__(
        self,
        cell: RNNCellBase,
        *,
        time_major: bool = False,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: int = 1,
        state_axes: Mapping[Filter, Any] | None = None,
    ):
        self.cell = cell
        self.time_major = time_major
        self.return_carry = return_carry
        self.reverse = reverse
        self.keep_order = keep_order
        self.unroll = unroll
        self.state_axes = StateAxes(state_axes if state_axes is not None else {...: Carry})

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: Carry_ | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        rngs: Rngs | RngStream | None = None,
    ) -> Any:
        return_carry = first_from(return_carry, self.return_carry, error_msg="")
        time_major = first_from(time_major, self.time_major, error_msg="")
        reverse = first_from(reverse, self.reverse, error_msg="")
        keep_order = first_from(keep_order, self.keep_order, error_msg="")
        x = jnp.asarray(inputs)
        n_features = self.cell.num_feature_axes
        layout = "time, *batch, features" if time_major else "*batch, time, features"
        check_min_rank(self, x, n_features + 1, layout)
        check_last_dim(self, x, self.cell.in_features)
        time_axis = 0 if time_major else x.ndim - n_features - 1
        x = jnp.moveaxis(x, time_axis, 0)
        n_batch = x.ndim - n_features - 1
        if initial_carry is None:
            initial_carry = self.cell.initialize_carry(tuple(x.shape[1:]), rngs)
        if reverse:
            x = flip_sequences(x, seq_lengths, n_batch)
        steps = jnp.arange(x.shape[0])

        @scan(in_axes=(self.state_axes, Carry, 0, 0, None), out_axes=(Carry, 0), unroll=self.unroll)
        def run(cell: RNNCellBase, carry: Any, x_t: jax.Array, t: jax.Array, lengths: Any) -> Any:
            new_carry, y = cell(carry, x_t)
            if lengths is not None:
                new_carry = _keep_where(t < lengths, new_carry, carry)
            return new_carry, y

        carry, ys = run(self.cell, initial_carry, x, steps, seq_lengths)
        if reverse and keep_order:
            ys = flip_sequences(ys, seq_lengths, n_batch)
        ys = jnp.moveaxis(ys, 0, time_axis)
        return (carry, ys) if return_carry else ys


def _concatenate(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.concatenate([a, b], axis=-1)


class Bidirectional(Module):
    """Runs a forward and a backward ``RNN`` over the same inputs and merges their
    outputs (concatenated on the feature axis by default).

    Args:
      forward_rnn, backward_rnn: ``RNN`` modules (the backward one is called with
        ``reverse=True, keep_order=True``).
      merge_fn: combines the two outputs (default: concatenate features).
      time_major, return_carry: as in ``RNN``.

    Call: ``inputs`` and optional ``initial_carry`` (a pair), ``seq_lengths``,
    ``return_carry``, ``time_major``; returns the merged outputs, and the pair of
    final carries first with ``return_carry``.

    Source: Flax NNX ``nnx.Bidirectional``.
    """

    def __init__(
        self,
        forward_rnn: RNN,
        backward_rnn: RNN,
        *,
        merge_fn: Callable[[jax.Array, jax.Array], jax.Array] = _concatenate,
        time_major: bool = False,
        return_carry: bool = False,
    ):
        self.forward_rnn = forward_rnn
        self.backward_rnn = backward_rnn
        self.merge_fn = merge_fn
        self.time_major = time_major
        self.return_carry = return_carry

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: tuple[Any, Any] | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        rngs: Rngs | RngStream | None = None,
    ) -> Any:
        return_carry = first_from(return_carry, self.return_carry, error_msg="")
        time_major = first_from(time_major, self.time_major, error_msg="")
        carry_f, carry_b = (None, None) if initial_carry is None else initial_carry
        common = {
            "seq_lengths": seq_lengths,
            "return_carry": True,
            "time_major": time_major,
            "rngs": rngs,
        }
        carry_f, y_f = self.forward_rnn(inputs, initial_carry=carry_f, **common)
        carry_b, y_b = self.backward_rnn(
            inputs, initial_carry=carry_b, reverse=True, keep_order=True, **common
        )
        y = self.merge_fn(y_f, y_b)
        return ((carry_f, carry_b), y) if return_carry else y
