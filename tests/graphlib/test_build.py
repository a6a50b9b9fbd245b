"""Tests of flaxgraph/graphlib/build.py: (GraphDef, leaves) -> graph, optionally in place."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.walk import flatten_with_paths


class Leaf(nnx.Module):
    init_calls = 0

    def __init__(self):
        type(self).init_calls += 1
        self.w = nnx.Param(jnp.ones(2), tag="w")
        self.name = "leaf"


class Point(NamedTuple):
    x: object
    y: object


def test_rebuilds_without_calling_init():
    m = Leaf()
    graphdef, leaves = flatten_with_paths(m)
    calls = Leaf.init_calls
    new = build_graph(graphdef, [v for _, v in leaves])
    assert Leaf.init_calls == calls
    assert type(new) is Leaf and new is not m and new.name == "leaf"
    assert type(new.w) is nnx.Param and new.w is not m.w and new.w.tag == "w"
    np.testing.assert_array_equal(new.w.value, np.ones(2))


def test_variable_leaf_gives_value_and_metadata_raw_leaf_uses_graphdef_metadata():
    graphdef, _ = flatten_with_paths(Leaf())
    from_var = build_graph(graphdef, [nnx.Param(jnp.zeros(2), tag="other")])
    assert from_var.w.tag == "other"
    from_raw = build_graph(graphdef, [jnp.full(2, 3.0)])
    assert from_raw.w.tag == "w"
    np.testing.assert_array_equal(from_raw.w.value, np.full(2, 3.0))


def test_kind_comes_from_graphdef():
    graphdef, _ = flatten_with_paths(Leaf())
    new = build_graph(graphdef, [nnx.BatchStat(jnp.zeros(2))])
    assert type(new.w) is nnx.Param


def test_sharing_and_cycles_restored():
    m = Leaf()
    m.alias = m.w
    m.child = Leaf()
    m.child.parent = m
    m.again = m.child
    graphdef, leaves = flatten_with_paths(m)
    new = build_graph(graphdef, [v for _, v in leaves])
    assert new.alias is new.w
    assert new.child.parent is new and new.again is new.child


def test_containers_rebuilt():
    m = Leaf()
    m.items = [nnx.Param(1.0), (jnp.zeros(1), 3), {"k": 2}]
    m.point = Point(jnp.ones(1), "s")
    graphdef, leaves = flatten_with_paths(m)
    new = build_graph(graphdef, [v for _, v in leaves])
    assert type(new.items) is list and type(new.items[1]) is tuple and new.items[2] == {"k": 2}
    assert type(new.point) is Point and new.point.y == "s"
    assert new.items[0] is not m.items[0]


def test_array_def_unboxes_a_variable_leaf():
    graphdef, _ = flatten_with_paths([jnp.ones(1)])
    assert isinstance(build_graph(graphdef, [nnx.Param(jnp.zeros(1))])[0], jax.Array)


def test_wrong_number_of_leaves():
    graphdef, _ = flatten_with_paths(Leaf())
    with pytest.raises(nnx.GraphStructureError, match="expects 1 state leaves but got 2"):
        build_graph(graphdef, [1, 2])
    with pytest.raises(nnx.GraphStructureError, match="expects 1 state leaves but got 0"):
        build_graph(graphdef, [])


def test_dangling_node_ref():
    from flaxgraph.graphlib.refmap import RefMap

    a = Leaf()
    b = Leaf()
    b.other = a
    index = RefMap()
    flatten_with_paths(a, ref_index=index)
    graphdef, leaves = flatten_with_paths(b, ref_index=index)
    with pytest.raises(
        nnx.GraphStructureError, match=r"refers to node index 0 \(Leaf\).*merge_context"
    ):
        build_graph(graphdef, [v for _, v in leaves])
    shared = {}
    ga, la = flatten_with_paths(a)
    first = build_graph(ga, [v for _, v in la], index_ref=shared)
    second = build_graph(graphdef, [v for _, v in leaves], index_ref=shared)
    assert second.other is first


def test_reuse_updates_in_place():
    m = Leaf()
    w = m.w
    graphdef, _ = flatten_with_paths(m)
    out = build_graph(graphdef, [nnx.Param(jnp.zeros(2), tag="new")], reuse={0: m, 1: w})
    assert out is m and m.w is w
    np.testing.assert_array_equal(w.value, np.zeros(2))
    assert w.tag == "new"


def test_reuse_applies_structural_changes():
    m = Leaf()
    template = Leaf()
    template.extra = jnp.ones(1)
    del template.name
    graphdef, leaves = flatten_with_paths(template)
    build_graph(graphdef, [v for _, v in leaves], reuse={0: m})
    assert "name" not in vars(m)
    np.testing.assert_array_equal(m.extra, np.ones(1))


def test_reuse_type_mismatch():
    class Other(nnx.Module):
        pass

    graphdef, leaves = flatten_with_paths(Leaf())
    with pytest.raises(nnx.GraphStructureError, match="Cannot update a Other in place"):
        build_graph(graphdef, [v for _, v in leaves], reuse={0: Other()})
    with pytest.raises(nnx.GraphStructureError, match="Cannot update a BatchStat in place"):
        build_graph(graphdef, [v for _, v in leaves], reuse={1: nnx.BatchStat(1.0)})


def test_reuse_from_another_trace_raises_and_writes_nothing():
    m = Leaf()
    w = m.w
    graphdef, _ = flatten_with_paths(m)

    @jax.jit
    def f(x):
        build_graph(graphdef, [x], reuse={0: m, 1: w})
        return x

    with pytest.raises(nnx.TraceContextError):
        f(jnp.zeros(2))
    np.testing.assert_array_equal(w.value, np.ones(2))
    assert m.w is w
