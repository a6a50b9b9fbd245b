"""Lift types: StateAxes, StateSharding, DiffState (``flaxgraph/transforms/lift_types.py``),
alone and as prefixes resolved by the lifting machine."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx
from flaxgraph.testing import Block, Node
from flaxgraph.transforms.aliasing import NamedRoots, PrefixSpec, PrefixWalk
from flaxgraph.transforms.lift_types import NO_MATCH, LiftType

MESH = Mesh(np.array(jax.devices()[:1]), ("x",))
S0 = NamedSharding(MESH, P())
S1 = NamedSharding(MESH, P("x"))


def test_first_matching_filter_wins():
    axes = nnx.StateAxes({nnx.PathContains("w"): 1, nnx.Param: 0, ...: None})
    w, b, s = nnx.Param(jnp.ones(1)), nnx.Param(jnp.ones(1)), nnx.BatchStat(jnp.ones(1))
    assert axes.prefix_of(("child", "w"), w) == 1
    assert axes.prefix_of(("b",), b) == 0
    assert axes.prefix_of(("s",), s) is None


def test_no_match():
    axes = nnx.StateAxes({nnx.Param: 0})
    assert axes.prefix_of(("s",), nnx.BatchStat(jnp.ones(1))) is NO_MATCH
    assert repr(NO_MATCH) == "NO_MATCH"


def test_constructed_from_a_mapping_or_pairs():
    a = nnx.StateSharding({nnx.Param: S0, ...: None})
    b = nnx.StateSharding([(nnx.Param, S0), (..., None)])
    assert a == b and hash(a) == hash(b)
    assert a.items() == [(nnx.Param, S0), (..., None)]
    assert a.filters == (nnx.Param, ...) and a.prefixes == (S0, None)


def test_equality_is_by_type_filters_and_prefixes():
    assert nnx.StateAxes({nnx.Param: 0}) == nnx.StateAxes({nnx.Param: 0})
    assert nnx.StateAxes({nnx.Param: 0}) != nnx.StateAxes({nnx.Param: 1})
    assert nnx.StateAxes({nnx.Param: 0}) != nnx.StateAxes({nnx.BatchStat: 0})
    # same mapping, different lift type
    assert nnx.StateAxes({nnx.Param: None}) != nnx.StateSharding({nnx.Param: None})
    # order matters: the first matching filter wins
    assert nnx.StateAxes({nnx.Param: 0, ...: 1}) != nnx.StateAxes({...: 1, nnx.Param: 0})
    assert len({nnx.StateAxes({nnx.Param: 0}), nnx.StateAxes({nnx.Param: 0})}) == 1


def test_repr():
    axes = nnx.StateAxes({nnx.Param: 0, (nnx.BatchStat, nnx.Cache): None, ...: 1})
    assert repr(axes) == "StateAxes({Param: 0, (BatchStat, Cache): None, ...: 1})"
    assert repr(nnx.DiffState(1, nnx.Param)) == "DiffState(1, Param)"
    assert repr(nnx.DiffState(0, ...)) == "DiffState(0, ...)"


def test_diff_state_value_semantics():
    a, b = nnx.DiffState(0, nnx.Param), nnx.DiffState(0, nnx.Param)
    assert a == b and hash(a) == hash(b)
    assert a != nnx.DiffState(1, nnx.Param) and a != nnx.DiffState(0, nnx.BatchStat)
    assert a.argnum == 0 and a.filter is nnx.Param
    assert a != (0, nnx.Param)


def test_lift_types_are_prefix_mappings():
    assert issubclass(nnx.StateAxes, LiftType) and issubclass(nnx.StateSharding, LiftType)
    assert not LiftType.distributes


# -- prefix resolution by the lifting machine -------------------------------------------------

SPEC = PrefixSpec("in_axes", lambda p: p is None or isinstance(p, int), nnx.StateAxes, "fix it")


def resolve(value, prefix):
    """The prefix of each leaf of ``args = (value,)`` given ``in_axes = (prefix,)``."""
    args = (value,)
    walk = PrefixWalk(SPEC, NamedRoots(("args",), (args,)))
    _, leaves, prefixes = walk.run_checked((args,), ((prefix,),))
    return {walk.where(path): p for (path, _), p in zip(leaves, prefixes)}


def test_lift_type_resolves_each_leaf_of_an_object_by_relative_path():
    m = Node(
        w=nnx.Param(jnp.ones(1)),
        s=nnx.BatchStat(jnp.ones(1)),
        child=Block(w=nnx.Param(jnp.ones(1))),
    )
    axes = nnx.StateAxes(
        {nnx.All(nnx.Param, nnx.PathContains("child")): 1, nnx.Param: 0, ...: None}
    )
    assert resolve([m, jnp.ones(2)], [axes, 0]) == {
        "args[0][0].child.w": 1,
        "args[0][0].s": None,
        "args[0][0].w": 0,
        "args[0][1]": 0,
    }


def test_plain_prefix_applies_to_all_of_an_objects_state():
    m = Node(w=nnx.Param(jnp.ones(1)), inner={"s": nnx.BatchStat(jnp.ones(1))})
    assert resolve({"m": m, "x": jnp.ones(1)}, {"m": 1, "x": None}) == {
        "args[0]['m'].inner['s']": 1,
        "args[0]['m'].w": 1,
        "args[0]['x']": None,
    }


def test_lift_type_given_for_a_container_is_an_error():
    with pytest.raises(
        nnx.PrefixError, match=r"StateAxes can only be used for an object(.|\n)*list at args\[0\]"
    ):
        resolve([Node()], nnx.StateAxes({...: 0}))


def test_lift_type_given_for_a_raw_leaf_is_an_error():
    with pytest.raises(
        nnx.PrefixError,
        match=r"gives StateAxes\(\{\.\.\.: 0\}\) for the \w+ leaf at args\[0\]; a leaf takes a single prefix",
    ):
        resolve(jnp.ones(1), nnx.StateAxes({...: 0}))


def test_leaf_matching_no_filter_is_an_error_naming_it():
    m = Node(w=nnx.Param(jnp.ones(1)), s=nnx.BatchStat(jnp.ones(1)))
    with pytest.raises(
        nnx.PrefixError,
        match=re.escape(
            "The BatchStat at args[0].s matches none of the filters of StateAxes({Param: 0})"
        ),
    ):
        resolve(m, nnx.StateAxes({nnx.Param: 0}))


def test_prefix_structure_mismatch_is_an_error():
    with pytest.raises(
        nnx.PrefixError,
        match=re.escape("in_axes has 1 entries at args[0], but the list there has 2"),
    ):
        resolve([1.0, 2.0], [0])
    with pytest.raises(
        nnx.PrefixError,
        match=re.escape("in_axes has keys ['a'] at args[0], but the dict there has keys ['b']"),
    ):
        resolve({"b": 1.0}, {"a": 0})
    with pytest.raises(
        nnx.PrefixError, match=r"gives 'zero' for the Node at args\[0\](.|\n)*Fix: fix it"
    ):
        resolve(Node(w=nnx.Param(jnp.ones(1))), "zero")


def test_shared_variable_under_a_lift_type_resolves_by_its_first_path_only_when_consistent():
    w = nnx.Param(jnp.ones(1))
    m = Node(a=w, b=w)
    assert resolve(m, nnx.StateAxes({...: 0})) == {"args[0].a": 0}
    # the two paths give the shared Variable different axes
    with pytest.raises(nnx.InconsistentAliasingError) as e:
        resolve(m, nnx.StateAxes({nnx.PathContains("a"): 0, ...: 1}))
    assert "args[0].a: 0" in str(e.value) and "args[0].b: 1" in str(e.value)


# -- used by the transforms ---------------------------------------------------------------


def test_state_sharding_in_jit_gives_each_sub_state_its_sharding():
    m = Node(w=nnx.Param(jnp.ones(2)), s=nnx.BatchStat(jnp.zeros(2)))
    ss = nnx.StateSharding({nnx.Param: S1, nnx.BatchStat: S0})

    @nnx.jit(in_shardings=(ss,), out_shardings=(ss, S1))
    def f(m):
        m.s.value = m.s.value + m.w.value
        return Node(w=nnx.Param(m.w.value * 2), s=nnx.BatchStat(m.s.value)), m.w.value

    out, y = f(m)
    assert out.w.value.sharding == S1 and out.s.value.sharding == S0 and y.sharding == S1
    assert m.w.value.sharding == S1 and m.s.value.sharding == S0
    np.testing.assert_allclose(m.s.value, jnp.ones(2))


def test_diff_state_in_grad_returns_only_the_filtered_sub_state():
    m = Node(
        a=nnx.Param(jnp.array(2.0)), b=nnx.Param(jnp.array(3.0)), c=nnx.BatchStat(jnp.array(5.0))
    )

    def f(m):
        return m.a.value * m.b.value * m.c.value

    g = nnx.grad(f, argnums=nnx.DiffState(0, nnx.Any(nnx.PathContains("b"), nnx.BatchStat)))(m)
    assert set(g) == {"b", "c"}
    assert float(g["b"].value) == 10.0 and float(g["c"].value) == 6.0
    assert type(g["c"]) is nnx.BatchStat


def test_lift_types_accept_a_state_of_prefixes_one_per_path():
    # Flax NNX 0.12: StateSharding(state) / StateAxes(state) give each leaf the prefix
    # at its own path.
    w = nnx.Param(jnp.ones((3, 2)))
    b = nnx.Param(jnp.zeros(2))
    m = nnx.Module()
    m.w, m.b = w, b
    axes = nnx.StateAxes(nnx.State({"w": 0, "b": None}))
    out = nnx.vmap(lambda m: m.w.value + m.b.value, in_axes=(axes,))(m)
    assert out.shape == (3, 2)
    with pytest.raises(nnx.PrefixError, match="matches none"):
        nnx.vmap(lambda m: None, in_axes=(nnx.StateAxes(nnx.State({"w": 0})),))(m)


def test_state_axes_reads_as_a_mapping():
    sa = nnx.StateAxes({nnx.Param: 0, ...: None})
    assert sa.axes == (0, None) == sa.values()
    assert sa.keys() == (nnx.Param, ...) and list(sa) == [nnx.Param, ...]
    assert sa.get(nnx.Param) == 0 and sa[...] is None and len(sa) == 2
    assert nnx.Param in sa and sa.get(nnx.BatchStat, "x") == "x"
    with pytest.raises(KeyError, match="no filter"):
        sa[nnx.BatchStat]


def test_state_axes_mapping_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")
    ours = nnx.StateAxes({nnx.Param: 0, ...: None})
    theirs = fnnx.StateAxes({fnnx.Param: 0, ...: None})
    assert tuple(ours.axes) == tuple(theirs.axes)
    assert tuple(ours.values()) == tuple(theirs.values())
    assert len(ours) == len(theirs)


def test_diff_state_map_prefix():
    d = nnx.DiffState(0, nnx.Param)
    assert d.map_prefix(("w",), nnx.Param(jnp.ones(2))) is True
    assert d.map_prefix(("s",), nnx.BatchStat(jnp.ones(2))) is False
    fnnx = pytest.importorskip("flax.nnx")
    f = fnnx.DiffState(0, fnnx.Param)
    assert f.map_prefix(("w",), fnnx.Param(jnp.ones(2))) is True
