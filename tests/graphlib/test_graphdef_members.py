"""Tests of the Flax 0.12 members of GraphDef (flaxgraph/graphlib/graphdefs.py)."""

import pytest

import flaxgraph as nnx
from flaxgraph.graphlib.graphdefs import NodeDef


def test_outer_index_members_return_self():
    graphdef, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    assert graphdef.with_no_outer_index() is graphdef
    assert graphdef.with_same_outer_index() is graphdef
    assert graphdef.with_matching_outer_index(graphdef) is graphdef
    with pytest.raises(TypeError, match="expects a GraphDef"):
        graphdef.with_matching_outer_index(None)


def test_attributes_cover_every_node_attribute():
    class M(nnx.Module):
        def __init__(self):
            self.sub = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
            self.items = [1, 2]
            self.shared = self.sub

    graphdef, _ = nnx.split(M())
    keys = [k for k, _ in graphdef.attributes]
    expected = []
    for d in graphdef.nodes:
        if type(d) is NodeDef:
            expected += [k for k, _ in d.attributes]
    assert set(expected) <= set(keys)
    assert {"sub", "items", "shared", "kernel", "bias", 0, 1} <= set(keys)


def test_members_exist_in_flax_too():
    fnnx = pytest.importorskip("flax.nnx")
    theirs, _ = fnnx.split(fnnx.Linear(2, 3, rngs=fnnx.Rngs(0)))
    ours, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    for g in (theirs, ours):  # same names, both give an equal GraphDef back for a fresh split
        for name in ("with_no_outer_index", "with_same_outer_index"):
            assert getattr(g, name)() == getattr(g, name)()
        assert g.with_matching_outer_index(g) == g.with_matching_outer_index(g)
        assert len(g.attributes) > 0
