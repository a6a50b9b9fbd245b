"""Running a recurrent cell over a sequence: ``RNN`` and ``Bidirectional``.

See the package README, "Recurrent layers". Source: Flax NNX ``nnx.RNN``,
``nnx.Bidirectional``, ``RNNBase``, ``flip_sequences`` (0.12); ``jax.lax.scan`` through
``nnx.scan``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol, TypeVar

import jax
import jax.numpy as jnp

from flaxgraph.filterlib import All, Filter
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.module_class import Module
from flaxgraph.nn.cell_base import RNNCellBase
from flaxgraph.nn.common import first_from
from flaxgraph.nn.errors import check_last_dim, check_min_rank
from flaxgraph.nn.stochastic import own_stream
from flaxgraph.rnglib.rngs import Rngs, RngState, RngStream
from flaxgraph.rnglib.splitting import split_rngs
from flaxgraph.transforms.lift_types import StateAxes
from flaxgraph.transforms.scan import Carry, scan

Carry_ = Any


A = TypeVar("A")


def flip_sequences(
    inputs: jax.Array,
    seq_lengths: jax.Array | None,
    num_batch_dims: int,
    time_major: bool,
) -> jax.Array:
    """Reverses each sequence along the time axis, its padding kept last (an involution).

    Args:
      inputs: ``(time, *batch, *features)`` if ``time_major``, else ``(*batch, time, *features)``.
      seq_lengths: ``None`` (reverse all), or integers of shape ``batch`` in ``[0, time]``.
      num_batch_dims: how many batch axes ``inputs`` has.
      time_major: whether time is the first axis.

    Returns:
      An array of the shape and dtype of ``inputs``.

    Raises:
      TypeError: (from JAX) ``seq_lengths`` does not broadcast against the batch axes.

    >>> import jax.numpy as jnp
    >>> from flaxgraph.nn.recurrent import flip_sequences
    >>> inputs = jnp.array([[1, 0, 0], [2, 3, 0], [4, 5, 6]])
    >>> flip_sequences(inputs, jnp.array([1, 2, 3]), 1, False).tolist()
    [[1, 0, 0], [3, 2, 0], [6, 5, 4]]
    """
    time_axis = 0 if time_major else num_batch_dims
    if seq_lengths is None:
        return jnp.flip(inputs, axis=time_axis)
    steps = inputs.shape[time_axis]
    # index t of the output reads step (len - 1 - t) mod steps: the real steps
    # [0, len) reversed in place, the padding [len, steps) reversed in place.
    index_shape = [1] * (num_batch_dims + 1)
    index_shape[time_axis] = steps
    backwards = jnp.reshape(jnp.arange(steps - 1, -1, -1), index_shape)
    lengths = jnp.expand_dims(jnp.asarray(seq_lengths), axis=time_axis)
    index = (backwards + lengths) % steps
    index = jnp.reshape(index, index.shape + (1,) * (inputs.ndim - index.ndim))
    return jnp.take_along_axis(inputs, index, axis=time_axis)


class RNNBase(Protocol):
    """The type of what runs a cell over a sequence, as ``Bidirectional`` calls it (not checked).

    Call: ``inputs`` and ``RNN.__call__``'s keywords; returns the outputs, or
    ``(carry, outputs)`` with ``return_carry``.
    """

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: Any | None = None,
        rngs: Rngs | RngStream | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Any: ...


def _keep_where(valid: jax.Array, new: Any, old: Any) -> Any:
    def select(n: jax.Array, o: jax.Array) -> jax.Array:
        v = jnp.reshape(valid, valid.shape + (1,) * (n.ndim - valid.ndim))
        return jnp.where(v, n, o)

    return jax.tree.map(select, new, old)


def _last_step(seq_lengths: jax.Array, steps: int) -> jax.Array:
    """Index of each sequence's final carry: ``seq_lengths - 1``, 0 naming the last step, clamped."""
    index = jnp.asarray(seq_lengths) - 1
    index = jnp.where(index < 0, index + steps, index)
    return jnp.clip(index, 0, steps - 1)


def carry_stream(owner: str, rngs: Rngs | RngStream | bool) -> RngStream | None:
    """The stream kept for ``initialize_carry``: ``True`` a ``'carry'`` stream from key 0, ``False`` none,
    an ``Rngs``/stream a fork of it; ``TypeError`` for anything else."""
    if rngs is True:
        return RngStream(jax.random.key(0), tag="carry")
    if rngs is False or rngs is None:
        return None
    if isinstance(rngs, (Rngs, RngStream)):
        return own_stream(rngs, "carry")
    raise TypeError(
        f"{owner}: rngs must be an nnx.Rngs, an nnx.RngStream or a bool, got {type(rngs).__name__}."
    )


class RNN(Module):
    """Runs a recurrent cell over the time axis (with ``nnx.scan``).

    Args:
      cell: an ``RNNCellBase`` (``LSTMCell``, ``GRUCell``, …).
      time_major: inputs are ``(time, *batch, features)``, not ``(*batch, time, features)``.
      return_carry: also return the final carry: ``(carry, outputs)``.
      reverse: process the sequence from its end (outputs in processing order).
      keep_order: with ``reverse``, put the outputs back in input order.
      unroll: steps unrolled per scan iteration (``jax.lax.scan``'s ``unroll``).
      state_axes: ``{filter: nnx.Carry | None}`` for the cell's state (default all carried).
      rngs: the stream kept for ``initialize_carry`` (see ``carry_stream``; default True).
      broadcast_rngs: a filter of the cell's streams broadcast to every step: one key per
        call, the same at each step (e.g. a recurrent dropout mask). Default none.

    Call: ``inputs``; optional ``initial_carry`` (default ``cell.initialize_carry``),
    ``seq_lengths`` (integers of shape ``batch``: the final carry of sequence ``b`` is the
    one after step ``seq_lengths[b] - 1``), and per-call ``return_carry``, ``time_major``,
    ``reverse``, ``keep_order``. Returns the outputs ``(*batch, time, hidden)`` (or
    time-major), preceded by the final carry with ``return_carry``.

    Raises:
      LayerShapeError: inputs without time and feature axes, or a feature axis that does
        not match the cell.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> rnn = nnx.RNN(nnx.GRUCell(2, 4, rngs=nnx.Rngs(0)), return_carry=True)
    >>> carry, ys = rnn(jnp.ones((3, 6, 2)))
    >>> carry.shape, ys.shape
    ((3, 4), (3, 6, 4))
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
        broadcast_rngs: Filter = None,
        rngs: Rngs | RngStream | bool = True,
    ):
        self.cell = cell
        self.rngs = carry_stream("RNN", rngs)
        self.broadcast_rngs = broadcast_rngs
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
            initial_carry = self.cell.initialize_carry(
                tuple(x.shape[1:]), rngs if rngs is not None else self.rngs
            )
        if reverse:
            x = flip_sequences(x, seq_lengths, n_batch, time_major=True)
        steps = jnp.arange(x.shape[0])

        state_axes = self.state_axes
        if self.broadcast_rngs is not None:
            state_axes = StateAxes(
                {All(RngState, self.broadcast_rngs): None, **dict(state_axes.items())}
            )

        # with seq_lengths, each sequence's carry after its last real step is kept aside
        last = None
        if seq_lengths is not None and return_carry:
            last = _last_step(seq_lengths, x.shape[0])

        @scan(in_axes=(state_axes, Carry, 0, 0, None), out_axes=(Carry, 0), unroll=self.unroll)
        def run(cell: RNNCellBase, carries: Any, x_t: jax.Array, t: jax.Array, last: Any) -> Any:
            carry, picked = carries
            with _kept_as_is(cell, state_axes if self.broadcast_rngs is not None else None):
                carry, y = cell(carry, x_t)
            if last is not None:
                picked = _keep_where(t == last, carry, picked)
            return (carry, picked), y

        if self.broadcast_rngs is not None:
            # one fresh key per call for the broadcast streams, shared by every step
            run = split_rngs(splits=1, only=self.broadcast_rngs, squeeze=True)(run)
        picked = initial_carry if last is not None else None
        (carry, picked), ys = run(self.cell, (initial_carry, picked), x, steps, last)
        if last is not None:
            carry = picked
        if reverse and keep_order:
            ys = flip_sequences(ys, seq_lengths, n_batch, time_major=True)
        ys = jnp.moveaxis(ys, 0, time_axis)
        return (carry, ys) if return_carry else ys


@contextmanager
def _kept_as_is(cell: Module, state_axes: StateAxes | None) -> Iterator[None]:
    """Restores, after the block, the RNG state of ``cell`` that ``state_axes`` broadcasts."""
    if state_axes is None:
        yield
        return
    kept = [
        (v, v.raw_value)
        for path, v in iter_graph(cell)
        if isinstance(v, RngState) and state_axes.prefix_of(path, v) is None
    ]
    try:
        yield
    finally:
        for v, raw in kept:
            v.value = raw


def concat_last_axis(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a`` and ``b`` joined on their last axis (``Bidirectional``'s default merge)."""
    return jnp.concatenate([a, b], axis=-1)


def select_last_carry(sequence: A, seq_lengths: jax.Array) -> A:
    """From each time-major array of ``sequence``, the entry at time ``seq_lengths[b] - 1`` for each ``b``."""
    last = seq_lengths - 1

    def pick(x: jax.Array) -> jax.Array:
        return x[last, jnp.arange(x.shape[1])]

    return jax.tree.map(pick, sequence)


def expand_dims_like(x: jax.Array, target: jax.Array) -> jax.Array:
    """``x`` with trailing size-1 axes up to ``target``'s rank."""
    return x.reshape(list(x.shape) + [1] * (target.ndim - x.ndim))


class Bidirectional(Module):
    """Runs a forward and a backward ``RNN`` over the same inputs and merges their outputs.

    Args:
      forward_rnn, backward_rnn: ``RNN`` modules (backward is called with
        ``reverse=True, keep_order=True``).
      merge_fn: combines the two outputs (default: concatenate features).
      time_major, return_carry, rngs: as in ``RNN`` (the kept stream goes to both).

    Call: ``inputs``, optional ``initial_carry`` (a pair), ``rngs``, ``seq_lengths``,
    ``return_carry``, ``time_major``; returns the merged outputs, preceded by the pair of
    final carries with ``return_carry``. ``reverse``/``keep_order`` are ignored, as in Flax.
    """

    def __init__(
        self,
        forward_rnn: RNNBase,
        backward_rnn: RNNBase,
        *,
        merge_fn: Callable[[jax.Array, jax.Array], jax.Array] = concat_last_axis,
        time_major: bool = False,
        return_carry: bool = False,
        rngs: Rngs | RngStream | bool = True,
    ):
        self.rngs = carry_stream("Bidirectional", rngs)
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
        rngs: Rngs | RngStream | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Any:
        del reverse, keep_order  # accepted and ignored, as in Flax NNX 0.12
        return_carry = first_from(return_carry, self.return_carry, error_msg="")
        time_major = first_from(time_major, self.time_major, error_msg="")
        carry_f, carry_b = (None, None) if initial_carry is None else initial_carry
        rngs = rngs if rngs is not None else self.rngs
        common: dict[str, Any] = dict(
            seq_lengths=seq_lengths, return_carry=True, time_major=time_major
        )
        carry_f, y_f = self.forward_rnn(inputs, initial_carry=carry_f, rngs=rngs, **common)
        carry_b, y_b = self.backward_rnn(
            inputs, initial_carry=carry_b, rngs=rngs, reverse=True, keep_order=True, **common
        )
        y = self.merge_fn(y_f, y_b)
        return ((carry_f, carry_b), y) if return_carry else y
