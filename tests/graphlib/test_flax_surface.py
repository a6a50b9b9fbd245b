"""Tests of the graph-engine surface Flax code reaches: ``GraphDef.nodes`` and
``TreeNodeDef``, generic annotations, ``IndexMap``/``RefMap.from_indexmap``,
``GraphState`` checks, spent contexts, tree-mode ordering and errors, raw Refs and
root scalars (flaxgraph/graphlib/graphdefs.py, refmap.py, graph_state.py,
contexts.py, functional.py, walk.py)."""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.graphlib import IndexMap, NodeDef, NodeRef, RefMap, TreeNodeDef, VariableDef


def test_nodes_start_with_the_root_definition():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert isinstance(nnx.graphdef(m).nodes[0], NodeDef)
    assert isinstance(nnx.graphdef(nnx.Param(jnp.ones(1))).nodes[0], VariableDef)
    with nnx.split_context() as ctx:
        g1, _ = ctx.split(m)
        g2, _ = ctx.split(m)
    assert isinstance(g1.nodes[0], NodeDef) and isinstance(g2.nodes[0], NodeRef)
    assert not hasattr(ctx, "ref_index") and not hasattr(ctx, "ctxtag")  # spent


def test_tree_mode_nodes_is_one_tree_node_def_with_sorted_paths():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    graphdef, _ = nnx.split(m, graph=False)
    (tree_def,) = graphdef.nodes
    assert isinstance(tree_def, TreeNodeDef) and tree_def.type is nnx.Linear
    paths = [p for p, _ in tree_def.path_index]
    assert paths == sorted(paths)
    assert graphdef == nnx.graphdef(m)  # same structure as in graph mode


@given(st.permutations(["d", "b", "a", "c"]))
def test_tree_mode_flatten_sorts_leaves_and_unflatten_inverts(names):
    Point = collections.namedtuple("Point", names)
    g = Point(*(nnx.Param(jnp.array(float(i))) for i in range(4)))
    graphdef, flat = nnx.graphlib.flatten(g, graph=False)
    assert flat.paths == (("a",), ("b",), ("c",), ("d",))
    back = nnx.graphlib.unflatten(graphdef, flat)
    assert all(getattr(back, n) is getattr(g, n) for n in names)
    graphdef, leaves = nnx.graphlib.flatten(g, with_paths=False, graph=False)
    back = nnx.graphlib.unflatten(graphdef, leaves)
    assert all(getattr(back, n) is getattr(g, n) for n in names)


def test_annotations_are_subscriptable():
    def f(graphdef: nnx.GraphDef[nnx.Linear], s: nnx.State[str, Any]) -> nnx.PureState[nnx.Linear]:
        return graphdef, s

    assert (
        f.__annotations__
        and nnx.PureState[nnx.Linear] == tuple[nnx.GraphDef[nnx.Linear], nnx.State]
    )


def test_index_map_and_ref_map_invert_each_other():
    a, b = [], []
    refmap = RefMap([(a, 0), (b, 1)])
    indexmap = IndexMap.from_refmap(refmap)
    assert indexmap == {0: a, 1: b}
    again = RefMap.from_indexmap(indexmap)
    assert again[a] == 0 and again[b] == 1 and [] not in again


def test_graph_state_reads_attributes_and_checks_merge_arguments():
    class Foo(nnx.Module):
        def __init__(self) -> None:
            self.linear = nnx.Linear(2, 3, rngs=nnx.Rngs(0))

    gs = nnx.unpack(Foo())
    assert isinstance(gs.linear, nnx.State) and "kernel" in gs.linear
    with pytest.raises(AttributeError, match="no attribute or State key 'nope'"):
        _ = gs.nope
    state_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(nnx.state(Foo()))[0]]
    assert [p for p, _ in jax.tree_util.tree_flatten_with_path(gs)[0]] == state_paths
    with pytest.raises(ValueError, match="Expected GraphState object at position 1"):
        nnx.merge(gs, nnx.state(Foo()))
    with pytest.raises(ValueError, match="GraphDef must be the same"):
        nnx.merge(gs, nnx.unpack(nnx.Linear(1, 1, rngs=nnx.Rngs(0))))


def test_merge_accepts_a_flat_state_and_counts_leaves():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    graphdef, flat = nnx.graphlib.flatten(m)
    assert nnx.merge(graphdef, flat).kernel is m.kernel
    with pytest.raises(ValueError, match=r"Incorrect number of leaves \(the GraphDef needs 2"):
        nnx.graphlib.unflatten(graphdef, nnx.State({}))


def test_tree_mode_errors_carry_flax_phrases():
    v = nnx.Param(jnp.ones(1))
    with pytest.raises(ValueError, match=r"Duplicate Param found at paths") as info:
        nnx.split([v, v], graph=False)
    assert "node[0]\n    node[1]" in str(info.value)
    a = nnx.List([1])
    a.append(nnx.List([2, a]))
    with pytest.raises(ValueError, match=r"found at paths node and node\[1\]\[1\]"):
        nnx.split(a, graph=False)


def test_pytree_false_objects_are_refused_in_tree_mode_with_their_path():
    class Opaque(nnx.Pytree, pytree=False):
        def __init__(self) -> None:
            self.x = 1

    with pytest.raises(ValueError, match=r"pytree=False.*Found at path: node\[0\]"):
        nnx.graphlib.flatten([Opaque()], graph=False)
    with pytest.raises(ValueError, match="pytree=False"):
        list(nnx.iter_children(Opaque(), graph=False))
    assert nnx.graphdef([Opaque()], graph=True)  # graph mode walks it


def test_raw_refs_are_state_and_tree_mode_refuses_sharing_them():
    ref = jax.new_ref(jnp.array(1.0))
    graphdef, state = nnx.split([ref, ref])
    back = nnx.merge(graphdef, state)
    assert back[0] is ref and back[1] is ref
    with pytest.raises(ValueError, match=r"Duplicate Ref found at paths"):
        nnx.split([ref, ref], graph=False)


@pytest.mark.parametrize("leaf", [42, 1.5, True])
def test_a_root_scalar_is_its_own_state(leaf):
    graphdef, state = nnx.split(leaf)
    assert state is leaf and nnx.merge(graphdef, state) is leaf


def test_clear_non_graph_nodes_keeps_only_nodes_and_variables():
    v, m = nnx.Param(jnp.ones(1)), nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    out = nnx.extract.clear_non_graph_nodes({"v": v, "m": m, "x": jnp.ones(2), "s": "a"})
    assert out["v"] is v and out["m"] is m and out["x"] is None and out["s"] is None
    assert nnx.extract.TreeState is nnx.extract.NodeStates
    result = nnx.prefix(m, {nnx.Param: 0}, graph=True)
    assert isinstance(result, nnx.extract.TreeState) and result.state["kernel"] == 0
