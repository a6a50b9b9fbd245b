"""Property tests of nnx.shard_map's lifting: consistent aliasing and updates.

They run in-process on a one-device mesh ``('x',)`` (the lifting does not depend on
the device count; ``test_shard_map.py`` covers 8 devices), with three distinct
specs: ``P()``, ``P('x')`` and ``None``. The oracles are those of
``test_aliasing_properties.py`` (every alias of a leaf must receive one spec; a
rejection lists every path with its spec) and ``test_mutation_differential.py``
(a mutation program under the transform does what it does eagerly; a program
that raises leaves the caller's objects exactly unchanged), reused here. Each
property runs at most 25 examples, since every example compiles a new function.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import structures
from hypothesis import event, given, settings
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from test_aliasing_properties import (
    Records,
    build_output,
    check_rejection,
    check_same_objects,
    inconsistent,
    object_places,
    outputs,
    pools,
    record_aliases,
)
from test_mutation_differential import (
    PROGRAMS,
    SMALL_GRAPHS,
    Boom,
    assert_same_outcome,
    assert_unchanged,
    program,
    raising,
    snapshot,
)

import flaxgraph as nnx
from flaxgraph.testing import assert_graphs_equal

MESH = Mesh(np.array(jax.devices()[:1]), ("x",))
SPECS: dict[str, Any] = {"P()": P(), "P('x')": P("x"), "None": None}
LABELS = tuple(SPECS)
# Every example compiles a new shard_map: cap them (the dev profile asks for 200).
BOUNDED = settings(max_examples=min(settings().max_examples, 25))


def to_specs(tree: Any) -> Any:
    if type(tree) is dict:
        return {k: to_specs(v) for k, v in tree.items()}
    if type(tree) in (tuple, list):
        return type(tree)(to_specs(v) for v in tree)
    return SPECS[tree]


def show(label: str) -> str:
    return repr(SPECS[label])


@st.composite
def spec_trees(draw: Any, value: Any) -> Any:
    """A spec (label) tree for ``value``: one label, or one per container entry."""
    if type(value) in (tuple, list, dict) and draw(st.booleans()):
        if type(value) is dict:
            return {k: draw(spec_trees(v)) for k, v in value.items()}
        return type(value)(draw(spec_trees(v)) for v in value)
    return draw(st.sampled_from(LABELS))


def variables_of(root: Any) -> list[Any]:
    return [v for _, v in nnx.iter_graph(root) if isinstance(v, nnx.Variable)]


def increment_all(*args: Any) -> None:
    """Adds one to every Variable reachable from the arguments (each once)."""
    for v in variables_of(args):
        v.value = v.value + 1


# -- in_specs: accepted iff consistent; accepted calls update every Variable once -----------


@BOUNDED
@given(st.data())
def test_shard_map_accepts_exactly_the_consistent_in_specs_and_updates_once(data: Any) -> None:
    pool = data.draw(pools(kinds=(nnx.Param, nnx.BatchStat)), label="pool")
    n_args = data.draw(st.integers(1, 3), label="n_args")
    args = tuple(
        data.draw(structures(pool, none_at_top=False), label=f"args[{i}]") for i in range(n_args)
    )
    labels = tuple(data.draw(spec_trees(a), label=f"in_specs[{i}]") for i, a in enumerate(args))

    records: Records = {}
    for i, a in enumerate(args):
        record_aliases(records, a, f"args[{i}]", labels[i], pool.attrs, lambda _, p: p)
    bad = inconsistent(records)
    event("rejected" if bad else "accepted")

    reached = [v for v in pool.objects if isinstance(v, nnx.Variable)]
    reached = [v for v in reached if any(v is w for w in variables_of(args))]
    before = {id(v): np.asarray(v.value) for v in reached}
    f = nnx.shard_map(increment_all, mesh=MESH, in_specs=to_specs(labels), out_specs=P())
    if not bad:
        assert f(*args) is None
        for v in reached:
            np.testing.assert_array_equal(np.asarray(v.value), before[id(v)] + 1)
        return
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        f(*args)
    check_rejection(info.value, bad, show)
    for v in reached:  # nothing was written
        np.testing.assert_array_equal(np.asarray(v.value), before[id(v)])


# -- out_specs: an output that is an input keeps its in_specs, and is the caller's object -----


@BOUNDED
@given(st.data())
def test_shard_map_outputs_must_keep_the_specs_of_their_input_aliases(data: Any) -> None:
    pool = data.draw(pools(), label="pool")
    n_args = data.draw(st.integers(1, 2), label="n_args")
    args = tuple(
        data.draw(structures(pool, none_at_top=False), label=f"args[{i}]") for i in range(n_args)
    )
    places = object_places(args, ())
    if not places:
        args = (*args, pool.objects[0])
        places = [(len(args) - 1,)]
    in_labels = tuple(
        data.draw(st.sampled_from(LABELS), label=f"in[{i}]") for i in range(len(args))
    )
    spec = data.draw(outputs(places), label="output")
    attrs = dict(pool.attrs)
    expected_out = build_output(spec, args, attrs)
    out_label = data.draw(spec_trees(expected_out), label="out_specs")

    in_records: Records = {}
    for i, a in enumerate(args):
        record_aliases(in_records, a, f"args[{i}]", in_labels[i], attrs, lambda _, p: p)
    all_records = {k: list(r) for k, r in in_records.items()}
    record_aliases(all_records, expected_out, "output", out_label, attrs, lambda _, p: p)
    bad = inconsistent(in_records) or inconsistent(all_records)
    event("accepted" if not bad else "rejected")

    f = nnx.shard_map(
        lambda *a: build_output(spec, a),
        mesh=MESH,
        in_specs=tuple(SPECS[label] for label in in_labels),
        out_specs=to_specs(out_label),
    )
    if not bad:
        check_same_objects(spec, f(*args), args)
        return
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        f(*args)
    check_rejection(info.value, bad, show)


# -- updates: a mutation program under shard_map does what it does eagerly ----------------------


def replicated(f: Any) -> Any:
    return nnx.shard_map(f, mesh=MESH, in_specs=(P(),), out_specs=P())


@BOUNDED
@given(graph=SMALL_GRAPHS, steps=PROGRAMS)
def test_a_program_under_shard_map_matches_it_run_eagerly(graph: Any, steps: Any) -> None:
    eager = nnx.clone(graph)
    eager_out = program(steps)(eager)
    out = replicated(program(steps))(graph)
    assert_same_outcome(graph, out, eager, eager_out, eager_out[0])


@BOUNDED
@given(graph=SMALL_GRAPHS, steps=PROGRAMS, data=st.data())
def test_a_program_that_raises_under_shard_map_leaves_the_objects_unchanged(
    graph: Any, steps: Any, data: Any
) -> None:
    at = data.draw(st.integers(0, len(steps)), label="raise after step")
    before = snapshot(graph)
    copy = nnx.clone(graph)
    with pytest.raises(Boom):
        replicated(raising(steps, at))(graph)
    assert_unchanged(before, graph)
    assert_graphs_equal(graph, copy)


# -- sharding names inside: the manual axes are dropped, and restored after ---------------------

NAMES = st.sampled_from(["x", "y", None, ("x", "y"), ("y", "x")])


def local_oracle(names: tuple[Any, ...], manual: set[str]) -> tuple[Any, ...]:
    out: list[Any] = []
    for entry in names:
        if isinstance(entry, tuple):
            kept = [n for n in entry if n not in manual]
            out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
        else:
            out.append(None if entry in manual else entry)
    return tuple(out)


MESH_XY = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("x", "y"))


@BOUNDED
@given(
    names=st.lists(NAMES, min_size=1, max_size=3).map(tuple),
    manual=st.sampled_from([set(), {"x"}, {"y"}]),
)
def test_sharding_names_inside_drop_the_manual_axes(
    names: tuple[Any, ...], manual: set[str]
) -> None:
    v = nnx.Param(jnp.ones((1,) * len(names)), out_sharding=names)
    metadata = v._var_metadata
    seen = []

    def body(v: Any) -> Any:
        seen.append(v.get_metadata("out_sharding", None))
        return jnp.zeros(())

    f = nnx.shard_map(body, mesh=MESH_XY, in_specs=(P(),), out_specs=P(), axis_names=manual)
    f(v)
    expected = local_oracle(names, manual or {"x", "y"})
    assert seen == [expected]
    assert v._var_metadata is metadata  # untouched: the caller's very metadata dict
