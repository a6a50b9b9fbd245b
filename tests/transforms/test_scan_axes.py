"""scan's checks of in_axes/out_axes, keyword arguments, and carry identity.

Each misuse raises a ValueError naming the offending entry (or path) and leaves
the caller's objects exactly as before. Behaviour per Flax NNX 0.12 ``nnx.scan``.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_unchanged, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.testing import Node

MODES = [
    {"graph": True, "graph_updates": True},
    {"graph": True, "graph_updates": False},
    {"graph": False, "graph_updates": False},
]


@pytest.mark.parametrize(
    "in_axes, out_axes, match",
    [
        ((nnx.Carry, nnx.Carry), (nnx.Carry, 0), "Found multiple Carry definitions in in_axes"),
        ((nnx.Carry, 0), (nnx.Carry, nnx.Carry), "Found multiple Carry definitions in out_axes"),
        (((nnx.Carry,), 0), (nnx.Carry, 0), r"cannot be nested: in_axes\[0\]\[0\]"),
        ((nnx.Carry, 0), (0,), "If one of in_axes or out_axes has Carry"),
        (0, (nnx.Carry, 0), "If one of in_axes or out_axes has Carry"),
        ((nnx.Carry, 0), (nnx.Carry, None), r"Cannot broadcast output state.*out_axes\[1\]"),
        (0, None, r"Cannot broadcast output state.*out_axes"),
    ],
)
@pytest.mark.parametrize("mode", MODES, ids=["updates", "no-updates", "tree"])
def test_axes_that_do_not_fit_scan_are_rejected_when_applied(in_axes, out_axes, match, mode):
    with pytest.raises(ValueError, match=match) as info:
        nnx.scan(lambda *a: a, in_axes=in_axes, out_axes=out_axes, **mode)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize("value, verb", [(None, "broadcast"), (nnx.Carry, "carry")])
def test_state_axes_in_out_axes_may_not_broadcast_or_carry(value, verb):
    with pytest.raises(ValueError, match=f"Cannot {verb} output state. Got StateAxes"):
        nnx.scan(
            lambda c, x: (c, x),
            in_axes=(nnx.Carry, 0),
            out_axes=(nnx.Carry, nnx.StateAxes({...: value})),
        )


def test_in_axes_carry_takes_exactly_one_argument():
    m = Node(n=nnx.BatchStat(jnp.array(0)))
    before, clone = snapshot(m), nnx.clone(m)
    loop = nnx.scan(lambda m, x: m, in_axes=nnx.Carry, out_axes=nnx.Carry, length=3)
    with pytest.raises(ValueError, match="When in_axes=Carry, the function must take exactly one"):
        loop(m, 0)
    assert_unchanged(m, before, clone)


@pytest.mark.parametrize("mode", MODES, ids=["updates", "no-updates", "tree"])
def test_a_body_returning_a_new_carried_variable_names_the_path(mode):
    m = Node(n=nnx.BatchStat(jnp.array(0)), w=nnx.Param(jnp.ones(2)))
    before, clone = snapshot(m), nnx.clone(m)

    def body(m: Node, x: jax.Array) -> tuple[Node, jax.Array]:
        m.n = nnx.BatchStat(m.n[...] + 1)
        return m, x

    with pytest.raises(
        ValueError,
        match=re.escape("new BatchStat at carry[0].n")
        + "(.|\n)*scan Variable identity must be preserved",
    ):
        nnx.scan(body, **mode)(m, jnp.arange(3))
    assert_unchanged(m, before, clone)


def test_with_graph_updates_a_new_carried_object_is_rejected():
    m = Node(n=nnx.BatchStat(jnp.array(0)))

    def body(m: Node, x: jax.Array) -> tuple[Node, jax.Array]:
        return Node(n=m.n), x

    with pytest.raises(ValueError, match=r"Carry references must be the same(.|\n)*carry\[0\]"):
        nnx.scan(body)(m, jnp.arange(3))
    # without graph updates a new graph node holding the same Variables is fine
    out, _ = nnx.scan(body, graph_updates=False)(m, jnp.arange(3))
    assert out.n is m.n


@pytest.mark.parametrize("mode", MODES, ids=["updates", "no-updates", "tree"])
def test_the_returned_carry_holds_the_callers_variables(mode):
    count = nnx.Variable(jnp.array(0))

    @nnx.scan(**mode)
    def f(count: nnx.Variable, x: jax.Array) -> tuple[nnx.Variable, jax.Array]:
        count[...] += 1
        return count, x + count[...]

    out, ys = f(count, jnp.arange(5))
    assert out is count and int(count[...]) == 5
    np.testing.assert_array_equal(ys, [1, 3, 5, 7, 9])


class Stack(nnx.Module):
    def __init__(self, n: int):
        self.w = nnx.Param(jnp.arange(float(n)))

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.w


def test_keyword_arguments_are_bound_to_the_positions_in_axes_covers():
    f = nnx.scan(lambda c, x: (c + x, c), in_axes=(nnx.Carry, 0))
    carry, ys = f(jnp.array(0.0), x=jnp.arange(4.0))
    assert float(carry) == 6.0
    np.testing.assert_array_equal(ys, [0.0, 0.0, 1.0, 3.0])
    # on a method: self is scanned, x is the carry, given by keyword
    assert float(Stack(4)(x=jnp.array(1.0))) == 7.0
    # a default fills its position too
    xs = jnp.arange(3.0)
    g = nnx.scan(lambda c, x=xs: (c + x, x), in_axes=(nnx.Carry, 0))
    carry, ys = g(jnp.array(1.0))
    assert float(carry) == 4.0
    np.testing.assert_array_equal(ys, [0.0, 1.0, 2.0])


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 5),
    reverse=st.booleans(),
    unroll=st.sampled_from([1, 2, True]),
    out_axis=st.sampled_from([0, 1]),
)
def test_scan_matches_a_python_loop(n: int, reverse: bool, unroll: Any, out_axis: int):
    xs = jnp.arange(n * 2.0).reshape(n, 2)
    acc = Node(total=nnx.BatchStat(jnp.zeros(2)))

    @nnx.scan(
        in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, out_axis), reverse=reverse, unroll=unroll
    )
    def step(acc: Node, x: jax.Array) -> tuple[Node, jax.Array]:
        acc.total[...] = acc.total[...] * 2 + x
        return acc, acc.total[...]

    out, ys = step(acc, xs)
    total, expected = np.zeros(2), []
    for x in np.asarray(xs)[::-1] if reverse else np.asarray(xs):
        total = total * 2 + x
        expected.append(total)
    if reverse:
        expected = expected[::-1]
    assert out is acc
    np.testing.assert_allclose(acc.total[...], total)
    np.testing.assert_allclose(ys, np.moveaxis(np.stack(expected), 0, out_axis))
