"""Tests of graphs_equal / assert_graphs_equal / graph_difference."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import corpus_params
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.testing import (
    Block,
    Node,
    apply_mutations,
    assert_graphs_equal,
    graph_difference,
    graphs,
    graphs_equal,
    mutations,
)


def p(*values: float, **metadata: Any) -> nnx.Param[Any]:
    return nnx.Param(jnp.asarray(values, dtype=jnp.float32), **metadata)


# -- equal graphs -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", corpus_params())
def test_corpus_graphs_equal_their_clone_and_a_rebuild(make: Any) -> None:
    a = make()
    assert graphs_equal(a, a)
    assert graphs_equal(a, nnx.clone(a))
    assert graphs_equal(a, make())  # factories are deterministic


@given(graphs())
def test_generated_graph_equals_itself_and_its_clone(g: Any) -> None:
    assert graphs_equal(g, g)
    assert_graphs_equal(g, nnx.clone(g))


def test_array_class_is_ignored_but_values_are_not() -> None:
    assert graphs_equal(Node(x=np.ones(2, np.float32)), Node(x=jnp.ones(2)))
    assert not graphs_equal(Node(x=np.ones(2, np.float32)), Node(x=jnp.zeros(2)))


def test_nan_equals_nan() -> None:
    assert graphs_equal(Node(x=jnp.array([jnp.nan])), Node(x=jnp.array([jnp.nan])))


def test_tolerances() -> None:
    a, b = Node(w=p(1.0)), Node(w=p(1.0 + 1e-6))
    assert not graphs_equal(a, b)
    assert graphs_equal(a, b, atol=1e-5)
    assert graphs_equal(a, b, rtol=1e-5)


def test_prng_keys_compare_by_key_data() -> None:
    assert graphs_equal(Node(k=jax.random.key(0)), Node(k=jax.random.key(0)))
    assert not graphs_equal(Node(k=jax.random.key(0)), Node(k=jax.random.key(1)))


def test_dict_key_order_is_ignored() -> None:
    assert graphs_equal(Node(d={"a": 1, "b": 2}), Node(d={"b": 2, "a": 1}))


def test_isomorphic_cycles_are_equal() -> None:
    a, b = Node(), Node()
    a.me, b.me = a, b
    assert graphs_equal(a, b)


# -- differences, each named with its path ------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (Node(n=1), Node(n=2), "at a.n / b.n: static values differ: 1 != 2"),
        (Node(n=1), Node(n=True), "at a.n / b.n: types differ: int != bool"),
        (Node(n=1), Node(n=1.0), "at a.n / b.n: types differ: int != float"),
        (Node(n=(1, 2)), Node(n=[1, 2]), "at a.n / b.n: types differ: tuple != list"),
        (Node(n=(1, 2)), Node(n=(1,)), "at a.n / b.n: lengths differ: 2 != 1"),
        (Node(d={"a": 1}), Node(d={"b": 1}), "at a.d / b.d: dict keys differ"),
        (Node(c=Node()), Node(c=Block()), "at a.c / b.c: types differ: Node != Block"),
        (Node(w=p(1.0)), Node(w=nnx.BatchStat(jnp.ones(1))), "types differ: Param != BatchStat"),
        (Node(w=p(1.0)), Node(w=p(2.0)), "at a.w.value / b.w.value: array values differ"),
        (Node(x=jnp.ones(2)), Node(x=jnp.ones(3)), "array shapes differ: (2,) != (3,)"),
        (Node(x=jnp.ones(2)), Node(x=jnp.ones(2, jnp.int32)), "array dtypes differ"),
        (Node(x=jnp.ones(2)), Node(x=2.0), "types differ: ArrayImpl != float"),
        (Node(w=p(1.0, tag="a")), Node(w=p(1.0)), "at a.w / b.w: metadata differ"),
        (Node(a=1), Node(b=1), "attributes differ: only in a: ['a'], only in b: ['b']"),
        (
            Node(layers=[Node(w=p(1.0))]),
            Node(layers=[Node(w=p(3.0))]),
            "at a.layers[0].w.value / b.layers[0].w.value",
        ),
        (nnx.List([1, 2]), nnx.List([1, 3]), "at a[1] / b[1]"),
    ],
)
def test_differences_are_found_and_located(a: Any, b: Any, message: str) -> None:
    assert not graphs_equal(a, b)
    assert not graphs_equal(b, a)
    with pytest.raises(AssertionError, match=re.escape(message)):
        assert_graphs_equal(a, b)


def test_shared_variable_differs_from_two_copies() -> None:
    w = p(1.0)
    shared = Node(a=w, b=w)
    copies = Node(a=p(1.0), b=p(1.0))
    assert not graphs_equal(shared, copies)
    assert not graphs_equal(copies, shared)
    assert graph_difference(shared, copies) == (
        "at a.b / b.b: sharing differs: in a it is the object already seen at a.a, "
        "but in b it is an object not seen before"
    )


def test_different_sharing_partners_differ() -> None:
    # a: x.a is x.b, x.c separate;  b: y.a separate, y.b is y.c — same values everywhere
    w1, w2 = p(1.0), p(1.0)
    a = Node(a=w1, b=w1, c=w2)
    w3, w4 = p(1.0), p(1.0)
    b = Node(a=w3, b=w4, c=w4)
    assert not graphs_equal(a, b)
    assert not graphs_equal(b, a)


def test_cycle_differs_from_a_longer_cycle() -> None:
    a = Node()
    a.me = a
    b, c = Node(), Node()
    b.me, c.me = c, b
    assert not graphs_equal(a, b)  # and it terminates
    assert not graphs_equal(b, a)


def test_shared_node_differs_from_copies() -> None:
    child = Node(w=p(1.0))
    assert not graphs_equal(Node(l=child, r=child), Node(l=Node(w=p(1.0)), r=Node(w=p(1.0))))


# -- graphs_equal agrees with GraphDef + State equality on generated graphs ------------------------


def leaves_equal(s1: nnx.State, s2: nnx.State) -> bool:
    f1, f2 = s1.flat_state(), s2.flat_state()
    if f1.paths != f2.paths:
        return False
    for (_, x), (_, y) in zip(f1, f2, strict=True):
        if type(x) is not type(y):
            return False
        if isinstance(x, nnx.Variable) and x.get_metadata() != y.get_metadata():
            return False
        lx, ly = jax.tree.leaves(x), jax.tree.leaves(y)
        if len(lx) != len(ly):
            return False
        for u, v in zip(lx, ly, strict=True):
            if jax.dtypes.issubdtype(u.dtype, jax.dtypes.prng_key):
                u, v = jax.random.key_data(u), jax.random.key_data(v)
            if u.dtype != v.dtype or not np.array_equal(np.asarray(u), np.asarray(v)):
                return False
    return True


@given(graphs(), mutations())
def test_graphs_equal_agrees_with_graphdef_and_state(g: Any, steps: list[Any]) -> None:
    other = nnx.clone(g)
    apply_mutations(other, steps)
    (gd1, s1), (gd2, s2) = nnx.split(g), nnx.split(other)
    assert graphs_equal(g, other) == (gd1 == gd2 and leaves_equal(s1, s2))
