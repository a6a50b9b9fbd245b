"""Tests of flaxgraph/graphlib/graphdefs.py: frozen, hashable, structurally-equal GraphDefs."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.graphlib.graphdefs import (
    ARRAY_DEF,
    ArrayDef,
    ContainerDef,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.testing import assert_graphs_equal, graphs


class Block(nnx.Module):
    def __init__(self, n, *, activation="relu"):
        self.w = nnx.Param(jnp.ones((n, n)))
        self.b = nnx.BatchStat(jnp.zeros(n))
        self.activation = activation

    def __call__(self, x):
        return x @ self.w + self.b


# -- the definitions ---------------------------------------------------------------------------


def test_defs_compare_by_value_and_hash_equal():
    a = NodeDef(Block, 0, None, (("w", VariableDef(nnx.Param, 1, ())),))
    b = NodeDef(Block, 0, None, (("w", VariableDef(nnx.Param, 1, ())),))
    assert a == b and hash(a) == hash(b)
    assert a != NodeDef(Block, 0, None, (("w", VariableDef(nnx.BatchStat, 1, ())),))
    assert a != NodeDef(Block, 1, None, (("w", VariableDef(nnx.Param, 1, ())),))
    assert NodeRef(Block, 0) == NodeRef(Block, 0) != NodeRef(Block, 1)
    assert ContainerDef(list, (0,), (ARRAY_DEF,)) != ContainerDef(tuple, (0,), (ARRAY_DEF,))
    assert ArrayDef() == ARRAY_DEF
    assert NodeRef(Block, 0) != VariableDef(Block, 0, ())


def test_defs_of_different_kinds_never_compare_equal():
    # the kinds differ in arity or in the type of a field (see graphdefs.py)
    defs = [
        NodeDef(Block, 0, None, ()),
        VariableDef(Block, 0, ()),
        NodeRef(Block, 0),
        ContainerDef(Block, (), (), None),
        ArrayDef(),
        ArrayDef(0),
        StaticDef(0),
        StaticDef(Block),
        StaticDef(None),
    ]
    for i, a in enumerate(defs):
        for b in defs[i + 1 :]:
            assert a != b, (a, b)


def test_defs_are_read_by_field_name_and_from_fields_is_the_constructor():
    node = NodeDef(Block, 2, None, (("w", VariableDef(nnx.Param, 3, (("a", 1),))),))
    assert (node.type, node.index, node.metadata) == (Block, 2, None)
    ((key, variable),) = node.attributes
    assert (key, variable.type, variable.index, variable.metadata) == (
        "w",
        nnx.Param,
        3,
        (("a", 1),),
    )
    for d in (node, variable, NodeRef(Block, 4), ContainerDef(list, (0,), (ARRAY_DEF,))):
        fields = {f: getattr(d, f) for f in d._fields}
        assert type(d).from_fields(tuple(fields.values())) == d == type(d)(**fields)
    static = StaticDef("x")
    assert (static.value_type, static.key, static.value) == (str, "x", "x")
    assert StaticDef.from_fields((str, "x")) == static
    assert (ArrayDef().index, ArrayDef(5).index) == (None, 5)


def test_static_def_tells_equal_python_values_of_other_types_apart():
    assert StaticDef(1) != StaticDef(True)
    assert StaticDef(1) != StaticDef(1.0)
    assert StaticDef(1) == StaticDef(1)
    assert len({StaticDef(1), StaticDef(True), StaticDef(1.0)}) == 3


def test_defs_are_immutable():
    d = NodeRef(Block, 0)
    with pytest.raises(AttributeError, match="NodeRef is immutable"):
        d.index = 3
    gd = nnx.graphdef(Block(2))
    with pytest.raises(AttributeError, match="GraphDef is immutable"):
        gd.root = None
    with pytest.raises(AttributeError, match="immutable"):
        gd.leaf_paths = ()


def test_defs_repr():
    assert repr(NodeRef(Block, 3)) == "NodeRef(type=Block, index=3)"
    assert repr(StaticDef("x")) == "StaticDef(value='x')"
    assert repr(ARRAY_DEF) == "ArrayDef()"


def test_defs_pickle_roundtrip():
    for d in (NodeRef(Block, 3), StaticDef(2), VariableDef(nnx.Param, 0, (("a", 1),))):
        assert pickle.loads(pickle.dumps(d)) == d


# -- GraphDef ----------------------------------------------------------------------------------


def test_same_structure_equal_graphdefs():
    a, b = nnx.graphdef(Block(2)), nnx.graphdef(Block(2))
    assert a == b and hash(a) == hash(b)
    assert a is not b


def test_different_values_same_graphdef():
    m1, m2 = Block(2), Block(2)
    m2.w.value = jnp.full((2, 2), 9.0)
    assert nnx.graphdef(m1) == nnx.graphdef(m2)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "activation", "gelu"),
        lambda m: setattr(m, "extra", 1),
        lambda m: setattr(m, "w", nnx.BatchStat(m.w.value)),
        lambda m: m.w.set_metadata("out_sharding", ("a", None)),
        lambda m: setattr(m, "b", m.w),  # sharing changes structure
        lambda m: delattr(m, "b"),
    ],
)
def test_structural_change_changes_graphdef(change):
    m = Block(2)
    before = nnx.graphdef(m)
    change(m)
    assert nnx.graphdef(m) != before


def test_array_shape_is_not_part_of_graphdef():
    assert nnx.graphdef(Block(2)) == nnx.graphdef(Block(3))


def test_num_leaves_leaf_paths_and_type():
    gd = nnx.graphdef(Block(2))
    assert isinstance(gd, GraphDef)
    assert gd.num_leaves == 2
    assert gd.leaf_paths == (("b",), ("w",))
    assert gd.type is Block
    assert nnx.graphdef([nnx.Param(1.0)]).type is list
    assert nnx.graphdef(3).type is type(None)  # a static root has no node type


def test_graphdef_pickle_roundtrip():
    gd = nnx.graphdef(Block(2))
    assert pickle.loads(pickle.dumps(gd)) == gd


def test_graphdef_is_a_jit_static_argument_without_retrace():
    traces = []

    @jax.jit
    def apply(graphdef, state, x):
        traces.append(1)
        return nnx.merge(graphdef, state)(x)

    apply = jax.jit(apply.__wrapped__, static_argnums=0)
    x = jnp.ones(2)
    for _ in range(3):
        graphdef, state = nnx.split(Block(2))
        out = apply(graphdef, state, x)
    assert len(traces) == 1
    np.testing.assert_allclose(out, x @ jnp.ones((2, 2)))
    graphdef, state = nnx.split(Block(2, activation="gelu"))
    apply(graphdef, state, x)
    assert len(traces) == 2


def test_graphdef_as_dict_key():
    cache = {nnx.graphdef(Block(2)): "compiled"}
    assert cache[nnx.graphdef(Block(2))] == "compiled"
    assert nnx.graphdef(Block(2, activation="tanh")) not in cache


def test_apply_merges_calls_and_returns_new_state():
    class Counter(nnx.Module):
        def __init__(self):
            self.n = nnx.Variable(jnp.array(0))

        def __call__(self, x):
            self.n += 1
            return x * 2

        def peek(self):
            return self.n.value

    graphdef, state = nnx.split(Counter())
    out, (graphdef2, state2) = graphdef.apply(state)(3)
    assert out == 6 and graphdef2 == graphdef
    # merge shares the State's Variables (Flax NNX 0.12), so the call wrote `state` too
    assert int(state2["n"].value) == 1 and state2["n"] is state["n"]
    out, _ = graphdef.apply(state2).peek()
    assert int(out) == 1


# -- a GraphDef is a pytree without leaves ----------------------------------------------------


class _MLP(nnx.Module):
    def __init__(self, seed: int = 0):
        rngs = nnx.Rngs(seed)
        self.hidden = nnx.Linear(2, 4, rngs=rngs)
        self.out = nnx.Linear(4, 3, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


def _numpy_mlp(state, x):
    hidden = state["hidden"]
    h = np.tanh(x @ np.asarray(hidden["kernel"].value) + np.asarray(hidden["bias"].value))
    return h @ np.asarray(state["out"]["kernel"].value) + np.asarray(state["out"]["bias"].value)


def test_graphdef_is_a_pytree_without_leaves():
    graphdef, _ = nnx.split(_MLP())
    leaves, treedef = jax.tree.flatten(graphdef)
    assert leaves == []
    assert jax.tree.unflatten(treedef, []) == graphdef
    assert jax.tree.map(lambda x: x + 1, graphdef) is graphdef


def test_functional_pattern_through_jax_jit():
    graphdef, state = nnx.split(_MLP())
    x = jnp.ones((5, 2))
    traces = []

    @jax.jit
    def apply(g, s, x):
        traces.append(1)
        return nnx.merge(g, s)(x)

    y = apply(graphdef, state, x)
    np.testing.assert_allclose(y, _numpy_mlp(state, np.ones((5, 2))), rtol=1e-5, atol=1e-6)
    other_graphdef, other_state = nnx.split(_MLP(seed=1))  # equal structure: no retrace
    apply(other_graphdef, other_state, x)
    assert len(traces) == 1
    graphdef_out = jax.jit(lambda g: g)(graphdef)  # a GraphDef may also be an output
    assert graphdef_out == graphdef


def test_functional_pattern_through_vmap_and_scan_over_a_stacked_state():
    graphdef, _ = nnx.split(_MLP())
    states = [nnx.split(_MLP(seed=s))[1] for s in range(3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    x = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32).reshape(4, 2)

    ys = jax.vmap(lambda g, s, x: nnx.merge(g, s)(x), in_axes=(None, 0, None))(graphdef, stacked, x)
    for i, s in enumerate(states):
        np.testing.assert_allclose(ys[i], _numpy_mlp(s, np.asarray(x)), rtol=1e-5, atol=1e-6)

    def body(carry, g_and_s):
        g, s = g_and_s
        return carry + nnx.merge(g, s)(x).sum(), None

    # the GraphDef rides along in xs: it has no leaves, so nothing of it is scanned over
    total, _ = jax.lax.scan(body, jnp.float32(0.0), (graphdef, stacked))
    expected = sum(_numpy_mlp(s, np.asarray(x)).sum() for s in states)
    np.testing.assert_allclose(total, expected, rtol=1e-5)


@given(graphs(rngs=False))
def test_graphdef_roundtrips_through_jit(g):
    graphdef, state = nnx.split(g)
    g2, s2 = jax.jit(lambda gd, s: (gd, s))(graphdef, state)
    assert g2 == graphdef
    assert_graphs_equal(nnx.merge(g2, s2), g)
