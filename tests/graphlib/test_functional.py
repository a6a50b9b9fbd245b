"""Tests of flaxgraph/graphlib/functional.py and graph_state.py: flatten/unflatten,
unpack/GraphState, map, as_pure/pure; each in graph and tree mode."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import corpus_params
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.testing import assert_graphs_equal, graphs


class Model(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.arange(3.0))
        self.stats = nnx.BatchStat(jnp.ones(2))
        self.raw = jnp.zeros(1)
        self.name = "m"


# -- flatten / unflatten -------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [True, False])
def test_flatten_gives_paths_and_the_models_own_variables(graph):
    m = Model()
    graphdef, flat = nnx.flatten(m, graph=graph)
    assert isinstance(flat, nnx.FlatState)
    assert flat.paths == (("raw",), ("stats",), ("w",))
    assert flat.leaves[2] is m.w and flat.leaves[0] is m.raw
    _, leaves = nnx.flatten(m, with_paths=False, graph=graph)
    assert leaves == list(flat.leaves)
    assert graphdef == nnx.graphdef(m)


@pytest.mark.parametrize("form", ["flat", "list", "state"])
def test_unflatten_from_each_form(form):
    m = Model()
    graphdef, flat = nnx.flatten(m)
    given_state: Any = {
        "flat": flat,
        "list": list(flat.leaves),
        "state": nnx.State.from_flat_path(flat),
    }[form]
    shared = nnx.unflatten(graphdef, given_state)
    assert shared is not m and shared.w is m.w and shared.name == "m"
    copied = nnx.unflatten(graphdef, given_state, copy_variables=True)
    assert copied.w is not m.w and copied.w.value is m.w.value
    pure = [x.value if isinstance(x, nnx.Variable) else x for x in flat.leaves]
    assert type(nnx.unflatten(graphdef, pure).w) is nnx.Param
    assert isinstance(nnx.unflatten(graphdef, pure, recreate_variables=False).w, jax.Array)


def test_unflatten_wrong_number_of_leaves():
    graphdef, flat = nnx.flatten(Model())
    with pytest.raises(nnx.GraphStructureError, match="expects 3 state leaves but got 2"):
        nnx.unflatten(graphdef, list(flat.leaves)[:2])


def test_flatten_with_shared_ref_index_like_split_context():
    from flaxgraph.graphlib.refmap import RefMap

    shared = nnx.Param(jnp.ones(1))
    a, b = nnx.Dict(w=shared), nnx.Dict(w=shared)
    ref_index = RefMap[int]()
    nnx.flatten(a, ref_index=ref_index)
    _, flat_b = nnx.flatten(b, ref_index=ref_index)
    assert len(flat_b) == 0  # b's Variable was seen in a


@given(graphs())
def test_flatten_unflatten_roundtrip(g):
    graphdef, flat = nnx.flatten(g)
    assert_graphs_equal(nnx.unflatten(graphdef, flat), g)
    assert_graphs_equal(nnx.unflatten(graphdef, flat, copy_variables=True), g)


# -- unpack / GraphState ---------------------------------------------------------------------


@pytest.mark.parametrize("graph", [True, False])
def test_unpack_bundles_the_graphdef(graph):
    m = Model()
    gs = nnx.unpack(m, graph=graph)
    assert isinstance(gs, nnx.GraphState) and gs.graphdef == nnx.graphdef(m)
    assert gs["w"] is m.w and sorted(gs) == ["raw", "stats", "w"] and len(gs) == 3
    rebuilt = nnx.merge(gs)
    assert type(rebuilt) is Model and rebuilt.w is m.w
    params, rest = nnx.unpack(m, nnx.Param, ..., graph=graph)
    assert list(params) == ["w"] and nnx.merge(rest, params).stats is m.stats
    assert nnx.unpack(m, ..., graph=graph) == gs


def test_graph_state_is_a_pytree_with_the_graphdef_as_aux_data():
    m = Model()
    gs = nnx.unpack(m)
    leaves = jax.tree.leaves(gs)
    assert len(leaves) == 3
    doubled = jax.jit(lambda g: jax.tree.map(lambda x: x * 2, g))(gs)
    assert isinstance(doubled, nnx.GraphState) and doubled.graphdef == gs.graphdef
    np.testing.assert_array_equal(nnx.merge(doubled).w.value, np.arange(3.0) * 2)
    gs["extra"] = 1
    assert "extra" in gs._state
    del gs["extra"]
    assert "extra" not in gs


def test_unpack_unmatched_leaf_is_an_error():
    with pytest.raises(nnx.UnmatchedLeafError):
        nnx.unpack(Model(), nnx.Param, nnx.BatchStat)


# -- map ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [True, False])
def test_map_rebuilds_with_new_leaves(graph):
    m = Model()
    seen = []

    def f(path, leaf):
        seen.append(path)
        return leaf * 2 if not isinstance(leaf, nnx.Variable) else leaf.value * 2

    out = nnx.map(f, m, graph=graph)
    assert sorted(seen) == [("raw",), ("stats",), ("w",)]
    assert out is not m and type(out.w) is nnx.Param and out.w is not m.w
    np.testing.assert_array_equal(out.w.value, np.arange(3.0) * 2)
    np.testing.assert_array_equal(m.w.value, np.arange(3.0))  # m untouched
    raw = nnx.map(f, m, graph=graph, recreate_variables=False)
    assert isinstance(raw.w, jax.Array)
    same = nnx.map(lambda p, v: v, m, graph=graph)
    assert same.w is m.w  # a Variable returned unchanged is shared


def test_map_of_a_variable_root():
    v = nnx.Param(jnp.ones(2))
    out = nnx.map(lambda p, x: x.value + 1, v)
    assert type(out) is nnx.Param and p_equal(out.value, np.full(2, 2.0))


def p_equal(a: Any, b: Any) -> bool:
    return bool(np.array_equal(np.asarray(a), b))


# -- as_pure -------------------------------------------------------------------------------------


def test_as_pure_unboxes_every_variable():
    m = Model()
    state = nnx.state(m)
    pure = nnx.as_pure(state)
    assert isinstance(pure, nnx.State) and pure["w"] is m.w.value
    assert nnx.pure is nnx.as_pure
    assert nnx.as_pure(m.w) is m.w.value
    assert nnx.as_pure([m.w, 3, {"s": m.stats}]) == [m.w.value, 3, {"s": m.stats.value}]


@pytest.mark.parametrize("make", corpus_params())
def test_pure_state_merges_back_with_recreated_variables(make):
    g = make()
    graphdef, state = nnx.split(g)
    rebuilt = nnx.merge(graphdef, nnx.as_pure(state))
    assert_graphs_equal(rebuilt, g)


def test_flatten_ref_outer_index_and_unflatten_outer_index_outer_ref_update_in_place():
    from flaxgraph.graphlib.refmap import RefMap

    m = Model()
    w = m.w
    outer = RefMap[int]()
    graphdef, flat = nnx.flatten(m, ref_index=outer)
    index_ref: dict[int, Any] = {}
    inner = nnx.unflatten(graphdef, flat, index_ref=index_ref, copy_variables=True)
    inner.w.value = inner.w.value + 1
    inner.extra = nnx.Param(jnp.zeros(1))
    del inner.stats
    inner_to_outer = RefMap.from_pairs((x, i) for i, x in index_ref.items())
    g2, flat2 = nnx.flatten(inner, ref_outer_index=inner_to_outer)
    back = nnx.unflatten(g2, flat2, outer_index_outer_ref={i: x for x, i in outer.items()})
    assert back is m and m.w is w
    np.testing.assert_array_equal(m.w.value, np.arange(3.0) + 1)
    assert isinstance(m.extra, nnx.Param) and not hasattr(m, "stats")
    # without the outer numbering, the same leaves build a new graph
    assert nnx.unflatten(nnx.flatten(inner)[0], flat2) is not m


@given(graphs())
def test_identity_map_and_unpack_merge_rebuild_the_graph_with_its_variables(g):
    mapped = nnx.map(lambda path, leaf: leaf, g)
    assert_graphs_equal(mapped, g)
    originals = {id(v) for _, v in nnx.iter_graph(g) if isinstance(v, nnx.Variable)}
    assert all(id(v) in originals for _, v in nnx.iter_graph(mapped) if isinstance(v, nnx.Variable))
    assert_graphs_equal(nnx.merge(nnx.unpack(g)), g)
