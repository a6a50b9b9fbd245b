"""Tests of mutation programs: each step's effect, determinism, eager vs. jit."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import corpus_params, corpus_settings, has_cycle
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.testing import (
    AddAttribute,
    DeleteAttribute,
    Node,
    SetValue,
    ShareAttribute,
    SwapAttributes,
    apply_mutations,
    assert_graphs_equal,
    graphs,
    mutations,
)

CORPUS_SETTINGS = corpus_settings()


def small() -> Node:
    # iter_graph order: nodes [child, root]; Variables [child.v, w]
    return Node(child=Node(v=nnx.BatchStat(jnp.array([1, 2]))), n=3, w=nnx.Param(jnp.ones(2)))


# -- each step ---------------------------------------------------------------------------------


def test_set_value() -> None:
    m = small()
    assert apply_mutations(m, [SetValue(1, 2, 1)]) == ["set root.w = value * 2 + 1"]
    np.testing.assert_array_equal(m.w.value, [3.0, 3.0])
    assert apply_mutations(m, [SetValue(0, 0, 3)]) == ["set root.child.v = value * 0 + 3"]
    np.testing.assert_array_equal(m.child.v.value, [3, 3])
    assert m.child.v.value.dtype == jnp.int32


def test_set_value_skips_prng_keys_and_tuples() -> None:
    m = Node(rngs=nnx.Rngs(0), t=nnx.Intermediate((jnp.ones(1),)))
    # the only numeric Variable is the stream's count
    assert apply_mutations(m, [SetValue(5, 1, 1)]) == [
        "set root.rngs.default.count = value * 1 + 1"
    ]
    assert apply_mutations(Node(t=nnx.Intermediate((jnp.ones(1),))), [SetValue(0, 1, 1)]) == [
        "skip SetValue: no Variable with a numeric array value"
    ]


@pytest.mark.parametrize(
    ("kind", "check"),
    [
        ("param", lambda v: type(v) is nnx.Param and v.value.tolist() == [2.0, 2.0]),
        ("batch_stat", lambda v: type(v) is nnx.BatchStat and v.value.dtype == jnp.int32),
        ("array", lambda v: isinstance(v, jax.Array) and v.tolist() == [2, 3]),
        ("static", lambda v: v == 2 and type(v) is int),
        ("node", lambda v: type(v) is Node and type(v.w) is nnx.Param),
    ],
)
def test_add_attribute(kind: str, check: Any) -> None:
    m = small()
    assert apply_mutations(m, [AddAttribute(0, "new", kind, 2)]) == [
        f"add root.child.new = new {kind} (2)"
    ]
    assert check(m.child.new)


def test_add_attribute_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        apply_mutations(small(), [AddAttribute(0, "new", "tensor", 2)])


def test_delete_attribute() -> None:
    m = small()
    assert apply_mutations(m, [DeleteAttribute(1, 1)]) == ["delete root.n"]
    assert not hasattr(m, "n")
    # the child has one attribute; the root now has two (child, w): selector 3 -> root, w
    assert apply_mutations(m, [DeleteAttribute(3, 1)]) == ["delete root.w"]
    assert apply_mutations(Node(), [DeleteAttribute(0, 0)]) == [
        "skip DeleteAttribute: no node has a string attribute"
    ]


def test_share_attribute_makes_an_alias() -> None:
    m = small()
    # sources: nodes [child, root] then Variables [child.v, w]; 3 -> w, placed on the child
    assert apply_mutations(m, [ShareAttribute(3, 0, "alias")]) == [
        "share root.child.alias = root.w"
    ]
    assert m.child.alias is m.w


def test_share_attribute_may_close_a_cycle_unless_told_not_to() -> None:
    m = small()
    apply_mutations(m, [ShareAttribute(1, 0, "parent")])
    assert m.child.parent is m and has_cycle(m)
    m = small()
    # without cycles, the root and the child itself are no candidates for the child:
    # sources are [child.v, w]
    log = apply_mutations(m, [ShareAttribute(1, 0, "x", allow_cycle=False)])
    assert log == ["share root.child.x = root.w"]
    assert not has_cycle(m)


def test_swap_attributes() -> None:
    m = small()
    child, w = m.child, m.w
    assert apply_mutations(m, [SwapAttributes(0, 0, 2)]) == ["swap root.child <-> root.w"]
    assert m.child is w and m.w is child
    # equal selectors swap with the next name
    assert apply_mutations(m, [SwapAttributes(0, 1, 1)]) == ["swap root.n <-> root.w"]


def test_unknown_step_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="steps are SetValue"):
        apply_mutations(small(), ["set w"])  # type: ignore[list-item]


# -- determinism ---------------------------------------------------------------------------------


@given(graphs(marks=True), mutations())
def test_same_program_on_clones_gives_isomorphic_graphs(g: Any, steps: list[Any]) -> None:
    a, b = nnx.clone(g), nnx.clone(g)
    assert apply_mutations(a, steps) == apply_mutations(b, steps)
    assert_graphs_equal(a, b)


@given(graphs(cycles=False), mutations(cycles=False))
def test_acyclic_programs_keep_graphs_acyclic(g: Any, steps: list[Any]) -> None:
    apply_mutations(g, steps)
    assert not has_cycle(g)


def run_under_jit(g: Any, steps: list[Any]) -> Any:
    """The lead's differential pattern, by hand: merge inside jit, mutate, split out."""
    graphdef, state = nnx.split(g)
    out_graphdef: list[nnx.GraphDef] = []

    def f(state: nnx.State) -> nnx.State:
        inner = nnx.merge(graphdef, state)
        apply_mutations(inner, steps)
        gd, s = nnx.split(inner)
        out_graphdef.append(gd)
        return s

    new_state = jax.jit(f)(state)
    return nnx.merge(out_graphdef[0], new_state)


def as_jit_returns(g: Any) -> Any:
    """``g`` with every State leaf as a JAX array, as it comes back from ``jax.jit``
    (an ``nnx.data(3)`` attribute becomes ``Array(3)``)."""
    graphdef, state = nnx.split(g)
    return nnx.merge(graphdef, jax.tree.map(jnp.asarray, state))


@given(graphs(marks=True), mutations())
def test_program_under_jit_matches_eager(g: Any, steps: list[Any]) -> None:
    eager = nnx.clone(g)
    apply_mutations(eager, steps)
    assert_graphs_equal(run_under_jit(g, steps), as_jit_returns(eager))


@pytest.mark.parametrize("make", corpus_params())
@CORPUS_SETTINGS
@given(steps=mutations())
def test_program_under_jit_matches_eager_corpus(make: Any, steps: list[Any]) -> None:
    eager = make()
    apply_mutations(eager, steps)
    assert_graphs_equal(run_under_jit(make(), steps), as_jit_returns(eager))
