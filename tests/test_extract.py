"""Tests of flaxgraph/extract.py (``nnx.extract``): to_tree/from_tree,
NodeStates, prefix in graph and tree mode."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import corpus_params
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.errors import SharedReferenceError
from flaxgraph.testing import assert_graphs_equal, graphs


def linear() -> nnx.Linear:
    return nnx.Linear(2, 3, rngs=nnx.Rngs(0))


def test_extract_module_names():
    for name in ("to_tree", "from_tree", "NodeStates", "prefix"):
        assert getattr(nnx.extract, name) is getattr(nnx, name)


def test_to_tree_is_pure_and_stores_a_shared_node_once():
    m = linear()
    tree = nnx.to_tree((m, {"again": m, "y": 1}, jnp.ones(1)))
    assert isinstance(tree[0], nnx.NodeStates) and isinstance(tree[1]["again"], nnx.NodeStates)
    assert tree[1]["y"] == 1
    leaves = jax.tree.leaves(tree)
    assert len(leaves) == 1 + 2 + 1  # the y, m's two Params once, the array
    assert not any(isinstance(x, nnx.Variable) for x in jax.tree.leaves(tree))


def test_from_tree_restores_sharing_after_a_jax_function():
    m = linear()
    tree = nnx.to_tree((m, [m]))
    a, (b,) = nnx.from_tree(jax.jit(lambda t: t)(tree))
    assert a is b and a is not m and type(a) is nnx.Linear
    np.testing.assert_array_equal(a.kernel.value, m.kernel.value)


def check_roundtrip(g: Any) -> None:
    tree = nnx.to_tree({"g": g, "n": 3})
    back = nnx.from_tree(tree)
    assert back["n"] == 3
    assert_graphs_equal(back["g"], g)


@given(graphs())
def test_to_tree_from_tree_roundtrip(g):
    check_roundtrip(g)


@pytest.mark.parametrize("make", corpus_params())
def test_to_tree_from_tree_roundtrip_corpus(make):
    check_roundtrip(make())


def test_to_tree_prefix_and_aliasing_check():
    m = linear()
    seen = []

    def split_fn(ctx, path, prefix, leaf):
        seen.append((path, prefix))
        return nnx.NodeStates.from_split(*ctx.split(leaf), metadata=prefix)

    nnx.to_tree((m, linear()), prefix=(0, None), split_fn=split_fn)
    assert seen == [((0,), 0), ((1,), None)]
    with pytest.raises(ValueError, match=r"Inconsistent aliasing.*prefix 0.*prefix 1"):
        nnx.to_tree((m, m), prefix=(0, 1))
    nnx.to_tree((m, m), prefix=(0, 1), check_aliasing=False)
    with pytest.raises(ValueError, match="does not match"):
        nnx.to_tree((m, m), prefix=(0, 1, 2))


def test_node_states_accessors():
    graphdef, params, rest = nnx.split(linear(), nnx.Param, ...)
    ns = nnx.NodeStates.from_split(graphdef, params, rest, metadata="meta")
    assert ns.graphdef == graphdef and ns.states == (params, rest) and ns.metadata == "meta"
    with pytest.raises(ValueError, match="exactly one State"):
        _ = ns.state
    assert nnx.NodeStates.from_split(graphdef, params).state is params
    with pytest.raises(ValueError, match="no GraphDef"):
        _ = nnx.NodeStates.from_states(params).graphdef
    assert nnx.NodeStates.from_prefixes([0, None]).states == (0, None)
    assert ns.replace(metadata=1).metadata == 1 and ns.replace(metadata=1).states == ns.states
    leaves, treedef = jax.tree.flatten(ns)
    back = jax.tree.unflatten(treedef, leaves)
    assert back.graphdef == graphdef and back.metadata == "meta"
    assert jax.tree.structure(back) == treedef and jax.tree.leaves(back) == leaves


def test_prefix_tree_mode():
    d = {"a": nnx.Param(jnp.array(2)), "b": nnx.BatchStat(jnp.arange(5)), "c": jnp.ones(1)}
    assert nnx.prefix(d, {nnx.Param: None, nnx.BatchStat: 0, ...: None}, graph=False) == {
        "a": None,
        "b": 0,
        "c": None,
    }
    # As in Flax 0.12: a leaf no filter matches is an error naming its path.
    with pytest.raises(ValueError, match=r"No filter matched the Array of shape \(1,\) at path c"):
        nnx.prefix(d, {nnx.Param: None, nnx.BatchStat: 0}, graph=False)
    assert nnx.prefix(d, lambda p, x: p, graph=False) == {"a": ("a",), "b": ("b",), "c": ("c",)}
    v = nnx.Param(jnp.ones(1))
    with pytest.raises(SharedReferenceError):
        nnx.prefix({"x": v, "y": v}, {...: 0}, graph=False)


def test_prefix_graph_mode_matches_to_tree():
    m = linear()
    px = nnx.prefix((m, m), {nnx.Param: 0}, graph=True)
    tree = nnx.to_tree((m, m))
    assert isinstance(tree[0], nnx.NodeStates) and px[0].graphdef == tree[0].graphdef
    kernel_axes = px[0].states[0]["kernel"]
    assert kernel_axes == 0
    assert px[1].states[0].flat_state() == ()  # the second m is a reference: no leaves
    # paths seen by the function are the node's own paths
    seen = []
    nnx.prefix(m, lambda p, x: seen.append(p), graph=True)
    assert sorted(seen) == [("bias",), ("kernel",)]
