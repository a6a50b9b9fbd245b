"""Object-shaped prefixes in every transform: ``nnx.prefix`` results (a NodeStates in
graph mode, a prefix-valued copy of the object in tree mode) and States give each
Variable the prefix at its own path; the checks made when a transform is created.

Differential: a per-path prefix must act exactly as the StateAxes with the same
filters (or as plain jax.vmap over the arrays).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx


class Pair(nnx.Module):
    def __init__(self, a: jax.Array, b: jax.Array) -> None:
        self.a = nnx.Param(a)
        self.b = nnx.BatchStat(b)


def forward(m: Pair, x: jax.Array) -> jax.Array:
    return m.a[...] * x + m.b[...]


@pytest.mark.parametrize("graph", [True, False])
@given(axis_a=st.sampled_from([0, None]), axis_b=st.sampled_from([0, None]))
@settings(max_examples=8, deadline=None)
def test_prefix_acts_as_the_state_axes_with_the_same_filters(
    graph: bool, axis_a: int | None, axis_b: int | None
) -> None:
    m = Pair(
        jnp.arange(4.0) if axis_a == 0 else jnp.array(2.0),
        jnp.arange(4.0) * 10 if axis_b == 0 else jnp.array(1.0),
    )
    x = jnp.arange(4.0)
    axes = nnx.prefix(m, {nnx.Param: axis_a, nnx.BatchStat: axis_b}, graph=graph)
    y = nnx.vmap(forward, in_axes=(axes, 0), graph=graph, graph_updates=False)(m, x)
    reference = nnx.vmap(
        forward, in_axes=(nnx.StateAxes({nnx.Param: axis_a, nnx.BatchStat: axis_b}), 0)
    )(m, x)
    np.testing.assert_allclose(y, reference)


def test_prefix_as_out_axes_places_each_variable_axis() -> None:
    abstract = nnx.eval_shape(lambda: Pair(jnp.ones(3), jnp.ones(3)))
    axes = nnx.prefix(abstract, {nnx.Param: 0, nnx.BatchStat: 1}, graph=True)

    @nnx.vmap(out_axes=axes, axis_size=5, graph=True, graph_updates=False)
    def create() -> Pair:
        return Pair(jnp.ones(3), jnp.ones(3))

    m = create()
    assert m.a.shape == (5, 3) and m.b.shape == (3, 5)


def test_references_of_a_shared_object_take_the_first_prefix() -> None:
    m = Pair(jnp.arange(4.0), jnp.arange(4.0))
    p1, p2 = nnx.prefix((m, m), {...: 0}, graph=True)

    @nnx.vmap(in_axes=(p1, p2), graph=True)
    def f(m1: Pair, m2: Pair) -> jax.Array:
        assert m1 is m2
        return m1.a[...] + m2.b[...]

    np.testing.assert_allclose(f(m, m), 2 * jnp.arange(4.0))


def test_state_prefix_over_a_state_argument() -> None:
    P = jax.sharding.PartitionSpec
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("a",))
    _, state = nnx.split(Pair(jnp.ones((2,)), jnp.ones((2,))))
    specs = nnx.State({"a": P("a"), "b": P()})

    @nnx.shard_map(mesh=mesh, in_specs=(specs,), out_specs=P(), graph_updates=False)
    def total(s: nnx.State) -> jax.Array:
        return jax.lax.psum(s["a"][...].sum(), "a") + s["b"][...].sum()

    np.testing.assert_allclose(total(state), 4.0)


def test_tree_mode_prefix_covering_rngs() -> None:
    rngs = nnx.Rngs(0).split(3)
    axes = nnx.prefix(rngs, {nnx.RngState: 0}, graph=False)
    keys = nnx.vmap(lambda r: r.default(), in_axes=(axes,), graph=False)(rngs)
    assert (
        keys.shape[0] == 3 and len({tuple(np.asarray(jax.random.key_data(k))) for k in keys}) == 3
    )


def test_variable_prefixes_are_rejected_at_creation() -> None:
    with pytest.raises(ValueError, match=r"in_axes\[0\].*Variables prefixes are not supported"):
        nnx.vmap(lambda v: v, in_axes=(nnx.Variable(0),), graph=False)


def test_graph_node_prefixes_are_rejected_in_graph_mode() -> None:
    prefix = nnx.Dict(a=nnx.Param(1))
    with pytest.raises(ValueError, match="Graph nodes are not allowed as prefixes"):
        nnx.vmap(lambda x: x, in_axes=nnx.Dict(a=0), graph=True)
    with pytest.raises(ValueError, match=r"in_axes\.a .*Variables prefixes"):
        nnx.vmap(lambda x: x, in_axes=prefix, graph=False)


def test_lift_types_without_graph_updates_name_the_argument() -> None:
    axes = nnx.StateAxes({...: 0})
    with pytest.raises(ValueError, match="`out_axes` cannot contain `StateAxes` objects"):
        nnx.vmap(lambda x: x, out_axes=axes, graph=False)


def test_state_axes_map_prefix() -> None:
    axes = nnx.StateAxes({nnx.Param: 0, ...: None})
    assert axes.map_prefix(("a",), nnx.Param(1)) == 0
    assert axes.map_prefix(("b",), nnx.BatchStat(1)) is None
    with pytest.raises(ValueError, match="No filter"):
        nnx.StateAxes({nnx.Param: 0}).map_prefix(("b",), nnx.BatchStat(1))


def test_vmap_binds_keywords_to_positions_when_in_axes_covers_them() -> None:
    m = Pair(jnp.arange(3.0), jnp.zeros(3))

    @nnx.vmap(in_axes=(0, None))
    def f(m: Pair, scale: jax.Array) -> jax.Array:
        return m.a[...] * scale

    np.testing.assert_allclose(f(m, scale=jnp.array(2.0)), 2 * jnp.arange(3.0))
    with pytest.raises(ValueError, match="in_axes has 2 entries"):
        nnx.vmap(lambda a: a, in_axes=(0, None))(jnp.ones(3))


def test_broadcast_state_batched_inside_names_its_path() -> None:
    class Env(nnx.Module):
        def __init__(self) -> None:
            self.shared = nnx.BatchStat(jnp.array(0))
            self.index = nnx.Param(jnp.arange(4))

    env = Env()

    @nnx.vmap(in_axes=(nnx.StateAxes({nnx.BatchStat: None, nnx.Param: 0}),))
    def f(env: Env) -> None:
        env.shared[...] += env.index[...]

    with pytest.raises(ValueError, match=r"args\[0\]\['shared'\].*batched on axis 0"):
        f(env)
    assert int(env.shared[...]) == 0


def test_a_shared_variable_listed_once_takes_its_first_prefix() -> None:
    shared = nnx.Param(jnp.arange(4.0))
    first = Pair(jnp.arange(4.0), jnp.zeros(4))
    second = Pair(jnp.ones(4), jnp.zeros(4))
    first.a, second.a = shared, shared  # second's 'a' is a reference in nnx.prefix
    p1, p2 = nnx.prefix((first, second), {...: 0}, graph=True)

    @nnx.vmap(in_axes=(p1, p2), graph=True, graph_updates=False)
    def f(m1: Pair, m2: Pair) -> jax.Array:
        assert m1.a is m2.a
        return m1.a[...] + m2.a[...]

    np.testing.assert_allclose(f(first, second), 2 * jnp.arange(4.0))


def test_a_shared_variable_given_another_prefix_by_the_rule_is_inconsistent() -> None:
    shared = nnx.Param(jnp.ones((4, 4)))
    first = Pair(jnp.zeros(4), jnp.zeros(4))
    second = Pair(jnp.zeros(4), jnp.zeros(4))
    first.b, second.a = shared, shared  # second's 'a' is a reference in nnx.prefix
    rule = lambda path, leaf: 0 if path[0] == 0 else 1
    p1, p2 = nnx.prefix((first, second), rule, graph=True)
    before = (first.b[...], second.a[...])

    @nnx.vmap(in_axes=(p1, p2), graph=True, graph_updates=False)
    def f(m1: Pair, m2: Pair) -> jax.Array:
        return m1.b[...] + m2.a[...]

    with pytest.raises(ValueError, match="Inconsistent aliasing detected") as info:
        f(first, second)
    assert "args[0].b: 0" in str(info.value) and "args[1].a: 1" in str(info.value)
    assert first.b is second.a and first.b[...] is before[0]


@pytest.mark.parametrize("graph", [True, False])
@given(axis=st.sampled_from([0, 1]))
@settings(max_examples=4, deadline=None)
def test_prefix_of_a_lone_variable_maps_it(graph: bool, axis: int | None) -> None:
    v = nnx.Param(jnp.arange(12.0).reshape(3, 4))
    v_axes = nnx.prefix(v, {nnx.Param: axis}, graph=graph)

    @nnx.vmap(in_axes=(v_axes,), out_axes=0, graph=graph, graph_updates=False)
    def f(v: nnx.Param) -> jax.Array:
        return v[...] * 2

    expected = jax.vmap(lambda a: a * 2, in_axes=(axis,), out_axes=0)(v[...])
    np.testing.assert_allclose(f(v), expected)
