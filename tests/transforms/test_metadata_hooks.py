"""Tests of flaxgraph/transforms/metadata_hooks.py: ``transform_metadata``."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.testing import (
    MutationStep,
    apply_mutations,
    assert_graphs_equal,
    graphs,
    mutations,
)


class Stack(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones((4, 3)), out_sharding=("layers", "model"))
        self.b = nnx.BatchStat(jnp.zeros((4,)), out_sharding=("layers",))
        self.plain = nnx.Param(jnp.ones((4,)))


@given(
    names=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=4),
    data=st.data(),
)
def test_inside_the_axis_is_removed_and_afterwards_restored(names: list[Any], data: Any) -> None:
    axis = data.draw(st.integers(-len(names), len(names) - 1))
    names[axis] = "p"
    v = nnx.Param(jnp.zeros((2,) * len(names)), out_sharding=tuple(names))
    seen = []
    nnx.transform_metadata(lambda x: seen.append(x.out_sharding), in_axes=axis, partition="p")(v)
    expected = list(names)
    del expected[axis]
    assert seen == [tuple(expected)]
    assert v.out_sharding == tuple(names) and v.value.shape == (2,) * len(names)


def test_same_metadata_inside_as_vmap_shows() -> None:
    def inside(m: Stack) -> Any:
        return (m.w.out_sharding, m.b.out_sharding)

    seen_vmap = []
    nnx.vmap(
        lambda m: seen_vmap.append(inside(m)), transform_metadata={nnx.PARTITION_NAME: "layers"}
    )(Stack())
    seen = nnx.transform_metadata(inside, partition="layers")(Stack())
    assert seen == seen_vmap[0] == (("model",), ())


def test_in_axes_none_and_state_axes() -> None:
    stack = Stack()
    f = lambda m: (m.w.out_sharding, m.b.out_sharding)
    assert nnx.transform_metadata(f, in_axes=None, partition="layers")(stack) == (
        ("layers", "model"),
        ("layers",),
    )
    axes = (nnx.StateAxes({nnx.PathContains("w"): 1, ...: None}),)
    assert nnx.transform_metadata(f, in_axes=axes, partition="model")(stack) == (
        ("layers",),
        ("layers",),
    )
    assert stack.w.out_sharding == ("layers", "model")


def test_per_argument_in_axes_and_keywords() -> None:
    def f(a: Stack, b: Stack) -> Any:
        return a.w.out_sharding, b.w.out_sharding

    g = nnx.transform_metadata(f, in_axes=(0, None), partition="layers")
    assert g(Stack(), Stack()) == (("model",), ("layers", "model"))
    assert g(Stack(), b=Stack()) == (("model",), ("layers", "model"))
    with pytest.raises(ValueError, match="in_axes has 2 entries"):
        nnx.transform_metadata(lambda a: None, in_axes=(0, None), partition="x")(Stack())


def test_updates_reach_the_caller_with_the_axis_back() -> None:
    stack = Stack()

    def step(m: Stack) -> nnx.Param:
        m.w.value = m.w.value * 3
        m.extra = nnx.Param(jnp.ones((4, 2)), out_sharding=("model",))
        return nnx.Param(jnp.zeros((3, 5)), out_sharding=("out",))

    out = nnx.transform_metadata(step, in_axes=0, out_axes=1, partition="layers")(stack)
    np.testing.assert_allclose(stack.w.value, 3 * np.ones((4, 3)))
    assert stack.w.out_sharding == ("layers", "model")
    assert stack.extra.out_sharding == ("layers", "model")  # got the in-axis on the way out
    assert out.out_sharding == ("out", "layers")


def test_returning_an_input_gives_the_callers_object() -> None:
    stack = Stack()
    out = nnx.transform_metadata(lambda m: m, partition="layers")(stack)
    assert out is stack and stack.w.out_sharding == ("layers", "model")


def test_decorator_form() -> None:
    @nnx.transform_metadata(in_axes=1, partition="model")
    def names(m: Stack) -> Any:
        return m.w.out_sharding

    assert names(Stack()) == ("layers",)


def test_bad_prefix_is_an_error_naming_it() -> None:
    with pytest.raises(nnx.PrefixError, match="in_axes"):
        nnx.transform_metadata(lambda m: None, in_axes="x", partition="p")(Stack())


def test_inconsistent_aliases_are_an_error_and_leave_the_object_alone() -> None:
    stack = Stack()
    with pytest.raises(nnx.InconsistentAliasingError, match=r"args\[0\]"):
        nnx.transform_metadata(lambda a, b: None, in_axes=(0, None), partition="p")(stack, stack)
    assert stack.w.out_sharding == ("layers", "model")


def test_same_names_inside_as_flax() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")
    v = flax_nnx.Param(jnp.ones((4, 3)), eager_sharding=False, out_sharding=("layers", "model"))
    theirs = []
    flax_nnx.transform_metadata(
        lambda x: theirs.append(x.get_metadata()["out_sharding"]), in_axes=1, partition="model"
    )(v)
    ours = nnx.transform_metadata(lambda x: x.out_sharding, in_axes=1, partition="model")(
        nnx.Param(jnp.ones((4, 3)), out_sharding=("layers", "model"))
    )
    assert theirs == [ours]


def test_a_name_other_than_partition_at_the_axis_is_an_error_naming_the_path() -> None:
    stack = Stack()
    with pytest.raises(ValueError, match=r"(?s)args\[0\]\.w.*'model'.*partition='model'"):
        nnx.transform_metadata(lambda m: m.w.value.sum(), in_axes=1, partition="layers")(stack)
    assert stack.w.out_sharding == ("layers", "model")


# -- differential: without axes, transform_metadata is an identity-like transform --------------


@given(graph=graphs(max_nodes=4, max_depth=2, max_attributes=3), steps=mutations(max_steps=4))
def test_a_mutation_program_matches_it_run_eagerly(graph: Any, steps: list[MutationStep]) -> None:
    def run(root: Any) -> Any:
        return apply_mutations(root, steps), root

    eager = nnx.clone(graph)
    eager_out = run(eager)
    out = nnx.transform_metadata(run, in_axes=None, out_axes=None, partition=None)(graph)
    assert out[1] is graph
    assert_graphs_equal((graph, out), (eager, eager_out))


@pytest.mark.parametrize("graph", [True, False])
def test_vmap_around_transform_metadata_names_the_axis_once(graph: bool) -> None:
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("a", "b"))

    def make(rngs: nnx.Rngs) -> nnx.Linear:
        return nnx.Linear(4, 6, rngs=rngs, kernel_init=init)

    inner = nnx.transform_metadata(make, in_axes=(None,), out_axes=0, partition="c", graph=graph)
    named = nnx.vmap(inner, in_axes=(None,), axis_size=3, graph=graph, graph_updates=False)
    plain = nnx.vmap(make, in_axes=(None,), axis_size=3, graph=graph, graph_updates=False)
    # Every instance is made from the same keys (in_axes None), on purpose here.
    same = nnx.split_rngs(splits=nnx.BROADCAST, graph=graph, graph_updates=False)
    m, p = same(named)(nnx.Rngs(0)), same(plain)(nnx.Rngs(0))
    assert m.kernel.shape == p.kernel.shape == (3, 4, 6)
    assert m.kernel.out_sharding == ("c", "a", "b")  # transform_metadata's name only
    # No partition name: the stacked axis is unnamed (Flax 0.12 leaves ('a', 'b'), flax#5112).
    assert p.kernel.out_sharding == (None, "a", "b")


def test_carry_in_the_axes_counts_as_none_so_a_scans_axes_can_be_reused() -> None:
    w = nnx.Param(jnp.ones((5, 3)), out_sharding=("layers", "d"))
    seen = []

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
    @nnx.transform_metadata(in_axes=(0, nnx.Carry), out_axes=nnx.Carry, partition="layers")
    def body(w: Any, c: Any) -> Any:
        seen.append(w.out_sharding)
        return c + w.value.sum()

    assert float(body(w, jnp.zeros(()))) == 15.0
    assert seen == [("d",)]
    assert w.out_sharding == ("layers", "d")
