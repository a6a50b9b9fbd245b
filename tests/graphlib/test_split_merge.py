"""Tests of flaxgraph/graphlib/split_merge.py in Flax NNX 0.12's terms: Variable
identity (split/state return the model's own Variables, merge reuses them unless
``copy=True``, ``recreate_variables``), ``clone(variables=, arrays=)``, and the
``graph=`` argument (tree mode: a shared Variable is an error naming every path).

Where a behaviour is a fact about Flax NNX 0.12.8, a differential test compares
with the installed flax (skipped when flax is not installed)."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import corpus_params, corpus_settings
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.errors import SharedReferenceError
from flaxgraph.graphlib.walk import variable_paths
from flaxgraph.modes import set_graph_mode
from flaxgraph.testing import Node, assert_graphs_equal, graphs

CORPUS_SETTINGS = corpus_settings()


class Pair(nnx.Module):
    def __init__(self, shared: bool = False):
        self.a = nnx.Param(jnp.ones(2))
        self.b = self.a if shared else nnx.Param(jnp.zeros(2))
        self.stats = nnx.BatchStat(jnp.arange(3.0))


# -- identity ---------------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [True, False])
def test_split_and_state_hold_the_models_variables(graph):
    m = Pair()
    _, params, rest = nnx.split(m, nnx.Param, ..., graph=graph)
    assert params["a"] is m.a and params["b"] is m.b and rest["stats"] is m.stats
    assert nnx.state(m, graph=graph)["a"] is m.a
    params["a"].value = jnp.full(2, 7.0)  # writes through to the model
    np.testing.assert_array_equal(m.a.value, np.full(2, 7.0))


@pytest.mark.parametrize("graph", [True, False])
def test_merge_reuses_the_states_variables_unless_copy(graph):
    m = Pair()
    graphdef, state = nnx.split(m, graph=graph)
    shared = nnx.merge(graphdef, state)
    assert shared is not m and shared.a is m.a and shared.stats is m.stats
    copied = nnx.merge(graphdef, state, copy=True)
    assert copied.a is not m.a and type(copied.a) is nnx.Param
    assert copied.a.value is m.a.value  # the same buffer, a new box
    copied.a.value = jnp.zeros(2)
    np.testing.assert_array_equal(m.a.value, np.ones(2))


def test_merge_recreate_variables_wraps_pure_values():
    m = Pair()
    m.a.set_metadata(out_sharding=("x",))
    graphdef, state = nnx.split(m)
    pure = nnx.as_pure(state)
    assert not any(isinstance(x, nnx.Variable) for x in jax.tree.leaves(pure))
    rebuilt = nnx.merge(graphdef, pure)
    assert type(rebuilt.a) is nnx.Param and rebuilt.a.out_sharding == ("x",)
    assert type(rebuilt.stats) is nnx.BatchStat
    assert rebuilt.a.value is m.a.value
    raw = nnx.merge(graphdef, pure, recreate_variables=False)
    assert isinstance(raw.a, jax.Array) and raw.a is m.a.value


def test_merge_accepts_graph_states_and_rejects_non_graphdefs():
    m = Pair()
    params, rest = nnx.unpack(m, nnx.Param, ...)
    assert nnx.merge(params, rest).a is m.a
    graphdef, state = nnx.split(m)
    assert nnx.merge(graphdef, nnx.GraphState(graphdef, state)).stats is m.stats
    with pytest.raises(TypeError, match="GraphDef"):
        nnx.merge(state)


def test_merge_of_one_state_twice_gives_two_graphs_sharing_variables():
    m = Pair()
    graphdef, state = nnx.split(m)
    one, two = nnx.merge(graphdef, state), nnx.merge(graphdef, state)
    assert one is not two and one.a is two.a


# -- clone ------------------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [True, False])
def test_clone_variables_and_arrays(graph):
    m = Pair()
    deep = nnx.clone(m, graph=graph)
    assert deep.a is not m.a and deep.a.value is m.a.value
    structure_only = nnx.clone(m, variables=False, graph=graph)
    assert structure_only is not m and structure_only.a is m.a
    arrays = nnx.clone(m, arrays=True, graph=graph)
    assert arrays.a is not m.a and arrays.a.value is not m.a.value
    np.testing.assert_array_equal(arrays.a.value, m.a.value)
    for c in (deep, structure_only, arrays):
        assert_graphs_equal(c, m)


def test_clone_arrays_without_variables_is_an_error():
    with pytest.raises(ValueError, match="variables=True"):
        nnx.clone(Pair(), variables=False, arrays=True)


def test_clone_keeps_sharing():
    m = Pair(shared=True)
    c = nnx.clone(m)
    assert c.a is c.b and c.a is not m.a


# -- tree mode --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda m: nnx.split(m, graph=False),
        lambda m: nnx.state(m, graph=False),
        lambda m: nnx.graphdef(m, graph=False),
        lambda m: nnx.clone(m, graph=False),
        lambda m: nnx.unpack(m, graph=False),
        lambda m: nnx.flatten(m, graph=False),
        lambda m: nnx.map(lambda p, v: v, m, graph=False),
        lambda m: list(nnx.iter_graph(m, graph=False)),
        lambda m: nnx.recursive_map(lambda p, v: v, m, graph=False),
        lambda m: list(nnx.iter_modules(m, graph=False)),
    ],
    ids=[
        "split",
        "state",
        "graphdef",
        "clone",
        "unpack",
        "flatten",
        "map",
        "iter_graph",
        "recursive_map",
        "iter_modules",
    ],
)
def test_tree_mode_rejects_shared_variables_naming_every_path(call):
    m = Pair(shared=True)
    with pytest.raises(SharedReferenceError) as info:
        call(m)
    assert ".a" in str(info.value) and ".b" in str(info.value)
    assert "graph=False" in str(info.value)
    call(Pair(shared=False))  # no sharing: fine


def test_set_graph_mode_is_the_default_of_graph_none():
    m = Pair(shared=True)
    with set_graph_mode(False):
        with pytest.raises(SharedReferenceError):
            nnx.split(m)
        nnx.split(m, graph=True)  # explicit beats the default
    nnx.split(m)


def test_tree_mode_allows_a_shared_node_without_variables():
    empty = nnx.Module()
    m = Node(x=empty, y=empty, w=nnx.Param(jnp.ones(1)))
    _, state = nnx.split(m, graph=False)
    assert list(state) == ["w"]


def reachable_twice(g: Any) -> bool:
    return any(len(paths) > 1 for paths in variable_paths(g).values())


def has_cycle(g: Any) -> bool:
    """Whether a graph node of ``g`` contains itself (walking attributes and the
    items of lists, tuples and dicts)."""
    on_stack: set[int] = set()

    def go(x: Any) -> bool:
        if isinstance(x, nnx.Pytree):
            if id(x) in on_stack:
                return True
            on_stack.add(id(x))
            found = any(go(v) for v in vars(x).values())
            on_stack.discard(id(x))
            return found
        if isinstance(x, (list, tuple)):
            return any(go(v) for v in x)
        if isinstance(x, dict):
            return any(go(v) for v in x.values())
        return False

    return go(g)


def check_tree_mode_split(g: Any) -> None:
    if reachable_twice(g) or has_cycle(g):
        with pytest.raises(SharedReferenceError, match=r"cycles|several paths"):
            nnx.split(g, graph=False)
        return
    graphdef, state = nnx.split(g, graph=False)
    assert nnx.split(g, graph=True)[0] == graphdef
    merged = nnx.merge(graphdef, state)
    assert_graphs_equal(g, merged)


@given(graphs())
def test_tree_mode_split_raises_iff_a_variable_is_reachable_twice_or_a_cycle(g):
    check_tree_mode_split(g)


def test_tree_mode_cycle_message_names_both_places():
    m = Node(w=nnx.Param(jnp.ones(1)))
    m.child = Node(back=m)
    with pytest.raises(
        SharedReferenceError,
        match=r"cycles: the Node at node contains itself at "
        r"node\.child\.back",
    ):
        nnx.split(m, graph=False)
    nnx.split(m, graph=True)


@pytest.mark.parametrize("make", corpus_params())
def test_tree_mode_split_corpus(make):
    check_tree_mode_split(make())


# -- what merge accepts as the state -------------------------------------------------------------


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


@given(graphs())
def test_merge_of_the_leaf_list_is_the_merge_of_the_state(g):
    # Code that flattens a State with jax.tree (to cast, reshard or copy it) hands
    # merge the list of leaves; they are the State's in the GraphDef's order.
    graphdef, state = nnx.split(g)
    leaves = jax.tree.leaves(state, is_leaf=_is_variable)
    assert_graphs_equal(nnx.merge(graphdef, leaves), nnx.merge(graphdef, state))


def test_merge_takes_nested_dicts_flat_states_and_a_leaf_root():
    m = Pair()
    graphdef, state = nnx.split(m)
    as_dict = {"a": m.a, "b": {"value": m.b[...]}["value"], "stats": m.stats}
    rebuilt = nnx.merge(graphdef, as_dict)
    assert rebuilt.a is m.a and type(rebuilt.b) is nnx.Param
    assert nnx.merge(graphdef, state.flat_state()).stats is m.stats
    root_graphdef, _ = nnx.split(jnp.ones(2))
    assert nnx.merge(root_graphdef, "anything") == "anything"  # the root is a leaf


# -- differential: Flax NNX 0.12 ----------------------------------------------------------------


def test_identity_facts_match_flax():
    fnnx = pytest.importorskip("flax.nnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        def facts(lib: Any) -> tuple[bool, ...]:
            m = lib.Linear(2, 3, rngs=lib.Rngs(0))
            graphdef, state = lib.split(m)
            merged = lib.merge(graphdef, state)
            copied = lib.merge(graphdef, state, copy=True)
            pure = lib.merge(graphdef, lib.as_pure(state), recreate_variables=False)
            return (
                state["kernel"] is m.kernel,
                lib.state(m)["kernel"] is m.kernel,
                merged.kernel is m.kernel,
                copied.kernel is m.kernel,
                isinstance(pure.kernel, lib.Variable),
                lib.clone(m).kernel is m.kernel,
                lib.clone(m, variables=False).kernel is m.kernel,
            )

        assert facts(nnx) == facts(fnnx)


def test_merge_of_a_leaf_list_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")

    def merged_from_leaves(lib: Any) -> dict[str, Any]:
        class Blocks(lib.Module):
            def __init__(self) -> None:
                self.layers = lib.Dict({"b": lib.Param(jnp.ones(1)), "a": lib.Param(jnp.zeros(2))})
                self.scale = lib.BatchStat(jnp.full(3, 2.0))
                self.z = lib.List([lib.Param(jnp.arange(4.0)), lib.Param(jnp.arange(5.0))])

        graphdef, state = lib.split(Blocks())
        leaves = [x + 1 for x in jax.tree.leaves(state)]  # what a cast or reshard returns
        m = lib.merge(graphdef, leaves)
        return {
            "types": [type(m.layers["a"]).__name__, type(m.scale).__name__],
            "values": jax.tree.map(np.asarray, lib.to_pure_dict(lib.state(m))),
        }

    ours, theirs = merged_from_leaves(nnx), merged_from_leaves(fnnx)
    assert ours["types"] == theirs["types"]
    jax.tree.map(np.testing.assert_array_equal, ours["values"], theirs["values"])
