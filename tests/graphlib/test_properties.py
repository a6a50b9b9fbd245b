"""Properties of the graph engine over generated graphs and over the corpus.

Each property is one ``check_*`` function, run twice: over hypothesis-generated
graphs (``flaxgraph.testing.graphs``: sharing, cycles, containers, mixed kinds,
metadata) and over every graph of the named corpus (``tests/graphs.py``).
Graphs are compared with ``assert_graphs_equal``: same types, static values,
array values, metadata and sharing pattern.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from graphs import corpus_params, corpus_settings
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.filterlib import to_predicate
from flaxgraph.graphlib.registry import is_array_leaf, is_node_or_variable
from flaxgraph.testing import (
    Node,
    SetValue,
    apply_mutations,
    assert_graphs_equal,
    filters,
    graphs,
    mutations,
)

GRAPHS = graphs(marks=True)
CORPUS_SETTINGS = corpus_settings()

# -- helpers --------------------------------------------------------------------------------


def tracked_objects(g: Any) -> list[Any]:
    """The graph nodes and Variables of ``g``, each once, in iter_graph order."""
    return [v for _, v in nnx.iter_graph(g) if is_node_or_variable(v)]


def assert_disjoint(a: Any, b: Any) -> None:
    """No node or Variable of ``a`` is also in ``b``."""
    ids = {id(x) for x in tracked_objects(a)}
    shared = [type(x).__name__ for x in tracked_objects(b) if id(x) in ids]
    assert not shared, f"objects shared between the two graphs: {shared}"


def assert_shares_only_variables(a: Any, b: Any) -> None:
    """Every Variable of ``b`` is one of ``a``'s and no graph node of ``b`` is in ``a``
    (what ``merge(*split(a))`` gives in Flax NNX 0.12: new nodes, the same Variables)."""
    ids = {id(x) for x in tracked_objects(a)}
    for x in tracked_objects(b):
        if isinstance(x, nnx.Variable):
            assert id(x) in ids, f"a new {type(x).__name__} in the merged graph"
        else:
            assert id(x) not in ids, f"the {type(x).__name__} node is shared"


def bump(x: Any) -> Any:
    """A different value of the same type, shape and dtype (PRNG keys unchanged)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and (
        jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
    ):
        return jnp.asarray(x + 1, dtype=dtype)
    return x


def has_array_in_tuple(g: Any) -> bool:
    """Whether a raw array sits directly in a tuple (``update`` cannot write it)."""
    return any(
        type(v) is tuple and any(is_array_leaf(item) for item in v) for _, v in nnx.iter_graph(g)
    )


def identity(x: Any) -> Any:
    return x


def without_catch_alls(fs: list[Any]) -> list[Any]:
    """``fs`` without ``...``/``True``, for tests that append the final ``...``."""
    return [f for f in fs if f is not Ellipsis and f is not True]


# -- merge(*split(g)) -------------------------------------------------------------------------


def check_split_merge_roundtrip(g: Any, fs: list[Any]) -> None:
    fs = without_catch_alls(fs)  # a catch-all may only come last (see check_filters_partition)
    snapshot = nnx.clone(g)
    graphdef, state = nnx.split(g)
    merged = nnx.merge(graphdef, state)
    assert_graphs_equal(g, merged)
    assert_shares_only_variables(g, merged)
    assert nnx.graphdef(merged) == graphdef
    # with filters, and the States passed in reverse order
    graphdef2, *states = nnx.split(g, *fs, ...)
    assert graphdef2 == graphdef
    assert_graphs_equal(g, nnx.merge(graphdef2, *reversed(states)))
    # copy=True shares nothing: mutating that graph leaves g alone
    copied = nnx.merge(graphdef, state, copy=True)
    assert_graphs_equal(g, copied)
    assert_disjoint(g, copied)
    apply_mutations(copied, [SetValue(i, 2, 1) for i in range(3)])
    assert_graphs_equal(g, snapshot)
    # the default merge shares the Variables: its value writes reach g
    apply_mutations(merged, [SetValue(i, 2, 1) for i in range(3)])
    assert_graphs_equal(g, merged)


@given(GRAPHS, st.lists(filters(), max_size=3))
def test_split_merge_roundtrip(g: Any, fs: list[Any]) -> None:
    check_split_merge_roundtrip(g, fs)


@pytest.mark.parametrize("make", corpus_params())
def test_split_merge_roundtrip_corpus(make: Any) -> None:
    check_split_merge_roundtrip(make(), [nnx.Param, nnx.BatchStat])


# -- update -------------------------------------------------------------------------------------


def check_update(g: Any) -> None:
    graphdef, state = nnx.split(g)
    g2 = nnx.merge(graphdef, jax.tree.map(bump, state))
    before = tracked_objects(g)
    if has_array_in_tuple(g):
        # Documented limit (as in Flax NNX): a raw array in a tuple cannot be
        # written in place. Then nothing at all is written.
        snapshot = nnx.merge(graphdef, state)
        with pytest.raises(nnx.GraphStructureError, match="immutable tuple"):
            nnx.update(g, nnx.state(g2))
        assert_graphs_equal(g, snapshot)
        return
    nnx.update(g, nnx.state(g2))
    assert_graphs_equal(g, g2)
    after = tracked_objects(g)
    assert len(before) == len(after), "update added or removed objects"
    assert all(x is y for x, y in zip(before, after, strict=True)), (
        "update replaced objects instead of writing into them"
    )
    assert nnx.graphdef(g) == graphdef


@given(GRAPHS)
def test_update_writes_values_in_place(g: Any) -> None:
    check_update(g)


@pytest.mark.parametrize("make", corpus_params())
def test_update_writes_values_in_place_corpus(make: Any) -> None:
    check_update(make())


def test_update_writes_data_marked_scalars() -> None:
    # Regression: update raised "the node has a int there" for `nnx.data(3)`
    # attributes, whose State leaf is the int itself.
    g = Node(step=nnx.data(3), w=nnx.Param(jnp.ones(1)))
    graphdef, state = nnx.split(g)
    nnx.update(g, state)
    assert g.step == 3
    nnx.update(g, nnx.State({"step": 4}))
    assert g.step == 4
    assert nnx.graphdef(g) == graphdef  # still marked data
    # As in Flax 0.12, a State leaf also overwrites a plain static value.
    plain = Node(step=3)
    nnx.update(plain, nnx.State({"step": 4}))
    assert plain.step == 4
    d = {"a": {"b": 1, "c": nnx.Param(jnp.array(2))}}
    nnx.update(d, {"a": {"b": 5, "c": jnp.array(10)}})
    assert d["a"]["b"] == 5 and d["a"]["c"][...] == 10


@pytest.mark.parametrize("value", [None, ..., 3, "s", (None, 1)])
def test_static_marked_singletons_do_not_warn(value: Any) -> None:
    # Regression: `nnx.static(None)` raised IdentityHashWarning (None hashes by
    # identity, but it is a singleton: every model gets the same GraphDef).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nnx.graphdef(Node(a=nnx.static(value))) == nnx.graphdef(Node(a=nnx.static(value)))


@given(GRAPHS)
def test_update_with_own_state_is_a_no_op(g: Any) -> None:
    graphdef, state = nnx.split(g)
    before = tracked_objects(g)
    if not has_array_in_tuple(g):
        nnx.update(g, state)
        assert_graphs_equal(g, nnx.merge(graphdef, state))
        assert all(x is y for x, y in zip(before, tracked_objects(g), strict=True))


# -- clone ---------------------------------------------------------------------------------------


def check_clone(g: Any, steps: list[Any]) -> None:
    graphdef, state = nnx.split(g)  # the State holds copies: a snapshot of g
    c = nnx.clone(g)
    assert_graphs_equal(g, c)
    assert_disjoint(g, c)
    apply_mutations(c, [*steps, SetValue(0, 3, 1)])
    assert_graphs_equal(g, nnx.merge(graphdef, state))


@given(GRAPHS, mutations())
def test_clone_is_deep_and_independent(g: Any, steps: list[Any]) -> None:
    check_clone(g, steps)


@pytest.mark.parametrize("make", corpus_params())
@CORPUS_SETTINGS
@given(steps=mutations())
def test_clone_is_deep_and_independent_corpus(make: Any, steps: list[Any]) -> None:
    check_clone(make(), steps)


# -- filters partition the state ------------------------------------------------------------------


def _catch_all(f: Any) -> bool:
    return f is Ellipsis or f is True


def check_filters_partition(g: Any, fs: list[Any]) -> None:
    whole = nnx.state(g).flat_state()
    if any(_catch_all(f) and not all(map(_catch_all, fs[i + 1 :])) for i, f in enumerate(fs)):
        # a catch-all before another filter would leave that filter nothing (Flax 0.12)
        with pytest.raises(ValueError, match="can only be used as the last filters"):
            nnx.split(g, *fs, ...)
        return
    _, *parts = nnx.split(g, *fs, ...)
    predicates = [to_predicate(f) for f in (*fs, ...)]
    seen: dict[Any, int] = {}
    for i, part in enumerate(parts):
        for path, leaf in part.flat_state():
            assert path not in seen, f"{path} is in States {seen[path]} and {i}"
            seen[path] = i
            # first matching filter wins
            assert predicates[i](path, leaf), f"{path} is in State {i} but filter {i} rejects it"
            earlier = [j for j in range(i) if predicates[j](path, leaf)]
            assert not earlier, f"{path} is in State {i} but filter {earlier[0]} matches it"
    assert set(seen) == set(whole.paths), "the States do not cover the whole state"
    for path, leaf in whole:
        [match] = [lf for p, lf in parts[seen[path]].flat_state() if p == path]
        assert_graphs_equal(leaf, match)
    # nnx.state(g, *fs) is the same partition without the rest
    if fs:
        filtered = nnx.state(g, *fs)
        filtered = (filtered,) if len(fs) == 1 else filtered
        for got, want in zip(filtered, parts[: len(fs)], strict=True):
            assert got.flat_state().paths == want.flat_state().paths
    # split without a final `...` fails exactly when some leaf matches no filter
    unmatched = [p for p, i in seen.items() if i == len(fs)]
    if fs and unmatched:
        with pytest.raises(nnx.UnmatchedLeafError):
            nnx.split(g, *fs)
    elif fs:
        nnx.split(g, *fs)


@given(GRAPHS, st.lists(filters(), max_size=4))
def test_filters_partition_the_state(g: Any, fs: list[Any]) -> None:
    check_filters_partition(g, fs)


@pytest.mark.parametrize("make", corpus_params())
@CORPUS_SETTINGS
@given(fs=st.lists(filters(), max_size=4))
def test_filters_partition_the_state_corpus(make: Any, fs: list[Any]) -> None:
    check_filters_partition(make(), fs)


# -- GraphDef equality and hash --------------------------------------------------------------------


def check_graphdef_stable(g: Any) -> None:
    first, second = nnx.graphdef(g), nnx.graphdef(g)
    assert first is not second
    assert first == second and hash(first) == hash(second)
    cloned = nnx.graphdef(nnx.clone(g))
    assert cloned == first and hash(cloned) == hash(first)
    merged = nnx.graphdef(nnx.merge(*nnx.split(g)))
    assert merged == first and hash(merged) == hash(first)
    # a value-only change keeps the GraphDef
    graphdef, state = nnx.split(g)
    changed = nnx.merge(graphdef, jax.tree.map(bump, state))
    assert nnx.graphdef(changed) == first
    # usable as a dict key: equal GraphDefs find each other
    assert {first: 1}[cloned] == 1


@given(GRAPHS)
def test_graphdef_equality_and_hash_are_stable(g: Any) -> None:
    check_graphdef_stable(g)


@pytest.mark.parametrize("make", corpus_params())
def test_graphdef_equality_and_hash_are_stable_corpus(make: Any) -> None:
    check_graphdef_stable(make())


def test_graphdef_differs_when_structure_differs() -> None:
    a = Node(w=nnx.Param(jnp.ones(2)), n=1)
    assert nnx.graphdef(a) != nnx.graphdef(Node(w=nnx.Param(jnp.ones(2)), n=True))
    assert nnx.graphdef(a) != nnx.graphdef(Node(w=nnx.BatchStat(jnp.ones(2)), n=1))
    w = nnx.Param(jnp.ones(2))
    assert nnx.graphdef(Node(a=w, b=w)) != nnx.graphdef(
        Node(a=nnx.Param(jnp.ones(2)), b=nnx.Param(jnp.ones(2)))
    )


# -- States through jax.tree.map and jax.jit -----------------------------------------------------


def check_state_through_jax(g: Any, fs: list[Any]) -> None:
    fs = without_catch_alls(fs)
    graphdef, *states = nnx.split(g, *fs, ...)
    mapped = jax.tree.map(identity, states)
    assert_graphs_equal(g, nnx.merge(graphdef, *mapped))
    # jit returns every leaf as a JAX array (an `nnx.data(3)` comes back as Array(3))
    expected = nnx.merge(graphdef, *jax.tree.map(jnp.asarray, states))
    jitted = jax.jit(identity)(states)
    assert_graphs_equal(expected, nnx.merge(graphdef, *jitted))
    # merge and split inside jit, the GraphDef as a static argument
    inner: list[nnx.GraphDef] = []

    def roundtrip(gd: nnx.GraphDef, states: list[nnx.State]) -> nnx.State:
        graphdef_in, state_in = nnx.split(nnx.merge(gd, *states))
        inner.append(graphdef_in)
        return state_in

    out = jax.jit(roundtrip, static_argnums=0)(graphdef, states)
    assert inner and inner[0] == graphdef
    assert_graphs_equal(expected, nnx.merge(graphdef, out))


@given(GRAPHS, st.lists(filters(), max_size=2))
def test_state_survives_tree_map_and_jit(g: Any, fs: list[Any]) -> None:
    check_state_through_jax(g, fs)


@pytest.mark.parametrize("make", corpus_params())
def test_state_survives_tree_map_and_jit_corpus(make: Any) -> None:
    check_state_through_jax(make(), [nnx.Param])


# -- split_context / merge_context across graphs ---------------------------------------------------


def check_contexts(g1: Any, g2: Any) -> None:
    with nnx.split_context() as ctx:
        gd1, s1 = ctx.split(g1)
        gd2, s2 = ctx.split(g2)
    with nnx.merge_context() as ctx:
        m1 = ctx.merge(gd1, s1)
        m2 = ctx.merge(gd2, s2)
    assert_graphs_equal((g1, g2), (m1, m2))
    assert_shares_only_variables((g1, g2), (m1, m2))
    with nnx.merge_context() as ctx:
        c1 = ctx.merge(gd1, s1, copy=True)
        c2 = ctx.merge(gd2, s2, copy=True)
    assert_graphs_equal((g1, g2), (c1, c2))
    assert_disjoint((g1, g2), (c1, c2))
    # each shared leaf is stored once, in the first State that reaches it
    together = nnx.state((g1, g2)).flat_state()
    assert len(s1.flat_state()) + len(s2.flat_state()) == len(together)
    # g2 refers to g1's objects: its GraphDef alone cannot be merged
    with pytest.raises(nnx.GraphStructureError, match="merge_context"):
        nnx.merge(gd2, s2)


@given(GRAPHS, graphs(), st.data())
def test_contexts_restore_sharing_across_graphs(g1: Any, g2: Any, data: st.DataObject) -> None:
    in_g1 = tracked_objects(g1)
    g2.shared_from_g1 = data.draw(st.sampled_from(in_g1), label="object of g1 shared by g2")
    if data.draw(st.booleans(), label="share back"):
        # an object of g2 (possibly one reached only through g1) shared by g1 too
        g1.shared_from_g2 = data.draw(st.sampled_from(tracked_objects(g2)), label="back")
    check_contexts(g1, g2)


@pytest.mark.parametrize("make", corpus_params())
def test_contexts_restore_sharing_across_graphs_corpus(make: Any) -> None:
    g1 = make()
    for obj in tracked_objects(g1)[:3]:
        check_contexts(g1, Node(own=nnx.Param(jnp.ones(1)), shared=obj))
