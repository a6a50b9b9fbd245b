"""Drawing a broadcast random stream inside ``vmap``/``scan`` warns (flax#4195).

The thread's scripts: ``nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))`` over a
model with ``Dropout`` gives every row the same mask; a broadcast ``Rngs`` drawn in
every ``nnx.scan`` step gives every step the same numbers. Flax says nothing;
flaxgraph warns with ``nnx.RngBroadcastWarning`` naming the stream and the fix,
once per call site, unless the broadcast is marked as intended
(``nnx.split_rngs(splits=nnx.BROADCAST)``) or the randomness really varies.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(3, 32, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dropout(self.linear(x))


def _count(model: Model) -> int:
    return int(model.dropout.rngs.count.value)


def test_vmap_with_a_broadcast_dropout_stream_warns_and_names_it() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((4, 3))
    f = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))
    with pytest.warns(nnx.RngBroadcastWarning) as caught:
        y = f(model, x)
    message = str(caught[0].message)
    assert "args[0].dropout.rngs was drawn" in message
    assert "nnx.split_rngs(splits=n)" in message and "StateAxes" in message
    assert caught[0].filename == __file__  # attributed to the call site
    # The warning changes nothing: every row got the same mask, as without it.
    np.testing.assert_array_equal(y[0] == 0, y[1] == 0)


def test_the_warning_is_shown_once_per_call_site() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((4, 3))
    f = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        globals().pop("__warningregistry__", None)
        for _ in range(3):
            f(model, x)
        f(model, x)  # another call site
    assert [w.category for w in caught] == [nnx.RngBroadcastWarning] * 2
    assert caught[0].lineno != caught[1].lineno


def test_as_an_error_the_callers_objects_are_unchanged() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((4, 3))
    before = _count(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", nnx.RngBroadcastWarning)
        with pytest.raises(nnx.RngBroadcastWarning):
            nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(model, x)
    assert _count(model) == before


def test_scan_with_a_broadcast_rngs_drawn_every_step_warns() -> None:
    @nnx.scan(in_axes=(nnx.Carry, None), out_axes=(nnx.Carry, 0), length=3)
    def body(c: jax.Array, rngs: nnx.Rngs) -> tuple[jax.Array, jax.Array]:
        return c, jax.random.uniform(rngs.dropout(), ())

    with pytest.warns(nnx.RngBroadcastWarning, match=r"nnx\.scan: .* at args\[1\]\.dropout"):
        _, ys = body(jnp.zeros(()), nnx.Rngs(dropout=1))
    assert len(set(np.asarray(ys).tolist())) == 1  # the same number in every step


def _no_warning(f: Any, *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return f(*args)


def test_no_warning_where_the_randomness_varies() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((4, 3))
    axes = nnx.StateAxes({nnx.RngState: 0, ...: None})
    split = nnx.split_rngs(splits=4)(nnx.vmap(lambda m, x: m(x), in_axes=(axes, 0)))
    y = _no_warning(split, model, x)
    assert not np.array_equal(y[0] == 0, y[1] == 0)

    carry_rngs = nnx.StateAxes({nnx.RngState: nnx.Carry, ...: None})  # the fix it names

    @nnx.scan(in_axes=(nnx.Carry, carry_rngs), out_axes=(nnx.Carry, 0), length=3)
    def carried(c: jax.Array, rngs: nnx.Rngs) -> Any:
        return c, jax.random.uniform(rngs.dropout(), ())

    (_, ys) = _no_warning(lambda: carried(jnp.zeros(()), nnx.Rngs(dropout=1)))
    assert len(set(np.asarray(ys).tolist())) == 3
    # a broadcast stream that is not drawn from
    _no_warning(nnx.vmap(lambda m, x: m.linear(x), in_axes=(None, 0)), model, x)
    # a deterministic Dropout draws nothing
    model.eval()
    _no_warning(nnx.vmap(lambda m, x: m(x), in_axes=(None, 0)), model, x)


@pytest.mark.parametrize("graph_updates", [True, False])
def test_an_intended_broadcast_is_marked_with_split_rngs(graph_updates: bool) -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((4, 3))
    twin = nnx.clone(model)
    f = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))
    marked = nnx.split_rngs(splits=nnx.BROADCAST, graph_updates=graph_updates)(f)
    y = _no_warning(marked, model, x)
    with pytest.warns(nnx.RngBroadcastWarning):
        expected = f(twin, x)
    np.testing.assert_array_equal(y, expected)  # the mark changes no number
    key = model.dropout.rngs.key
    assert key.get_metadata("broadcast_rngs", None) is None  # unmarked after the call
    assert _count(model) == _count(twin)


def test_only_selects_the_streams_marked() -> None:
    rngs = nnx.Rngs(dropout=0, noise=1)

    @nnx.split_rngs(splits=nnx.BROADCAST, only="dropout")
    @nnx.vmap(in_axes=(None, 0))
    def draw(rngs: nnx.Rngs, x: jax.Array) -> jax.Array:
        return x + jax.random.uniform(rngs.dropout()) + jax.random.uniform(rngs.noise())

    with pytest.warns(nnx.RngBroadcastWarning) as caught:
        draw(rngs, jnp.ones(2))
    assert "args[0].noise was drawn" in str(caught[0].message)
    assert "dropout" not in str(caught[0].message).split("was drawn")[0]
