"""Tests of flaxgraph/graphlib/walk.py: graph -> (GraphDef, leaves)."""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.graphlib.graphdefs import (
    ARRAY_DEF,
    ContainerDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.walk import flatten_with_paths


class Leaf(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(2))


class Point(NamedTuple):
    x: object
    y: object


def test_leaves_are_the_variables_themselves_in_walk_order():
    m = Leaf()
    m.b = nnx.BatchStat(jnp.zeros(1))
    m.a = jnp.ones(3)
    graphdef, leaves = flatten_with_paths(m)
    assert [p for p, _ in leaves] == [("a",), ("b",), ("w",)]  # attributes sorted
    assert leaves[1][1] is m.b and leaves[2][1] is m.w and leaves[0][1] is m.a
    assert graphdef.leaf_paths == (("a",), ("b",), ("w",))


def test_node_def_structure():
    m = Leaf()
    m.name = "leaf"
    graphdef, _ = flatten_with_paths(m)
    root = graphdef.root
    assert isinstance(root, NodeDef) and root.type is Leaf and root.index == 0
    assert dict(root.attributes) == {
        "name": StaticDef("leaf"),
        "w": VariableDef(nnx.Param, 1, ()),
    }


def test_shared_variable_is_stored_once_then_referenced():
    m = Leaf()
    m.v = m.w
    graphdef, leaves = flatten_with_paths(m)
    assert len(leaves) == 1 and leaves[0][0] == ("v",)
    attrs = dict(graphdef.root.attributes)
    assert attrs["v"] == VariableDef(nnx.Param, 1, ())
    assert attrs["w"] == NodeRef(nnx.Param, 1)


def test_shared_node_and_cycle():
    parent = Leaf()
    child = Leaf()
    parent.a = child
    parent.b = child
    child.parent = parent
    graphdef, leaves = flatten_with_paths(parent)
    attrs = dict(graphdef.root.attributes)
    assert isinstance(attrs["a"], NodeDef)
    assert attrs["b"] == NodeRef(Leaf, 1)
    assert dict(attrs["a"].attributes)["parent"] == NodeRef(Leaf, 0)
    assert [p for p, _ in leaves] == [("a", "w"), ("w",)]


def test_containers_are_walked_by_value():
    m = Leaf()
    m.items = [nnx.Param(1.0), (jnp.zeros(1), 3), {"k": nnx.Cache(2.0)}]
    graphdef, leaves = flatten_with_paths(m)
    items = dict(graphdef.root.attributes)["items"]
    assert items.type is list and items.keys == (0, 1, 2)
    assert items.children[1] == ContainerDef(tuple, (0, 1), (ARRAY_DEF, StaticDef(3)))
    assert items.children[2].type is dict and items.children[2].keys == ("k",)
    assert [p for p, _ in leaves] == [
        ("items", 0),
        ("items", 1, 0),
        ("items", 2, "k"),
        ("w",),
    ]


def test_same_list_twice_is_two_values():
    shared = [jnp.ones(1)]
    m = Leaf()
    m.a, m.b = shared, shared
    _, leaves = flatten_with_paths(m)
    assert [p for p, _ in leaves] == [("a", 0), ("b", 0), ("w",)]


def test_pytree_containers_keep_their_treedef():
    m = Leaf()
    m.point = Point(nnx.Param(1.0), "static")
    graphdef, leaves = flatten_with_paths(m)
    d = dict(graphdef.root.attributes)["point"]
    assert d.type is Point and d.keys == ("x", "y")
    assert d.treedef == jax.tree.structure(Point(0, 0))
    assert ("point", "x") in [p for p, _ in leaves]


@pytest.mark.parametrize("array", [jnp.ones(2), np.ones(2), np.array(1.0)])
def test_array_like_leaves(array):
    m = Leaf()
    m.x = array
    graphdef, leaves = flatten_with_paths(m)
    assert dict(graphdef.root.attributes)["x"] is ARRAY_DEF
    assert [p for p, _ in leaves] == [("w",), ("x",)]
    assert leaves[1][1] is array


@pytest.mark.parametrize(
    "value",
    [
        1,
        2.5,
        "s",
        True,
        None,
        ...,
        b"x",
        1j,
        len,
        jnp.float32,
        np.float32(1.0),
        np.int32(3),
        jax.ShapeDtypeStruct((2,), jnp.float32),
    ],
)
def test_static_values_go_into_the_graphdef(value):
    m = Leaf()
    m.s = value
    graphdef, leaves = flatten_with_paths(m)
    assert dict(graphdef.root.attributes)["s"] == StaticDef(value)
    assert len(leaves) == 1


def test_data_and_static_markers():
    m = Leaf()
    m.step = nnx.data(3)
    m.table = nnx.static((1, 2))
    graphdef, leaves = flatten_with_paths(m)
    attrs = dict(graphdef.root.attributes)
    assert attrs["step"] is ARRAY_DEF
    assert attrs["table"] == StaticDef((1, 2))
    assert (("step",), 3) in leaves


def test_variable_metadata_is_frozen_and_sorted():
    m = Leaf()
    m.w.set_metadata(z=1, a=("x", None))
    graphdef, _ = flatten_with_paths(m)
    assert dict(graphdef.root.attributes)["w"].metadata == (("a", ("x", None)), ("z", 1))


def test_root_variable_and_plain_containers():
    v = nnx.Param(1.0)
    graphdef, leaves = flatten_with_paths(v)
    assert graphdef.root == VariableDef(nnx.Param, 0, ()) and leaves == [((), v)]
    graphdef, leaves = flatten_with_paths({"a": [v, v]})
    assert graphdef.root.children[0].children[1] == NodeRef(nnx.Param, 0)
    assert len(leaves) == 1


def test_shared_ref_index_continues_numbering():
    m1, m2 = Leaf(), Leaf()
    m2.other = m1
    index = RefMap()
    flatten_with_paths(m1, ref_index=index)
    graphdef, leaves = flatten_with_paths(m2, ref_index=index)
    assert graphdef.root.index == 2
    assert dict(graphdef.root.attributes)["other"] == NodeRef(Leaf, 0)
    assert [p for p, _ in leaves] == [("w",)]
    assert len(index) == 4


# -- errors ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    layers: list


@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    layers: list


@pytest.mark.parametrize("bad", [Config([1, 2]), FrozenConfig([1, 2]), {1, 2}, bytearray(b"x")])
def test_unhashable_static_attribute_splits_and_hashing_names_path_and_fix(bad):
    # Only a GraphDef used as a cache key must be hashable: flatten_with_paths works, and
    # hashing the GraphDef names the attribute's path and the fix.
    m = Leaf()
    m.sub = nnx.Dict(cfg=bad)
    graphdef, _ = flatten_with_paths(m)
    assert graphdef == flatten_with_paths(m)[0]
    with pytest.raises(
        nnx.StaticAttributeError,
        match=rf"The static attribute at node\.sub\.cfg is a {type(bad).__name__}, which is unhashable",
    ):
        hash(graphdef)
    with pytest.raises(TypeError, match=r"1\. make the value hashable"):
        hash(graphdef)


def test_unhashable_static_marked_value():
    m = Leaf()
    m.table = nnx.static([1, 2])
    with pytest.raises(nnx.StaticAttributeError, match=r"node\.table is a list"):
        hash(flatten_with_paths(m)[0])


def test_unhashable_static_error_names_the_path_from_a_root():
    m = Leaf()
    m.cfg = Config([1])
    graphdef, _ = flatten_with_paths(m)
    assert "at model.cfg" in str(graphdef.unhashable_error("model"))
    graphdef, _ = flatten_with_paths(([m], {}))
    assert "at args[0].cfg" in str(graphdef.unhashable_error("x", ("args", "kwargs")))


def test_unhashable_metadata_splits_and_hashing_names_path():
    # As in Flax: list metadata (out_sharding=["a", None]) splits and compares by ==;
    # only hashing the GraphDef itself needs it hashable, and names the Variable.
    m = Leaf()
    m.layers = [Leaf(), Leaf()]
    m.layers[1].w.set_metadata(out_sharding=["a", None])
    graphdef, _ = flatten_with_paths(m)
    assert graphdef == flatten_with_paths(m)[0]
    m.layers[1].w.set_metadata(out_sharding=["b", None])
    assert graphdef != flatten_with_paths(m)[0]
    with pytest.raises(
        nnx.StaticAttributeError,
        match=r"metadata 'out_sharding' of the Param at node\.layers\[1\]\.w is a list",
    ):
        hash(graphdef)


def test_a_list_of_ints_is_walked_not_rejected():
    m = Leaf()
    m.features = [3, 4]
    graphdef, _ = flatten_with_paths(m)
    assert dict(graphdef.root.attributes)["features"] == ContainerDef(
        list, (0, 1), (StaticDef(3), StaticDef(4))
    )
