"""The direct build of merge (``graphlib/direct_merge.py``) against the general build.

Property: whenever it builds, ``merge_direct`` gives the graph ``build_graph`` gives from
the State's leaves in the GraphDef's order (same structure, values and sharing; with
``copy=False`` the State's own Variables); on a State that does not fit, it gives up and
``merge`` reports the general error.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from graphs import corpus_params
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.direct_merge import GAVE_UP, join_states, merge_direct
from flaxgraph.graphlib.registry import REGISTRY, Kind
from flaxgraph.testing import Node, assert_graphs_equal, graphs


def check_same_as_general(g: Any) -> None:
    graphdef, state = nnx.split(g)
    if type(state) is not nnx.State:
        return
    leaves = [leaf for _, leaf in state.flat_state()]
    for copy in (False, True):
        built = merge_direct(graphdef, state, copy, True)
        if built is GAVE_UP:
            return
        want = build_graph(graphdef, leaves, copy_variables=copy)
        assert_graphs_equal(built, want)
        if not copy:
            variables = [v for _, v in nnx.iter_graph(built) if isinstance(v, nnx.Variable)]
            originals = {id(v) for _, v in state.flat_state()}
            assert all(id(v) in originals for v in variables)
    pure = nnx.State(jax.tree.map(lambda x: x, state.to_pure_dict()))
    built = merge_direct(graphdef, pure, False, True)
    if built is not GAVE_UP:
        assert_graphs_equal(built, nnx.merge(graphdef, state))


@given(graphs(marks=True))
def test_direct_merge_is_the_general_merge(g: Any) -> None:
    check_same_as_general(g)


@pytest.mark.parametrize("make", corpus_params())
def test_direct_merge_is_the_general_merge_corpus(make: Any) -> None:
    check_same_as_general(make())


def test_gives_up_on_a_state_that_does_not_fit() -> None:
    m = Node(a=nnx.Param(jnp.ones(1)), c=Node(d=nnx.Param(1.0)))
    graphdef, state = nnx.split(m)
    extra = nnx.State({**state, "x": nnx.Param(2.0)})
    assert merge_direct(graphdef, extra, False, True) is GAVE_UP
    with pytest.raises(nnx.GraphStructureError, match="no place for: x"):
        nnx.merge(graphdef, extra)
    missing = nnx.State({"a": state["a"]})
    assert merge_direct(graphdef, missing, False, True) is GAVE_UP
    with pytest.raises(nnx.GraphStructureError, match="missing leaves at c/d"):
        nnx.merge(graphdef, missing)
    misplaced = nnx.State({"a": {"z": state["a"]}, "c": state["c"]})
    assert merge_direct(graphdef, misplaced, False, True) is GAVE_UP
    with pytest.raises(nnx.GraphStructureError):
        nnx.merge(graphdef, misplaced)


def test_merge_copy_false_shares_and_copy_true_does_not() -> None:
    w = nnx.Param(jnp.ones(2))
    m = Node(a=w, b=w, items=[Node(k=nnx.BatchStat(0)), (1, jnp.zeros(1))])
    graphdef, state = nnx.split(m)
    shared = nnx.merge(graphdef, state)
    assert shared.a is w and shared.b is w and shared.items[0].k is m.items[0].k
    copied = nnx.merge(graphdef, state, copy=True)
    assert copied.a is copied.b and copied.a is not w
    assert_graphs_equal(copied, m)


def test_join_states_unites_filtered_states_without_changing_them() -> None:
    m = Node(a=nnx.Param(jnp.ones(1)), b=nnx.BatchStat(0), c=Node(d=nnx.Param(1.0), e=nnx.Cache(2)))
    graphdef, params, rest = nnx.split(m, nnx.Param, ...)
    before = (params.flat_state().paths, rest.flat_state().paths)
    joined = join_states((rest, params))
    assert joined is not None
    assert set(joined.flat_state().paths) == set(nnx.state(m).flat_state().paths)
    assert (params.flat_state().paths, rest.flat_state().paths) == before
    assert join_states((params,)) is params
    assert join_states((params, params)) is None  # a path in two States
    assert join_states((params, {"b": 1})) is None  # not a State: the general path
    merged = nnx.merge(graphdef, rest, params)
    assert merged.c.d is m.c.d and merged.b is m.b
    with pytest.raises(nnx.GraphStructureError, match="more than one"):
        nnx.merge(graphdef, params, params, rest)


def test_direct_merge_handles_the_corpus() -> None:
    # A direct build that always gave up would pass the properties above.
    handled = 0
    makes = [p.values[0] for p in corpus_params()]
    for make in makes:
        graphdef, state = nnx.split(make())
        handled += merge_direct(graphdef, state, False, True) is not GAVE_UP
    assert handled == len(makes)


@given(graphs(marks=True))
def test_the_direct_build_gives_up_only_on_raw_refs(g: Any) -> None:
    # What split returns (one nested State) is what the direct build is for: it may
    # leave only raw jax.Refs to the general build. One that gave up on anything else,
    # or always, fails here on generated graphs, not only the corpus.
    graphdef, state = nnx.split(g)
    if type(state) is not nnx.State:
        return
    if any(REGISTRY.kind_of(v) is Kind.REF for _, v in nnx.iter_graph(g)):
        return
    assert merge_direct(graphdef, state, False, True) is not GAVE_UP
