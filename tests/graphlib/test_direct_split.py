"""The direct walk of split (``graphlib/direct_split.py``) against the general walk.

Property: on every graph it accepts, ``split_direct`` gives the GraphDef (leaf paths
included) and the State that ``walk.flatten`` + ``State.from_flat_path`` give, with the
same leaf objects; where it gives up, ``split`` still reports the general walk's error;
and it gives up only where the general walk warns or tracks a raw ``jax.Ref``.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from graphs import corpus_params
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.filterlib import filters_to_predicates
from flaxgraph.graphlib.direct_split import partition_state, split_direct
from flaxgraph.graphlib.registry import REGISTRY, Kind
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.statelib import State, partition
from flaxgraph.testing import Node, filters, graphs


def general_split(g: Any, graph: bool = True) -> tuple[nnx.GraphDef, Any]:
    graphdef, leaves = flatten_with_paths(g, graph=graph)
    if len(leaves) == 1 and leaves[0][0] == ():
        return graphdef, leaves[0][1]
    return graphdef, State.from_flat_path(leaves)


def check_same_as_general(g: Any) -> None:
    check_mode(g, True)
    check_mode(g, False)


def check_mode(g: Any, graph: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = split_direct(g, graph)
        try:
            want_def, want_state = general_split(g, graph)
        except ValueError:  # tree mode: shared Variables or a cycle
            assert found is None, "the direct walk accepted what the general walk rejects"
            return
    if found is None:  # gave up: split takes the general walk
        return
    graphdef, state = found
    assert graphdef.tree is want_def.tree is (not graph)
    assert graphdef == want_def
    assert graphdef.leaf_paths == want_def.leaf_paths
    assert hash(graphdef) == hash(want_def)
    if type(want_state) is not State:
        assert state is want_state
        return
    got, want = list(state.flat_state()), list(want_state.flat_state())
    assert [p for p, _ in got] == [p for p, _ in want]
    assert all(a is b for (_, a), (_, b) in zip(got, want, strict=True))


@given(graphs(marks=True))
def test_direct_split_is_the_general_split(g: Any) -> None:
    check_same_as_general(g)


@pytest.mark.parametrize("make", corpus_params())
def test_direct_split_is_the_general_split_corpus(make: Any) -> None:
    check_same_as_general(make())


def test_containers_and_leaf_roots() -> None:
    w = nnx.Param(jnp.ones(2))
    for root in ([w, {"a": jnp.zeros(1), "b": (1, w)}], w, jnp.ones(3), Node()):
        check_same_as_general(root)
    graphdef, state = nnx.split(w)
    assert state is w and graphdef.leaf_paths == ((),)
    assert nnx.split(Node())[1] == nnx.State({})


def test_gives_up_where_the_general_walk_reports() -> None:
    assert split_direct(3) is None  # a scalar root is a leaf of the general walk
    listed = Node(w=nnx.Param(jnp.ones(1), names=["a"]))  # unhashable metadata: kept
    direct = split_direct(listed)
    assert direct is not None and direct[0] == general_split(listed)[0]
    per_instance = Node(f=lambda x: x)  # a static value made per model: a warning
    assert split_direct(per_instance) is None
    with pytest.warns(nnx.IdentityHashWarning, match=r"node\.f"):
        nnx.split(per_instance)
    ref = jax.new_ref(jnp.ones(1))  # a raw jax.Ref: the general walk tracks it
    assert split_direct(Node(r=ref)) is None
    _, state = nnx.split(Node(r=ref, s=ref))
    assert list(state) == ["r"]


def test_split_with_filters_takes_the_direct_walk() -> None:
    m = Node(a=nnx.Param(jnp.ones(1)), b=nnx.BatchStat(jnp.ones(1)), c=Node(d=nnx.Param(1.0)))
    graphdef, params, rest = nnx.split(m, nnx.Param, ...)
    assert params.flat_state().paths == (("a",), ("c", "d"))
    assert list(rest) == ["b"] and rest["b"] is m.b
    assert graphdef == nnx.graphdef(m)
    assert nnx.state(m, nnx.BatchStat)["b"] is m.b


@given(graphs(marks=True), st.lists(filters(), max_size=3))
def test_partition_state_is_partition_of_the_flat_state(g: Any, fs: list[Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = nnx.state(g)
    if type(state) is not State:
        return
    predicates = filters_to_predicates(tuple(fs))
    parts, rest = partition_state(state, predicates)
    want_parts, want_rest = partition(state.flat_state(), predicates)
    for got, want in zip(parts, want_parts, strict=True):
        pairs, want_pairs = list(got.flat_state()), list(State.from_flat_path(want).flat_state())
        assert [p for p, _ in pairs] == [p for p, _ in want_pairs]
        assert all(a is b for (_, a), (_, b) in zip(pairs, want_pairs, strict=True))
    assert [p for p, _ in rest] == [p for p, _ in want_rest]


def test_tree_mode_takes_the_direct_walk_and_leaves_sharing_to_the_general_one() -> None:
    m = Node(a=nnx.Param(jnp.ones(1)), c=Node(d=nnx.Param(1.0)))
    graphdef, state = nnx.split(m, graph=False)
    assert graphdef.tree and split_direct(m, False) is not None
    assert state["c"]["d"] is m.c.d
    w = nnx.Param(jnp.ones(1))
    shared = Node(a=w, b=w)
    assert split_direct(shared, False) is None
    with pytest.raises(ValueError, match="Duplicate Param"):
        nnx.split(shared, graph=False)


def test_direct_split_handles_most_of_the_corpus() -> None:
    # A direct walk that always gave up would pass the properties above; it must
    # handle every graph-mode corpus entry and most tree-mode ones (tree mode leaves
    # shared references and cycles to the general walk, which checks them).
    makes = [p.values[0] for p in corpus_params()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph_mode = sum(split_direct(make(), True) is not None for make in makes)
        tree_mode = sum(split_direct(make(), False) is not None for make in makes)
    assert graph_mode == len(makes)
    assert tree_mode >= len(makes) // 2


def _holds_raw_ref(g: Any) -> bool:
    return any(REGISTRY.kind_of(v) is Kind.REF for _, v in nnx.iter_graph(g, graph=True))


@given(graphs(marks=True))
def test_the_direct_walk_gives_up_only_where_the_general_walk_has_something_to_say(
    g: Any,
) -> None:
    # Both walks classify values the same way (registry.REGISTRY); the direct one may
    # leave a value only to the general one when that one warns (a static made per
    # model) or tracks it specially (a raw jax.Ref). A direct walk that gave up on
    # anything else, or always, fails here on generated graphs, not only the corpus.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flatten_with_paths(g)
    if caught or _holds_raw_ref(g):
        return
    assert split_direct(g, True) is not None
